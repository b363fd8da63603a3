"""Le et al.'s WER split: biased words count to B-WER, the rest to U-WER; the total is the plain WER."""

import random

import editdistance
import pytest

from asr.decode.biased_wer import DEL, INS, MATCH, BiasedErrorCounter, align


def test_alignment_cost_is_the_edit_distance_and_replays_both_sides():
    rng = random.Random(0)
    for _ in range(200):
        ref = [rng.choice("abcd") for _ in range(rng.randint(0, 8))]
        hyp = [rng.choice("abcd") for _ in range(rng.randint(0, 8))]
        ops = align(ref, hyp)
        assert sum(op != MATCH for op, _, _ in ops) == editdistance.eval(ref, hyp)
        assert [r for op, r, _ in ops if op != INS] == ref
        assert [h for op, _, h in ops if op != DEL] == hyp


def test_biased_and_unbiased_errors_follow_the_list():
    counter = BiasedErrorCounter()
    # "nebul" (in the list) inserted, "zentrova" (biased) misspelled, "c" (unbiased) deleted
    counts = counter.add("a zentrova b c d", "nebul a zen b d", ["zentrova", "nebul", "unused"])
    assert counts == {"u_errors": 1, "b_errors": 2, "ref_words": 5, "biased_words": 1}
    assert counter.b_wer == pytest.approx(2 / 1)
    assert counter.u_wer == pytest.approx(1 / 4)
    assert counter.wer == pytest.approx(3 / 5)
    counter.add("hello world", "hello world", [])
    assert counter.summary()["ref_words"] == 7 and counter.wer == pytest.approx(3 / 7)


def test_total_equals_plain_wer():
    rng = random.Random(1)
    counter, errors, words = BiasedErrorCounter(), 0, 0
    for _ in range(50):
        ref = " ".join(rng.choice("ab cd ef gh".split()) for _ in range(rng.randint(1, 6)))
        hyp = " ".join(rng.choice("ab cd ef xy".split()) for _ in range(rng.randint(0, 6)))
        counter.add(ref, hyp, ["cd", "xy"])
        errors += editdistance.eval(ref.split(), hyp.split())
        words += len(ref.split())
    assert counter.wer == pytest.approx(errors / words)


def test_a_listed_word_counts_every_time_the_reference_holds_it():
    counter = BiasedErrorCounter()
    counts = counter.add("anna met anna and bob", "anna met hannah and bob", ["anna"])
    assert counts == {"u_errors": 0, "b_errors": 1, "ref_words": 5, "biased_words": 2}
    assert counter.b_wer == pytest.approx(1 / 2) and counter.u_wer == 0.0


def test_an_empty_hypothesis_misses_every_reference_word_once():
    # Every reference word is deleted: each is a B or a U error, so both rates are exactly 1,
    # whatever the list and however often a word repeats.
    rng = random.Random(2)
    for _ in range(100):
        ref = " ".join(rng.choice("ab cd ef gh".split()) for _ in range(rng.randint(1, 8)))
        counter = BiasedErrorCounter()
        counts = counter.add(ref, "", ["cd", "xy"])
        assert counts["b_errors"] == counts["biased_words"]
        assert counts["u_errors"] == counts["ref_words"] - counts["biased_words"]
        assert counter.b_wer in (0.0, 1.0) and counter.u_wer in (0.0, 1.0)
