"""Decode a split with a trained checkpoint and score WER/CER for one or more modes.

Usage:
    python scripts/decode.py --ckpt exp/quickstart_rel_xl/checkpoints/last.ckpt
    python scripts/decode.py --ckpt CKPT --modes ctc_greedy,attention_rescoring --split test
    python scripts/decode.py --ckpt CKPT --chunk-size 16 --left-chunks -1     # streaming masks
    python scripts/decode.py --ckpt CKPT --cuts data/synth/cuts_long.jsonl.gz --out-dir results/long

Modes: ctc_greedy, ctc_prefix_beam, attention, attention_rescoring (comma-separated).
Writes <out-dir>/<mode>.jsonl (one line per utterance: key, ref, hyp, word/char errors)
and <out-dir>/summary.json (WER, CER, utterances, seconds, RTF per mode); prints a table.
Default out-dir: <run folder>/decode/<split>_<full|chunkC_leftL>.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.decode import MODES, ErrorCounter, decode_batch  # noqa: E402
from asr.train.checkpoint import load_model  # noqa: E402

# Fbank frame shift: feature frames -> seconds of audio for the real-time factor.
FRAME_SHIFT_S = 0.01


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="checkpoint written by scripts/train.py (or averaged)")
    parser.add_argument("--modes", default="ctc_greedy,attention_rescoring",
                        help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument("--split", default="test", help="data split: cuts_<split>.jsonl.gz in the data dir")
    parser.add_argument("--cuts", help="explicit CutSet file (overrides --split)")
    parser.add_argument("--data-dir", help="corpus folder (default: the one the model was trained on)")
    parser.add_argument("--chunk-size", type=int, default=0, help="encoder chunk (frames); 0 = full context")
    parser.add_argument("--left-chunks", type=int, default=-1, help="left chunks of context; -1 = all")
    parser.add_argument("--beam", type=int, default=10)
    parser.add_argument("--ctc-weight", type=float, default=0.5, help="CTC weight in attention rescoring")
    parser.add_argument("--reverse-weight", type=float, default=0.0, help="right-to-left decoder weight")
    parser.add_argument("--max-duration", type=float, default=100.0, help="seconds of audio per batch")
    parser.add_argument("--out-dir", help="where JSONL files and summary.json go")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        parser.error(f"unknown modes {bad}; choose from {list(MODES)}")
    if args.chunk_size < 0:
        parser.error(f"--chunk-size ({args.chunk_size}) must be >= 0")
    return args


def make_loader(cfg, args: argparse.Namespace):
    """A deterministic, augmentation-free loader over the requested cuts."""
    from asr.data.datamodule import AsrDataModule

    data_cfg = cfg.data
    data_dir = args.data_dir or data_cfg.data_dir
    tokenizer_path = data_cfg.tokenizer_path
    if args.data_dir:
        # The tokenizer lives in the corpus folder: follow the corpus when it is overridden.
        tokenizer_path = str(Path(args.data_dir) / Path(tokenizer_path).name)
    dm = AsrDataModule(
        data_dir=data_dir, tokenizer_path=tokenizer_path, max_duration=args.max_duration,
        num_workers=0, speed_perturb=False, spec_augment=False,
    )
    cuts = args.cuts or str(Path(data_dir) / f"cuts_{args.split}.jsonl.gz")
    return dm, dm.eval_dataloader(cuts)


def default_out_dir(args: argparse.Namespace) -> Path:
    run_dir = Path(args.ckpt).resolve().parent.parent
    name = Path(args.cuts).name.split(".")[0] if args.cuts else args.split
    ctx = "full" if args.chunk_size == 0 else f"chunk{args.chunk_size}_left{args.left_chunks}"
    return run_dir / "decode" / f"{name}_{ctx}"


def decode(model, tokenizer, loader, args: argparse.Namespace, out_dir: Path) -> dict:
    """Decode every batch with every mode; write JSONL per mode; return the summary."""
    counters = {m: ErrorCounter() for m in args.modes}
    seconds = {m: 0.0 for m in args.modes}
    audio_s = 0.0
    files = {m: open(out_dir / f"{m}.jsonl", "w") for m in args.modes}
    try:
        with torch.inference_mode():
            for batch in tqdm(loader, desc="decoding", unit="batch"):
                audio_s += float(batch.feat_lens.sum()) * FRAME_SHIFT_S
                for mode in args.modes:
                    start = time.perf_counter()
                    hyps = decode_batch(
                        model, batch.feats, batch.feat_lens, mode, beam=args.beam,
                        chunk_size=args.chunk_size, left_chunks=args.left_chunks,
                        ctc_weight=args.ctc_weight, reverse_weight=args.reverse_weight,
                    )
                    seconds[mode] += time.perf_counter() - start
                    for key, ref, ids in zip(batch.keys, batch.texts, hyps):
                        record = counters[mode].add(ref, tokenizer.decode(ids), key=key)
                        files[mode].write(json.dumps(record, ensure_ascii=False) + "\n")
    finally:
        for f in files.values():
            f.close()
    summary = {
        "ckpt": str(args.ckpt),
        "cuts": args.cuts or args.split,
        "chunk_size": args.chunk_size,
        "left_chunks": args.left_chunks,
        "audio_seconds": audio_s,
        "modes": {
            m: {**counters[m].summary(), "seconds": seconds[m], "rtf": seconds[m] / audio_s if audio_s else None}
            for m in args.modes
        },
    }
    return summary


def format_table(summary: dict) -> str:
    ctx = "full context" if summary["chunk_size"] == 0 else (
        f"chunk {summary['chunk_size']}, left {summary['left_chunks']}")
    lines = [f"{summary['cuts']} ({ctx}, {summary['audio_seconds']:.1f} s of audio)",
             f"{'mode':<22}{'WER %':>8}{'CER %':>8}{'utts':>7}{'RTF':>8}"]
    for mode, r in summary["modes"].items():
        rtf = "n/a" if r["rtf"] is None else f"{r['rtf']:.3f}"
        lines.append(f"{mode:<22}{100 * r['wer']:>8.2f}{100 * r['cer']:>8.2f}{r['utterances']:>7}{rtf:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model, tokenizer, cfg = load_model(args.ckpt)
    dm, loader = make_loader(cfg, args)
    out_dir = Path(args.out_dir) if args.out_dir else default_out_dir(args)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = decode(model, tokenizer, loader, args, out_dir)
    summary["skipped_utterances"] = dict(dm.skip_report())
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(summary))
    print(f"results: {out_dir}")
    return summary


if __name__ == "__main__":
    main()
