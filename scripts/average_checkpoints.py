"""Average the top-k checkpoints of a training run into one checkpoint for decoding.

Usage:
    python scripts/average_checkpoints.py exp/quickstart_rel_xl --num 3
    python scripts/average_checkpoints.py exp/quickstart_rel_xl --num 5 --out avg5.ckpt
    python scripts/average_checkpoints.py --checkpoint a.ckpt b.ckpt c.ckpt --out avg.ckpt

The top-k come from the ModelCheckpoint records (monitored validation WER) stored in
<run_dir>/checkpoints/last.ckpt. The output (default <run_dir>/checkpoints/avg<k>.ckpt)
loads with asr.train.checkpoint.load_model, like any training checkpoint.
--checkpoint is the flag every script that takes a checkpoint uses; it may be repeated,
and --ckpts is its former name. Every input must be a checkpoint of the same model (the same
model_kwargs, features, tokenizer, tensor names and shapes, finite weights): anything else is a
one-line error and exit code 2, and nothing is written.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.decode.options import add_checkpoint_argument  # noqa: E402
from asr.train.checkpoint import top_k_checkpoints, write_averaged_checkpoint  # noqa: E402


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="training run folder (holds checkpoints/last.ckpt)")
    parser.add_argument("--num", type=int, default=5, help="how many best checkpoints to average")
    add_checkpoint_argument(parser, many=True)  # explicit checkpoints instead of a run's top-k
    parser.add_argument("--out", help="output checkpoint path")
    args = parser.parse_args(argv)
    if args.checkpoints:
        paths = [Path(p) for p in args.checkpoints]
        if not args.out:
            parser.error("--out is required with --checkpoint")
    elif not args.run_dir:
        parser.error("give a run_dir or --checkpoint")
    try:
        if not args.checkpoints:
            ranked = top_k_checkpoints(args.run_dir, args.num)
            for path, score in ranked:
                print(f"  {score:.4f}  {path}")
            paths = [p for p, _ in ranked]
        out = Path(args.out) if args.out else Path(args.run_dir) / "checkpoints" / f"avg{len(paths)}.ckpt"
        write_averaged_checkpoint(paths, out)
    except ValueError as err:  # CheckpointError: an input that is not a usable checkpoint, or not the first's model
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"averaged {len(paths)} checkpoints -> {out}")
    return out


if __name__ == "__main__":
    main()
