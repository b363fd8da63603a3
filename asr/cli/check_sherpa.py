"""Decode a test split with sherpa-onnx itself and with our streaming recognizer; compare texts and WERs.

Both decode the same audio (each utterance plus the tail of zeros sherpa-onnx needs to decode
its end): sherpa-onnx's OnlineRecognizer (greedy search) on a scripts/export.py --format
sherpa-onnx export, in a child process, and our StreamingRecognizer's CTC greedy path on the
checkpoint, at the export's chunk size and left chunks. Prints the fraction of utterances with
identical (normalized) text, both WERs against the references, and the utterances that differ.
Bad cuts are skipped and counted by the evaluation's rules.

A Wenet CTC export (an imported Wenet model) is fed sherpa-onnx's own Kaldi fbank, which differs
slightly from the model's (asr/interop/sherpa_wenet.py): the identical fraction and the two WERs
are then what that costs, and a third line decodes our side on sherpa-onnx's frames, which must be
identical (the graph is exact; every difference is the fbank's).

Usage:
    python scripts/check_sherpa.py --checkpoint CKPT --export-dir exported/ --cuts data/synth/cuts_test.jsonl.gz
    python scripts/check_sherpa.py --checkpoint CKPT --export-dir exported/ --cuts CUTS --max-utts 50 --json out.json
    python scripts/check_sherpa.py --checkpoint CKPT --export-dir exported/ --cuts CUTS --onset-jitter 0.64 \
        --lead-seconds 0.5   # sherpa-onnx's padding on speech that starts anywhere in a chunk
    python scripts/check_sherpa.py --checkpoint CKPT --export-dir exported/ my_audio/ data/test/data.list
        # any input decode.py takes (asr/data/inputs.py); WERs where there are references
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from asr.decode.options import add_checkpoint_argument, add_threads_argument, set_threads

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    add_checkpoint_argument(parser)
    parser.add_argument("--export-dir", required=True, type=Path, help="model.onnx + tokens.txt of the checkpoint")
    parser.add_argument("inputs", nargs="*", help="audio files or folders, a data.list, a wav.scp, a NeMo or Lhotse "
                                                  "manifest (as decode.py)")
    parser.add_argument("--cuts", help="Lhotse manifest of the utterances (one of the inputs)")
    parser.add_argument("--max-utts", type=int, default=None)
    add_threads_argument(parser, default=1)  # also sherpa-onnx's num_threads, which takes no 0 for "its default"
    parser.add_argument("--lead-seconds", type=float, default=0.0,
                        help="zeros before each utterance on both sides (sherpa-onnx's command line puts 0.5 s: "
                             "its --left-padding)")
    parser.add_argument("--onset-jitter", type=float, default=0.0, metavar="S",
                        help="before the --lead-seconds zeros, give each utterance its own zeros, uniform in [0, S) "
                             "(seeded by --seed): speech that starts anywhere in a chunk, as on a live stream "
                             "(0.64 covers a chunk of 16)")
    parser.add_argument("--seed", type=int, default=0, help="draws of --onset-jitter")
    parser.add_argument("--json", type=Path, help="write the per-utterance texts and the summary here")
    args = parser.parse_args(argv)
    sources = [*args.inputs, *([args.cuts] if args.cuts else [])]
    if not sources:
        parser.error("name the audio to decode (inputs or --cuts)")
    if not (args.export_dir / "model.onnx").is_file():
        parser.error(f"no model.onnx in {args.export_dir}: export the checkpoint first, with python scripts/export.py "
                     f"--checkpoint {args.checkpoint} --out-dir {args.export_dir} --format sherpa-onnx")

    from asr.data.features import FeatureConfig
    from asr.data.inputs import read_inputs
    from asr.decode.wer import ErrorCounter
    from asr.evaluation.split import usable_cuts
    from asr.interop.sherpa_check import compare, export_layout, normalize, sherpa_frames_agreement, with_onsets
    from asr.train.checkpoint import load_model

    set_threads(args.threads)
    model, tokenizer, cfg = load_model(args.checkpoint)
    features = FeatureConfig.from_dict(cfg.features)
    try:
        inputs = read_inputs(sources)
        skipped: Counter = Counter(inputs.skipped)
        usable = list(usable_cuts(inputs.cuts, max_utts=args.max_utts, skipped=skipped, references=inputs.references))
        keys = [cut.id for cut, _, _ in usable]
        refs = [normalize(text) for _, text, _ in usable]
        waves = with_onsets([audio.numpy() for _, _, audio in usable], args.onset_jitter, args.seed)
        result = compare(args.export_dir, model, tokenizer, features, keys, waves, args.threads,
                         args.lead_seconds)
        on_sherpa_frames = sherpa_frames_agreement(export_layout(args.export_dir), model, tokenizer, features,
                                                   waves, result, args.lead_seconds)
    except (OSError, RuntimeError, ValueError) as err:  # InputError is a ValueError
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    n = len(keys)
    summary = {"utterances": n, "identical": result.identical, "identical_fraction": result.identical / max(n, 1),
               "wer_ours": None, "wer_sherpa": None, "skipped": dict(skipped),
               "identical_on_sherpa_frames": on_sherpa_frames}
    print(f"{n} utterances{f' (skipped {dict(skipped)})' if skipped else ''}: identical text {result.identical}/{n} "
          f"({100 * summary['identical_fraction']:.2f}%)")
    if inputs.references:
        counters = {"ours": ErrorCounter(), "sherpa": ErrorCounter()}
        for key, ref, ours, sherpa in zip(keys, refs, result.ours, result.sherpa):
            counters["ours"].add(ref, ours, key)
            counters["sherpa"].add(ref, sherpa, key)
        summary.update(wer_ours=counters["ours"].wer, wer_sherpa=counters["sherpa"].wer)
        print(f"WER ours (streaming CTC greedy) {100 * summary['wer_ours']:.2f}% | "
              f"sherpa-onnx (greedy) {100 * summary['wer_sherpa']:.2f}%")
    else:
        print("no references: no WER computed")
    if on_sherpa_frames is not None:
        print(f"ours on sherpa-onnx's frames: identical {on_sherpa_frames}/{n} (the graph; the differences above are "
              "the fbank's)")
    for key, ours, sherpa in result.differing():
        print(f"  differs {key}:\n    ours  : {ours}\n    sherpa: {sherpa}")
    if args.json:
        rows = [{"key": k, "ref": r, "ours": o, "sherpa": s}
                for k, r, o, s in zip(keys, refs, result.ours, result.sherpa)]
        args.json.write_text(json.dumps({"summary": summary, "utterances": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
