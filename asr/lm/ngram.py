"""Token n-gram language model: interpolated Kneser-Ney estimation, ARPA back-off scoring.

The model works on the ASR model's own token ids (sentencepiece pieces or
characters), so it plugs into the CTC prefix beam search token by token without a
lexicon, and words the lexicon never saw are still spellable.

Estimation (:func:`train_kneser_ney`): the highest order counts n-grams as they
occur; every lower order counts, for each n-gram, the distinct tokens seen before
it (its continuation count), except n-grams that start with <s>, which nothing
can precede and which keep their plain counts. Each order k has one absolute
discount D_k = n1 / (n1 + 2 n2) (n1, n2: how many k-grams have count 1 and 2),
and the probabilities are interpolated down to a uniform distribution over the
tokens the model may predict, so no token ever gets probability zero:

    P_k(w | h) = max(c_k(h w) - D_k, 0) / c_k(h) + gamma(h) * P_{k-1}(w | h[1:])
    gamma(h)   = D_k * |{w : c_k(h w) > 0}| / c_k(h)

Stored the ARPA way (the probability of every seen n-gram, interpolation
included, and gamma(h) as the back-off weight of context h), scoring by back-off
gives exactly the interpolated probability: a token unseen after h gets gamma(h)
times the lower-order probability, which is what the sum above reduces to.
"""

from __future__ import annotations

import gzip
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

BOS = -1  # <s>: context only, never predicted; no token id is negative
LOG10 = math.log(10.0)
CACHE_ENTRIES = 1_000_000  # ~150 MB of cached scores at most


class NgramLM:
    """A back-off n-gram model over token ids (natural-log probabilities).

    Args:
        order: n (>= 1).
        logprobs: for each order k = 1..n, a dict from a k-gram (tuple of ids, <s> as
            :data:`BOS`) to log P(last | the rest).
        backoffs: context tuple -> log back-off weight (missing: 0).
        eos_id: the id that ends a sentence (the model's <sos/eos>).
    """

    def __init__(self, order: int, logprobs: list[dict[tuple[int, ...], float]],
                 backoffs: dict[tuple[int, ...], float], eos_id: int) -> None:
        if order < 1:
            raise ValueError(f"order ({order}) must be >= 1.")
        if len(logprobs) != order:
            raise ValueError(f"logprobs holds {len(logprobs)} orders, expected order ({order}).")
        self.order = order
        self.logprobs = logprobs
        self.backoffs = backoffs
        self.eos_id = eos_id
        # (context, token) -> log-prob; a beam asks the same few thousand again and again. Cleared when
        # full, so a long-running server's memory stays bounded.
        self._cache: dict[tuple[tuple[int, ...], int], float] = {}

    def context(self, history: Sequence[int]) -> tuple[int, ...]:
        """The last order - 1 ids of <s> + history: all the model looks at."""
        return ngram_context(self.order, history)

    def logprob(self, history: Sequence[int], token: int) -> float:
        """log P(token | history); history holds the sentence's ids so far (no <s>)."""
        ctx = self.context(history)
        key = (ctx, token)
        cached = self._cache.get(key)
        if cached is None:
            cached = _backoff_logprob(self.logprobs, self.backoffs, ctx, token)
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.clear()
            self._cache[key] = cached
        return cached

    def sentence_logprob(self, tokens: Sequence[int]) -> float:
        """log P(tokens, then </s>) from the start of a sentence."""
        total = 0.0
        for i, tok in enumerate(tokens):
            total += self.logprob(tokens[:i], tok)
        return total + self.logprob(tokens, self.eos_id)

    def num_ngrams(self) -> list[int]:
        """How many n-grams each order stores (1..n)."""
        return [len(table) for table in self.logprobs]


def ngram_context(order: int, history: Sequence[int]) -> tuple[int, ...]:
    """The last order - 1 ids of <s> + history: all an n-gram model of ``order`` looks at."""
    n = order - 1
    if n == 0:
        return ()
    if len(history) >= n:
        # only the tail: the beam asks this for every (prefix, token), and prefixes grow with the audio
        return tuple(history[-n:])
    return (BOS, *history)


def _backoff_logprob(logprobs: list[dict[tuple[int, ...], float]], backoffs: dict[tuple[int, ...], float],
                     ctx: tuple[int, ...], token: int) -> float:
    """log P(token | ctx) from the longest stored n-gram, plus the back-off weights of the longer contexts."""
    penalty = 0.0
    for start in range(len(ctx) + 1):
        sub = ctx[start:]
        found = logprobs[len(sub)].get((*sub, token))
        if found is not None:
            return penalty + found
        penalty += backoffs.get(sub, 0.0)
    raise KeyError(f"token {token} has no unigram probability: not a token this model predicts")


def _discount(counts: Iterable[int]) -> float:
    """Ney's absolute discount n1 / (n1 + 2 n2), kept inside (0, 1) for tiny corpora."""
    histogram = Counter(c for c in counts if c <= 2)
    n1, n2 = histogram[1], histogram[2]
    if n1 == 0:
        return 0.5
    return min(max(n1 / (n1 + 2 * n2), 0.1), 0.9)


def train_kneser_ney(sentences: Iterable[Sequence[int]], order: int, predictable: Iterable[int],
                     eos_id: int) -> NgramLM:
    """Estimate an interpolated Kneser-Ney model.

    Args:
        sentences: token-id sequences, one sentence each (no <s> or </s>).
        order: n (>= 1).
        predictable: every id the model may predict (the uniform floor spreads over
            these; ``eos_id`` is added). Tokens in ``sentences`` outside it raise.
        eos_id: the end-of-sentence id.
    """
    if order < 1:
        raise ValueError(f"order ({order}) must be >= 1.")
    vocab = set(int(t) for t in predictable) | {eos_id}
    if BOS in vocab:
        raise ValueError(f"token ids must be >= 0 ({BOS} stands for <s>)")
    # counts[k][context][token]: plain counts at order n, continuation counts below (see module docstring)
    counts: list[defaultdict[tuple[int, ...], Counter]] = [defaultdict(Counter) for _ in range(order + 1)]
    num_sentences = 0
    for sentence in sentences:
        toks = (BOS, *map(int, sentence), eos_id)
        unknown = set(toks[1:]) - vocab
        if unknown:
            raise ValueError(f"sentence {num_sentences} holds ids {sorted(unknown)} outside the predictable set")
        num_sentences += 1
        for i in range(1, len(toks)):
            for k in range(1, order + 1):
                if i - k + 1 < 0:
                    break
                gram = toks[i - k + 1:i + 1]
                # plain count at the top order and for n-grams that begin with <s>
                if k == order or gram[0] == BOS:
                    counts[k][gram[:-1]][gram[-1]] += 1
    if num_sentences == 0:
        raise ValueError("no sentences to estimate a language model from")
    for k in range(order - 1, 0, -1):
        for ctx, followers in counts[k + 1].items():
            for tok in followers:
                lower = (*ctx[1:], tok)
                if lower[0] != BOS:
                    counts[k][lower[:-1]][lower[-1]] += 1

    logprobs: list[dict[tuple[int, ...], float]] = [{} for _ in range(order)]
    backoffs: dict[tuple[int, ...], float] = {}
    # Order 1: interpolate with the uniform floor over the predictable ids.
    unigrams = counts[1][()]
    d1 = _discount(unigrams.values())
    total1 = sum(unigrams.values())
    floor = d1 * len(unigrams) / total1 / len(vocab)
    prob1 = {tok: max(unigrams.get(tok, 0) - d1, 0.0) / total1 + floor for tok in vocab}
    logprobs[0] = {(tok,): math.log(p) for tok, p in prob1.items()}
    for k in range(2, order + 1):
        dk = _discount(c for followers in counts[k].values() for c in followers.values())
        current: dict[tuple[int, ...], float] = {}
        for ctx, followers in counts[k].items():
            total = sum(followers.values())
            gamma = dk * len(followers) / total
            backoffs[ctx] = math.log(gamma)
            for tok, c in followers.items():
                # the lower orders are complete, so back-off scoring gives P_{k-1}(tok | ctx[1:])
                lower = math.exp(_backoff_logprob(logprobs, backoffs, ctx[1:], tok))
                current[(*ctx, tok)] = (c - dk) / total + gamma * lower
        logprobs[k - 1] = {gram: math.log(p) for gram, p in current.items()}
    return NgramLM(order, logprobs, backoffs, eos_id)


def _symbol(tok: int, names: Sequence[str]) -> str:
    return "<s>" if tok == BOS else names[tok]


def save_arpa(lm: NgramLM, path: str | Path, names: Sequence[str]) -> Path:
    """Write ``lm`` as an ARPA file (log10 values; gzip when the name ends in .gz).

    Args:
        names: the printable name of every id (``names[i]``, e.g. a sentencepiece piece);
            ``names[lm.eos_id]`` is written as </s>. Names must be unique and hold no whitespace.
    """
    names = list(names)
    names[lm.eos_id] = "</s>"
    if len(set(names)) != len(names) or any(not n or any(ch.isspace() for ch in n) for n in names):
        raise ValueError("token names must be unique, non-empty and free of whitespace")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # <s> has no probability of its own; ARPA lists it with -99 so its back-off has a line.
    unigrams = dict(lm.logprobs[0])
    with (gzip.open(path, "wt", encoding="utf-8") if path.suffix == ".gz" else path.open("w", encoding="utf-8")) as f:
        f.write("\\data\\\n")
        counts = lm.num_ngrams()
        counts[0] += 1  # <s>
        for k, n in enumerate(counts, 1):
            f.write(f"ngram {k}={n}\n")
        for k in range(1, lm.order + 1):
            f.write(f"\n\\{k}-grams:\n")
            table = lm.logprobs[k - 1]
            if k == 1:
                f.write(f"-99\t<s>\t{lm.backoffs.get((BOS,), 0.0) / LOG10:.6f}\n")
                table = unigrams
            for gram, logp in table.items():
                words = " ".join(_symbol(t, names) for t in gram)
                line = f"{logp / LOG10:.6f}\t{words}"
                if k < lm.order and gram in lm.backoffs:
                    line += f"\t{lm.backoffs[gram] / LOG10:.6f}"
                f.write(line + "\n")
        f.write("\n\\end\\\n")
    return path


def _text_lines(path: Path) -> Iterator[str]:
    """The lines of a text file, gzip-compressed when its name ends in .gz; a cut or corrupt file (which gzip
    reports as EOFError or OSError) or one that is not UTF-8 raises ValueError."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            yield from f
    except (EOFError, OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: unreadable language model file ({type(err).__name__}: {err})") from None


def load_arpa(path: str | Path, names: Sequence[str]) -> NgramLM:
    """Read an ARPA file written for the tokens ``names`` (id i is ``names[i]``; </s> is the last id's name
    or ``</s>`` itself). A name the tokenizer does not have means another tokenizer: ValueError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"language model not found: {path}")
    ids = {n: i for i, n in enumerate(names)}
    eos_id = len(names) - 1
    ids["</s>"] = eos_id
    ids["<s>"] = BOS
    declared: dict[int, int] = {}
    found: Counter = Counter()
    logprobs: list[dict[tuple[int, ...], float]] = []
    backoffs: dict[tuple[int, ...], float] = {}
    section = 0
    for line_no, raw in enumerate(_text_lines(path), 1):
        line = raw.strip()
        if not line or line == "\\data\\" or line == "\\end\\":
            continue
        if line.startswith("ngram "):
            k, n = line[6:].split("=")
            declared[int(k)] = int(n)
            continue
        if line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1:-7])
            while len(logprobs) < section:
                logprobs.append({})
            continue
        if section == 0:
            raise ValueError(f"{path}:{line_no}: expected the \\data\\ header, got {line!r}")
        fields = line.split()
        if len(fields) not in (section + 1, section + 2):
            raise ValueError(f"{path}:{line_no}: a {section}-gram line needs {section + 1} or {section + 2} "
                             f"fields, got {len(fields)}")
        try:
            gram = tuple(ids[w] for w in fields[1:section + 1])
        except KeyError as err:
            raise ValueError(f"{path}:{line_no}: token {err.args[0]!r} is not in the tokenizer "
                             f"(a language model built for another tokenizer?)") from None
        if len(fields) == section + 2:
            backoffs[gram] = float(fields[-1]) * LOG10
        if gram != (BOS,):
            logprobs[section - 1][gram] = float(fields[0]) * LOG10
        found[section] += 1
    if not logprobs:
        raise ValueError(f"{path}: no n-gram sections")
    if declared != dict(found):
        raise ValueError(f"{path}: the header declares {declared} n-grams by order, the file holds {dict(found)} "
                         f"(a truncated file?)")
    return NgramLM(len(logprobs), logprobs, backoffs, eos_id)
