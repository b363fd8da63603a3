"""Bootstrap intervals against brute-force computations on small cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from asr.ablation.stats import (
    align_records,
    paired_difference,
    pool_seeds,
    resample_indices,
    seeded_paired_difference,
    seeded_wer_interval,
    wer_interval,
)

ERRORS = [0, 3, 1, 5, 2, 0, 7, 1]
WORDS = [5, 6, 4, 9, 8, 3, 10, 6]


def test_wer_interval_matches_a_loop_over_the_same_draws():
    idx = resample_indices(len(ERRORS), 500, seed=3)
    rates = []
    for row in idx:  # one replicate at a time, plain Python sums
        rates.append(sum(ERRORS[i] for i in row) / sum(WORDS[i] for i in row))
    expected_low, expected_high = np.percentile(rates, [2.5, 97.5])
    got = wer_interval(ERRORS, WORDS, replicates=500, seed=3)
    assert got.value == pytest.approx(sum(ERRORS) / sum(WORDS))
    assert got.low == pytest.approx(expected_low)
    assert got.high == pytest.approx(expected_high)
    assert got.low < got.value < got.high


def exact_distribution(values_of_replicate, n):
    """Every one of the n**n equally likely resamples of n utterances."""
    return np.array([values_of_replicate(list(rows)) for rows in itertools.product(range(n), repeat=n)])


def test_bootstrap_distribution_matches_full_enumeration():
    errors, words = [0, 2, 1, 4], [3, 4, 2, 5]
    exact = exact_distribution(lambda rows: sum(errors[i] for i in rows) / sum(words[i] for i in rows), 4)
    idx = resample_indices(4, 40000, seed=0)
    sampled = np.asarray(errors)[idx].sum(1) / np.asarray(words)[idx].sum(1)
    for x in (0.15, 0.25, 0.35, 0.5):
        # CDF at x: sampling error of a fraction over 40000 draws is < 0.0025 (1 sigma)
        assert np.mean(sampled <= x) == pytest.approx(np.mean(exact <= x), abs=0.012)
    interval = wer_interval(errors, words, replicates=40000, seed=0)
    exact_low, exact_high = np.percentile(exact, [2.5, 97.5])
    assert interval.low == pytest.approx(exact_low, abs=0.03)
    assert interval.high == pytest.approx(exact_high, abs=0.03)


def test_paired_difference_matches_enumeration_and_its_p_value():
    err_a, err_b, words = [1, 0, 3, 2], [2, 1, 3, 4], [4, 3, 6, 5]
    exact = exact_distribution(
        lambda rows: (sum(err_a[i] for i in rows) - sum(err_b[i] for i in rows)) / sum(words[i] for i in rows), 4
    )
    got = paired_difference(err_a, err_b, words, replicates=40000, seed=1)
    assert got.difference == pytest.approx((6 - 10) / 18)
    exact_p = min(1.0, 2 * min(np.mean(exact <= 0), np.mean(exact >= 0)))
    assert got.p_value == pytest.approx(exact_p, abs=0.01)
    exact_low, exact_high = np.percentile(exact, [2.5, 97.5])
    assert got.low == pytest.approx(exact_low, abs=0.03)
    assert got.high == pytest.approx(exact_high, abs=0.03)


def test_paired_p_value_is_twice_the_smaller_tail_of_the_same_draws():
    """Pinned to the draws themselves (no sampling tolerance): a one-sided p, half of this, fails."""
    err_a, err_b = [3, 1, 4, 1, 5, 2, 6], [2, 2, 3, 2, 4, 3, 5]
    words = [7, 5, 9, 4, 8, 6, 10]
    idx = resample_indices(len(words), 3000, seed=11)
    diffs = np.array([(sum(err_a[i] for i in row) - sum(err_b[i] for i in row)) / sum(words[i] for i in row)
                      for row in idx])  # one replicate at a time, plain Python sums
    smaller_tail = min(np.mean(diffs <= 0), np.mean(diffs >= 0))
    assert 0.1 < smaller_tail < 0.4  # the premise: the factor of two moves p by far more than any rounding
    got = paired_difference(err_a, err_b, words, replicates=3000, seed=11)
    assert got.p_value == pytest.approx(2 * smaller_tail, abs=1e-12)


def test_paired_p_value_matches_enumeration_where_one_and_two_sided_differ():
    """Exact two-sided p over all 5**5 resamples is 0.635; a one-sided p would be 0.317."""
    err_a, err_b, words = [2, 0, 3, 1, 2], [1, 1, 2, 2, 3], [5, 4, 6, 3, 5]
    exact = exact_distribution(
        lambda rows: (sum(err_a[i] for i in rows) - sum(err_b[i] for i in rows)) / sum(words[i] for i in rows), 5
    )
    exact_p = min(1.0, 2 * min(np.mean(exact <= 0), np.mean(exact >= 0)))
    assert 0.3 < exact_p < 0.9 and exact_p - exact_p / 2 > 0.1
    got = paired_difference(err_a, err_b, words, replicates=40000, seed=2)
    # sampling error of a tail fraction over 40000 draws: < 0.0025 (1 sigma), doubled for the p value
    assert got.p_value == pytest.approx(exact_p, abs=0.02)


def test_paired_p_value_reaches_one_when_both_tails_hold_half_the_draws():
    """Symmetric differences with mass at zero: each tail holds >= half the replicates, so 2 * tail >= 1 and
    the p value is exactly 1 (a one-sided p would stop at 0.64)."""
    err_a, err_b, words = [2, 1, 3, 0, 1], [1, 2, 3, 0, 1], [4, 4, 5, 3, 4]
    exact = exact_distribution(
        lambda rows: (sum(err_a[i] for i in rows) - sum(err_b[i] for i in rows)) / sum(words[i] for i in rows), 5
    )
    assert min(np.mean(exact <= 0), np.mean(exact >= 0)) > 0.5
    got = paired_difference(err_a, err_b, words, replicates=5000, seed=4)
    assert got.p_value == 1.0 and got.difference == 0.0 and not got.resolved


def test_paired_difference_resolves_only_a_consistent_gap():
    same = paired_difference(ERRORS, ERRORS, WORDS, replicates=300)
    assert same.difference == 0.0 and same.p_value == 1.0 and not same.resolved
    better = [max(e - 1, 0) for e in ERRORS]  # a fewer on every utterance that had one
    worse_by_one = paired_difference(ERRORS, better, WORDS, replicates=2000, seed=5)
    assert worse_by_one.resolved and worse_by_one.low > 0 and worse_by_one.p_value < 0.05
    # One utterance decides the difference: the paired interval must include zero.
    lucky = list(ERRORS)
    lucky[3] -= 5
    unresolved = paired_difference(ERRORS, lucky, WORDS, replicates=2000, seed=5)
    assert unresolved.difference > 0 and not unresolved.resolved and unresolved.p_value > 0.05


def test_paired_p_value_and_interval_agree_on_significance():
    rng = np.random.default_rng(0)
    words = rng.integers(3, 12, size=60)
    for shift in (0, 1, 2):
        err_a = rng.binomial(words, 0.3)
        err_b = np.maximum(err_a - rng.binomial(1, 0.15 * shift, size=60), 0)
        d = paired_difference(err_a, err_b, words, replicates=2000, seed=shift)
        assert d.resolved == (d.p_value < 0.05) or d.p_value == pytest.approx(0.05, abs=0.002)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="equal-length"):
        wer_interval([1, 2], [3])
    with pytest.raises(ValueError, match="no utterances"):
        wer_interval([], [])
    with pytest.raises(ValueError, match="no words"):
        wer_interval([0, 0], [0, 0])
    with pytest.raises(ValueError, match="level"):
        wer_interval([1], [2], level=1.5)


def test_align_records_keeps_common_utterances_and_pools_seeds():
    run1 = [{"key": "a", "word_errors": 1, "ref_words": 4}, {"key": "b", "word_errors": 0, "ref_words": 2},
            {"key": "c", "word_errors": 2, "ref_words": 5}]
    run2 = [{"key": "c", "word_errors": 4, "ref_words": 5}, {"key": "a", "word_errors": 3, "ref_words": 4}]
    keys, errors, words = align_records([run1, run2])
    assert keys == ["a", "c"]
    assert errors.tolist() == [[1, 2], [3, 4]]
    assert words.tolist() == [4, 5]
    pooled = pool_seeds(errors)
    seed_wers = errors.sum(1) / words.sum()
    assert pooled.sum() / words.sum() == pytest.approx(seed_wers.mean())
    run2[0]["ref_words"] = 6
    with pytest.raises(ValueError, match="word counts differ"):
        align_records([run1, run2])


# Hierarchical bootstrap (seeds, then utterances).
RNG = np.random.default_rng(21)
UTT_WORDS = RNG.integers(3, 12, size=80)
UTT_ERRORS = RNG.binomial(UTT_WORDS, 0.3)
OTHER_ERRORS = RNG.binomial(UTT_WORDS, 0.25)


def test_one_seed_gives_the_utterance_bootstrap_number_for_number():
    for seed in (0, 7):
        plain = paired_difference(UTT_ERRORS, OTHER_ERRORS, UTT_WORDS, replicates=1500, seed=seed)
        seeded = seeded_paired_difference(UTT_ERRORS[None], OTHER_ERRORS[None], UTT_WORDS, replicates=1500, seed=seed)
        assert (seeded.difference, seeded.low, seeded.high, seeded.p_value) == \
            (plain.difference, plain.low, plain.high, plain.p_value)
        assert seeded.seed_sd == 0.0 and seeded.dominant_source is None  # seed noise not measured with one seed
        assert seeded_wer_interval(UTT_ERRORS[None], UTT_WORDS, replicates=1500, seed=seed) == \
            wer_interval(UTT_ERRORS, UTT_WORDS, replicates=1500, seed=seed)


def test_seeds_that_agree_add_nothing_and_a_seed_spread_widens_the_interval():
    base = UTT_ERRORS + 6  # room to move errors down by the largest spread
    one = seeded_paired_difference(base[None], OTHER_ERRORS[None], UTT_WORDS, seed=3)
    twins = seeded_paired_difference(np.stack([base, base]), OTHER_ERRORS[None], UTT_WORDS, seed=3)
    assert (twins.low, twins.high) == pytest.approx((one.low, one.high))
    widths = []
    for spread in (1, 3, 6):
        # Two seeds: `spread` errors more and fewer than base on a tenth of the utterances (same pooled errors).
        shift = np.where(np.arange(UTT_WORDS.size) % 10 == 0, spread, 0)
        seeds = np.stack([base + shift, base - shift])
        d = seeded_paired_difference(seeds, OTHER_ERRORS[None], UTT_WORDS, seed=3)
        assert d.difference == pytest.approx(one.difference)
        # The utterance-only bootstrap of the pooled errors (the old interval) cannot see the spread.
        old = paired_difference(pool_seeds(seeds), OTHER_ERRORS, UTT_WORDS, seed=3)
        assert (old.low, old.high) == pytest.approx((one.low, one.high))
        widths.append(d.high - d.low)
    assert one.high - one.low < widths[0] < widths[1] < widths[2]


def test_source_spreads_match_enumeration_of_the_seed_draws():
    a = np.stack([UTT_ERRORS, UTT_ERRORS + 1, UTT_ERRORS + 3])  # (3, N)
    b = np.stack([OTHER_ERRORS, OTHER_ERRORS + 2])  # (2, N)
    got = seeded_paired_difference(a, b, UTT_WORDS, replicates=4000, seed=9)
    words = UTT_WORDS.sum()
    # Every equally likely seed draw of both sides, on the whole test set.
    exact = [(a[list(da)].mean(0).sum() - b[list(db)].mean(0).sum()) / words
             for da in itertools.product(range(3), repeat=3) for db in itertools.product(range(2), repeat=2)]
    assert got.seed_sd == pytest.approx(np.std(exact), rel=1e-9)
    # Utterances only: the paired bootstrap of the pooled errors, same utterance draws.
    idx = resample_indices(UTT_WORDS.size, 4000, seed=9)
    pooled = (pool_seeds(a)[idx].sum(1) - pool_seeds(b)[idx].sum(1)) / UTT_WORDS[idx].sum(1)
    assert got.utterance_sd == pytest.approx(pooled.std(), rel=1e-9)
    assert got.dominant_source == "seeds" and got.seed_sd > got.utterance_sd


def test_same_models_share_their_seed_draw():
    # Two seeds of one scheme measured twice (a stream offset that changes nothing): the
    # difference is zero in every replicate only if both sides draw the same seeds.
    seeds = np.stack([UTT_ERRORS, OTHER_ERRORS])
    same = seeded_paired_difference(seeds, seeds, UTT_WORDS, same_models=True)
    assert (same.difference, same.low, same.high, same.seed_sd) == (0.0, 0.0, 0.0, 0.0)
    independent = seeded_paired_difference(seeds, seeds, UTT_WORDS)
    assert independent.low < 0 < independent.high
    with pytest.raises(ValueError, match="as many seeds"):
        seeded_paired_difference(seeds, seeds[:1], UTT_WORDS, same_models=True)
    with pytest.raises(ValueError, match=r"\(seeds, N\)"):
        seeded_wer_interval(UTT_ERRORS, UTT_WORDS)
