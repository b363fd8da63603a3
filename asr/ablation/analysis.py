"""Statistics of an ablation: WER intervals, paired differences to a reference, findings.

Input: every run's :class:`~asr.ablation.results.SchemeResult` (one per scheme and
seed) and the per-utterance records its evaluation wrote
(``<run_dir>/eval/decode_<metric>.jsonl``). Output: per scheme and measurement, the
pooled WER with its 95 % bootstrap interval (seeds and utterances resampled), the seed
spread, and the paired difference to the reference scheme; per scheme, whether its
validation curve converged (``asr.ablation.convergence``); then a few sentences of
findings in which a claim "A beats B" appears only when the paired interval excludes
zero and both schemes converged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from asr.ablation.convergence import CONVERGED_BAND, PLATEAU_FRACTION, Convergence, plateau_convergence
from asr.ablation.results import SchemeResult, read_jsonl
from asr.ablation.stats import (
    DEFAULT_REPLICATES,
    Interval,
    PairedDifference,
    align_records,
    seeded_paired_difference,
    seeded_wer_interval,
)

REFERENCE_SCHEME = "rel_xl"
# Where the ablation program (asr.cli.ablate) has the evaluation write its records, inside a run folder.
EVAL_DIR = "eval"


def records_path(run_dir: str | Path, metric: str) -> Path:
    """Where the evaluation writes the per-utterance records of one WER measurement."""
    return Path(run_dir) / EVAL_DIR / f"decode_{metric}.jsonl"


def read_records(run_dir: str | Path, metric: str) -> list[dict] | None:
    """The records of one measurement, or None when it was not measured (or failed)."""
    path = records_path(run_dir, metric)
    if not path.is_file():
        return None
    return read_jsonl(path)


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


def group_runs(results: Sequence[SchemeResult]) -> dict[str, list[SchemeResult]]:
    """Successful runs by scheme, in first-seen order."""
    groups: dict[str, list[SchemeResult]] = {}
    for result in results:
        if result.ok:
            groups.setdefault(result.scheme, []).append(result)
    return groups


def pooled_difference(
    records_a: Sequence[Sequence[dict]], records_b: Sequence[Sequence[dict]], replicates: int = DEFAULT_REPLICATES,
    seed: int = 0, same_models: bool = False,
) -> PairedDifference | None:
    """WER(a) - WER(b) in percent, each side's seeds pooled, paired over the utterances every
    run scored (hierarchical bootstrap: seeds, then utterances); None when nothing pairs.
    ``same_models``: a and b are the same runs measured twice (see ``seeded_paired_difference``)."""
    if not records_a or not records_b:
        return None
    keys, errors, words = align_records([*records_a, *records_b])
    if not keys or words.sum() <= 0:
        return None
    n = len(records_a)
    diff = seeded_paired_difference(errors[:n], errors[n:], words, replicates=replicates, seed=seed,
                                    same_models=same_models)
    return diff.scaled(100)


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
        interval = seeded_wer_interval(errors, words, replicates=replicates, seed=seed)
        stats[scheme] = MeasurementStats(_percent_interval(interval), len(keys), seed_wers)
    if reference in stats:
        for scheme, scheme_stats in stats.items():
            if scheme != reference:
                scheme_stats.versus_reference = pooled_difference(records[scheme], records[reference],
                                                                  replicates, seed)
    return stats


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


@dataclass
class Analysis:
    """Everything the report derives from the runs.

    ``stats[metric][scheme]`` pooled WER with interval and paired difference;
    ``not_applicable[metric][scheme]`` the reason a scheme could not run a
    measurement ("n/a: longer than its table ..."); ``convergence[scheme]`` the plateau
    slope of its validation curves, seeds pooled (None without a curve); ``seeds[scheme]``
    the seeds pooled; ``stopped[scheme]`` where the adaptive budget stopped a scheme and the
    scheme it was judged behind (``{"behind": ..., "steps": ...}``).
    """

    reference: str
    stats: dict[str, dict[str, MeasurementStats]]
    not_applicable: dict[str, dict[str, str]]
    convergence: dict[str, Convergence | None]
    seeds: dict[str, list[int | None]]
    stopped: dict[str, dict] = field(default_factory=dict)

    def wer(self, metric: str, scheme: str) -> MeasurementStats | None:
        return self.stats.get(metric, {}).get(scheme)

    def converged(self, *schemes: str) -> bool:
        """True when every one of ``schemes`` converged by the report's criterion."""
        return all((c := self.convergence.get(s)) is not None and c.converged for s in schemes)

    def stopped_behind(self, scheme: str, other: str) -> bool:
        """True when the adaptive budget stopped ``scheme`` as behind ``other`` by more than its slope could
        close in the largest budget: a ranking on the dev split, whether or not either converged."""
        return self.stopped.get(scheme, {}).get("behind") == other

    def settled(self, *schemes: str) -> bool:
        """True when every one of ``schemes`` converged or was stopped behind another scheme."""
        return all(self.converged(s) or s in self.stopped for s in schemes)


def analyze(
    results: Sequence[SchemeResult],
    metrics: Sequence[str],
    reference: str = REFERENCE_SCHEME,
    replicates: int = DEFAULT_REPLICATES,
    stopped: Mapping[str, dict] | None = None,
) -> Analysis:
    """Intervals, paired differences, n/a reasons and convergence for ``metrics``; ``stopped``: the
    adaptive budget's stops (``asr.ablation.adaptive.stops_of``)."""
    from asr.ablation.evaluate import NOT_APPLICABLE

    groups = group_runs(results)
    stats = {m: measurement_stats(groups, m, reference, replicates) for m in metrics}
    not_applicable: dict[str, dict[str, str]] = {}
    for scheme, runs in groups.items():
        for run in runs:
            for metric, error in run.metric_errors.items():
                if error.startswith(NOT_APPLICABLE):
                    not_applicable.setdefault(metric, {})[scheme] = error
    convergence = {scheme: plateau_convergence([run.curve for run in runs]) for scheme, runs in groups.items()}
    seeds = {scheme: [run.seed for run in runs] for scheme, runs in groups.items()}
    stops = {scheme: dict(stop) for scheme, stop in (stopped or {}).items() if scheme in groups}
    return Analysis(reference, stats, not_applicable, convergence, seeds, stops)


def _best(stats: Mapping[str, MeasurementStats]) -> str | None:
    return min(stats, key=lambda s: stats[s].wer.value) if stats else None


def comparison_lines(analysis: Analysis, metric: str, what: str, stops_rank: bool = False) -> list[str]:
    """Every scheme against the reference on ``metric``: one sentence per resolved
    difference between converged schemes, one listing the unresolved ones, and one
    listing the differences that are not a ranking because a side did not converge.

    ``stops_rank``: ``metric`` is the one the adaptive budget's stops rank (the main WER; the stops
    decide on dev with the same decoding's greedy pass), so a scheme stopped behind the reference
    is listed as ranked below it rather than as unranked.
    """
    stats = analysis.stats.get(metric, {})
    ref = analysis.reference
    lines, unresolved, unranked, stopped = [], [], [], []
    for scheme, s in stats.items():
        d = s.versus_reference
        if scheme == ref or d is None:
            continue
        if stops_rank and analysis.stopped_behind(scheme, ref):
            stopped.append(f"`{scheme}` (stopped at {analysis.stopped[scheme]['steps']} steps) {format_difference(d)}")
        elif not analysis.converged(scheme, ref):
            unranked.append(f"`{scheme}` {format_difference(d)}")
        elif d.resolved:
            lines.append(compare_sentence(scheme, ref, d, what))
        else:
            unresolved.append(f"`{scheme}` {format_difference(d)}")
    if stopped:
        lines.append(
            f"Ranked below `{ref}`, because the adaptive budget stopped them behind it (on dev, further behind than "
            f"their steepest plausible slope could close by the largest budget; the difference on {what} is at the "
            "budget each stopped at): " + "; ".join(stopped) + "."
        )
    if unresolved:
        lines.append(
            f"Not resolved against `{ref}` on {what} (the 95% interval of the difference includes zero): "
            + "; ".join(unresolved) + "."
        )
    if unranked:
        lines.append(
            f"Not ranked against `{ref}` on {what}, because the two did not both converge (differences at this "
            "budget, which a longer one may change): " + "; ".join(unranked) + "."
        )
    return lines


def convergence_line(analysis: Analysis) -> str:
    """Per scheme: converged, or not converged with its slope, interval and why."""
    done, not_done = [], []
    for scheme, c in analysis.convergence.items():
        if c is None:
            not_done.append(f"`{scheme}` (no validation curve)")
        elif c.converged:
            done.append(f"`{scheme}` {c.describe()}")
        else:
            stop = analysis.stopped.get(scheme)
            why = f"stopped at {stop['steps']} steps behind `{stop['behind']}`" if stop else c.state
            not_done.append(f"`{scheme}` {c.describe()} ({why})")
    parts = [f"converged: {', '.join(done)}" if done else "no scheme converged",
             *([f"not converged: {', '.join(not_done)}"] if not_done else [])]
    return (f"Convergence (slope of the validation WER over the last {PLATEAU_FRACTION:.0%} of each run's steps, "
            f"seeds pooled, points per 1000 steps with its 95% CI; converged when the interval lies within "
            f"+-{CONVERGED_BAND:g}): " + "; ".join(parts) + ".")


def seed_source_line(analysis: Analysis) -> str | None:
    """Which source of noise dominates each main-WER difference where a side has several seeds."""
    pairs = [f"`{scheme}` seeds {d.seed_sd:.2f}, utterances {d.utterance_sd:.2f} ({d.dominant_source} dominate)"
             for scheme, s in analysis.stats.get(MAIN_METRIC, {}).items()
             if (d := s.versus_reference) is not None and d.dominant_source is not None]
    if not pairs:
        return None
    return (f"Sources of the interval of each difference to `{analysis.reference}` on the main WER, where a side "
            "has several seeds (standard deviation of the difference in points when only seeds or only "
            "utterances are resampled): " + "; ".join(pairs) + ".")


def findings(analysis: Analysis, chunk_metrics: Mapping[int, str], probe_metrics: Mapping[int, str]) -> list[str]:
    """The report's findings, each a sentence built from the numbers.

    A sentence that ranks two schemes appears only when their paired interval
    excludes zero (``compare_sentence``) and both converged; otherwise it says the
    difference is not resolved, or not a ranking at this budget.
    """
    out: list[str] = []
    main = analysis.stats.get(MAIN_METRIC, {})
    best = _best(main)
    if best is None:
        return ["No scheme finished its evaluation: nothing to compare yet."]
    b = main[best].wer
    settled = ("" if analysis.converged(best) and analysis.settled(*main)
               else " at this budget (not a ranking: not every scheme converged or was stopped behind another)")
    out.append(f"Lowest test WER (attention rescoring, full context){settled}: `{best}` at {format_interval(b)}%.")
    out.append(convergence_line(analysis))
    out += comparison_lines(analysis, MAIN_METRIC, "test WER (rescoring, full context)", stops_rank=True)
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
        out.append(f"Seed spread of the main WER (lowest-highest seed): {spread}; the intervals of these schemes "
                   "resample their seeds as well as the utterances, those of one-seed schemes the utterances only.")
        if (sources := seed_source_line(analysis)) is not None:
            out.append(sources)
    else:
        # A paired bootstrap over utterances says how sure the ranking is for these trained
        # models; a second training seed can move a scheme's WER by more than that.
        out.append("One training seed per scheme: the intervals cover the choice of test utterances, not "
                   "training-seed variation, which can be larger than a small resolved difference; "
                   "`--seeds N` trains N seeds per scheme and pools them.")
    return out
