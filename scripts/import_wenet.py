"""Import a Wenet released model (U2/U2++ Conformer) as a checkpoint of this toolkit.

Usage:
    python scripts/import_wenet.py WENET_DIR --out exp/wenet/imported.ckpt
    python scripts/decode.py --checkpoint exp/wenet/imported.ckpt my_audio/ --reverse-weight 0.3   # any audio
    python scripts/decode.py --checkpoint exp/wenet/imported.ckpt data/test/data.list   # scored (or wav.scp + text)
    python scripts/stream.py --checkpoint exp/wenet/imported.ckpt --chunk-size 16 --left-chunks 4 a.wav
    python scripts/serve.py --checkpoint exp/wenet/imported.ckpt --port 10086
    python scripts/export.py --checkpoint exp/wenet/imported.ckpt --format sherpa-onnx --out-dir exp/wenet/sherpa
    python scripts/train.py init_from=exp/wenet/imported.ckpt data.data_dir=data/mine data.tokenizer_path=WENET_DIR \
        trainer.max_steps=2000 optim.scheduler.warmup_steps=200   # fine-tune: the model's fbank, CMVN, loss weights

WENET_DIR holds final.pt, train.yaml, units.txt, global_cmvn (Wenet's JSON or Kaldi's text
form) and, for BPE units, bpe.model (Wenet 1.x-3.x layouts; where train.yaml names no tokenizer,
bpe.model present means BPE units; a final.pt wrapping its state dict under "model" or
"state_dict" is unwrapped). The checkpoint keeps Wenet's token ids (units.txt order),
its fbank options (train.yaml dataset_conf.fbank_conf) and computes Wenet's function: a
rel_pos encoder becomes position scheme wenet_rel (an abs_pos one abs_sin). Anything the
importer cannot map (another encoder, an unknown option, a tensor no layer uses, a pickle
that needs code to load) is refused with a one-line reason and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Allow `python scripts/import_wenet.py` from a checkout that is not pip-installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.interop.wenet import describe, import_wenet, write_checkpoint  # noqa: E402
from asr.interop.wenet_config import WenetImportError  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("wenet_dir", type=Path, help="Wenet model folder (final.pt, train.yaml, units.txt, ...)")
    parser.add_argument("--out", required=True, type=Path, help="checkpoint to write (e.g. exp/wenet/imported.ckpt)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        imported = import_wenet(args.wenet_dir)
    except WenetImportError as err:
        print(f"import_wenet: {err}", file=sys.stderr)
        return 2
    path = write_checkpoint(imported, args.out)
    print(describe(imported))
    print(f"checkpoint: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
