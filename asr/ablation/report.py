"""Build the ablation's Markdown report and ``results.json`` from scheme results."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asr.ablation.analysis import (
    Analysis,
    analyze,
    findings,
    format_difference,
    format_interval,
)
from asr.ablation.convergence import CONVERGED_BAND, PLATEAU_FRACTION
from asr.ablation.stats import DEFAULT_REPLICATES
from asr.ablation.evaluate import ALL_WER_METRICS, CHUNK_SWEEP, NOT_APPLICABLE, PROBE_CONTEXTS, TRANSLATION_METRICS
from asr.ablation.report_sections import rel_shift_section, translation_section
from asr.ablation.translation import CHUNK as SHIFT_CHUNK
from asr.ablation.translation import LEFT as SHIFT_LEFT
from asr.ablation.results import METRICS, SchemeResult
from asr.data.features import FRAME_SHIFT_S
from asr.synth.probes import PROBE_LENGTHS

MISSING = "—"
CHUNK_METRICS: dict[int, str] = {c: f"wer_chunk{c}" for c, _ in CHUNK_SWEEP}
PROBE_METRICS: dict[str, dict[int, str]] = {
    context: {s: f"wer_probe{s}_{context}" for s in PROBE_LENGTHS} for context in PROBE_CONTEXTS
}
PROBE_CONTEXT_NAMES = {"full": "full context", "c16": "streaming C16/L4"}
# Encoder frame period when a run's config cannot be read: the quickstart's 4x subsampling.
DEFAULT_SUBSAMPLING = 4


def format_cell(result: SchemeResult, key: str, fmt: str) -> str:
    """One table cell: the formatted number, ``failed`` for a failed run, or ``n/a`` with a footnote mark."""
    if not result.ok:
        return "failed"
    value = result.metrics.get(key)
    if value is None:
        return "n/a" if key in result.metric_errors else MISSING
    return fmt.format(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_table(results: Sequence[SchemeResult]) -> str:
    """A Markdown table: one row per run, one column per metric, plus status (and seed when several)."""
    seeded = len({r.seed for r in results if r.seed is not None}) > 1
    headers = ["Scheme", *(["Seed"] if seeded else []), "Status", *(m.header for m in METRICS)]
    rows = []
    for result in results:
        status = "ok" if result.ok else f"failed ({result.failed_phase})"
        seed = [str(result.seed)] if seeded else []
        rows.append([f"`{result.scheme}`", *seed, status, *(format_cell(result, m.key, m.fmt) for m in METRICS)])
    return _table(headers, rows)


def interval_cell(analysis: Analysis, metric: str, scheme: str) -> str:
    """Pooled WER with its 95% interval; why it is missing otherwise."""
    stats = analysis.wer(metric, scheme)
    if stats is not None:
        return format_interval(stats.wer)
    if scheme in analysis.not_applicable.get(metric, {}):
        return NOT_APPLICABLE
    return "n/a"


def main_table(analysis: Analysis, schemes: Sequence[str]) -> str:
    """Test WER with intervals, paired differences to the reference, seeds and convergence."""
    ref = analysis.reference
    headers = ["Scheme", "Seeds", "WER rescore % [95% CI]", f"vs `{ref}`: diff [95% CI], p",
               "WER greedy % [95% CI]", f"greedy vs `{ref}`", "Seed WERs (rescore)",
               "Plateau slope [95% CI]"]
    rows = []
    for scheme in schemes:
        main = analysis.wer("wer_test_rescore", scheme)
        greedy = analysis.wer("wer_test_greedy", scheme)
        convergence = analysis.convergence.get(scheme)
        rows.append([
            f"`{scheme}`",
            str(len(analysis.seeds.get(scheme, []))),
            interval_cell(analysis, "wer_test_rescore", scheme),
            "reference" if scheme == ref else format_difference(main.versus_reference if main else None),
            interval_cell(analysis, "wer_test_greedy", scheme),
            "reference" if scheme == ref else format_difference(greedy.versus_reference if greedy else None),
            ", ".join(f"{w:.2f}" for w in main.seed_wers) if main else MISSING,
            MISSING if convergence is None else f"{convergence.describe()}: {convergence.state}",
        ])
    return _table(headers, rows)


def encoder_frame_ms(results: Sequence[SchemeResult]) -> tuple[float, bool]:
    """(Milliseconds per encoder frame, read from a run's config?) for chunk latencies."""
    from omegaconf import OmegaConf

    for result in results:
        path = Path(result.run_dir) / ".hydra" / "config.yaml"
        if result.ok and path.is_file():
            sub = OmegaConf.select(OmegaConf.load(path), "model.encoder.subsampling")
            if sub:
                return 1000.0 * FRAME_SHIFT_S * int(sub), True
    return 1000.0 * FRAME_SHIFT_S * DEFAULT_SUBSAMPLING, False


def chunk_table(analysis: Analysis, schemes: Sequence[str], frame_ms: float) -> str:
    """CTC greedy test WER at full context and each chunk size (with its latency)."""
    headers = ["Scheme", "full context"] + [
        f"C{c}/L{left} ({c * frame_ms:.0f} ms)" for c, left in CHUNK_SWEEP
    ]
    rows = [
        [f"`{s}`", interval_cell(analysis, "wer_test_greedy", s),
         *(interval_cell(analysis, CHUNK_METRICS[c], s) for c, _ in CHUNK_SWEEP)]
        for s in schemes
    ]
    return _table(headers, rows)


def length_table(analysis: Analysis, schemes: Sequence[str], context: str) -> str:
    """CTC greedy WER on the probe passages of each length, one context."""
    metrics = PROBE_METRICS[context]
    headers = ["Scheme"] + [f"{s} s" for s in metrics]
    rows = [[f"`{scheme}`", *(interval_cell(analysis, m, scheme) for m in metrics.values())] for scheme in schemes]
    return _table(headers, rows)


def rel_shift_rows(frame_ms: float) -> dict[str, str]:
    """Every measurement the "rel_shift or not" section compares: metric -> row label."""
    rows = {"wer_test_rescore": "test, rescoring, full context", "wer_test_greedy": "test, CTC greedy, full context"}
    rows.update({CHUNK_METRICS[c]: f"test, greedy, C{c}/L{left} ({c * frame_ms:.0f} ms)" for c, left in CHUNK_SWEEP})
    for context, name in (("full", "full context"), ("c16", "C16/L4")):
        rows.update({m: f"{s} s passages, {name}" for s, m in PROBE_METRICS[context].items()})
    rows.update({m: f"translation probe, clock at {s} s" for m, s in TRANSLATION_METRICS.items()})
    return rows


def _translation_utts(analysis: Analysis) -> str:
    counts = {v.utterances for v in analysis.stats.get(next(iter(TRANSLATION_METRICS)), {}).values()}
    return f"the first {max(counts)} usable test utterances" if counts else "none measured"


def _escape(text: str) -> str:
    # A pipe or backtick inside an error message would break the Markdown table/code span.
    return text.replace("|", "\\|").replace("`", "'")


def notes(results: Sequence[SchemeResult]) -> list[str]:
    """Bullet lines for failed runs and for single measurements that failed."""
    lines = []
    for result in results:
        if not result.ok:
            lines.append(f"- `{result.scheme}` failed in {result.failed_phase}: `{_escape(result.error or '')}`")
            continue
        headers = {m.key: m.header for m in METRICS}
        for key, error in sorted(result.metric_errors.items()):
            lines.append(f"- `{result.scheme}` {headers.get(key, key)}: n/a: `{_escape(error)}`")
    return lines


def describe_split(split: str, info: dict) -> str:
    """One line on what a split gave the evaluation: which cuts, how many decoded, what was skipped."""
    if "error" in info:
        return f"{split}: `{info['cuts']}` could not be read: `{_escape(info['error'])}`"
    limit = info.get("max_utts")
    which = f"the first {limit} usable cuts of" if limit else "every usable cut of"
    skipped = ", ".join(f"{reason} {count}" for reason, count in info.get("skipped", {}).items()) or "none"
    return f"{split}: {which} `{info['cuts']}`, {info['utterances']} decoded; skipped cuts: {skipped}"


def eval_data_lines(results: Sequence[SchemeResult]) -> list[str]:
    """Bullet lines on the evaluation data of the finished schemes; schemes are named only where they differ."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for result in results:
        if result.ok and result.eval_data:
            lines = tuple(describe_split(split, info) for split, info in sorted(result.eval_data.items()))
            groups.setdefault(lines, []).append(result.scheme)
    if len(groups) == 1:
        return [f"- {line}" for line in next(iter(groups))]
    return [f"- {', '.join(f'`{s}`' for s in schemes)}: {'; '.join(lines)}" for lines, schemes in groups.items()]


def scheme_order(results: Sequence[SchemeResult]) -> list[str]:
    """Schemes of the finished runs in run order, each once."""
    return list(dict.fromkeys(r.scheme for r in results if r.ok))


def render_report(
    results: Sequence[SchemeResult],
    settings: dict[str, Any],
    plots: Sequence[str] = (),
    title: str = "Ablation of position encoding schemes",
    analysis: Analysis | None = None,
    budget_lines: Sequence[str] = (),
) -> str:
    """The full ``report.md`` text: findings, tables with intervals, settings, notes and plots."""
    if analysis is None:
        analysis = analyze(results, list(ALL_WER_METRICS))
    schemes = scheme_order(results)
    frame_ms, from_config = encoder_frame_ms(results)
    parts = [f"# {title}", "", f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.", ""]
    parts += ["## Findings", "", *(f"- {line}" for line in findings(analysis, CHUNK_METRICS,
                                                                       PROBE_METRICS["full"])), ""]
    parts += [
        "## Test WER with 95% intervals", "",
        main_table(analysis, schemes), "",
        "WER in percent on the test split (voices never heard in training), pooled over seeds. "
        f"Intervals: bootstrap over seeds, then utterances ({DEFAULT_REPLICATES} replicates; with one seed, over "
        "utterances only). *diff*: this scheme's WER minus "
        f"`{analysis.reference}`'s on the same utterances (paired bootstrap), with its interval and two-sided "
        "p; a difference is resolved only when its interval excludes zero. *rescore* = CTC prefix beam + "
        "attention rescoring, *greedy* = CTC greedy. *Plateau slope*: least-squares slope of the validation "
        f"WER over the last {PLATEAU_FRACTION:.0%} of each run's steps (seeds share the slope), in points per "
        f"1000 steps, with its 95% t interval; *converged* when the interval lies within +-{CONVERGED_BAND:g}, "
        "and only converged schemes are ranked in the findings (and, on the test WER, a scheme the adaptive "
        "budget stopped behind another ranks below that one).", "",
        "## Streaming trade-off", "",
        chunk_table(analysis, schemes, frame_ms), "",
        f"CTC greedy test WER with the chunk mask; every chunk size keeps 64 frames of memory. Latency = "
        f"chunk x {frame_ms:.0f} ms per encoder frame"
        + ("" if from_config else f" (assumed subsampling {DEFAULT_SUBSAMPLING}; no run config found)")
        + ", not counting compute.", "",
        "## Length extrapolation", "",
    ]
    for context, name in PROBE_CONTEXT_NAMES.items():
        parts += [f"CTC greedy WER on the probe passages, {name}:", "", length_table(analysis, schemes, context), ""]
    parts += [
        "Probe passages: sentences by test voices joined with short pauses, 20 per target length "
        f"(within 8% of it); training utterances are 1-6 s. `{NOT_APPLICABLE}`: the scheme's learned "
        "position table is shorter than the passage.", "",
        *translation_section(analysis, results, schemes, TRANSLATION_METRICS, (SHIFT_CHUNK, SHIFT_LEFT),
                             _translation_utts(analysis)),
        *rel_shift_section(analysis, rel_shift_rows(frame_ms)),
        *budget_section(budget_lines),
        "## Runs", "", markdown_table(results), "",
        "Step time is the mean training step (forward, backward, optimizer; data loading and validation "
        "excluded); Steps are those behind the evaluated checkpoint; peak RSS covers the training process and "
        "its data workers; stream RTF is encoder `stream_step` + CTC time over audio duration (C16/L4, one "
        "CPU thread).", "",
        "## Settings", "",
        *(f"- {key}: `{value}`" for key, value in settings.items()), "",
    ]
    data_lines = eval_data_lines(results)
    if data_lines:
        parts += ["## Evaluation data", "", *data_lines, ""]
    note_lines = notes(results)
    if note_lines:
        parts += ["## Notes", "", *note_lines, ""]
    if plots:
        parts += ["## Plots", ""]
        parts += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
        parts.append("")
    return "\n".join(parts)


def budget_section(lines: Sequence[str]) -> list[str]:
    """The adaptive budget's rungs: every scheme's decision after each rung, with its reason."""
    if not lines:
        return []
    return ["## Budget", "",
            "Rungs of the adaptive budget (asr/ablation/adaptive.py): after each rung every scheme still "
            "training is judged on the dev split (CTC greedy, full context) against the best: *stopped* when "
            "its paired interval lies further above the best's than its plateau slope could close in the steps "
            "left, *finished* when it converged or reached the largest budget, *continue* otherwise.", "",
            *(f"- {line}" for line in lines), ""]


def write_report(
    out_dir: Path,
    results: Sequence[SchemeResult],
    settings: dict[str, Any],
    plots: Sequence[str] = (),
    analysis: Analysis | None = None,
    budget_lines: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write ``out_dir/report.md`` and ``out_dir/results.json``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = out_dir / "report.md"
    report_path.write_text(render_report(results, settings, plots, analysis=analysis, budget_lines=budget_lines))
    json_path = out_dir / "results.json"
    payload = {
        "settings": settings,
        "metrics": [{"key": m.key, "header": m.header} for m in METRICS],
        "schemes": [r.to_json() for r in results],
        "budget": list(budget_lines),
    }
    json_path.write_text(json.dumps(payload, indent=2, default=str))
    return report_path, json_path
