"""Scoring normalization: the same on both sides, stated, and the case-only errors counted when case is kept."""

import pytest

from asr.decode.scoring import Scoring, case_warning, remove_punctuation
from asr.decode.wer import ErrorCounter


@pytest.mark.parametrize("text, want", [
    ("Hello, World!", "Hello World"),
    ("don't stop \u2014 it's 'quoted'", "don't stop it's quoted"),
    ("rock\u2019n\u2019roll \u201csaid\u201d", "rock\u2019n\u2019roll said"),
    ("\u4f60\u597d\uff0c\u4e16\u754c\u3002", "\u4f60\u597d\u4e16\u754c"),
    ("<unk> a+b = c", "<unk> a+b = c"),  # symbols (S*) are not punctuation
    ("... !", ""),
])
def test_punctuation_is_removed_and_apostrophes_inside_words_kept(text, want):
    assert remove_punctuation(text) == want


def test_the_default_folds_case_and_removes_punctuation_on_both_sides():
    scoring = Scoring()
    assert scoring.normalize("  THE Cat, sat. ") == scoring.normalize("the cat sat") == "the cat sat"
    counter = ErrorCounter()
    record = counter.add("Hello, world.", "HELLO WORLD", key="u1")
    assert (record["word_errors"], record["char_errors"], record["ref_words"]) == (0, 0, 2)
    assert (record["ref"], record["hyp"]) == ("Hello, world.", "HELLO WORLD")  # records keep the texts as given
    assert "case_only_word_errors" not in counter.summary()


def test_exact_scoring_counts_the_errors_that_are_case_only():
    counter = ErrorCounter(Scoring(case_sensitive=True, keep_punctuation=True))
    counter.add("hello world again", "HELLO world agan")  # one case-only error, one real one
    counter.add("Good day", "good day!")  # "Good" is a case difference, "day!" more than that
    summary = counter.summary()
    assert summary["word_errors"] == 4 and summary["case_only_word_errors"] == 2
    lines = case_warning({"ctc_greedy": summary}, counter.scoring)
    assert lines == ["warning: ctc_greedy: 2 of its 4 word errors differ from the reference in case only (scored "
                     "case-sensitively); drop --case-sensitive to score them as equal"]
    assert case_warning({"ctc_greedy": ErrorCounter().summary()}, Scoring()) == []


def test_case_sensitive_with_punctuation_removed():
    counter = ErrorCounter(Scoring(case_sensitive=True))
    record = counter.add("Hello, world.", "hello world")
    assert record["word_errors"] == 1 and counter.case_only_word_errors == 1
    assert Scoring(case_sensitive=True).describe() == ("case-sensitive, punctuation removed, applied to references "
                                                       "and hypotheses alike")
