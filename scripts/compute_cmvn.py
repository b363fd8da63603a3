"""Compute global CMVN (mean, inverse std) over a manifest's fbank frames into cmvn.json.

The stats are computed with the fbank options a run trains with (``--features``: a preset or a
features YAML file) and record them; training refuses stats computed with other options.

Usage:
  python scripts/compute_cmvn.py data/synth/cuts_train.jsonl.gz data/synth/cmvn.json
  python scripts/compute_cmvn.py data/libri/cuts_train.jsonl.gz data/libri/cmvn.json --max-utts 20000
  python scripts/compute_cmvn.py data/synth/cuts_train.jsonl.gz data/synth/cmvn_sherpa.json --features sherpa
"""

from __future__ import annotations

import argparse

from asr.data.cmvn import compute_cmvn, save_cmvn
from asr.data.features import TRAINING_BACKEND, FbankExtractor, load_feature_config
from asr.data.manifest import manifest_stats, read_cuts


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cuts", help="CutSet manifest (jsonl.gz); relative audio paths resolve against its folder")
    p.add_argument("out", help="output cmvn.json")
    p.add_argument("--max-utts", type=int, default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--features", default="legacy",
                   help="fbank options: a conf/features preset (legacy, sherpa) or a YAML file (default legacy)")
    args = p.parse_args(argv)
    extractor = FbankExtractor(load_feature_config(args.features), backend=TRAINING_BACKEND)
    stats = compute_cmvn(read_cuts(args.cuts, lazy=True), extractor, max_cuts=args.max_utts,
                         num_workers=args.workers, total=manifest_stats(args.cuts).cuts)
    save_cmvn(stats, args.out)
    print(f"{stats['frames']} frames, {stats['skipped']} unreadable cuts -> {args.out}")


if __name__ == "__main__":
    main()
