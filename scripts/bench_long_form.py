"""Decode long files at full context and chunk by chunk: time and peak RSS per length.

Usage:
    python scripts/bench_long_form.py --checkpoint exp/quickstart_rel_xl/checkpoints/avg3.ckpt
    python scripts/bench_long_form.py --checkpoint CKPT --minutes 5 20 --settings full chunk16_left4
    python scripts/bench_long_form.py --checkpoint CKPT --repo /path/to/older/checkout   # "before" figures

Each file is the test split's sentences (manifest order, repeated when the split is shorter)
joined by 0.3 s pauses, made once under --work-dir (asr.bench.long_form.build_long_file). Every
(length, setting) runs scripts/decode.py of --repo (default: this checkout; its own asr package)
in a fresh subprocess with greedy CTC, whose resident memory is polled: past --rss-limit (default
8G) it is killed and reported as stopped, so no setting can take the machine down. Printed per
run: status, wall seconds (model loading included), decode seconds and RTF from the decode's
summary, the child's peak RSS (ru_maxrss) and the WER over the whole file.

Settings: full (chunk 0), chunk<C>_left<L> (e.g. chunk16_left4: chunk 16, 4 left chunks, the file as
one stream: decode.py --no-endpoint-reset); a ``_pauses`` suffix (full_pauses, chunk16_left4_pauses)
cuts the file at its pauses first (decode.py --segment-at-pauses, asr.decode.segment); an
``_endpoints`` suffix (chunk16_left4_endpoints) streams it with endpoint resets by the CTC blank rule
(asr.decode.endpointed; ``_endpoints0.3``: after 0.3 s of blank), ``_pause_endpoints`` by the audio's
pauses (asr.decode.pause_endpoint; ``_pause_endpoints0.2``: of at least 0.2 s), ``_both_endpoints`` by
whichever comes first; each names its rule to decode.py (--endpoint-rule), whatever its default.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asr.bench.long_form import build_long_file, long_file_name, parse_setting, run_guarded  # noqa: E402
from asr.evaluation.memory import parse_bytes  # noqa: E402
from asr.decode.options import add_checkpoint_argument, add_threads_argument  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(parser)
    parser.add_argument("--data-dir", default="data/synth", help="corpus whose split is joined (default data/synth)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--minutes", type=float, nargs="+", default=[5, 20, 60])
    parser.add_argument("--settings", nargs="+", default=["full", "chunk16_left4"])
    parser.add_argument("--repo", default=str(ROOT), help="checkout whose scripts/decode.py and asr run")
    parser.add_argument("--work-dir", default="data/longform", help="long files and decode outputs")
    # A fixed count, not torch's default: timings compare across runs and hosts.
    add_threads_argument(parser, default=2)
    parser.add_argument("--rss-limit", default="8G", help="kill a run whose resident memory passes this")
    parser.add_argument("--timeout", type=float, default=None, help="kill a run after this many seconds")
    parser.add_argument("--tag", default="", help="suffix of the decode output folders (e.g. before)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        settings = [parse_setting(name) for name in args.settings]
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    # A checkout from before endpoint resets streams a long file whole without being told.
    decode_source = (Path(args.repo) / "asr/cli/decode.py").read_text()
    knows_endpoints, knows_rules = "--no-endpoint-reset" in decode_source, "--endpoint-rule" in decode_source
    try:
        for setting in settings:
            setting.decode_args(knows_endpoints, knows_rules)
    except ValueError as err:
        parser.error(f"{err} (--repo {args.repo})")
    rss_limit = parse_bytes(args.rss_limit)
    work = Path(args.work_dir).resolve()
    env = {**os.environ, "PYTHONPATH": str(Path(args.repo).resolve())}
    rows = []
    print(f"{'minutes':>7} {'setting':<26} {'status':<34} {'wall s':>7} {'decode s':>8} {'RTF':>6} "
          f"{'peak RSS GiB':>12} {'WER %':>6}  (load average {os.getloadavg()[0]:.1f}, repo {args.repo})", flush=True)
    for minutes in args.minutes:
        cuts = build_long_file(Path(args.data_dir) / f"cuts_{args.split}.jsonl.gz", args.data_dir, work, minutes)
        for setting in settings:
            name = setting.name
            out_dir = work / f"{long_file_name(minutes)}_{name}{'_' + args.tag if args.tag else ''}"
            cmd = [sys.executable, "scripts/decode.py", "--checkpoint", str(Path(args.checkpoint).resolve()),
                   "--cuts", str(cuts), "--data-dir", str(work), "--modes", "ctc_greedy",
                   "--threads", str(args.threads), "--out-dir", str(out_dir),
                   *setting.decode_args(knows_endpoints, knows_rules)]
            (out_dir / "summary.json").unlink(missing_ok=True)
            run = run_guarded(cmd, args.repo, env, rss_limit, timeout_s=args.timeout)
            summary_file = out_dir / "summary.json"
            result = json.loads(summary_file.read_text())["modes"]["ctc_greedy"] if summary_file.is_file() else None
            status = run.stopped or ("ok" if run.returncode == 0 and result else f"failed ({run.returncode})")
            row = {"minutes": minutes, "setting": name, "status": status, "wall_s": run.seconds,
                   "peak_rss_gib": run.peak_rss_bytes / 2**30, "load": os.getloadavg()[0],
                   "decode_s": result["decode_seconds"] if result else None,
                   "rtf": result["rtf"] if result else None, "wer": result["wer"] if result else None}
            rows.append(row)
            print(f"{minutes:>7g} {name:<26} {status:<34.34} {run.seconds:>7.0f} "
                  f"{row['decode_s'] if result else float('nan'):>8.1f} {row['rtf'] if result else float('nan'):>6.3f} "
                  f"{row['peak_rss_gib']:>12.2f} {100 * row['wer'] if result else float('nan'):>6.1f}", flush=True)
            if status.startswith("failed"):
                print("\n".join(run.output.strip().splitlines()[-5:]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
