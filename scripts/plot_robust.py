"""Plot robustness reports side by side: WER of the sentences alone against SNR per background, and
against the reverberation time, one line per report (scripts/bench_robust.py --out-json, or a
quickstart run's decode/robust_test/robust.json).

Usage (from the repository root):
    python scripts/plot_robust.py exp/a/decode/robust_test/robust.json exp/b/decode/robust_test/robust.json \\
        --out robust.png
    python scripts/plot_robust.py before.json after.json --labels "today's recipe,rooms" --out robust.png

A report's label defaults to its run folder (for <run>/decode/robust_test/robust.json) or its file name.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def default_label(path: Path) -> str:
    """The run folder of ``<run>/decode/<bench>/robust.json``; else the file's stem."""
    parts = path.resolve().parts
    return parts[-4] if len(parts) >= 4 and parts[-3] == "decode" else path.stem


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", type=Path, help="robustness reports (JSON)")
    p.add_argument("--labels", help="comma-separated, one per report (default: run folders or file names)")
    p.add_argument("--out", required=True, type=Path, help="the PNG to write")
    p.add_argument("--title", default="WER against background level (sentences alone)")
    args = p.parse_args(argv)
    labels = [s.strip() for s in args.labels.split(",")] if args.labels else [default_label(r) for r in args.reports]
    if len(labels) != len(args.reports):
        p.error(f"--labels names {len(labels)} reports, {len(args.reports)} are given")
    reports = []
    for path in args.reports:
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            p.error(f"{path}: not a readable JSON report ({type(err).__name__})")
        if not isinstance(report, dict) or not isinstance(report.get("alone"), dict):
            p.error(f"{path}: not a robustness report (no 'alone' rows; scripts/bench_robust.py --out-json writes one)")
        reports.append(report)

    from asr.bench.robust_plot import plot_wer_against_snr

    written = plot_wer_against_snr(list(zip(labels, reports)), args.out, title=args.title)
    if written is None:
        print("error: no report has a background row to plot (only clean)", file=sys.stderr)
        return 2
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
