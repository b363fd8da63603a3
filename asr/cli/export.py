"""Export a checkpoint's streaming encoder step (explicit state tensors in and out) as ONNX and TorchScript,
or the whole streaming CTC model for sherpa-onnx.

One call of the exported step encodes one whole chunk of one stream:
inputs feats (1, S, F) raw fbank, keys/values (L, 1, H, M, Dh), conv (L, 1, D, k-1),
valid (1,) and time (1,) int64; outputs the chunk's encoder frames (1, C, D) and the
same state tensors for the next chunk (see asr/serve/export.py). The sizes are stored
in the files (ONNX metadata / TorchScript extra file "asr_encoder_step").

Usage:
    python scripts/export.py --checkpoint exp/run/checkpoints/last.ckpt --out-dir exported/
    python scripts/export.py --checkpoint last.ckpt --out-dir exported/ --chunk-size 16 --left-chunks 4 --int8
    python scripts/export.py --checkpoint last.ckpt --out-dir exported/ --format onnx

Writes encoder_step.onnx, encoder_step.pt (TorchScript) and, with --int8,
encoder_step.int8.onnx (dynamic int8 weights). Needs the optional extra:
pip install -e '.[export]'.

sherpa-onnx (encoder, CMVN, online CMN and CTC in one graph with the stream state as explicit
tensors):
    python scripts/export.py --checkpoint last.ckpt --out-dir exported/ --format sherpa-onnx --chunk-size 16
writes model.onnx and tokens.txt and prints the sherpa-onnx commands that run them. A model trained
with features=sherpa goes to its online NeMo CTC format (asr/interop/sherpa_onnx.py: exact, any
number of streams a call); one with Wenet's Kaldi fbank (an imported Wenet model) to its online Wenet
CTC format, the one sherpa-onnx runs Wenet's own models with (asr/interop/sherpa_wenet.py), with a
warning that sherpa-onnx computes those frames slightly otherwise (snip_edges, mel bank top) and
what that costs. It refuses (exit 2, naming why) a non-causal model, a chunk size or memory
sherpa-onnx cannot hold (--chunk-size and --left-chunks >= 1), abs_learned, a checkpoint without its
tokenizer, and fbank options neither format computes (train with features=sherpa).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from asr.decode.options import add_checkpoint_argument, add_chunk_arguments
from asr.extras import MissingExtra


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--out-dir", required=True, type=Path, help="folder for the exported files")
    add_chunk_arguments(parser)  # an export streams: left chunks >= 1 (a fixed cache), refused otherwise
    parser.add_argument("--format", choices=("both", "onnx", "torchscript", "sherpa-onnx"), default="both")
    parser.add_argument("--int8", action="store_true", help="also write a dynamically int8-quantized ONNX file")
    args = parser.parse_args(argv)
    if args.int8 and args.format in ("torchscript", "sherpa-onnx"):
        parser.error("--int8 quantizes the encoder-step ONNX file; use --format onnx or both")
    return args


def export_sherpa(args: argparse.Namespace) -> int:
    from asr.interop.sherpa_export import export_checkpoint
    from asr.interop.sherpa_onnx import SherpaExportError

    try:
        export = export_checkpoint(args.checkpoint, args.out_dir, args.chunk_size, args.left_chunks)
    except (OSError, KeyError, ValueError, MissingExtra) as err:  # SherpaExportError is a ValueError
        kind = "cannot export for sherpa-onnx" if isinstance(err, SherpaExportError) else "error"
        print(f"{kind}: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    layout = export.layout
    cmn = "" if export.model_type == "wenet_ctc" else f", online CMN {'on' if layout.online_cmn_frames > 0 else 'off'}"
    print(f"sherpa-onnx {'Wenet' if export.model_type == 'wenet_ctc' else 'NeMo'} CTC: chunk {layout.chunk_size} "
          f"frames ({layout.window} feature frames in, {layout.shift} between chunks), {layout.left_chunks} left "
          f"chunks, scheme {layout.pos_enc}{cmn}")
    for path in (export.model_path, export.tokens_path):
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    if layout.subsampling != 4:
        print(f"note: sherpa-onnx's CTC timestamps and endpoint rules assume 4x subsampling; this model's is "
              f"{layout.subsampling}x (its text is unaffected)")
    for warning in export.warnings:
        print(f"warning: {warning}")
    print("run it:\n  " + "\n  ".join(export.commands))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.format == "sherpa-onnx":
        return export_sherpa(args)
    from asr.serve.export import EncoderStep, ExportError, export_onnx, export_torchscript, quantize_int8
    from asr.train.checkpoint import load_model

    try:
        model, _, _ = load_model(args.checkpoint)
        step = EncoderStep(model.encoder, args.chunk_size, args.left_chunks)
    except (OSError, KeyError, ValueError) as err:  # ExportError is a ValueError
        kind = "cannot export" if isinstance(err, ExportError) else "error"
        print(f"{kind}: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if args.format in ("both", "onnx"):
        try:
            onnx_path = export_onnx(step, args.out_dir / "encoder_step.onnx")
        except MissingExtra as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        written.append(onnx_path)
        if args.int8:
            written.append(quantize_int8(onnx_path, args.out_dir / "encoder_step.int8.onnx"))
    if args.format in ("both", "torchscript"):
        written.append(export_torchscript(step, args.out_dir / "encoder_step.pt"))
    spec = step.spec
    print(f"chunk {spec.chunk_size} frames ({spec.chunk_span} feature frames in), "
          f"{spec.left_chunks} left chunks, scheme {spec.pos_enc}")
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
