"""Our model beside Wenet's own ASRModel and ESPnet's conformer encoder: forward + backward on the same batches.

Interleaved on the same synthetic duration-bucketed batches: audio seconds per second, CPU share of
wall, peak memory and (CUDA) the share of the step the GPU was busy. See asr/bench/peers.py.
Wenet comes from its source folder (an export of its repository, never vendored:
``git --git-dir=/work/.mirror/wenet-e2e+wenet/repo archive HEAD wenet | tar -x -C DIR``, or
``scripts/gpu_check.py --fetch-wheels``); ESPnet from ``pip install --no-deps "espnet<=202511" typeguard``.
A contender whose code is missing is skipped with the reason.

Usage (from the repository root):
    python scripts/bench_peers.py --wenet-src /tmp/wenet_src                       # CPU, small dims
    python scripts/bench_peers.py --device cuda --precision bf16 --size librispeech --wenet-src .peers/wenet \
        --batches 8 --rounds 3 --max-duration 600                                  # on a GPU, equal size
    python scripts/bench_peers.py --contenders ours,ours_encoder --batches 2 --rounds 1
    python scripts/bench_peers.py --help
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from asr.bench.peers import CONTENDERS, PeerSize, peers_table, run_peers  # noqa: E402
from asr.bench.synthetic import synthetic_batches  # noqa: E402
from asr.decode.options import add_threads_argument, set_threads  # noqa: E402

SIZES = {
    "tiny": PeerSize(d_model=16, heads=2, layers=1, ffn_dim=32, kernel=3, decoder_layers=1, r2l_layers=1,
                     decoder_ffn_dim=32, vocab=30),
    "small": PeerSize(d_model=64, heads=4, layers=2, ffn_dim=128, kernel=15, decoder_layers=1, r2l_layers=1,
                      decoder_ffn_dim=128, vocab=100),
    "librispeech": PeerSize(),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma-separated, of {', '.join(CONTENDERS)}")
    p.add_argument("--size", choices=tuple(SIZES), default="small",
                   help="tiny (a check that it runs), small (CPU) or librispeech (d=256, 12 blocks)")
    p.add_argument("--wenet-src", type=Path, default=None, help="folder holding Wenet's wenet/ package")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--precision", choices=("32", "bf16"), default="32", help="bf16: autocast, as bf16-mixed")
    p.add_argument("--batches", type=int, default=4, help="distinct batches a round")
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after one warm-up round")
    p.add_argument("--max-duration", type=float, default=8.0, help="seconds of audio a batch (duration bucketing)")
    p.add_argument("--seconds", type=float, nargs=2, default=(1.0, 3.0), metavar=("MIN", "MAX"),
                   help="utterance length range in seconds")
    p.add_argument("--chunk", type=int, default=0, help="train ours and Wenet's with this chunk mask (0: full)")
    add_threads_argument(p, default=0)
    args = p.parse_args(argv)
    names = [n for n in args.contenders.split(",") if n]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        p.error(f"unknown contender(s) {unknown}; valid: {', '.join(CONTENDERS)}")
    if args.batches < 1 or args.rounds < 1:
        p.error(f"--batches ({args.batches}) and --rounds ({args.rounds}) must be >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here")
    set_threads(args.threads)
    size = SIZES[args.size]
    batches = synthetic_batches(args.batches, args.max_duration, size.vocab, size.input_dim, seed=0,
                                seconds=tuple(args.seconds))
    print(f"{size}\n{args.batches} batches of up to {args.max_duration:g} s, {args.rounds} rounds after a warm-up, "
          f"device {args.device}, precision {args.precision}, chunk {args.chunk}, threads {torch.get_num_threads()}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    results = run_peers(names, size, batches, args.rounds, args.device,
                        torch.bfloat16 if args.precision == "bf16" else None, args.chunk, args.wenet_src)
    if not results:
        print("no contender ran")
        return 1
    print(peers_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
