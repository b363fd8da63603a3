"""Decode a test split with sherpa-onnx itself and with our streaming recognizer; compare texts and WERs.

Both decode the same audio (each utterance plus the tail of zeros sherpa-onnx needs to decode
its end): sherpa-onnx's OnlineRecognizer (greedy search) on a scripts/export.py --format
sherpa-onnx export, in a child process, and our StreamingRecognizer's CTC greedy path on the
checkpoint, at the export's chunk size and left chunks. Prints the fraction of utterances with
identical (normalized) text, both WERs against the references, and the utterances that differ.
Bad cuts are skipped and counted by the evaluation's rules.

Usage:
    python scripts/check_sherpa.py --checkpoint CKPT --export-dir exported/ --cuts data/synth/cuts_test.jsonl.gz
    python scripts/check_sherpa.py --checkpoint CKPT --export-dir exported/ --cuts CUTS --max-utts 50 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--export-dir", required=True, type=Path, help="model.onnx + tokens.txt of the checkpoint")
    parser.add_argument("--cuts", required=True, help="Lhotse manifest of the utterances")
    parser.add_argument("--max-utts", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lead-seconds", type=float, default=0.0,
                        help="zeros before each utterance on both sides (sherpa-onnx's command line puts 0.5 s: "
                             "its --left-padding)")
    parser.add_argument("--json", type=Path, help="write the per-utterance texts and the summary here")
    args = parser.parse_args(argv)

    import torch

    from asr.data.features import FeatureConfig
    from asr.decode.evaluate import usable_cuts
    from asr.decode.wer import ErrorCounter
    from asr.interop.sherpa_check import compare, normalize
    from asr.train.checkpoint import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer, cfg = load_model(args.checkpoint)
    skipped: Counter = Counter()
    usable = list(usable_cuts(args.cuts, max_utts=args.max_utts, skipped=skipped))
    keys = [cut.id for cut, _, _ in usable]
    refs = [normalize(text) for _, text, _ in usable]
    waves = [audio.numpy() for _, _, audio in usable]
    try:
        result = compare(args.export_dir, model, tokenizer, FeatureConfig.from_dict(cfg.features), keys, waves,
                         args.threads, args.lead_seconds)
    except (OSError, RuntimeError, ValueError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    counters = {"ours": ErrorCounter(), "sherpa": ErrorCounter()}
    for key, ref, ours, sherpa in zip(keys, refs, result.ours, result.sherpa):
        counters["ours"].add(ref, ours, key)
        counters["sherpa"].add(ref, sherpa, key)
    n = len(keys)
    summary = {"utterances": n, "identical": result.identical, "identical_fraction": result.identical / max(n, 1),
               "wer_ours": counters["ours"].wer, "wer_sherpa": counters["sherpa"].wer, "skipped": dict(skipped)}
    print(f"{n} utterances{f' (skipped {dict(skipped)})' if skipped else ''}: identical text {result.identical}/{n} "
          f"({100 * summary['identical_fraction']:.2f}%)")
    print(f"WER ours (streaming CTC greedy) {100 * summary['wer_ours']:.2f}% | "
          f"sherpa-onnx (greedy) {100 * summary['wer_sherpa']:.2f}%")
    for key, ours, sherpa in result.differing():
        print(f"  differs {key}:\n    ours  : {ours}\n    sherpa: {sherpa}")
    if args.json:
        rows = [{"key": k, "ref": r, "ours": o, "sherpa": s} for k, r, o, s in zip(keys, refs, result.ours, result.sherpa)]
        args.json.write_text(json.dumps({"summary": summary, "utterances": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
