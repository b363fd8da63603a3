"""Two training runs side by side on the same decodes: paired WER differences with bootstrap intervals.

A recipe change is judged against the recipe it changes on the same test utterances: the quickstart
writes one folder per decode under ``<run dir>/decode/`` (``test_full``, ``test_chunk16_lm``, ...),
each with one JSONL per search mode (a line per utterance: ``key``, ``word_errors``, ``ref_words``).
For every (folder, mode) both runs decoded, :func:`compare_runs` pairs the utterances both scored and
gives WER(other) - WER(base) with its paired bootstrap interval (``asr.ablation.stats``): the
utterances' difficulty cancels, so a difference the unpaired intervals hide is resolved.

A side may be several runs of one recipe (seeds): each side's WER is then the mean of its runs', and
the interval draws each side's runs as well as the utterances (``asr.ablation.stats``'s hierarchical
bootstrap), so it holds what another draw of the training could move. One run a side covers only the
choice of utterances, and a small model's seeds move its test WER by 1-2 points on their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from asr.ablation.stats import (DEFAULT_REPLICATES, PairedDifference, align_records, paired_difference,
                                seeded_paired_difference)

DECODE_FOLDER = "decode"


@dataclass(frozen=True)
class DecodeComparison:
    """One decode (folder and mode) of both runs, in percent."""

    decode: str  # the folder under decode/, e.g. test_chunk16_lm
    mode: str  # the search, e.g. attention_rescoring
    utterances: int  # scored by every run
    base_wer: float  # the mean of the side's runs
    other_wer: float
    difference: PairedDifference  # other - base, percent points (seed_sd set when a side has several runs)
    runs: tuple[int, int] = (1, 1)  # runs (seeds) on the base side and on the other


def read_records(path: Path) -> list[dict]:
    """The per-utterance lines of one mode's JSONL; a clear error on a line that is not a record."""
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not JSON ({err.msg})") from err
        if not isinstance(record, dict) or not {"key", "word_errors", "ref_words"} <= record.keys():
            raise ValueError(f"{path}:{number}: a record needs key, word_errors and ref_words")
        records.append(record)
    return records


def decoded_modes(run_dir: Path) -> dict[tuple[str, str], Path]:
    """(decode folder, mode) -> its JSONL, for every per-utterance file under ``run_dir/decode``."""
    root = Path(run_dir) / DECODE_FOLDER
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is missing: decode the run first (scripts/quickstart.py or decode.py)")
    return {(path.parent.name, path.stem): path for path in sorted(root.glob("*/*.jsonl"))}


def compare_runs(base: Path | Sequence[Path], other: Path | Sequence[Path], replicates: int = DEFAULT_REPLICATES,
                 seed: int = 0) -> list[DecodeComparison]:
    """Every decode all runs have, paired on the utterances all of them scored (in the first base run's
    order). ``base`` and ``other``: a run folder, or several (one recipe's seeds)."""
    bases, others = _runs(base), _runs(other)
    modes = [decoded_modes(run) for run in (*bases, *others)]
    rows = []
    for decode, mode in sorted(set.intersection(*(set(m) for m in modes))):
        _, errors, words = align_records([read_records(m[decode, mode]) for m in modes])
        if not words.size or words.sum() <= 0:
            continue  # nothing every run scored, or no reference words: no WER to pair
        base_errors, other_errors = errors[:len(bases)], errors[len(bases):]  # (runs, N) each
        if len(bases) == len(others) == 1:
            diff = paired_difference(other_errors[0], base_errors[0], words, replicates=replicates, seed=seed)
        else:
            diff = seeded_paired_difference(other_errors, base_errors, words, replicates=replicates, seed=seed)
        rows.append(DecodeComparison(decode, mode, int(words.size), 100.0 * base_errors.mean(0).sum() / words.sum(),
                                     100.0 * other_errors.mean(0).sum() / words.sum(), diff.scaled(100.0),
                                     (len(bases), len(others))))
    return rows


def _runs(side: Path | Sequence[Path]) -> list[Path]:
    runs = [Path(side)] if isinstance(side, (str, Path)) else [Path(run) for run in side]
    if not runs:
        raise ValueError("a side of the comparison needs at least one run folder")
    return runs


def comparison_table(rows: list[DecodeComparison], base_name: str, other_name: str) -> str:
    """Markdown: per decode and mode, both WERs and the paired difference."""
    seeded = any(row.runs != (1, 1) for row in rows)
    extra = (" sd: utterances / seeds |", "---:|") if seeded else ("", "")
    lines = [f"| decode | mode | utterances | {base_name} WER % | {other_name} WER % | difference [95% CI] | p |"
             + extra[0], "|---|---|---:|---:|---:|---|---:|" + extra[1]]
    for row in rows:
        d = row.difference
        spread = f" {d.utterance_sd:.2f} / {d.seed_sd:.2f} |" if seeded and d.seed_sd is not None else (
            " - |" if seeded else "")
        lines.append(f"| {row.decode} | {row.mode} | {row.utterances} | {row.base_wer:.2f} | {row.other_wer:.2f} | "
                     f"{d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}] | {d.p_value:.3f} |" + spread)
    return "\n".join(lines)


def _side(text: str) -> list[Path]:
    """A side on the command line: one run folder, or several joined by commas (one recipe's seeds)."""
    return [Path(part) for part in text.split(",") if part.strip()]


def _side_name(runs: list[Path]) -> str:
    return runs[0].name if len(runs) == 1 else "+".join(run.name for run in runs)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=_side, help="the run compared against (its folder: decode/ inside), or "
                        "several runs of one recipe joined by commas (seeds)")
    parser.add_argument("other", type=_side, help="the run compared, or several joined by commas")
    parser.add_argument("--replicates", type=int, default=DEFAULT_REPLICATES, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    args = parser.parse_args(argv)
    try:
        rows = compare_runs(args.base, args.other, args.replicates, args.seed)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"error: {err}") from err
    names = (_side_name(args.base), _side_name(args.other))
    if not rows:
        raise SystemExit(f"error: no decode of {names[0]} and {names[1]} in common (folder and mode)")
    if names[0] == names[1]:
        names = (",".join(map(str, args.base)), ",".join(map(str, args.other)))
    print(comparison_table(rows, *names))
    seeded = len(args.base) > 1 or len(args.other) > 1
    print(f"\ndifference: {names[1]} - {names[0]}, percent points; paired over the utterances every run scored, "
          f"{args.replicates} bootstrap replicates"
          + (f"; {len(args.base)} and {len(args.other)} runs a side, each side's WER their mean, the interval "
             "drawing runs and utterances (sd: the spread from each alone)" if seeded else ""))
