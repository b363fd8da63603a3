"""Measure the WebSocket server libraries on loopback: server CPU per message, messages per second.

Usage:
    python scripts/bench_ws_library.py                       # websockets and fastapi, 32 clients x 200 frames
    python scripts/bench_ws_library.py --clients 8 --frames 500 --repeats 3

See asr/serve/library_bench.py for what is measured; FastAPI needs `pip install fastapi uvicorn`.
Libraries are interleaved over the repeats (the machine's load drifts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    from asr.serve.library_bench import LIBRARIES, measure

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--libraries", default=",".join(LIBRARIES))
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--frames", type=int, default=200, help="frames (100 ms of PCM each) per client")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    print("| library | clients | messages | wall s | messages/s | server CPU ms/message |")
    print("|---|---:|---:|---:|---:|---:|")
    for _ in range(args.repeats):
        for library in args.libraries.split(","):
            r = measure(library, args.clients, args.frames)
            print(f"| {r['library']} | {r['clients']} | {r['messages']} | {r['wall_s']:.2f} | "
                  f"{r['messages_per_s']:.0f} | {r['server_cpu_ms_per_message']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
