"""KenLM scores in the decoder's natural log, checked without the kenlm package.

KenLM returns log10 probabilities; the fusions add natural logs (CTC's). A stand-in ``kenlm``
module answers ``BaseScore`` from a hand-written bigram ARPA as KenLM does (log10, back-off
through the context), so the wrapper's conversion and its context states are checked against
scores computed by hand here, with or without the real package (which must agree with them too).
"""

from __future__ import annotations

import math
import sys
import types

import pytest

from asr.lm.kenlm_backend import KenLMNgram
from asr.lm.ngram import load_arpa

ARPA = "\n".join([
    "\\data\\", "ngram 1=4", "ngram 2=3", "",
    "\\1-grams:", "-1.0\t</s>", "-99\t<s>\t-0.5", "-0.6\ta\t-0.2", "-0.8\tb\t-0.3", "",
    "\\2-grams:", "-0.1\t<s> a", "-0.4\ta b", "-0.2\tb </s>", "",
    "\\end\\", "",
])  # tab-separated, as KenLM requires
NAMES = ["<blank>", "a", "b", "<sos/eos>"]  # ids 1 = a, 2 = b, 3 ends a sentence
LN10 = math.log(10.0)
# log P(token | history) in log10, by hand from ARPA: a listed bigram, else back-off(context) + unigram.
BY_HAND = [
    ((), 1, -0.1),              # <s> a
    ((), 2, -0.5 + -0.8),       # <s> b: backs off
    ((1,), 2, -0.4),            # a b
    ((2,), 1, -0.3 + -0.6),     # b a: backs off
    ((1, 2), 3, -0.2),          # b </s>
    ((2, 2), 3, -0.2),          # a bigram's context is the last token only: b </s> after b b
    ((1,), 3, -0.2 + -1.0),     # a </s>: backs off
]


def fake_kenlm(arpa: str) -> types.ModuleType:
    """A ``kenlm`` module for a bigram ARPA: ``Model`` with KenLM's calls, ``State`` holding the last word."""
    probs, backoffs, section = {}, {}, 0
    for line in arpa.splitlines():
        if line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1])
        elif section and line.strip() and not line.startswith("\\"):
            fields = line.split()
            words = tuple(fields[1:section + 1])
            probs[words] = float(fields[0])
            if len(fields) == section + 2:
                backoffs[words] = float(fields[-1])

    class State:
        def __init__(self):
            self.word = None

    class Model:
        order = 2

        def __init__(self, path):
            self.path = path

        def BeginSentenceWrite(self, state):
            state.word = "<s>"

        def NullContextWrite(self, state):
            state.word = None

        def BaseScore(self, state, word, out):
            out.word = word
            if state.word is not None and (state.word, word) in probs:
                return probs[(state.word, word)]
            return backoffs.get((state.word,), 0.0) + probs[(word,)]

        def __contains__(self, word):
            return (word,) in probs

    return types.SimpleNamespace(Model=Model, State=State)


@pytest.fixture
def arpa(tmp_path):
    path = tmp_path / "bigram.arpa"
    path.write_text(ARPA)
    return path


@pytest.mark.parametrize("package", ["stand-in", "kenlm"])
def test_kenlm_scores_are_natural_logs_of_the_arpa_values(arpa, monkeypatch, package):
    if package == "kenlm":
        pytest.importorskip("kenlm", reason="the kenlm package is not installed (the stand-in case still runs)")
    else:
        monkeypatch.setitem(sys.modules, "kenlm", fake_kenlm(ARPA))
    lm = KenLMNgram(arpa, NAMES)  # KenLM keeps float32 scores: 1e-6 is far below ln(10) - 1 of a log10 left alone
    assert lm.order == 2 and lm.eos_id == 3
    for history, token, log10 in BY_HAND:
        assert lm.logprob(list(history), token) == pytest.approx(log10 * LN10, abs=1e-6), (history, token)
    assert lm.sentence_logprob([1, 2]) == pytest.approx((-0.1 - 0.4 - 0.2) * LN10, abs=1e-6)


def test_our_arpa_reader_gives_the_same_hand_computed_scores(arpa):
    lm = load_arpa(arpa, NAMES)
    for history, token, log10 in BY_HAND:
        assert lm.logprob(list(history), token) == pytest.approx(log10 * LN10, abs=1e-6), (history, token)
