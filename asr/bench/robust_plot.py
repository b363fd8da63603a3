"""WER against SNR: the robustness benchmark's reports (:func:`asr.bench.robust.run_robust`) as one PNG.

One panel per additive background (WER of the sentences alone against SNR, the x axis running from
quiet to loud backgrounds) and one for reverberation (against the reverberation time), each model a
line with its 95% bootstrap interval as error bars and its clean WER as a dashed level of the same
colour. A condition a report did not measure is a gap in its line, never a zero.

Uses matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)


@dataclass(frozen=True)
class Point:
    """One measured condition of one report: its level (dB SNR, or s of RT60) and WER % with interval."""

    level: float
    wer: float
    low: float
    high: float


def wer_by_kind(report: dict) -> tuple[dict[str, list[Point]], Point | None]:
    """A report's sentences-alone rows per background kind, each kind's points ordered from its mildest
    level to its harshest (SNR falling, reverberation time rising), and the clean row (level nan) or None.

    Kinds come in the order the report lists its conditions (the benchmark's own); a kind with no
    measured row is absent.
    """
    alone = report.get("alone", {})
    by_kind: dict[str, list[Point]] = {}
    clean = None
    for name in dict.fromkeys([*report.get("conditions", []), *alone]):  # listed order, then any row unlisted
        row = alone.get(name)
        if not isinstance(row, dict) or row.get("wer") is None:
            continue
        point = Point(float("nan"), 100 * row["wer"], 100 * row["low"], 100 * row["high"])
        if name == "clean":
            clean = point
            continue
        kind, _, level = name.partition("@")
        try:
            value = float(level.rstrip("sdB"))
        except ValueError:  # not a condition the benchmark names (kind@level)
            continue
        by_kind.setdefault(kind, []).append(Point(value, point.wer, point.low, point.high))
    ordered = {}
    for kind in by_kind:
        harsher_later = (lambda p: p.level) if kind == "reverb" else (lambda p: -p.level)
        ordered[kind] = sorted(by_kind[kind], key=harsher_later)
    return ordered, clean


def plot_wer_against_snr(reports: Sequence[tuple[str, dict]], path: str | Path,
                         title: str = "WER against background level (sentences alone)") -> Path | None:
    """Write the PNG of ``reports`` (label, report) to ``path``; None when no report has a background row."""
    series = [(label, *wer_by_kind(report)) for label, report in reports]
    kinds = list(dict.fromkeys(kind for _, by_kind, _ in series for kind in by_kind))  # first seen first
    if not kinds:
        return None
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.4 * len(kinds) + 0.6, 3.8), sharey=True, squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, kind in zip(axes[0], kinds):
        levels = sorted({p.level for _, by_kind, _ in series for p in by_kind.get(kind, [])})
        # each model's points drawn a little apart, so that overlapping intervals stay readable
        spread = (levels[-1] - levels[0]) if len(levels) > 1 else max(abs(levels[0]), 1.0)
        step = 0.06 * spread / max(len(series) - 1, 1) if len(series) > 1 else 0.0
        for index, (label, by_kind, clean) in enumerate(series):
            colour = colours[index % len(colours)]
            points = by_kind.get(kind, [])
            # left to right in legend order on the SNR panels too, whose axis runs from high to low
            shift = (index - (len(series) - 1) / 2) * step * (1 if kind == "reverb" else -1)
            if points:
                ax.errorbar([p.level + shift for p in points], [p.wer for p in points],
                            yerr=[[p.wer - p.low for p in points], [p.high - p.wer for p in points]],
                            marker="o", markersize=4, capsize=3, color=colour, label=label)
            if clean is not None:
                ax.axhline(clean.wer, color=colour, linestyle="--", linewidth=0.9, alpha=0.7)
        ax.set_xticks(levels)
        ax.set_xticklabels([f"{level:g}" for level in levels])
        if len(levels) == 1:
            ax.set_xlim(levels[0] - spread * 0.2, levels[0] + spread * 0.2)
        if kind == "reverb":
            ax.set_xlabel("reverberation time RT60 (s)")
        else:
            ax.set_xlabel("SNR (dB)")
            ax.invert_xaxis()  # quiet backgrounds on the left, as the reverberation panel's short rooms
        ax.set_title(kind)
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("WER % (dashed: clean)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
