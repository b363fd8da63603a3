"""Measure the training data pipeline's throughput (audio read + speed perturb + fbank + SpecAugment).

Prints utterances/s and audio seconds/s (x real time) over N batches after a warm-up,
with the training loader of AsrDataModule (2 workers by default).

Usage:
  python scripts/bench_data.py                                  # data/synth train set
  python scripts/bench_data.py --data-dir data/libri --cuts cuts_dev.jsonl.gz --batches 50
  python scripts/bench_data.py --no-augment --workers 1
"""

from __future__ import annotations

import argparse
import time

import torch

from asr.data.datamodule import AsrDataModule
from asr.data.features import FRAME_SHIFT_S


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default="data/synth")
    p.add_argument("--tokenizer", default="tokenizer", help="path, or relative to --data-dir")
    p.add_argument("--cuts", default="cuts_train.jsonl.gz")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-duration", type=float, default=200.0)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-augment", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    dm = AsrDataModule(
        args.data_dir, args.tokenizer, train_cuts=args.cuts, max_duration=args.max_duration,
        num_workers=args.workers, speed_perturb=not args.no_augment, spec_augment=not args.no_augment,
    )
    utts, frames, batches = 0, 0, 0
    started = None
    for i, batch in enumerate(dm.train_dataloader()):
        if i == args.warmup:
            started = time.perf_counter()
        if i >= args.warmup:
            utts += batch.feats.shape[0]
            frames += int(batch.feat_lens.sum())
            batches += 1
        if batches == args.batches:
            break
    if started is None or batches == 0:
        raise SystemExit(f"only {i + 1} batches available; lower --warmup/--batches or --max-duration")
    elapsed = time.perf_counter() - started
    audio_s = frames * FRAME_SHIFT_S
    print(f"{batches} batches ({utts} utts, {audio_s:.0f} s audio) in {elapsed:.2f} s, {args.workers} workers, "
          f"augment={'off' if args.no_augment else 'on'}")
    print(f"throughput: {utts / elapsed:.1f} utts/s  {audio_s / elapsed:.0f} audio s/s "
          f"({audio_s / elapsed:.0f}x real time)  {batches / elapsed:.2f} batches/s")
    print(f"skips: {dm.skip_report() or 'none'}")


if __name__ == "__main__":
    main()
