"""Token n-gram LM: normalisation, a naive float64 Kneser-Ney reference, ARPA round trip, refusals,
and the tokenizer-level helpers (train_token_lm / load_token_lm)."""

import functools
import gzip
import itertools
import math
import random
from collections import Counter, defaultdict

import pytest

from asr.data.tokenizer import CharTokenizer
from asr.lm import lm_path, load_token_lm, token_names, train_token_lm
from asr.lm.ngram import BOS, load_arpa, save_arpa, train_kneser_ney

PREDICTABLE = [0, 1, 2, 3, 4]  # 4 never occurs in the training corpora below
EOS = 5
NAMES = ["a", "b", "c", "d", "never", "EOS"]


def random_corpus(seed, n=15, max_len=6, tokens=(0, 1, 2, 3)):
    rng = random.Random(seed)
    return [[rng.choice(tokens) for _ in range(rng.randint(0, max_len))] for _ in range(n)]


CORPORA = {
    "random0": random_corpus(0),
    "random1": random_corpus(1, n=8, max_len=9),
    "no_singletons": [[0, 1], [0, 1], [0, 1]],  # n1 == 0 at every order: D = 0.5
}


# ---------------------------------------------------------------- naive reference (float64, no back-off tables)
def naive_kneser_ney(sentences, order, predictable, eos):
    """P(w | history) straight from the recursive interpolated Kneser-Ney formula."""
    vocab = set(predictable) | {eos}
    occurrences = Counter()
    left_neighbours = defaultdict(set)
    for sent in sentences:
        toks = (BOS, *sent, eos)
        for end in range(1, len(toks)):
            for k in range(1, order + 1):
                start = end - k + 1
                if start < 0:
                    break
                gram = toks[start : end + 1]
                occurrences[gram] += 1
                if start > 0:
                    left_neighbours[gram].add(toks[start - 1])

    def count(gram):
        if len(gram) == order or gram[0] == BOS:
            return occurrences.get(gram, 0)
        return len(left_neighbours.get(gram, ()))

    by_order = defaultdict(list)
    for gram in occurrences:
        by_order[len(gram)].append(gram)

    @functools.cache
    def discount(k):
        cs = [count(g) for g in by_order[k]]
        n1, n2 = cs.count(1), cs.count(2)
        if n1 == 0:
            return 0.5
        return min(max(n1 / (n1 + 2 * n2), 0.1), 0.9)

    @functools.cache
    def followers(h):
        k = len(h) + 1
        return {g[-1]: count(g) for g in by_order[k] if g[:-1] == h}

    @functools.cache
    def prob(w, h):
        f = followers(h)
        c_h = sum(f.values())
        d = discount(len(h) + 1)
        if not h:
            return max(f.get(w, 0) - d, 0) / c_h + d * len(f) / c_h / len(vocab)
        if c_h == 0:
            return prob(w, h[1:])
        return max(f.get(w, 0) - d, 0) / c_h + d * len(f) / c_h * prob(w, h[1:])

    def logprob(history, w):
        ctx = tuple([BOS, *history])[-(order - 1):] if order > 1 else ()
        return math.log(prob(w, ctx))

    return logprob


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("corpus", list(CORPORA))
def test_matches_a_naive_recursive_kneser_ney(corpus, order):
    sentences = CORPORA[corpus]
    lm = train_kneser_ney(sentences, order, PREDICTABLE, EOS)
    ref = naive_kneser_ney(sentences, order, PREDICTABLE, EOS)
    alphabet = [*PREDICTABLE, EOS]
    checked = 0
    # every history up to order - 1 tokens (so every context), and a few longer ones (truncated to the context)
    histories = [h for n in range(order) for h in itertools.product(PREDICTABLE, repeat=n)]
    histories += [(0, 1, 2, 3, 0, 1), (3, 3, 3, 3, 3), (4, 0, 1, 2, 3)]
    for history in histories:
        for tok in alphabet:
            assert lm.logprob(list(history), tok) == pytest.approx(ref(history, tok), abs=1e-9), (history, tok)
            checked += 1
    assert checked >= len(alphabet) * order


@pytest.mark.parametrize("order", [1, 2, 3, 5])
@pytest.mark.parametrize("history", [[], [0, 1], [2, 3, 0, 1, 2], [3, 3, 3, 3], [4], [0, 4, 1], [4, 4, 4, 4]])
def test_probabilities_sum_to_one(order, history):
    lm = train_kneser_ney(random_corpus(2, n=20), order, PREDICTABLE, EOS)
    total = math.fsum(math.exp(lm.logprob(history, t)) for t in [*PREDICTABLE, EOS])
    assert total == pytest.approx(1.0, abs=1e-9)
    assert all(lm.logprob(history, t) > -math.inf for t in PREDICTABLE)  # the uniform floor: nothing is zero


def test_seen_continuation_is_preferred():
    corpus = [[0, 1, 2]] * 10 + [[2, 0], [1, 1, 0], [0, 3]]
    lm = train_kneser_ney(corpus, 3, PREDICTABLE, EOS)
    p_seen = math.exp(lm.logprob([0, 1], 2))
    p_unseen = math.exp(lm.logprob([0, 1], 0))
    assert p_seen > 0.7
    assert p_seen > 20 * p_unseen
    # and the whole seen sentence beats a reordering of it
    assert lm.sentence_logprob([0, 1, 2]) > lm.sentence_logprob([2, 1, 0]) + 3.0


def test_sentence_logprob_includes_end_of_sentence():
    lm = train_kneser_ney(random_corpus(3), 3, PREDICTABLE, EOS)
    for sent in ([], [0], [1, 2, 3, 0], [4, 4]):
        expected = math.fsum(lm.logprob(sent[:i], t) for i, t in enumerate(sent)) + lm.logprob(sent, EOS)
        assert lm.sentence_logprob(sent) == pytest.approx(expected, abs=1e-12)
    # the empty sentence is P(</s> | <s>), not 0
    assert lm.sentence_logprob([]) < 0.0


def test_context_and_num_ngrams():
    lm3 = train_kneser_ney([[0, 1, 2]], 3, PREDICTABLE, EOS)
    assert lm3.context([]) == (BOS,)
    assert lm3.context([7]) == (BOS, 7)
    assert lm3.context([5, 6, 7]) == (6, 7)
    lm1 = train_kneser_ney([[0, 1, 2]], 1, PREDICTABLE, EOS)
    assert lm1.context([5, 6, 7]) == ()
    # <s> 0 1 2 </s>: unigrams cover the whole vocab (the floor), bigrams and trigrams what occurred
    assert lm3.num_ngrams() == [len(PREDICTABLE) + 1, 4, 3]
    assert lm1.num_ngrams() == [len(PREDICTABLE) + 1]
    with pytest.raises(KeyError):
        lm3.logprob([], 9)  # not a predictable id


def test_training_refusals():
    with pytest.raises(ValueError, match=r"order \(0\)"):
        train_kneser_ney([[0]], 0, PREDICTABLE, EOS)
    with pytest.raises(ValueError, match="no sentences"):
        train_kneser_ney([], 2, PREDICTABLE, EOS)
    with pytest.raises(ValueError, match="no sentences"):
        train_kneser_ney(iter(()), 2, PREDICTABLE, EOS)
    with pytest.raises(ValueError, match=r"sentence 1 holds ids \[7\]"):
        train_kneser_ney([[0, 1], [2, 7]], 2, PREDICTABLE, EOS)
    with pytest.raises(ValueError, match="predictable"):
        train_kneser_ney([[-1, 0]], 2, PREDICTABLE, EOS)
    with pytest.raises(ValueError, match=">= 0"):
        train_kneser_ney([[0]], 2, [BOS, 0], EOS)
    # eos inside a sentence is a known id, not refused
    assert train_kneser_ney([[0, EOS, 1]], 2, PREDICTABLE, EOS).order == 2


# ---------------------------------------------------------------- ARPA
def eval_sentences(n=60, seed=11):
    rng = random.Random(seed)
    return [[rng.choice(PREDICTABLE) for _ in range(rng.randint(0, 8))] for _ in range(n)]


@pytest.mark.parametrize("order", [1, 3, 4])
@pytest.mark.parametrize("name", ["lm.arpa", "sub/lm.arpa.gz"])
def test_arpa_round_trip(tmp_path, order, name):
    lm = train_kneser_ney(random_corpus(4, n=25), order, PREDICTABLE, EOS)
    names = list(NAMES)
    path = save_arpa(lm, tmp_path / name, names)
    assert names == NAMES  # the caller's list is not modified
    assert path == tmp_path / name and path.is_file()
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    loaded = load_arpa(path, NAMES)
    assert loaded.order == order and loaded.eos_id == EOS
    assert loaded.num_ngrams() == lm.num_ngrams()
    for sent in eval_sentences():
        assert loaded.sentence_logprob(sent) == pytest.approx(lm.sentence_logprob(sent), abs=1e-4)


def test_arpa_is_log10_with_counts_in_the_header(tmp_path):
    lm = train_kneser_ney(random_corpus(5), 3, PREDICTABLE, EOS)
    text = save_arpa(lm, tmp_path / "lm.arpa", NAMES).read_text()
    header = [line for line in text.splitlines() if line.startswith("ngram ")]
    expected = lm.num_ngrams()
    expected[0] += 1  # <s>
    assert header == [f"ngram {k}={n}" for k, n in enumerate(expected, 1)]
    unigrams = text.split("\\1-grams:\n")[1].split("\n\n")[0].splitlines()
    eos_line = next(line for line in unigrams if line.split()[1] == "</s>")
    assert float(eos_line.split()[0]) == pytest.approx(lm.logprobs[0][(EOS,)] / math.log(10), abs=1e-6)
    assert "EOS" not in text  # the eos id is written as </s>, whatever its name
    assert any(line.split()[1] == "<s>" and line.startswith("-99") for line in unigrams)


def test_load_with_other_names_names_the_token(tmp_path):
    lm = train_kneser_ney([[0, 1, 2, 3]], 2, PREDICTABLE, EOS)
    path = save_arpa(lm, tmp_path / "lm.arpa.gz", NAMES)
    other = ["a", "b", "z", "d", "never", "EOS"]
    with pytest.raises(ValueError, match="'c'"):
        load_arpa(path, other)


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_truncated_file_is_refused(tmp_path, fraction):
    lm = train_kneser_ney(random_corpus(6, n=20), 3, PREDICTABLE, EOS)
    text = save_arpa(lm, tmp_path / "lm.arpa", NAMES).read_text()
    cut = tmp_path / "cut.arpa"
    cut.write_text(text[: int(len(text) * fraction)])
    with pytest.raises(ValueError):
        load_arpa(cut, NAMES)
    # whole lines missing (the cut falls on a line boundary): caught by the header counts
    lines = text.splitlines(keepends=True)
    cut.write_text("".join(lines[: int(len(lines) * fraction)]))
    with pytest.raises(ValueError):
        load_arpa(cut, NAMES)


def test_truncated_gzip_file_is_refused_with_value_error(tmp_path):
    lm = train_kneser_ney(random_corpus(6, n=20), 3, PREDICTABLE, EOS)
    data = save_arpa(lm, tmp_path / "lm.arpa.gz", NAMES).read_bytes()
    cut = tmp_path / "cut.arpa.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError):
        load_arpa(cut, NAMES)


def test_missing_file_and_bad_names(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_arpa(tmp_path / "nope.arpa.gz", NAMES)
    lm = train_kneser_ney([[0, 1]], 2, PREDICTABLE, EOS)
    with pytest.raises(ValueError, match="unique"):
        save_arpa(lm, tmp_path / "dup.arpa", ["a", "b", "a", "d", "never", "EOS"])
    with pytest.raises(ValueError, match="whitespace"):
        save_arpa(lm, tmp_path / "ws.arpa", ["a", "b c", "c", "d", "never", "EOS"])
    with pytest.raises(ValueError, match="non-empty"):
        save_arpa(lm, tmp_path / "empty.arpa", ["a", "", "c", "d", "never", "EOS"])
    assert not any(tmp_path.glob("*.arpa"))  # refused before anything is written
    (tmp_path / "junk.arpa").write_text("hello\n")
    with pytest.raises(ValueError, match="data"):
        load_arpa(tmp_path / "junk.arpa", NAMES)


# ---------------------------------------------------------------- tokenizer helpers
UNITS = ["<blank>", "<unk>", "\u2581", "a", "b", "c", "<sos/eos>"]
TEXTS = ["ab c", "", "ba ab", "cab", "  ", "a b c", "abc abc"]


def char_tokenizer(folder, units=UNITS):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "units.txt").write_text("".join(f"{u} {i}\n" for i, u in enumerate(units)), encoding="utf-8")
    return CharTokenizer(folder / "units.txt")


def test_train_token_lm_round_trip(tmp_path):
    tok = char_tokenizer(tmp_path / "tok")
    assert token_names(tok) == UNITS
    lm = train_token_lm(TEXTS, tok, 3)
    assert lm.order == 3 and lm.eos_id == tok.sos_eos_id == 6
    # every id but <blank> and <sos/eos> is predictable, and <sos/eos> ends sentences
    assert {g[0] for g in lm.logprobs[0]} == {1, 2, 3, 4, 5, 6}
    # blank lines are skipped: the same model as without them
    same = train_token_lm([t for t in TEXTS if t.strip()], tok, 3)
    assert same.logprobs == lm.logprobs and same.backoffs == lm.backoffs

    path = lm_path(tmp_path, 3)
    assert path == tmp_path / "lm" / "3gram.arpa.gz"
    save_arpa(lm, path, token_names(tok))
    with gzip.open(path, "rt") as f:
        assert f.readline().strip() == "\\data\\"
    loaded = load_token_lm(path, tok)
    assert loaded.num_ngrams() == lm.num_ngrams()
    for text in ["abc", "c b a", "aaaa", "", "ab ab ab c", "cc"]:
        ids = tok.encode(text)
        assert loaded.sentence_logprob(ids) == pytest.approx(lm.sentence_logprob(ids), abs=1e-4)


def test_load_token_lm_with_another_tokenizer(tmp_path):
    tok = char_tokenizer(tmp_path / "tok")
    path = save_arpa(train_token_lm(TEXTS, tok, 2), lm_path(tmp_path, 2), token_names(tok))
    renamed = char_tokenizer(tmp_path / "renamed", ["<blank>", "<unk>", "\u2581", "a", "b", "x", "<sos/eos>"])
    with pytest.raises(ValueError, match="'c'"):
        load_token_lm(path, renamed)
    with pytest.raises(FileNotFoundError):
        load_token_lm(tmp_path / "missing.arpa.gz", tok)


def test_load_token_lm_with_a_larger_tokenizer_is_refused(tmp_path):
    tok = char_tokenizer(tmp_path / "tok")
    path = save_arpa(train_token_lm(TEXTS, tok, 2), lm_path(tmp_path, 2), token_names(tok))
    larger = char_tokenizer(tmp_path / "larger", ["<blank>", "<unk>", "\u2581", "a", "b", "c", "d", "<sos/eos>"])
    # without the check it loads, and scoring 'd' raises KeyError in the middle of a beam search
    with pytest.raises(ValueError, match="1 units the language model cannot score \\('d'\\)"):
        load_token_lm(path, larger)
