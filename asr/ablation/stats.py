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
over seeds (``pool_seeds``): the pooled WER is the mean of the seeds' WERs, and the
bootstrap then resamples utterances, the unit the test set was drawn in.

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
    """WER(a) - WER(b) on the same utterances (fractions), its interval and two-sided p."""

    difference: float
    low: float
    high: float
    p_value: float

    @property
    def resolved(self) -> bool:
        """True when the interval excludes zero (one system is better at this level)."""
        return self.low > 0.0 or self.high < 0.0


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
    p_value = min(1.0, 2.0 * min(float(np.mean(diffs <= 0.0)), float(np.mean(diffs >= 0.0))))
    return PairedDifference(float((err_a.sum() - err_b.sum()) / ref.sum()), low, high, p_value)


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
