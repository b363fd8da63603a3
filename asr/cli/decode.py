"""Decode a split with a trained checkpoint and score WER/CER for one or more modes.

Usage:
    python scripts/decode.py --checkpoint exp/quickstart_rel_xl/checkpoints/last.ckpt
    python scripts/decode.py --checkpoint CKPT --modes ctc_greedy,attention_rescoring --split test
    python scripts/decode.py --checkpoint CKPT --chunk-size 16 --left-chunks -1     # streaming masks
    python scripts/decode.py --checkpoint CKPT --cuts data/synth/cuts_long.jsonl.gz --out-dir results/long
    python scripts/decode.py --checkpoint CKPT --lm data/synth/lm/4gram.arpa.gz   # + the token n-gram LM
    python scripts/decode.py --checkpoint CKPT --lm data/synth/lm/4gram.arpa.gz \
        --word-lm data/synth/lm/words_3gram.arpa.gz                                # + word LM and lexicon
    python scripts/decode.py --checkpoint CKPT --hotwords names.txt --hotword-score 2   # + hotword biasing
    python scripts/decode.py --checkpoint CKPT --cuts podcast.jsonl.gz --chunk-size 16 --left-chunks 4
        # long audio: chunk by chunk through the streaming encoder, memory independent of the length,
        # a fresh stream after each endpoint (--no-endpoint-reset: one stream the whole file)
    python scripts/decode.py --checkpoint CKPT --cuts podcast.jsonl.gz --memory-budget 6G
        # full context: a forward that would not fit 6 GiB takes the blocked attention, or is skipped with advice
    python scripts/decode.py --checkpoint CKPT --cuts podcast.jsonl.gz --segment-at-pauses
        # long audio and passages: cut at pauses >= --min-pause s, each piece decoded alone, each cut scored whole
    python scripts/decode.py --checkpoint CKPT recordings/          # any audio: no corpus, no --data-dir
    python scripts/decode.py --checkpoint CKPT a.wav b.flac c.mp3
    python scripts/decode.py --checkpoint CKPT data/test/data.list  # Wenet data.list (key/wav/txt): scored
    python scripts/decode.py --checkpoint CKPT data/test/wav.scp    # Kaldi wav.scp, scored with the text beside it
    python scripts/decode.py --checkpoint CKPT test_manifest.json   # NeMo manifest (audio_filepath/duration/text)
    python scripts/decode.py --checkpoint CKPT recordings/ --text refs.txt   # references as Kaldi "key text" lines

Inputs (positional; asr/data/inputs.py): audio files or folders (searched recursively for
wav/flac/mp3/ogg/opus), a Wenet data.list, a Kaldi wav.scp or data folder, a NeMo or a Lhotse manifest;
relative audio paths resolve against the folder of the file naming them. The checkpoint carries
the tokenizer, the fbank options and the CMVN, so nothing else is needed. With references the
modes are scored; without, each <mode>.jsonl holds (key, hyp, seconds), <mode>.text the Kaldi-style
"key hypothesis" lines, and the table says that no WER was computed.

Long audio chunk by chunk (--chunk-size C > 0, --left-chunks L >= 0, past 40 s): as a streaming
recognizer reads it (asr.decode.endpointed): an utterance ends at an endpoint, the encoder's caches and
online CMN restart there, and every mode decodes each utterance on its own (attention rescoring
included); the file's text joins theirs. --endpoint-rule says what ends an utterance: blank (the CTC path
emitted a token, then --endpoint-silence s of blank frames; Wenet's rules, the server's detector), pause
(--endpoint-pause s of audio well under the speech level, heard causally: asr.decode.pause_endpoint) or
both. summary.json's "endpoints" (with its "rule") and each record's "endpoint_utterances" say so.
--no-endpoint-reset streams the whole file as one utterance.

Long audio: at full context rel_xl, shaw and rel_bias attend in blocks past 2^23 logits (about a
minute of audio), exact and in memory linear in the length; every setting is checked against --memory-budget
(default: 80% of the memory available at the start) before it runs, so nothing is killed by the kernel.

Modes: ctc_greedy, ctc_prefix_beam, attention, attention_rescoring (comma-separated).
Writes <out-dir>/<mode>.jsonl (one line per utterance: key, ref, hyp, word/char errors,
seconds), <out-dir>/<mode>.text ("key hypothesis" lines) and <out-dir>/summary.json
(the input it decoded, settings, skipped cuts by reason, and per mode
WER, CER, utterances, decode seconds, RTF); prints a table.
Default out-dir: one per input, <run folder>/decode/<folder>_<stem>-<hash>_<full|chunkC_leftL>[_lm][_wordlm]
[_hotwords][_pauses][_cased][_punct] (asr/evaluation/output_dir.py); a folder whose summary.json names another
input is refused.

Scoring: references and hypotheses are normalized alike, case folded and punctuation removed
(apostrophes inside words kept); --case-sensitive and --keep-punctuation score them as written
(a warning then counts the word errors that are case differences only). summary.json records it.
The evaluation itself is asr.evaluation.split, the one the ablation uses too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf


from asr.decode import MODES  # noqa: E402
from asr.data.features import FeatureConfig  # noqa: E402
from asr.data.inputs import hypothesis_lines  # noqa: E402
from asr.evaluation.memory import default_budget, format_bytes, parse_bytes  # noqa: E402
from asr.evaluation.output_dir import OutDirError, check_out_dir, input_folder_name, input_identity  # noqa: E402
from asr.decode.scoring import add_scoring_arguments, case_warning, scoring_from_args  # noqa: E402
from asr.evaluation.split import evaluate_utterances, load_inputs, load_utterances  # noqa: E402
from asr.decode.segment import PauseSegmenter  # noqa: E402
from asr.decode.endpointed import (ENDPOINT_RULES, FILE_ENDPOINT_RULE, FILE_TRAILING_SILENCE_S,  # noqa: E402
                                   file_endpoints)
from asr.decode.pause_endpoint import PauseRule  # noqa: E402
from asr.decode.hotwords import add_hotword_arguments, biasing_from_args  # noqa: E402
from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_search_arguments,  # noqa: E402
                                add_threads_argument, options_from_args, set_threads)
from asr.lm import add_lm_arguments, fusion_from_args  # noqa: E402
from asr.train.checkpoint import CheckpointError, load_model  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_checkpoint_argument(parser)
    parser.add_argument("--modes", default="ctc_greedy,attention_rescoring",
                        help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument("inputs", nargs="*",
                        help="audio files or folders, a Wenet data.list, a Kaldi wav.scp, a NeMo or Lhotse manifest "
                             "(default: --split of the corpus the model was trained on)")
    parser.add_argument("--text", help="references for the inputs: Kaldi-style 'key transcript' lines")
    parser.add_argument("--split", default="test", help="data split: cuts_<split>.jsonl.gz in the data dir")
    parser.add_argument("--cuts", help="explicit CutSet file (overrides --split); relative audio paths resolve "
                                       "against its folder, or --data-dir when given")
    parser.add_argument("--data-dir", help="corpus folder (default: the one the model was trained on)")
    parser.add_argument("--max-utts", type=int, help="decode only the first N usable cuts (default: all)")
    add_chunk_arguments(parser, full_context=True)  # offline: the model as trained; --chunk-size C as it streams
    add_search_arguments(parser)
    add_lm_arguments(parser)  # used by ctc_prefix_beam and attention_rescoring; other modes decode without it
    add_hotword_arguments(parser)  # the same two modes
    parser.add_argument("--batch-seconds", "--max-duration", dest="batch_seconds", type=float, default=100.0,
                        help="seconds of audio per batch")
    parser.add_argument("--out-dir", help="where JSONL files and summary.json go (default: a folder of this "
                                          "input's own under the run folder)")
    add_scoring_arguments(parser)
    add_threads_argument(parser)
    parser.add_argument("--memory-budget", default="auto",
                        help="bytes a forward may add (e.g. 6G); over it a batch is decoded one utterance at a time, "
                             "an utterance with the blocked attention, or skipped with advice (counted); 'auto': 80%% "
                             "of the memory available at the start; 'none': no check")
    parser.add_argument("--segment-at-pauses", action="store_true",
                        help="cut each utterance at its pauses and decode the pieces on their own (long audio, "
                             "passages: asr.decode.segment); it is still scored whole")
    parser.add_argument("--no-endpoint-reset", dest="endpoint_reset", action="store_false",
                        help="long inputs decoded chunk by chunk stream as one utterance, with no endpoints "
                             "(default: a fresh stream after each endpoint)")
    parser.add_argument("--endpoint-rule", choices=ENDPOINT_RULES,
                        help=f"what ends an utterance of a long input: blank (the CTC path's blank run), pause (the "
                             f"audio's pauses, asr.decode.pause_endpoint) or both, whichever comes first "
                             f"(default {FILE_ENDPOINT_RULE})")
    parser.add_argument("--endpoint-silence", type=float, metavar="S",
                        help=f"blank and both rules: seconds of blank frames after a decoded token that end an "
                             f"utterance of a long input (default {FILE_TRAILING_SILENCE_S:g})")
    parser.add_argument("--endpoint-pause", type=float, metavar="S",
                        help=f"pause and both rules: seconds of quiet audio that end an utterance of a long input "
                             f"(default {PauseRule.min_pause_s:g})")
    parser.add_argument("--min-pause", type=float, default=PauseSegmenter.min_pause_s,
                        help="with --segment-at-pauses: shortest pause (s) that separates two pieces")
    parser.add_argument("--max-piece", type=float, default=PauseSegmenter.max_piece_s,
                        help="with --segment-at-pauses: a longer piece (s) is split at its quietest moment")
    args = parser.parse_args(argv)
    args.segmenter = None
    _endpoints_from_args(args, parser)
    if args.segment_at_pauses:
        try:
            args.segmenter = PauseSegmenter(min_pause_s=args.min_pause, max_piece_s=args.max_piece)
        except ValueError as err:
            parser.error(f"--segment-at-pauses: {err}")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        parser.error(f"unknown modes {bad}; choose from {list(MODES)}")
    options_from_args(args, parser)  # refuses bad chunking, beam and weights before the model loads
    if args.max_utts is not None and args.max_utts < 1:
        parser.error(f"--max-utts ({args.max_utts}) must be >= 1")
    if args.batch_seconds <= 0:
        parser.error(f"--batch-seconds ({args.batch_seconds}) must be > 0")
    if args.memory_budget == "auto":
        args.memory_budget = default_budget()
    elif args.memory_budget == "none":
        args.memory_budget = None
    else:
        try:
            args.memory_budget = parse_bytes(args.memory_budget)
        except ValueError as err:
            parser.error(f"--memory-budget: {err}")
    return args


def _endpoints_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """args.endpoints (the blank rule's EndpointConfig) and args.pause_endpoints (a PauseRule), each None when
    off; refuses an endpoint option that has no use with the others."""
    args.endpoints = args.pause_endpoints = None
    given = [flag for flag, value in (("--endpoint-rule", args.endpoint_rule), ("--endpoint-silence",
             args.endpoint_silence), ("--endpoint-pause", args.endpoint_pause)) if value is not None]
    if given and (not args.endpoint_reset or args.segment_at_pauses):
        parser.error(f"{given[0]} sets the endpoints of long inputs streamed whole; it has no use with "
                     f"{'--no-endpoint-reset' if not args.endpoint_reset else '--segment-at-pauses'}")
    # Cut at pauses, every piece is a sentence or two: none streams, so none has endpoints.
    if not args.endpoint_reset or args.segment_at_pauses:
        return
    rule = args.endpoint_rule or FILE_ENDPOINT_RULE
    if args.endpoint_silence is not None and rule == "pause":
        parser.error("--endpoint-silence sets the blank rule; the pause rule (--endpoint-rule pause, the default) "
                     "has none: add --endpoint-rule blank or both")
    if args.endpoint_pause is not None and rule == "blank":
        parser.error("--endpoint-pause sets the pause rule; --endpoint-rule blank has none: use pause or both")
    if rule in ("blank", "both"):
        silence = FILE_TRAILING_SILENCE_S if args.endpoint_silence is None else args.endpoint_silence
        try:
            args.endpoints = file_endpoints(silence)
        except ValueError as err:
            parser.error(f"--endpoint-silence: {err}")
    if rule in ("pause", "both"):
        try:
            args.pause_endpoints = PauseRule(**({} if args.endpoint_pause is None
                                                 else {"min_pause_s": args.endpoint_pause}))
        except ValueError as err:
            parser.error(f"--endpoint-pause: {err}")


def default_out_dir(args: argparse.Namespace, identity: dict) -> Path:
    ckpt = Path(args.checkpoint).resolve()
    run_dir = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent  # an imported .ckpt: beside it
    name = input_folder_name(identity)
    ctx = "full" if args.chunk_size == 0 else f"chunk{args.chunk_size}_left{args.left_chunks}"
    lm = ("_lm" if args.lm else "") + ("_wordlm" if args.word_lm else "") + ("_hotwords" if args.hotwords else "")
    lm += "_pauses" if args.segment_at_pauses else ""
    lm += ("_cased" if args.case_sensitive else "") + ("_punct" if args.keep_punctuation else "")
    return run_dir / "decode" / f"{name}_{ctx}{lm}"


def format_table(summary: dict) -> str:
    ctx = "full context" if summary["chunk_size"] == 0 else (
        f"chunk {summary['chunk_size']}, left {summary['left_chunks']}")
    lm = summary.get("lm") or {}
    if "order" in lm:
        ctx += f"; LM {lm['order']}-gram, weight {lm['weight']}, length bonus {lm['length_bonus']}"
    if "word_lm" in lm:
        words = lm["word_lm"]
        ctx += (f"; word LM {words['order']}-gram over {words['words']} words, weight {words['weight']}, "
                f"word bonus {words['word_bonus']}, OOV penalty {words['oov_penalty']}")
    if summary.get("hotwords"):
        hot = summary["hotwords"]
        ctx += f"; {hot['phrases']} hotwords, score {hot['score']}, rescoring keeps {hot['rescore_weight']}"
    if summary.get("segments"):
        seg = summary["segments"]
        ctx += (f"; cut at pauses >= {seg['min_pause_s']} s into {seg['pieces']} pieces, "
                f"{seg['pause_seconds']:.1f} s of pauses not decoded")
    ends = summary.get("endpoints")
    if ends and ends["inputs"]:
        ctx += (f"; endpoint resets ({ends.get('rule', 'blank')} rule): {ends['inputs']} long inputs read as "
                f"{ends['utterances']} utterances")
    if summary.get("scoring"):
        ctx += f"; scoring: {summary['scoring']['rule']}"
    lines = [f"{summary['cuts']} ({ctx}, {summary['audio_seconds']:.1f} s of audio)",
             f"{'mode':<22}{'WER %':>8}{'CER %':>8}{'utts':>7}{'RTF':>8}  word errors: sub / del / ins"]
    for mode, r in summary["modes"].items():
        rates = "".join(f"{'-':>8}" if r[k] is None else f"{100 * r[k]:>8.2f}" for k in ("wer", "cer"))
        ops = (f"  {r['word_errors']} of {r['ref_words']}: {r['substitutions']} / {r['deletions']} / "
               f"{r['insertions']}" if r.get("substitutions") is not None else "")
        lines.append(f"{mode:<22}{rates}{r['utterances']:>7}{r['rtf']:>8.3f}{ops}")
    if not summary.get("references", True):
        lines.append("no references: hypotheses written (<mode>.jsonl, <mode>.text), no WER computed")
    memory = summary.get("memory")
    if memory and memory["blocked_attention_utterances"]:
        lines.append(f"blocked attention (over the {format_bytes(memory['budget_bytes'])} budget otherwise): "
                     f"{memory['blocked_attention_utterances']} utterances")
    skipped = summary["skipped_utterances"]
    lines.append(f"skipped cuts: {', '.join(f'{k} {n}' for k, n in skipped.items()) if skipped else 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    set_threads(args.threads)
    try:
        model, tokenizer, cfg = load_model(args.checkpoint)
    except CheckpointError as err:
        print(f"decode: {err}", file=sys.stderr)
        sys.exit(2)
    features = FeatureConfig.from_dict(cfg.features)
    scoring = scoring_from_args(args)
    sources = args.inputs or ([args.cuts] if args.cuts and not args.data_dir else [])
    if sources:
        cuts, identity = ", ".join(sources), input_identity(sources, args.text)
    else:
        data_dir = args.data_dir or OmegaConf.select(cfg, "data.data_dir")
        if data_dir is None:
            sys.exit(f"decode: {args.checkpoint} stores no data.data_dir: name what to decode (audio files, a "
                     "folder, a data.list, a wav.scp, a NeMo or Lhotse manifest) or pass --data-dir")
        cuts = Path(args.cuts) if args.cuts else Path(data_dir) / f"cuts_{args.split}.jsonl.gz"
        identity = input_identity(cuts=cuts)
    out_dir = Path(args.out_dir) if args.out_dir else default_out_dir(args, identity)
    try:  # before decoding: a clash found after an hour of it would waste the hour
        note = check_out_dir(out_dir, identity)
    except OutDirError as err:
        sys.exit(f"decode: {err}")
    try:
        if sources:
            eval_set = load_inputs(sources, args.text, args.max_utts, features)
        else:
            eval_set = load_utterances(cuts, data_dir, args.max_utts, features)
        fusion = fusion_from_args(args, tokenizer)
        biasing = biasing_from_args(args, tokenizer)
    except (FileNotFoundError, ValueError) as err:  # InputError is a ValueError
        sys.exit(f"decode: {err}")
    if not eval_set.utterances:
        sys.exit(f"decode: no utterances to decode in {cuts} (skipped: {dict(eval_set.skipped) or 'none'})")
    result = evaluate_utterances(
        model, tokenizer, eval_set,
        args.modes,
        chunk_size=args.chunk_size, left_chunks=args.left_chunks, beam=args.beam, ctc_weight=args.ctc_weight,
        reverse_weight=args.reverse_weight, batch_seconds=args.batch_seconds, progress=True, fusion=fusion,
        memory_budget=args.memory_budget,
        biasing=biasing, hotword_rescore_weight=args.hotword_rescore_weight, segmenter=args.segmenter,
        scoring=scoring, endpoints=args.endpoints, pause_endpoints=args.pause_endpoints,
    )
    if note:
        print(note, file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    for mode, mode_result in result.modes.items():
        lines = (json.dumps(r, ensure_ascii=False) + "\n" for r in mode_result.records)
        (out_dir / f"{mode}.jsonl").write_text("".join(lines), encoding="utf-8")
        (out_dir / f"{mode}.text").write_text(hypothesis_lines(mode_result.records), encoding="utf-8")
    summary = {"ckpt": str(args.checkpoint), "input": identity, "cuts": str(cuts), "max_utts": args.max_utts,
               "references": eval_set.references, **result.summary()}
    if args.lm:
        summary["lm"] = {"path": str(args.lm), **summary["lm"]}
    if args.endpoints is None and args.pause_endpoints is None:
        summary["endpoints"] = None  # off: a long input decoded chunk by chunk is one stream
    if args.word_lm:
        summary["lm"]["word_lm"] = {"path": str(args.word_lm), **summary["lm"]["word_lm"]}
    if biasing is not None:
        summary["hotwords"].update(path=str(args.hotwords), score=args.hotword_score, **biasing.settings())
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(summary))
    for line in case_warning(summary["modes"], scoring):
        print(line, file=sys.stderr)
    print(f"results: {out_dir}")
    return summary


if __name__ == "__main__":
    main()
