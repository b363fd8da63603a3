"""The report's "rel_shift or not" section and the translation-probe table.

``rel_xl`` and ``wenet_rel`` share everything (learned u and v, a bias-free projection of a
sinusoid table, the same (q + u) . k term) except what the position term reads: the query-key
distance i - j (a real rel_shift) or the key's absolute stream time (Wenet's rel_pos, which
comments rel_shift out). Every comparison here is paired over the same utterances, with each
scheme's seeds pooled and resampled (``asr.ablation.analysis``); a sentence ranks them only
when the 95% interval of the difference excludes zero and both schemes converged, or when the
adaptive budget stopped one behind the other (the test WER only: the stop decided on dev WER).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from asr.ablation.analysis import (
    MAIN_METRIC,
    Analysis,
    format_difference,
    format_interval,
    group_runs,
    pooled_difference,
    read_records,
)
from asr.ablation.results import SchemeResult

RELATIVE, ABSOLUTE_KEYS = "rel_xl", "wenet_rel"


def _cell(analysis: Analysis, metric: str, scheme: str) -> str:
    stats = analysis.wer(metric, scheme)
    return format_interval(stats.wer) if stats else "n/a"


def _seeds(analysis: Analysis, metric: str, scheme: str) -> str:
    stats = analysis.wer(metric, scheme)
    return ", ".join(f"{w:.2f}" for w in stats.seed_wers) if stats else "—"


def rel_shift_section(analysis: Analysis, rows: Mapping[str, str]) -> list[str]:
    """Markdown lines: ``rel_xl`` against ``wenet_rel`` on every measurement in ``rows`` (metric -> label)."""
    out = ["## rel_shift or not: `rel_xl` against `wenet_rel`", "",
           "`wenet_rel` is Wenet's `rel_pos` attention as Wenet ships it: the same learned `pos_bias_u`, "
           "`pos_bias_v` and bias-free `linear_pos` as `rel_xl`, but its position term scores each key's "
           "absolute stream time (Wenet comments `rel_shift` out); `rel_xl` scores the query-key distance. "
           f"*diff*: `{ABSOLUTE_KEYS}` minus `{RELATIVE}` on the same utterances (paired bootstrap, each scheme's "
           "seeds pooled and resampled), negative = `wenet_rel` better.", ""]
    if analysis.wer("wer_test_rescore", RELATIVE) is None or analysis.wer("wer_test_rescore", ABSOLUTE_KEYS) is None:
        return out + [f"Not measured: this ablation lacks a finished `{RELATIVE}` or `{ABSOLUTE_KEYS}` run.", ""]
    header = ["Measurement", f"`{RELATIVE}` WER % [95% CI]", f"`{ABSOLUTE_KEYS}` WER % [95% CI]",
              "diff [95% CI], p", f"seeds `{RELATIVE}`", f"seeds `{ABSOLUTE_KEYS}`"]
    table = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    better, worse, unresolved = [], [], []
    stop = analysis.stopped.get(ABSOLUTE_KEYS) if analysis.stopped_behind(ABSOLUTE_KEYS, RELATIVE) else None
    for metric, label in rows.items():
        stats = analysis.wer(metric, ABSOLUTE_KEYS)
        d = stats.versus_reference if stats else None
        table.append(f"| {label} | {_cell(analysis, metric, RELATIVE)} | {_cell(analysis, metric, ABSOLUTE_KEYS)} | "
                     f"{format_difference(d)} | {_seeds(analysis, metric, RELATIVE)} | "
                     f"{_seeds(analysis, metric, ABSOLUTE_KEYS)} |")
        if d is None:
            continue
        if stop is not None and metric == MAIN_METRIC:
            continue  # ranked by the stop (below)
        (better if d.resolved and d.difference < 0 else worse if d.resolved else unresolved).append(
            f"{label} ({d.difference:+.2f})")
    out += table + [""]
    if stop is not None:
        out.append(f"- The adaptive budget stopped `{ABSOLUTE_KEYS}` at {stop['steps']} steps behind `{RELATIVE}` (on dev, "
                   "further behind than its steepest plausible slope could close by the largest budget): it ranks below "
                   f"`{RELATIVE}` on the test WER (the table's difference is at the budget it stopped at).")
    if not analysis.converged(RELATIVE, ABSOLUTE_KEYS):
        # A difference in learning speed is not a ranking: the sentences name no winner.
        differences = worse + better
        if differences:
            out.append(f"- Not ranked: `{RELATIVE}` and `{ABSOLUTE_KEYS}` did not both converge, so these resolved "
                       f"differences are at this budget and a longer one may change them: {'; '.join(differences)}.")
    else:
        if worse:
            out.append(f"- `{ABSOLUTE_KEYS}` is worse than `{RELATIVE}` (interval excludes zero) on: {'; '.join(worse)}.")
        if better:
            out.append(f"- `{ABSOLUTE_KEYS}` is better than `{RELATIVE}` (interval excludes zero) on: "
                       f"{'; '.join(better)}.")
    if unresolved:
        out.append(f"- Not resolved (the interval includes zero): {'; '.join(unresolved)}.")
    spread = [f"`{s}` {min(v.seed_wers):.2f}-{max(v.seed_wers):.2f} ({len(v.seed_wers)} seeds)"
              for s in (RELATIVE, ABSOLUTE_KEYS) if (v := analysis.wer("wer_test_rescore", s)) and v.seed_wers]
    out.append(f"- Seed spread of the test WER (rescoring, lowest-highest seed): {', '.join(spread)}. The intervals "
               "resample the seeds and then the utterances, so they cover both the choice of utterances and the "
               "seed-to-seed variation these seeds show.")
    d = analysis.wer("wer_test_rescore", ABSOLUTE_KEYS).versus_reference
    if d is not None and d.dominant_source is not None:
        out.append(f"- The interval of the test WER difference (rescoring) is dominated by the {d.dominant_source}: "
                   f"standard deviation {d.seed_sd:.2f} points when only seeds are resampled, {d.utterance_sd:.2f} "
                   "when only utterances are.")
    return out + [""]


def translation_section(analysis: Analysis, results: Sequence[SchemeResult], schemes: Sequence[str],
                        metrics: Mapping[str, int], chunk: tuple[int, int], utts_note: str) -> list[str]:
    """Markdown lines: every scheme's WER at each stream offset, and its last offset minus the first (paired)."""
    first, last = min(metrics, key=metrics.get), max(metrics, key=metrics.get)
    groups = group_runs(results)
    header = ["Scheme", *(f"{s} s" for s in metrics.values()), f"{metrics[last]} s - {metrics[first]} s [95% CI], p"]
    lines = ["## Translation probe", "",
             f"The same test utterances ({utts_note}) decoded as C{chunk[0]}/L{chunk[1]} streams whose clock "
             "starts at " + ", ".join(f"{s} s" for s in metrics.values()) + ": the stream state's clock is "
             "advanced to that time (nothing is encoded for it), then a 2.56 s silent lead-in (seeded white noise at "
             "-70 dBFS, 64 encoder frames: the whole C16/L4 memory) fills the attention cache, then the utterance; CTC "
             "greedy over the utterance's frames. Identical audio at every offset: a relative scheme gives identical "
             "hypotheses (tested), so a difference is the scheme reading the clock. The last column is paired over "
             "the same utterances, seeds pooled (and resampled alike on both sides: the same models).", "",
             "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for scheme in schemes:
        cells = [_cell(analysis, m, scheme) if analysis.wer(m, scheme) else
                 ("n/a: longer than its table" if scheme in analysis.not_applicable.get(m, {}) else "n/a")
                 for m in metrics]
        # Each run at both offsets: the two sides are the same models, paired seed by seed.
        pairs = [(a, b) for run in groups.get(scheme, [])
                 if (a := read_records(run.run_dir, last)) and (b := read_records(run.run_dir, first))]
        d = pooled_difference([a for a, _ in pairs], [b for _, b in pairs], same_models=True)
        lines.append(f"| `{scheme}` | " + " | ".join(cells) + f" | {format_difference(d)} |")
    return lines + [""]
