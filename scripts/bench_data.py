"""Measure the training data pipeline: throughput, or memory and start-up at corpus scale.

Default: utterances/s and audio seconds/s (x real time) over N batches after a warm-up,
with the training loader of AsrDataModule (2 workers by default).

--scale: builds manifests of 10k, 100k and 1M cuts that point at a handful of real
audio files (from --data-dir/--cuts; Shar shards, which copy the audio, only up to
--shar-max-cuts) and prints, per size and reader (eager manifest, lazy manifest, Shar),
the time to the first batch and the peak RSS of the main process and of the workers,
each measured in a fresh process.

Usage:
  python scripts/bench_data.py                                  # data/synth train set
  python scripts/bench_data.py --data-dir data/libri --cuts cuts_dev.jsonl.gz --batches 50
  python scripts/bench_data.py --no-augment --workers 1
  python scripts/bench_data.py --scale                          # 10k / 100k / 1M cuts in /tmp/asr_scale_bench
  python scripts/bench_data.py --scale --sizes 10000 100000 --shar-max-cuts 10000
  python scripts/bench_data.py --scale --shar-max-cuts 1000000     # Shar at 1M too: 19 GB, ~2.5 min to write
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

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
    p.add_argument("--scale", action="store_true", help="memory and first-batch time at 10k..1M cuts")
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--scale-dir", default="/tmp/asr_scale_bench", help="where --scale writes its manifests")
    p.add_argument("--shar-max-cuts", type=int, default=100_000,
                   help="build Shar shards up to this size (they hold a copy of every cut's audio: "
                        "about 19 KB a cut, 1.9 GB at 100k)")
    p.add_argument("--bucket-buffer", type=int, default=None,
                   help="--scale: the sampler's look-ahead in cuts, every mode (default 2000: Shar cuts carry audio)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.scale:
        scale(args)
        return
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


def scale(args: argparse.Namespace) -> None:
    from asr.bench.scale_corpus import (
        HEADER, MODES, SCALE_BUCKET_BUFFER, build_scale_corpus, format_row, measure_in_fresh_process,
    )

    data_dir = Path(args.data_dir)
    tokenizer = Path(args.tokenizer) if Path(args.tokenizer).exists() else data_dir / args.tokenizer
    built = build_scale_corpus(data_dir / args.cuts, Path(args.scale_dir), sorted(args.sizes), args.shar_max_cuts)
    buffer = args.bucket_buffer or SCALE_BUCKET_BUFFER
    print(f"{args.workers} workers, max_duration {args.max_duration} s, {args.batches} batches drawn per run, "
          f"bucket buffer {buffer} cuts")
    print(HEADER)
    for size, paths in built.items():
        for mode in MODES:
            path = paths.get("shar" if mode == "shar" else "manifest")
            result = None if path is None else measure_in_fresh_process(
                mode, path, str(tokenizer.resolve()), args.workers, args.batches, args.max_duration, buffer)
            print(format_row(size, mode, result), flush=True)


if __name__ == "__main__":
    main()
