"""What silence before speech costs a streamed model: fresh streams against streams after a lead-in,
with the cost split between online CMN's running mean and the attention cache.

Usage (from the repository root):
    python scripts/probe_lead_in.py --checkpoint exp/quickstart_rel_xl/checkpoints/avg3.ckpt
    python scripts/probe_lead_in.py --checkpoint CKPT --dbfs -70 -50 --seconds 2.56 --max-utts 100
    python scripts/probe_lead_in.py --help

The lead-in is seeded white noise at each --dbfs level (the translation probe's, through the
checkpoint's own fbank), --seconds long (a whole number of chunks); the utterances are the
--cuts split's. Rows: fresh, lead-in (live), CMN restarted, cache clear; see
asr/ablation/lead_in.py for what each holds. CTC greedy WER, chunk --chunk-size, --left-chunks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


from asr.ablation.lead_in import ROWS, lead_in_probe  # noqa: E402
from asr.ablation.translation import lead_in_features  # noqa: E402
from asr.data.features import FRAME_SHIFT_S, FeatureConfig  # noqa: E402
from asr.evaluation.split import load_utterances  # noqa: E402
from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_threads_argument,  # noqa: E402
                                set_threads)
from asr.train.checkpoint import load_model  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(p)
    p.add_argument("--cuts", default="data/synth/cuts_test.jsonl.gz")
    p.add_argument("--data-dir", default=None, help="where the cuts' audio paths are relative to (default: their folder)")
    p.add_argument("--max-utts", type=int, default=None, help="the first N usable cuts (default: all)")
    p.add_argument("--dbfs", type=float, nargs="+", default=[-70.0], help="lead-in levels (RMS, dBFS)")
    p.add_argument("--seconds", type=float, default=2.56, help="lead-in length (rounded to whole chunks)")
    add_chunk_arguments(p)
    add_threads_argument(p)
    args = p.parse_args(argv)
    if args.chunk_size < 1:
        p.error(f"--chunk-size ({args.chunk_size}) must be >= 1: the probe streams")
    if args.seconds <= 0:
        p.error(f"--seconds ({args.seconds}) must be > 0")
    set_threads(args.threads)
    model, tokenizer, cfg = load_model(args.checkpoint)
    features = FeatureConfig.from_dict(cfg.features)
    cuts = Path(args.cuts)
    utts = load_utterances(cuts, args.data_dir or cuts.parent, args.max_utts, features).utterances
    if not utts:
        p.error(f"no usable utterances in {cuts}")
    chunk_frames = args.chunk_size * model.encoder.subsampling_rate  # feature frames per chunk
    frames = max(1, round(args.seconds / (FRAME_SHIFT_S * chunk_frames))) * chunk_frames
    print(f"{len(utts)} utterances of {cuts}, C{args.chunk_size}/L{args.left_chunks}, CTC greedy, "
          f"lead-in {frames * FRAME_SHIFT_S:.2f} s, online CMN {model.encoder.online_cmn_frames:g} frames")
    header = f"{'lead-in':>12}" + "".join(f"{row:>15}" for row in ROWS)
    print(header)
    for dbfs in args.dbfs:
        lead = lead_in_features(features, frames=frames, dbfs=dbfs)
        results = lead_in_probe(model, tokenizer, utts, lead, args.chunk_size, args.left_chunks)
        print(f"{f'{dbfs:g} dBFS':>12}" + "".join(f"{100 * results[row].totals['wer']:>14.2f}%" for row in ROWS),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
