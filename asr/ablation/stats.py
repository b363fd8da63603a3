"""Bootstrap confidence intervals for WER over utterances, single and paired.

A corpus WER is a ratio of sums, ``sum(errors) / sum(ref_words)``, so one bootstrap
replicate redraws N utterances with replacement and takes the ratio of the redrawn
sums; the 95 % interval is the 2.5th and 97.5th percentiles of the replicates.

The paired bootstrap compares two systems on the SAME utterances: each replicate
draws one set of utterance indices and scores both systems on it, so utterance
difficulty (shared by both) cancels out of the difference. Its two-sided p value is
twice the smaller tail of the replicated difference around zero (at most 1):
p < 0.05 exactly when the 95 % percentile interval excludes zero.

Several training seeds of one system are pooled by averaging each utterance's errors
over seeds (``pool_seeds``): the pooled WER is the mean of the seeds' WERs. Two sources
of noise then stand behind a pooled WER: the choice of test utterances and the choice of
training seeds. The hierarchical bootstrap (``seeded_wer_interval``,
``seeded_paired_difference``) resamples both in each replicate: each system's seeds with
replacement, then the utterances (shared by both systems, so the pairing holds). With one
seed per system the seed draw is the identity and the replicates are those of the
utterance-only functions, number for number. With few seeds (two, three) the seed part
is a rough estimate (a percentile interval cannot reach past the seeds' own spread), but
it is no longer left out.

Replicates are drawn from a ``numpy.random.Generator`` seeded by the caller: the same
inputs and seed give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_REPLICATES = 2000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A WER (fraction) with its bootstrap interval."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class PairedDifference:
    """WER(a) - WER(b) on the same utterances (fractions), its interval and two-sided p.

    ``utterance_sd`` and ``seed_sd`` (set by :func:`seeded_paired_difference`) are the
    standard deviations of the bootstrapped difference with one source of noise at a time:
    utterances resampled with every seed kept, and seeds resampled on the whole test set.
    """

    difference: float
    low: float
    high: float
    p_value: float
    utterance_sd: float | None = None
    seed_sd: float | None = None

    @property
    def resolved(self) -> bool:
        """True when the interval excludes zero (one system is better at this level)."""
        return self.low > 0.0 or self.high < 0.0

    @property
    def dominant_source(self) -> str | None:
        """``"seeds"`` or ``"utterances"``, whichever spreads the difference more; None when a
        source was not measured (one seed per system: the seed part is zero, not measured)."""
        if self.utterance_sd is None or not self.seed_sd:
            return None
        return "seeds" if self.seed_sd > self.utterance_sd else "utterances"

    def scaled(self, factor: float) -> PairedDifference:
        """The same difference in other units (``100``: fractions to percent); p is unitless."""
        return PairedDifference(
            factor * self.difference, factor * self.low, factor * self.high, self.p_value,
            None if self.utterance_sd is None else factor * self.utterance_sd,
            None if self.seed_sd is None else factor * self.seed_sd,
        )


def _check(errors: np.ndarray, words: np.ndarray) -> None:
    if errors.ndim != 1 or errors.shape != words.shape:
        raise ValueError(f"errors {errors.shape} and words {words.shape} must be equal-length 1-d arrays")
    if errors.size == 0:
        raise ValueError("no utterances to bootstrap")
    if words.sum() <= 0:
        raise ValueError("the reference has no words: WER is undefined")


def resample_indices(num_utts: int, replicates: int, seed: int) -> np.ndarray:
    """(replicates, num_utts) utterance indices drawn with replacement."""
    if replicates < 1:
        raise ValueError(f"replicates ({replicates}) must be >= 1")
    return np.random.default_rng(seed).integers(0, num_utts, size=(replicates, num_utts))


def _replicate_rates(errors: np.ndarray, words: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(R,) WER of every replicate. A replicate with no reference words scores 0 errors / 1 word."""
    err = errors[idx].sum(axis=1)  # (R,)
    ref = words[idx].sum(axis=1)  # (R,)
    return err / np.maximum(ref, 1)


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level ({level}) must be in (0, 1)")
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def wer_interval(
    errors: Sequence[float], words: Sequence[float], replicates: int = DEFAULT_REPLICATES,
    level: float = DEFAULT_LEVEL, seed: int = 0,
) -> Interval:
    """Corpus WER of per-utterance ``errors`` / ``words`` with its percentile bootstrap interval."""
    err, ref = np.asarray(errors, dtype=np.float64), np.asarray(words, dtype=np.float64)
    _check(err, ref)
    rates = _replicate_rates(err, ref, resample_indices(err.size, replicates, seed))
    low, high = _percentiles(rates, level)
    return Interval(float(err.sum() / ref.sum()), low, high)


def paired_difference(
    errors_a: Sequence[float], errors_b: Sequence[float], words: Sequence[float],
    replicates: int = DEFAULT_REPLICATES, level: float = DEFAULT_LEVEL, seed: int = 0,
) -> PairedDifference:
    """WER(a) - WER(b) over the same utterances (same order), paired bootstrap interval and p."""
    err_a, err_b = np.asarray(errors_a, dtype=np.float64), np.asarray(errors_b, dtype=np.float64)
    ref = np.asarray(words, dtype=np.float64)
    _check(err_a, ref)
    _check(err_b, ref)
    idx = resample_indices(ref.size, replicates, seed)
    diffs = _replicate_rates(err_a, ref, idx) - _replicate_rates(err_b, ref, idx)  # (R,)
    low, high = _percentiles(diffs, level)
    return PairedDifference(float((err_a.sum() - err_b.sum()) / ref.sum()), low, high, _p_value(diffs))


def _p_value(diffs: np.ndarray) -> float:
    """Two-sided bootstrap p of replicated differences around zero (at most 1)."""
    return min(1.0, 2.0 * min(float(np.mean(diffs <= 0.0)), float(np.mean(diffs >= 0.0))))


# Offsets the seed draws' generator from the utterance draws' (which keep the plain
# ``default_rng(seed)`` stream, so one seed per system reproduces the utterance-only numbers).
_SEED_STREAM = 1


def _check_seeded(errors: np.ndarray, words: np.ndarray) -> None:
    if errors.ndim != 2 or errors.shape[0] < 1:
        raise ValueError(f"errors must be (seeds, N) with at least one seed, got {errors.shape}")
    _check(errors[0], words)


def seed_weights(num_seeds: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """(replicates, num_seeds) share of each seed in each replicate's seed draw (rows sum to 1).

    ``num_seeds`` seeds are drawn with replacement per replicate; one seed is always itself
    (no draw, so the generator is left untouched).
    """
    if num_seeds == 1:
        return np.ones((replicates, 1))
    draws = rng.integers(0, num_seeds, size=(replicates, num_seeds))  # (R, S)
    return (draws[:, :, None] == np.arange(num_seeds)).sum(axis=1) / num_seeds  # (R, S)


def _seeded_rates(errors: np.ndarray, words: np.ndarray, idx: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(R,) WER of every replicate: seed-weighted mean of the seeds' redrawn error sums over the
    redrawn reference words. ``errors`` (S, N), ``idx`` (R, N), ``weights`` (R, S)."""
    sums = np.stack([e[idx].sum(axis=1) for e in errors], axis=1)  # (R, S), one seed at a time: R x N memory
    ref = words[idx].sum(axis=1)  # (R,)
    return (weights * sums).sum(axis=1) / np.maximum(ref, 1)


def _seed_variance(errors: np.ndarray, words: np.ndarray) -> float:
    """Variance of the pooled WER when only the seeds are resampled (whole test set): the
    bootstrap variance of a mean of S values, their population variance / S."""
    seed_wers = errors.sum(axis=1) / words.sum()  # (S,)
    return float(seed_wers.var() / len(seed_wers))


def seeded_wer_interval(
    errors: np.ndarray, words: Sequence[float], replicates: int = DEFAULT_REPLICATES,
    level: float = DEFAULT_LEVEL, seed: int = 0,
) -> Interval:
    """Pooled WER of ``errors`` (seeds, N) with a hierarchical bootstrap interval (seeds, then utterances)."""
    err, ref = np.asarray(errors, dtype=np.float64), np.asarray(words, dtype=np.float64)
    _check_seeded(err, ref)
    idx = resample_indices(ref.size, replicates, seed)
    weights = seed_weights(err.shape[0], replicates, np.random.default_rng((seed, _SEED_STREAM)))
    low, high = _percentiles(_seeded_rates(err, ref, idx, weights), level)
    return Interval(float(pool_seeds(err).sum() / ref.sum()), low, high)


def seeded_paired_difference(
    errors_a: np.ndarray, errors_b: np.ndarray, words: Sequence[float], replicates: int = DEFAULT_REPLICATES,
    level: float = DEFAULT_LEVEL, seed: int = 0, same_models: bool = False,
) -> PairedDifference:
    """Pooled WER(a) - WER(b): ``errors_a`` (Sa, N) and ``errors_b`` (Sb, N) on the same
    utterances; hierarchical bootstrap interval, p, and the spread from each source.

    Each replicate draws a's seeds, b's seeds (independently: different trained models)
    and one set of utterances for both. ``same_models``: row k of a and of b are the same
    trained model measured twice (e.g. one scheme at two stream offsets), so one seed draw
    serves both and seed noise shared by the two measurements cancels.
    """
    err_a, err_b = np.asarray(errors_a, dtype=np.float64), np.asarray(errors_b, dtype=np.float64)
    ref = np.asarray(words, dtype=np.float64)
    _check_seeded(err_a, ref)
    _check_seeded(err_b, ref)
    if same_models and err_a.shape[0] != err_b.shape[0]:
        raise ValueError(f"same_models needs as many seeds on both sides, got {err_a.shape[0]} and {err_b.shape[0]}")
    idx = resample_indices(ref.size, replicates, seed)
    rng = np.random.default_rng((seed, _SEED_STREAM))
    weights_a = seed_weights(err_a.shape[0], replicates, rng)
    weights_b = weights_a if same_models else seed_weights(err_b.shape[0], replicates, rng)
    diffs = _seeded_rates(err_a, ref, idx, weights_a) - _seeded_rates(err_b, ref, idx, weights_b)  # (R,)
    low, high = _percentiles(diffs, level)
    # One source at a time: every seed kept at its own weight (utterances only), and the
    # seeds alone on the whole test set (independent models: their variances add).
    uniform = (np.full((replicates, s), 1.0 / s) for s in (err_a.shape[0], err_b.shape[0]))
    utterance_only = _seeded_rates(err_a, ref, idx, next(uniform)) - _seeded_rates(err_b, ref, idx, next(uniform))
    if same_models:
        seed_var = _seed_variance(err_a - err_b, ref)
    else:
        seed_var = _seed_variance(err_a, ref) + _seed_variance(err_b, ref)
    difference = float((pool_seeds(err_a).sum() - pool_seeds(err_b).sum()) / ref.sum())
    return PairedDifference(difference, low, high, _p_value(diffs), float(utterance_only.std()),
                            float(np.sqrt(seed_var)))


def align_records(runs: Sequence[Sequence[dict]]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per-utterance records of several runs on one split -> (keys, errors (runs, N), words (N,)).

    Records are dicts with ``key``, ``word_errors`` and ``ref_words`` (the evaluation's
    JSONL rows). Only utterances every run scored are kept (a run that skipped one
    cannot be paired on it), in the first run's order; their reference word counts
    must agree between runs.
    """
    if not runs:
        raise ValueError("no runs to align")
    by_key = [{r["key"]: r for r in run} for run in runs]
    keys = [r["key"] for r in runs[0] if all(r["key"] in other for other in by_key[1:])]
    errors = np.array([[float(table[k]["word_errors"]) for k in keys] for table in by_key]).reshape(len(runs), -1)
    words = np.array([float(by_key[0][k]["ref_words"]) for k in keys])
    for table in by_key[1:]:
        mismatch = [k for k in keys if table[k]["ref_words"] != by_key[0][k]["ref_words"]]
        if mismatch:
            raise ValueError(f"reference word counts differ between runs for {mismatch[:3]} (different test sets?)")
    return keys, errors, words


def pool_seeds(errors: np.ndarray) -> np.ndarray:
    """(seeds, N) per-utterance errors -> (N,) mean over seeds (pooled WER = mean of seed WERs)."""
    if errors.ndim != 2 or errors.shape[0] < 1:
        raise ValueError(f"errors must be (seeds, N), got {errors.shape}")
    return errors.mean(axis=0)
