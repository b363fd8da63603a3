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

from asr.decode.options import add_checkpoint_argument
from asr.train.checkpoint import average_to_file


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", nargs="?", help="training run folder (holds checkpoints/last.ckpt)")
    parser.add_argument("--num", type=int, default=5, help="how many best checkpoints to average")
    add_checkpoint_argument(parser, many=True)  # explicit checkpoints instead of a run's top-k
    parser.add_argument("--out", help="output checkpoint path")
    args = parser.parse_args(argv)
    if args.checkpoints and not args.out:
        parser.error("--out is required with --checkpoint")
    if not args.checkpoints and not args.run_dir:
        parser.error("give a run_dir or --checkpoint")
    try:
        return average_to_file(args.checkpoints, args.run_dir, args.num, args.out)
    except ValueError as err:  # CheckpointError: an input that is not a usable checkpoint, or not the first's model
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
