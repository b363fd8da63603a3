"""Build the ablation's Markdown report and ``results.json`` from scheme results."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asr.ablation.results import METRICS, SchemeResult

MISSING = "—"


def format_cell(result: SchemeResult, key: str, fmt: str) -> str:
    """One table cell: the formatted number, ``failed`` for a failed run, or ``n/a`` with a footnote mark."""
    if not result.ok:
        return "failed"
    value = result.metrics.get(key)
    if value is None:
        return "n/a" if key in result.metric_errors else MISSING
    return fmt.format(value)


def markdown_table(results: Sequence[SchemeResult]) -> str:
    """A Markdown table: one row per scheme, one column per metric, plus status."""
    headers = ["Scheme", "Status", *(m.header for m in METRICS)]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---", "---", *("---:" for _ in METRICS)]) + "|",
    ]
    for result in results:
        status = "ok" if result.ok else f"failed ({result.failed_phase})"
        cells = [f"`{result.scheme}`", status, *(format_cell(result, m.key, m.fmt) for m in METRICS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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


def render_report(
    results: Sequence[SchemeResult],
    settings: dict[str, Any],
    plots: Sequence[str] = (),
    title: str = "Ablation of position encoding schemes",
) -> str:
    """The full ``report.md`` text: settings, the table, notes and plot links."""
    parts = [f"# {title}", "", f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.", "", "## Settings", ""]
    parts += [f"- {key}: `{value}`" for key, value in settings.items()]
    parts += ["", "## Results", "", markdown_table(results), ""]
    parts += [
        "WER and CER (characters, spaces removed) are in percent.",
        "*rescore* = CTC prefix beam + attention rescoring, *greedy* = CTC greedy;",
        "streaming WERs use CTC greedy with the chunk mask (C = chunk in encoder frames, L = left chunks);",
        "*long* is the length-extrapolation split (utterances longer than any in training).",
        "Step time is the mean training step (forward, backward, optimizer; data loading and validation",
        "excluded); Steps are those behind the evaluated checkpoint; peak RSS covers the training",
        "process and its data workers;",
        "stream RTF is encoder `stream_step` + CTC time over audio duration (C16/L4, one CPU thread).",
        "",
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


def write_report(
    out_dir: Path,
    results: Sequence[SchemeResult],
    settings: dict[str, Any],
    plots: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Write ``out_dir/report.md`` and ``out_dir/results.json``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path = out_dir / "report.md"
    report_path.write_text(render_report(results, settings, plots))
    json_path = out_dir / "results.json"
    payload = {
        "settings": settings,
        "metrics": [{"key": m.key, "header": m.header} for m in METRICS],
        "schemes": [r.to_json() for r in results],
    }
    json_path.write_text(json.dumps(payload, indent=2, default=str))
    return report_path, json_path
