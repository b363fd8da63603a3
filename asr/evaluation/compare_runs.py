"""Two training runs side by side on the same decodes: paired WER differences with bootstrap intervals.

A recipe change is judged against the recipe it changes on the same test utterances: the quickstart
writes one folder per decode under ``<run dir>/decode/`` (``test_full``, ``test_chunk16_lm``, ...),
each with one JSONL per search mode (a line per utterance: ``key``, ``word_errors``, ``ref_words``).
For every (folder, mode) both runs decoded, :func:`compare_runs` pairs the utterances both scored and
gives WER(other) - WER(base) with its paired bootstrap interval (``asr.ablation.stats``): the
utterances' difficulty cancels, so a difference the unpaired intervals hide is resolved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from asr.ablation.stats import DEFAULT_REPLICATES, PairedDifference, align_records, paired_difference

DECODE_FOLDER = "decode"


@dataclass(frozen=True)
class DecodeComparison:
    """One decode (folder and mode) of both runs, in percent."""

    decode: str  # the folder under decode/, e.g. test_chunk16_lm
    mode: str  # the search, e.g. attention_rescoring
    utterances: int  # scored by both runs
    base_wer: float
    other_wer: float
    difference: PairedDifference  # other - base, percent points


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


def compare_runs(base: Path, other: Path, replicates: int = DEFAULT_REPLICATES, seed: int = 0) -> list[DecodeComparison]:
    """Every decode both runs have, paired on the utterances both scored (in base's order)."""
    base_modes, other_modes = decoded_modes(base), decoded_modes(other)
    rows = []
    for decode, mode in sorted(base_modes.keys() & other_modes.keys()):
        _, errors, words = align_records([read_records(base_modes[decode, mode]),
                                          read_records(other_modes[decode, mode])])
        if not words.size or words.sum() <= 0:
            continue  # nothing both runs scored, or no reference words: no WER to pair
        diff = paired_difference(errors[1], errors[0], words, replicates=replicates, seed=seed).scaled(100.0)
        rows.append(DecodeComparison(decode, mode, int(words.size), 100.0 * errors[0].sum() / words.sum(),
                                     100.0 * errors[1].sum() / words.sum(), diff))
    return rows


def comparison_table(rows: list[DecodeComparison], base_name: str, other_name: str) -> str:
    """Markdown: per decode and mode, both WERs and the paired difference."""
    lines = [f"| decode | mode | utterances | {base_name} WER % | {other_name} WER % | difference [95% CI] | p |",
             "|---|---|---:|---:|---:|---|---:|"]
    for row in rows:
        d = row.difference
        lines.append(f"| {row.decode} | {row.mode} | {row.utterances} | {row.base_wer:.2f} | {row.other_wer:.2f} | "
                     f"{d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}] | {d.p_value:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="the run compared against (its folder: decode/ inside)")
    parser.add_argument("other", type=Path, help="the run compared")
    parser.add_argument("--replicates", type=int, default=DEFAULT_REPLICATES, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    args = parser.parse_args(argv)
    try:
        rows = compare_runs(args.base, args.other, args.replicates, args.seed)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(f"error: {err}") from err
    if not rows:
        raise SystemExit(f"error: no decode of {args.base} and {args.other} in common (folder and mode)")
    names = (args.base.name, args.other.name)
    names = names if names[0] != names[1] else (str(args.base), str(args.other))
    print(comparison_table(rows, *names))
    print(f"\ndifference: {names[1]} - {names[0]}, percent points; paired over the utterances both runs scored, "
          f"{args.replicates} bootstrap replicates")
