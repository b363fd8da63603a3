"""PNG plots of an ablation: learning curves, WER by scheme, speed and memory.

Uses matplotlib's Agg backend (no display needed). Every function takes the
scheme results, writes one PNG and returns its path, or None when there is
nothing to draw (e.g. every run failed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from asr.ablation.curves import as_percent  # noqa: E402
from asr.ablation.results import METRICS, SchemeResult  # noqa: E402

_HEADERS = {m.key: m.header for m in METRICS}

# The bar groups of the WER chart: full context, streaming, long (extrapolation).
WER_BARS: tuple[str, ...] = (
    "wer_test_rescore",
    "wer_test_greedy",
    "wer_chunk16",
    "wer_chunk4",
    "wer_probe160_full",
    "wer_probe160_c16",
)


def plot_learning_curves(results: Sequence[SchemeResult], path: Path) -> Path | None:
    """Validation WER (%) and validation loss against training step, one line per scheme."""
    panels = (
        ("validation WER (%)", [(r.scheme, as_percent(r.curve)) for r in results if r.curve]),
        ("validation loss", [(r.scheme, r.loss_curve) for r in results if r.loss_curve]),
    )
    if not any(curves for _, curves in panels):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (label, curves) in zip(axes, panels):
        for scheme, curve in curves:
            ax.plot([s for s, _ in curve], [v for _, v in curve], marker="o", markersize=3, label=scheme)
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if curves:
            ax.legend(fontsize=8)
    fig.suptitle("Learning curves")
    return _save(fig, path)


def plot_wer_by_scheme(results: Sequence[SchemeResult], path: Path) -> Path | None:
    """Grouped bars: for each scheme, the full-context, streaming and long-set WERs."""
    done = [r for r in results if r.ok]
    if not done:
        return None
    width = 0.8 / len(WER_BARS)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.4 * len(done)), 5.0))
    for k, key in enumerate(WER_BARS):
        xs = [i + (k - (len(WER_BARS) - 1) / 2) * width for i in range(len(done))]
        # A missing value (e.g. abs_learned past its table on the long set) is a gap, not a zero bar.
        heights = [r.metrics.get(key) for r in done]
        ax.bar(
            [x for x, h in zip(xs, heights) if h is not None],
            [h for h in heights if h is not None],
            width=width,
            label=_HEADERS[key].replace(" (%)", ""),
        )
    ax.set_xticks(range(len(done)))
    ax.set_xticklabels([r.scheme for r in done])
    ax.set_ylabel("WER (%)")
    ax.set_title("WER by position scheme")
    ax.grid(True, axis="y", alpha=0.3)
    # Below the axes: WERs near 100 % (short budgets) would hide an in-axes legend.
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return _save(fig, path)


def plot_speed_memory(results: Sequence[SchemeResult], path: Path) -> Path | None:
    """Three panels per scheme: training step time, peak RSS and streaming RTF."""
    done = [r for r in results if r.ok]
    if not done:
        return None
    keys = ("step_time_s", "peak_rss_mb", "stream_rtf")
    fig, axes = plt.subplots(1, len(keys), figsize=(max(9.0, 1.2 * len(done) * len(keys)), 3.8))
    names = [r.scheme for r in done]
    for ax, key in zip(axes, keys):
        values = [r.metrics.get(key) for r in done]
        kept = [(i, v) for i, v in enumerate(values) if v is not None]  # a gap, not a zero, when missing
        ax.bar([i for i, _ in kept], [v for _, v in kept], color="tab:blue")
        ax.set_xticks(range(len(done)))
        ax.set_xticklabels(names, rotation=45, ha="right")
        ax.set_title(_HEADERS[key])
        ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def write_plots(results: Sequence[SchemeResult], out_dir: Path) -> list[Path]:
    """All plots into ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [
        plot_learning_curves(results, out_dir / "learning_curves.png"),
        plot_wer_by_scheme(results, out_dir / "wer_by_scheme.png"),
        plot_speed_memory(results, out_dir / "speed_memory.png"),
    ]
    return [p for p in made if p is not None]


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
