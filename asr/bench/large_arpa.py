"""A large synthetic word trigram ARPA file for the LM loading benchmark, and the loading itself.

:func:`write_large_arpa` writes ``unigrams + bigrams + trigrams`` n-grams (default ~10 M) over made-up
words ("w123"), deterministic from a seed. The structure is a real model's: every bigram's
history is a unigram, every trigram's history (a, b) is a bigram and so is its tail (b, c); every
history carries a back-off weight. The probabilities are random (not normalized): a loader neither
knows nor cares.

:func:`load_and_measure` runs in a child process (``python -m asr.bench.large_arpa load BACKEND PATH``)
and prints one JSON line: wall and CPU seconds of the load, the process's peak RSS, and a few
log-probabilities so the parent can check both backends read the same model.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

PROBES = [(["w1", "w2"], "w3"), ([], "w10"), (["w5"], "w7"), (["w0", "w1"], "</s>"), (["w9", "w3"], "w4")]


def _skewed(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """``size`` ids in [0, n), small ids far more often (a Zipf-like word frequency)."""
    return np.minimum((n * rng.random(size) ** 3).astype(np.int64), n - 1)


def write_large_arpa(path: str | Path, vocab: int = 50_000, bigrams: int = 3_000_000, trigrams: int = 7_000_000,
                     seed: int = 0) -> dict:
    """Write the ARPA file; returns the n-gram counts by order."""
    rng = np.random.default_rng(seed)
    bos, eos = vocab, vocab + 1  # ids of <s> (history only) and </s> (predicted only)
    base = vocab + 2
    # Bigrams: histories are words or <s>, successors words or </s>.
    hist = rng.integers(0, vocab + 1, size=int(bigrams * 1.3))
    succ = _skewed(rng, vocab + 1, hist.size)
    succ[succ == vocab] = eos
    keys = np.unique(hist * base + succ)[:bigrams]
    rng.shuffle(keys)
    keys = np.sort(keys[:bigrams])
    bi_hist, bi_succ = keys // base, keys % base
    # Successors of each word, for trigrams (a, b, c) with (a, b) and (b, c) both bigrams.
    starts = np.searchsorted(bi_hist, np.arange(base + 1))
    counts = starts[1:] - starts[:-1]
    pick = rng.integers(0, keys.size, size=int(trigrams * 1.5))
    a, b = bi_hist[pick], bi_succ[pick]
    ok = (b < vocab) & (counts[np.minimum(b, base - 1)] > 0)
    a, b = a[ok], b[ok]
    c = bi_succ[starts[b] + (rng.random(b.size) * counts[b]).astype(np.int64)]
    tri = np.unique((a * base + b) * base + c)
    tri = np.sort(rng.permutation(tri)[:trigrams])
    tri_ab = tri // base
    has_follower = np.isin(keys, tri_ab)

    names = [f"w{i}" for i in range(vocab)] + ["<s>", "</s>"]

    def logp(n: int) -> np.ndarray:
        return -rng.uniform(0.3, 6.0, size=n)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sizes = {1: vocab + 3, 2: int(keys.size), 3: int(tri.size)}  # unigrams: words, <s>, </s>, <unk>
    with path.open("w", encoding="utf-8") as f:
        f.write("\\data\\\n" + "".join(f"ngram {k}={n}\n" for k, n in sizes.items()))
        f.write("\n\\1-grams:\n")
        f.write(f"{-6.0:.4f}\t<unk>\t0.0000\n-99\t<s>\t{-0.5:.4f}\n{-1.0:.4f}\t</s>\n")
        uni, bo = logp(vocab), -rng.uniform(0.0, 1.0, size=vocab)
        f.writelines(f"{p:.4f}\tw{i}\t{w:.4f}\n" for i, (p, w) in enumerate(zip(uni.tolist(), bo.tolist())))
        f.write("\n\\2-grams:\n")
        step = 500_000
        for lo in range(0, keys.size, step):
            h, s, fol = bi_hist[lo:lo + step].tolist(), bi_succ[lo:lo + step].tolist(), has_follower[lo:lo + step]
            p, w = logp(len(h)).tolist(), (-rng.uniform(0.0, 1.0, size=len(h))).tolist()
            f.writelines(f"{pi:.4f}\t{names[x]} {names[y]}\t{wi:.4f}\n" if fl else f"{pi:.4f}\t{names[x]} {names[y]}\n"
                         for pi, x, y, wi, fl in zip(p, h, s, w, fol.tolist()))
        f.write("\n\\3-grams:\n")
        for lo in range(0, tri.size, step):
            chunk = tri[lo:lo + step]
            x, y, z = (chunk // base // base).tolist(), (chunk // base % base).tolist(), (chunk % base).tolist()
            f.writelines(f"{pi:.4f}\t{names[i]} {names[j]} {names[k]}\n"
                         for pi, i, j, k in zip(logp(len(x)).tolist(), x, y, z))
        f.write("\n\\end\\\n")
    return sizes


def load_and_measure(backend: str, path: str) -> dict:
    """Load ``path`` with ``backend`` ("ours" or "kenlm") in this process; time, peak RSS and probe scores."""
    from asr.lm.kenlm_backend import KenLMNgram
    from asr.lm.words import load_word_lm

    wall, cpu = time.perf_counter(), time.process_time()
    if backend == "ours":
        lm, names = load_word_lm(path)
    elif backend == "kenlm":
        from asr.lm.words import arpa_vocabulary

        names = [*arpa_vocabulary(path), "</s>"]
        lm = KenLMNgram(path, names)
    else:
        raise ValueError(f"backend {backend!r} must be ours or kenlm")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ids = {w: i for i, w in enumerate(names)}
    probes = [lm.logprob([ids[w] for w in hist], ids[word]) for hist, word in PROBES]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"backend": backend, "load_s": wall, "load_cpu_s": cpu, "peak_rss_mb": peak_mb, "probes": probes}


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "load":
        sys.exit("usage: python -m asr.bench.large_arpa load ours|kenlm PATH")
    print(json.dumps(load_and_measure(sys.argv[2], sys.argv[3])))
