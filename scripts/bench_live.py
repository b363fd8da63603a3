"""Live benchmark: sessions of several sentences with pauses over a background, through scripts/serve.py's
continuous decoding, against the same sentences sent alone.

Each session is a lead-in, --sentences sentences of --cuts with pauses between them and a tail, over
a background that runs under all of it: exact zeros, white floors at -90/-70/-50 dBFS, room tone (mains
hum and pink noise), a fan's band noise, a DC offset. The same sessions are built for every
background (deterministic for --seed). scripts/serve.py runs as a child process on 127.0.0.1 with a
free port; --server-args passes options through to it (e.g. chunk size, threads, an LM, a VAD), so
runtime options can be compared. Prints a Markdown table per background (session WER against the
same sentences alone, endpoints, late endpoints and fused sentences, the first word after an
endpoint, first-word latency) and WER by sentence position; --out-json writes the report with every
session's finals. The figures are defined in asr/bench/live.py.

Usage (from the repository root):
    python scripts/bench_live.py --checkpoint exp/quickstart_rel_xl/checkpoints/avg3.ckpt
    python scripts/bench_live.py --checkpoint CKPT --cuts data/synth/cuts_test.jsonl.gz --sessions 4 \\
        --backgrounds zeros,room --out-json live.json
    python scripts/bench_live.py --checkpoint CKPT --server-args "--chunk-size 8 --threads 2"
    python scripts/bench_live.py --checkpoint CKPT --speed 0       # as fast as the server decodes

--speed paces each connection at that many times real time (default 1: as a microphone; the
first-word latency is then what a user waits); faster pacing inflates the latency's compute part
by the factor, and 0 (unpaced) reports none. WER and endpoints do not depend on the pace: the
server decides them on stream time. Bounded: --concurrency connections at once, --max-seconds
for the whole run (what did not finish is counted, not scored).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH seconds, got {text!r}") from None
    return low, high


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from asr.bench.live import SERVER_START_S
    from asr.bench.live_sessions import BACKGROUNDS
    from asr.decode.options import add_checkpoint_argument

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(p)
    p.add_argument("--cuts", default="data/synth/cuts_dev.jsonl.gz", help="Lhotse manifest of the sentences "
                   "(default data/synth/cuts_dev.jsonl.gz: dev for choices, test for reports)")
    p.add_argument("--data-dir", default=None,
                   help="where the cuts' audio paths are relative to (default: their folder)")
    p.add_argument("--sessions", type=int, default=12, help="sessions per background (default 12)")
    p.add_argument("--sentences", type=int, default=5, help="sentences per session (default 5)")
    p.add_argument("--backgrounds", default=",".join(BACKGROUNDS),
                   help=f"comma-separated, of {', '.join(BACKGROUNDS)} (default all)")
    p.add_argument("--seed", type=int, default=0, help="sentence order, lead-ins, pauses, tails, backgrounds")
    p.add_argument("--lead-in-s", type=_range, default=(0.0, 3.0), help="lead-in range LOW,HIGH (default 0,3)")
    p.add_argument("--pause-s", type=_range, default=(0.3, 3.0), help="pause range (default 0.3,3)")
    p.add_argument("--tail-s", type=_range, default=(0.5, 2.0), help="tail range (default 0.5,2)")
    p.add_argument("--speed", type=float, default=1.0, help="pace, times real time (default 1; 0: unpaced)")
    p.add_argument("--concurrency", type=int, default=8, help="connections at once (default 8)")
    p.add_argument("--piece-ms", type=float, default=100.0, help="audio per WebSocket frame in ms (default 100)")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="wall-time cap on the whole run (default 1800)")
    p.add_argument("--server-start-s", type=float, default=SERVER_START_S,
                   help=f"seconds the server child may take to start (default {SERVER_START_S:g}; more on a "
                        "loaded machine)")
    p.add_argument("--server-args", default="",
                   help='extra scripts/serve.py arguments, one string: "--threads 2", or --server-args=--flag alone')
    p.add_argument("--out-json", help="write the report (figures, settings, every session's finals) here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from asr.bench.live import LiveConfig, format_table, run_live
    from asr.bench.live_sessions import Timing
    from asr.bench.report_cli import run_and_report

    def run(log):
        config = LiveConfig(
            checkpoint=args.checkpoint, cuts=args.cuts, data_dir=args.data_dir, sessions=args.sessions,
            sentences=args.sentences, backgrounds=tuple(b.strip() for b in args.backgrounds.split(",") if b.strip()),
            seed=args.seed, timing=Timing(args.lead_in_s, args.pause_s, args.tail_s), speed=args.speed,
            concurrency=args.concurrency, piece_s=args.piece_ms / 1000, max_seconds=args.max_seconds,
            server_args=tuple(shlex.split(args.server_args)), server_start_s=args.server_start_s)
        return run_live(config, log=log)

    return run_and_report(run, format_table, args.out_json)


if __name__ == "__main__":
    sys.exit(main())
