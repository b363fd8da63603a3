"""ErrorCounter against hand-computed edit distances."""

import pytest

from asr.decode import ErrorCounter


def test_hand_computed_word_and_char_errors():
    counter = ErrorCounter()
    r = counter.add("the cat sat on the mat", "the cat sit on mat", key="u1")
    # sat->sit (1 sub) and one 'the' deleted: 2 word errors of 6.
    assert (r["word_errors"], r["ref_words"]) == (2, 6)
    # chars without spaces: "thecatsatonthemat" (17) vs "thecatsitonmat": a->i sub + 'the' deleted = 4.
    assert (r["char_errors"], r["ref_chars"]) == (4, 17)
    assert r["key"] == "u1" and r["hyp"] == "the cat sit on mat"
    r2 = counter.add("hello world", "hello  world extra")
    assert (r2["word_errors"], r2["char_errors"]) == (1, 5)
    assert counter.wer == pytest.approx(3 / 8)
    assert counter.cer == pytest.approx(9 / 27)
    summary = counter.summary()
    assert summary["utterances"] == 2 and summary["word_errors"] == 3 and summary["ref_chars"] == 27
    assert len(counter.records) == 2


def test_unsegmented_text_cer_and_empty_references():
    counter = ErrorCounter()
    r = counter.add("今天天气", "今天 天汽")
    assert r["char_errors"] == 1 and r["ref_chars"] == 4
    empty = ErrorCounter()
    assert empty.wer == 0.0
    empty.add("", "")
    assert empty.wer == 0.0 and empty.cer == 0.0
    empty.add("", "noise")
    assert empty.wer == float("inf")


def test_word_errors_split_into_substitutions_deletions_and_insertions():
    counter = ErrorCounter()
    r = counter.add("the cat sat on the mat", "the cat sit on mat")
    assert (r["substitutions"], r["deletions"], r["insertions"]) == (1, 1, 0)
    r2 = counter.add("Hello world", "hello world extra")  # case folded before counting
    assert (r2["substitutions"], r2["deletions"], r2["insertions"]) == (0, 0, 1)
    summary = counter.summary()
    assert (summary["substitutions"], summary["deletions"], summary["insertions"]) == (1, 1, 1)
    assert summary["word_errors"] == 3
