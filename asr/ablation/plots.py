"""PNG plots of an ablation: learning curves, WER with intervals, WER against chunk
latency and against utterance length, speed and memory.

Uses matplotlib's Agg backend (no display needed). Every function writes one PNG
and returns its path, or None when there is nothing to draw (e.g. every run
failed). WERs come from the report's :class:`~asr.ablation.analysis.Analysis`
(pooled over seeds, with bootstrap intervals); a measurement a scheme could not
run is a gap in its line, never a zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from asr.ablation.analysis import Analysis  # noqa: E402
from asr.ablation.curves import as_percent  # noqa: E402
from asr.ablation.results import METRICS, SchemeResult  # noqa: E402

_HEADERS = {m.key: m.header for m in METRICS}


def plot_learning_curves(results: Sequence[SchemeResult], path: Path) -> Path | None:
    """Validation WER (%) and validation loss against training step, one line per scheme."""
    panels = (
        ("validation WER (%)", [(_run_label(r), as_percent(r.curve)) for r in results if r.curve]),
        ("validation loss", [(_run_label(r), r.loss_curve) for r in results if r.loss_curve]),
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


def _run_label(result: SchemeResult) -> str:
    """The scheme, or its run folder when a scheme has several seeds (``shaw-seed1``)."""
    name = Path(result.run_dir).name if result.run_dir else ""
    return name if name.startswith(f"{result.scheme}-seed") else result.scheme


def _wer_and_bars(analysis: Analysis, metric: str, scheme: str) -> tuple[float, float, float]:
    """(WER, below, above) in percent for an error bar; NaNs when not measured (a gap)."""
    stats = analysis.wer(metric, scheme)
    if stats is None:
        return float("nan"), float("nan"), float("nan")
    w = stats.wer
    return w.value, w.value - w.low, w.high - w.value


def plot_wer_intervals(analysis: Analysis, schemes: Sequence[str], path: Path,
                       metrics: Sequence[tuple[str, str]]) -> Path | None:
    """Points with 95% interval bars per scheme, one series per (metric, label)."""
    if not schemes:
        return None
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(schemes)), 4.5))
    offset = 0.6 / max(1, len(metrics))
    for k, (metric, label) in enumerate(metrics):
        values = [_wer_and_bars(analysis, metric, s) for s in schemes]
        xs = [i + (k - (len(metrics) - 1) / 2) * offset for i in range(len(schemes))]
        ax.errorbar(xs, [v[0] for v in values], yerr=[[v[1] for v in values], [v[2] for v in values]],
                    fmt="o", capsize=4, label=label)
    ax.set_xticks(range(len(schemes)))
    ax.set_xticklabels(schemes)
    ax.set_ylabel("test WER (%)")
    ax.set_title("Test WER with 95% bootstrap intervals")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_wer_vs_chunk(analysis: Analysis, schemes: Sequence[str], path: Path,
                      chunk_metrics: dict[int, str], frame_ms: float) -> Path | None:
    """CTC greedy test WER against chunk latency (ms, log scale), full context as a dotted level."""
    if not schemes or not chunk_metrics:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    chunks = sorted(chunk_metrics)
    latencies = [c * frame_ms for c in chunks]
    for scheme in schemes:
        values = [_wer_and_bars(analysis, chunk_metrics[c], scheme) for c in chunks]
        line = ax.errorbar(latencies, [v[0] for v in values], yerr=[[v[1] for v in values], [v[2] for v in values]],
                           marker="o", capsize=3, label=scheme)
        full = analysis.wer("wer_test_greedy", scheme)
        if full is not None:
            ax.axhline(full.wer.value, color=line[0].get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(latencies)
    ax.set_xticklabels([f"{ms:.0f}\n(C{c})" for ms, c in zip(latencies, chunks)])
    ax.set_xlabel("chunk latency (ms); dotted: full context")
    ax.set_ylabel("test WER (%), CTC greedy")
    ax.set_title("Streaming trade-off (64 frames of memory)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_wer_vs_length(analysis: Analysis, schemes: Sequence[str], path: Path,
                       probe_metrics: dict[str, dict[int, str]], context_names: dict[str, str]) -> Path | None:
    """WER against passage length (s, log scale), one panel per context; gaps where n/a."""
    if not schemes or not probe_metrics:
        return None
    fig, axes = plt.subplots(1, len(probe_metrics), figsize=(6.0 * len(probe_metrics), 4.6), sharey=True)
    axes = axes if len(probe_metrics) > 1 else [axes]
    for ax, (context, metrics) in zip(axes, probe_metrics.items()):
        lengths = sorted(metrics)
        for scheme in schemes:
            values = [_wer_and_bars(analysis, metrics[s], scheme) for s in lengths]
            ax.errorbar(lengths, [v[0] for v in values], yerr=[[v[1] for v in values], [v[2] for v in values]],
                        marker="o", capsize=3, label=scheme)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths)
        ax.set_xticklabels([str(s) for s in lengths])
        ax.set_xlabel("passage length (s); training utterances 1-6 s")
        ax.set_title(context_names.get(context, context))
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("WER (%), CTC greedy")
    axes[0].legend(fontsize=8)
    fig.suptitle("Length extrapolation")
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


def write_plots(results: Sequence[SchemeResult], out_dir: Path, analysis: Analysis | None = None) -> list[Path]:
    """All plots into ``out_dir``; returns the paths written."""
    from asr.ablation.analysis import analyze
    from asr.ablation.evaluate import ALL_WER_METRICS
    from asr.ablation.report import (
        CHUNK_METRICS,
        PROBE_CONTEXT_NAMES,
        PROBE_METRICS,
        encoder_frame_ms,
        scheme_order,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    if analysis is None:
        analysis = analyze(results, list(ALL_WER_METRICS))
    schemes = [s for s in scheme_order(results) if analysis.wer("wer_test_greedy", s) or analysis.wer(
        "wer_test_rescore", s)]
    made = [
        plot_learning_curves(results, out_dir / "learning_curves.png"),
        plot_wer_intervals(analysis, schemes, out_dir / "wer_intervals.png",
                           [("wer_test_rescore", "rescore, full context"), ("wer_test_greedy", "greedy, full context"),
                            ("wer_chunk16", "greedy, C16/L4")]),
        plot_wer_vs_chunk(analysis, schemes, out_dir / "wer_vs_chunk.png", CHUNK_METRICS,
                          encoder_frame_ms(results)[0]),
        plot_wer_vs_length(analysis, schemes, out_dir / "wer_vs_length.png", PROBE_METRICS, PROBE_CONTEXT_NAMES),
        plot_speed_memory(results, out_dir / "speed_memory.png"),
    ]
    return [p for p in made if p is not None]


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
