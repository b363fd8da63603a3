"""Statistics of an ablation: WER intervals, paired differences to a reference, findings.

Input: every run's :class:`~asr.ablation.results.SchemeResult` (one per scheme and
seed) and the per-utterance records its evaluation wrote
(``<run_dir>/eval/decode_<metric>.jsonl``). Output: per scheme and measurement, the
pooled WER with its 95 % bootstrap interval, the seed spread, and the paired
difference to the reference scheme; then a few sentences of findings in which a
claim "A beats B" appears only when the paired interval excludes zero.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asr.ablation.results import SchemeResult
from asr.ablation.stats import (
    DEFAULT_REPLICATES,
    Interval,
    PairedDifference,
    align_records,
    paired_difference,
    pool_seeds,
    wer_interval,
)

REFERENCE_SCHEME = "rel_xl"
# Where scripts/ablate.py has the evaluation write its records, inside a run folder.
EVAL_DIR = "eval"
# How many of the last validation points the plateau slope is fitted to.
PLATEAU_POINTS = 3


def records_path(run_dir: str | Path, metric: str) -> Path:
    """Where the evaluation writes the per-utterance records of one WER measurement."""
    return Path(run_dir) / EVAL_DIR / f"decode_{metric}.jsonl"


def read_records(run_dir: str | Path, metric: str) -> list[dict] | None:
    """The records of one measurement, or None when it was not measured (or failed)."""
    path = records_path(run_dir, metric)
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class MeasurementStats:
    """One scheme's WER on one measurement, pooled over its seeds (percent).

    ``seed_wers`` are the seeds' own WERs (their spread is the seed noise);
    ``versus_reference`` is this scheme minus the reference scheme, paired over
    the utterances both scored (None for the reference itself or when it is missing).
    """

    wer: Interval
    utterances: int
    seed_wers: list[float] = field(default_factory=list)
    versus_reference: PairedDifference | None = None


def _percent_interval(i: Interval) -> Interval:
    return Interval(100 * i.value, 100 * i.low, 100 * i.high)


def _percent_difference(d: PairedDifference) -> PairedDifference:
    return PairedDifference(100 * d.difference, 100 * d.low, 100 * d.high, d.p_value)


def group_runs(results: Sequence[SchemeResult]) -> dict[str, list[SchemeResult]]:
    """Successful runs by scheme, in first-seen order."""
    groups: dict[str, list[SchemeResult]] = {}
    for result in results:
        if result.ok:
            groups.setdefault(result.scheme, []).append(result)
    return groups


def measurement_stats(
    groups: Mapping[str, Sequence[SchemeResult]],
    metric: str,
    reference: str = REFERENCE_SCHEME,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = 0,
) -> dict[str, MeasurementStats]:
    """Pooled interval and paired difference to ``reference`` of every scheme that has records."""
    records = {
        scheme: [r for r in (read_records(run.run_dir, metric) for run in runs) if r]
        for scheme, runs in groups.items()
    }
    records = {scheme: runs for scheme, runs in records.items() if runs}
    stats: dict[str, MeasurementStats] = {}
    for scheme, runs in records.items():
        keys, errors, words = align_records(runs)
        if not keys or words.sum() <= 0:
            continue
        seed_wers = [100 * float(e.sum() / words.sum()) for e in errors]
        interval = wer_interval(pool_seeds(errors), words, replicates=replicates, seed=seed)
        stats[scheme] = MeasurementStats(_percent_interval(interval), len(keys), seed_wers)
    if reference in stats:
        for scheme, scheme_stats in stats.items():
            if scheme == reference:
                continue
            both = records[scheme] + records[reference]
            keys, errors, words = align_records(both)
            if not keys:
                continue
            n = len(records[scheme])
            diff = paired_difference(
                pool_seeds(errors[:n]), pool_seeds(errors[n:]), words, replicates=replicates, seed=seed
            )
            scheme_stats.versus_reference = _percent_difference(diff)
    return stats


def plateau_slope(curve: Sequence[Sequence[float]], points: int = PLATEAU_POINTS) -> float | None:
    """Least-squares slope of the last ``points`` validation WERs, in WER points per 1000 steps.

    ``curve`` holds [step, WER fraction] pairs. Near zero: the scheme has reached its
    plateau for this schedule; clearly negative: more steps would still help.
    """
    if len(curve) < 2:
        return None
    tail = np.asarray(curve[-points:], dtype=np.float64)
    if np.ptp(tail[:, 0]) == 0:
        return None
    slope = np.polyfit(tail[:, 0], tail[:, 1], 1)[0]
    return float(slope * 1000 * 100)


def format_interval(i: Interval | None) -> str:
    return "n/a" if i is None else f"{i.value:.2f} [{i.low:.2f}, {i.high:.2f}]"


def format_p(p_value: float, replicates: int = DEFAULT_REPLICATES) -> str:
    """``p=0.041``; a bootstrap p of 0 only says p < 2 / replicates, so it is written so."""
    return f"p<{2 / replicates:.2g}" if p_value == 0.0 else f"p={p_value:.3f}"


def format_difference(d: PairedDifference | None) -> str:
    if d is None:
        return "—"
    return f"{d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}], {format_p(d.p_value)}"


def compare_sentence(scheme: str, reference: str, d: PairedDifference, what: str) -> str:
    """One finding about ``scheme`` vs ``reference``; a direction only when the interval excludes zero."""
    span = f"{d.difference:+.2f} points, 95% CI [{d.low:+.2f}, {d.high:+.2f}], {format_p(d.p_value)}"
    if not d.resolved:
        return f"`{scheme}` vs `{reference}` on {what}: not resolved ({span}; the interval includes zero)."
    verdict = "lower (better)" if d.difference < 0 else "higher (worse)"
    return f"`{scheme}` has a {verdict} WER than `{reference}` on {what} ({span})."


# What each finding is about: the measurement key and how a sentence names it.
MAIN_METRIC = "wer_test_rescore"
# A slope steeper than this (WER points per 1000 steps, falling) says the scheme was
# still improving when its budget ended.
STILL_IMPROVING = -2.0


@dataclass
class Analysis:
    """Everything the report derives from the runs.

    ``stats[metric][scheme]`` pooled WER with interval and paired difference;
    ``not_applicable[metric][scheme]`` the reason a scheme could not run a
    measurement ("n/a: longer than its table ..."); ``slopes[scheme]`` the plateau
    slope averaged over seeds; ``seeds[scheme]`` the seeds pooled.
    """

    reference: str
    stats: dict[str, dict[str, MeasurementStats]]
    not_applicable: dict[str, dict[str, str]]
    slopes: dict[str, float | None]
    seeds: dict[str, list[int | None]]

    def wer(self, metric: str, scheme: str) -> MeasurementStats | None:
        return self.stats.get(metric, {}).get(scheme)


def analyze(
    results: Sequence[SchemeResult],
    metrics: Sequence[str],
    reference: str = REFERENCE_SCHEME,
    replicates: int = DEFAULT_REPLICATES,
) -> Analysis:
    """Intervals, paired differences, n/a reasons and plateau slopes for ``metrics``."""
    from asr.ablation.evaluate import NOT_APPLICABLE

    groups = group_runs(results)
    stats = {m: measurement_stats(groups, m, reference, replicates) for m in metrics}
    not_applicable: dict[str, dict[str, str]] = {}
    for scheme, runs in groups.items():
        for run in runs:
            for metric, error in run.metric_errors.items():
                if error.startswith(NOT_APPLICABLE):
                    not_applicable.setdefault(metric, {})[scheme] = error
    slopes = {}
    for scheme, runs in groups.items():
        values = [v for v in (plateau_slope(run.curve) for run in runs) if v is not None]
        slopes[scheme] = float(np.mean(values)) if values else None
    seeds = {scheme: [run.seed for run in runs] for scheme, runs in groups.items()}
    return Analysis(reference, stats, not_applicable, slopes, seeds)


def _best(stats: Mapping[str, MeasurementStats]) -> str | None:
    return min(stats, key=lambda s: stats[s].wer.value) if stats else None


def comparison_lines(analysis: Analysis, metric: str, what: str) -> list[str]:
    """Every scheme against the reference on ``metric``: one sentence per resolved
    difference, one sentence listing the unresolved ones."""
    stats = analysis.stats.get(metric, {})
    ref = analysis.reference
    lines, unresolved = [], []
    for scheme, s in stats.items():
        d = s.versus_reference
        if scheme == ref or d is None:
            continue
        if d.resolved:
            lines.append(compare_sentence(scheme, ref, d, what))
        else:
            unresolved.append(f"`{scheme}` {format_difference(d)}")
    if unresolved:
        lines.append(
            f"Not resolved against `{ref}` on {what} (the 95% interval of the difference includes zero): "
            + "; ".join(unresolved) + "."
        )
    return lines


def findings(analysis: Analysis, chunk_metrics: Mapping[int, str], probe_metrics: Mapping[int, str]) -> list[str]:
    """The report's findings, each a sentence built from the numbers.

    A sentence that ranks two schemes appears only when their paired interval
    excludes zero (``compare_sentence``); otherwise it says the difference is not resolved.
    """
    out: list[str] = []
    main = analysis.stats.get(MAIN_METRIC, {})
    best = _best(main)
    if best is None:
        return ["No scheme finished its evaluation: nothing to compare yet."]
    b = main[best].wer
    out.append(f"Lowest test WER (attention rescoring, full context): `{best}` at {format_interval(b)}%.")
    out += comparison_lines(analysis, MAIN_METRIC, "test WER (rescoring, full context)")
    improving = {s: v for s, v in analysis.slopes.items() if v is not None and v < STILL_IMPROVING}
    if improving:
        listed = ", ".join(f"`{s}` ({v:+.1f})" for s, v in improving.items())
        out.append(
            f"Still improving when the budget ended (validation WER slope over the last {PLATEAU_POINTS} "
            f"validations, points per 1000 steps): {listed}; a longer budget may reorder these schemes."
        )
    else:
        out.append(f"Every scheme's validation WER had flattened (slope over the last {PLATEAU_POINTS} "
                   f"validations above {STILL_IMPROVING:+.0f} points per 1000 steps).")
    if chunk_metrics:
        smallest = min(chunk_metrics)
        metric = chunk_metrics[smallest]
        costs = []
        for scheme, s in analysis.stats.get(metric, {}).items():
            full = analysis.wer("wer_test_greedy", scheme)
            if full is not None:
                costs.append(f"`{scheme}` {s.wer.value - full.wer.value:+.1f}")
        if costs:
            out.append(f"Streaming cost (CTC greedy WER at chunk {smallest} minus full context, points): "
                       + ", ".join(costs) + ".")
        out += comparison_lines(analysis, metric, f"chunk-{smallest} streaming WER")
    if probe_metrics:
        longest = max(probe_metrics)
        shortest = min(probe_metrics)
        metric = probe_metrics[longest]
        growth = []
        for scheme in analysis.stats.get(probe_metrics[shortest], {}):
            short = analysis.wer(probe_metrics[shortest], scheme)
            long = analysis.wer(metric, scheme)
            if long is not None:
                growth.append(f"`{scheme}` {short.wer.value:.1f} -> {long.wer.value:.1f}")
        if growth:
            out.append(f"Length extrapolation (full context, CTC greedy WER at {shortest} s -> {longest} s; "
                       f"training utterances are 1-6 s): " + ", ".join(growth) + ".")
        for scheme, reason in analysis.not_applicable.get(metric, {}).items():
            out.append(f"`{scheme}` cannot run {longest} s passages: {reason}.")
        out += comparison_lines(analysis, metric, f"{longest} s passages (full context)")
    multi = {s: v for s, v in analysis.stats.get(MAIN_METRIC, {}).items() if len(v.seed_wers) > 1}
    if multi:
        spread = ", ".join(
            f"`{s}` {min(v.seed_wers):.2f}-{max(v.seed_wers):.2f} ({len(v.seed_wers)} seeds)" for s, v in multi.items()
        )
        out.append(f"Seed spread of the main WER (lowest-highest seed): {spread}.")
    else:
        # A paired bootstrap over utterances says how sure the ranking is for these trained
        # models; a second training seed can move a scheme's WER by more than that.
        out.append("One training seed per scheme: the intervals cover the choice of test utterances, not "
                   "training-seed variation, which can be larger than a small resolved difference; "
                   "`--seeds N` trains N seeds per scheme and pools them.")
    return out
