"""Decode test utterances through the multi-stream recognizer on eager, ONNX and int8 ONNX steps: WER, RTF, agreement.

Usage:
    python scripts/export.py --checkpoint CKPT --out-dir exported/ --format onnx --int8
    python scripts/compare_backends.py --checkpoint CKPT --export-dir exported/ --cuts data/synth/cuts_test.jsonl.gz

Uses exported/encoder_step.onnx and, when present, exported/encoder_step.int8.onnx (written
with the same --chunk-size and --left-chunks as given here; checked). Every utterance is a
stream fed in 100 ms pieces, 16 streams at a time, endpointing off. RTF is process CPU
seconds over audio seconds at --threads threads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_search_arguments,  # noqa: E402
                                add_threads_argument, options_from_args)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(parser)
    parser.add_argument("--export-dir", required=True, type=Path, help="folder written by scripts/export.py")
    parser.add_argument("--cuts", required=True, help="Lhotse manifest of test utterances")
    parser.add_argument("--utterances", type=int, default=100, help="first N usable cuts (default 100)")
    add_chunk_arguments(parser)
    add_search_arguments(parser, rescoring=False)  # the backends differ in the encoder step only
    add_threads_argument(parser, default=1)  # RTF per thread, as the server runs (scripts/serve.py's default)
    args = parser.parse_args(argv)
    args.options = options_from_args(args, parser)
    if args.utterances < 1:
        parser.error(f"--utterances ({args.utterances}) must be >= 1")
    if not (args.export_dir / "encoder_step.onnx").is_file():
        parser.error(f"{args.export_dir / 'encoder_step.onnx'} not found: run scripts/export.py --format onnx first")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from collections import Counter

    import torch

    from asr.data.features import SAMPLE_RATE, FeatureConfig
    from asr.evaluation.split import usable_cuts
    from asr.serve.compare import compare_backends, format_table, recognizer_factory
    from asr.train.checkpoint import load_model

    torch.set_num_threads(args.threads)
    skipped: Counter = Counter()
    usable = list(usable_cuts(args.cuts, max_utts=args.utterances, skipped=skipped))  # every evaluation's skip rules
    keys = [cut.id for cut, _, _ in usable]
    refs = [text for _, text, _ in usable]
    waves = [audio for _, _, audio in usable]
    model, tokenizer, cfg = load_model(args.checkpoint)
    model.eval()
    settings = dict(options=args.options, threads=args.threads,
                    features=FeatureConfig.from_dict(cfg.features))
    backends = {"eager": recognizer_factory(model, tokenizer, **settings),
                "onnx": recognizer_factory(model, tokenizer, onnx_path=str(args.export_dir / "encoder_step.onnx"),
                                           **settings)}
    int8 = args.export_dir / "encoder_step.int8.onnx"
    if int8.is_file():
        backends["onnx int8"] = recognizer_factory(model, tokenizer, onnx_path=str(int8), **settings)
    skipped_note = f", skipped {dict(skipped)}" if skipped else ""
    print(f"{len(waves)} utterances ({sum(w.numel() for w in waves) / SAMPLE_RATE:.1f} s){skipped_note}; "
          f"chunk {args.chunk_size}, left {args.left_chunks}, beam {args.beam}, {args.threads} thread(s)", flush=True)
    results = compare_backends(backends, waves, refs, keys)
    print(format_table(results))


if __name__ == "__main__":
    main()
