"""Our Conformer encoder against ESPnet's and SpeechBrain's at equal size: fwd+bwd, side by side.

Needs the benchmark extras for the other toolkits (pip install -e '.[bench]': espnet without its
dependencies, speechbrain); a toolkit that is not installed is skipped with a message.
See asr/bench/encoders.py for what "equal size" means here.

Usage (from the repository root):
    python scripts/bench_encoders.py                                  # d=256, 12 layers, B=8 x 1000 frames
    python scripts/bench_encoders.py --compiled                       # + ours with torch.compile'd blocks
    python scripts/bench_encoders.py --precision bf16                 # all three under bf16 autocast
    python scripts/bench_encoders.py --layers 4 --d-model 144 --ffn 576 --batch 22 --frames 270 --repeats 5
    python scripts/bench_encoders.py --help
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from asr.bench.encoders import EncoderSize, benchmark, table  # noqa: E402
from asr.decode.options import add_threads_argument  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    default = EncoderSize()  # the flags' defaults are the benchmark's standard size
    p.add_argument("--d-model", type=int, default=default.d_model)
    p.add_argument("--heads", type=int, default=default.heads)
    p.add_argument("--layers", type=int, default=default.layers)
    p.add_argument("--ffn", type=int, default=default.ffn_dim)
    p.add_argument("--kernel", type=int, default=default.kernel)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--frames", type=int, default=1000, help="input feature frames (T' = T/4)")
    p.add_argument("--repeats", type=int, default=7)
    # A fixed count, not torch's default: timings compare across runs and hosts.
    add_threads_argument(p, default=2)
    p.add_argument("--precision", choices=("32", "bf16"), default="32",
                   help="bf16: every encoder's forward under CPU bf16 autocast (bf16-mixed)")
    p.add_argument("--compiled", action="store_true", help="also time ours with torch.compile'd blocks (inductor)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    size = EncoderSize(d_model=args.d_model, heads=args.heads, layers=args.layers, ffn_dim=args.ffn, kernel=args.kernel)
    names = ["ours", *(["ours+compiled"] if args.compiled else []), "espnet", "speechbrain"]
    print(f"{size}, B={args.batch} x {args.frames} frames, fwd+bwd, threads {args.threads}, "
          f"precision {args.precision}, {args.repeats} interleaved repeats, load {os.getloadavg()[0]:.1f}", flush=True)
    results = benchmark(names, size, args.batch, args.frames, args.repeats, bf16=args.precision == "bf16")
    print(table(results))
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
