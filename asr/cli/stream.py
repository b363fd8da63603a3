"""Streaming recognition of audio files with a trained checkpoint.

Each file is fed to the model in real-time-sized pieces (``--chunk-ms`` of audio
at a time), as a microphone would deliver it. Partial hypotheses are printed
whenever they change, then the final text (CTC n-best rescored by the attention
decoder), the real-time factor and the compute latency per piece.

Usage:
    python scripts/stream.py --checkpoint exp/run/checkpoints/last.ckpt a.wav b.flac
    python scripts/stream.py --checkpoint last.ckpt --vad silero a.wav   # only speech reaches the encoder
    python scripts/stream.py --checkpoint last.ckpt --chunk-ms 320 --chunk-size 8 --left-chunks 4 a.wav
    python scripts/stream.py --checkpoint last.ckpt --lm data/synth/lm/4gram.arpa.gz a.wav   # + token LM
    python scripts/stream.py --checkpoint last.ckpt --hotwords names.txt --hotword-score 2 a.wav   # + hotwords
    python scripts/stream.py --checkpoint last.ckpt recordings/ data.list wav.scp   # folders and manifests too
    python scripts/stream.py --checkpoint last.ckpt recordings/ --text refs.txt --out-dir streamed/   # + WER

Inputs: audio files, folders (searched recursively), a Wenet data.list, a Kaldi wav.scp, a NeMo or
Lhotse manifest (asr/data/inputs.py). Where they carry references (or --text gives them as Kaldi
"key text" lines) the final texts are scored (WER/CER); --out-dir writes stream.jsonl and a
Kaldi-style stream.text of the final texts. Scoring normalizes references and final texts alike
(case folded, punctuation removed; --case-sensitive, --keep-punctuation: as written).
An utterance shorter than one fbank frame is skipped and counted (audio_too_short), as decode.py
counts it: it has nothing to recognize.

Audio may have any sample rate and channel count (resampled to the model's 16 kHz, downmixed).
A missing or unreadable file prints a one-line error on stderr and the other files
are still processed; the exit code is 1 if any file failed (2 if the checkpoint
cannot be loaded).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

# Small per-chunk kernels: OpenMP's default spin-waiting makes every barrier cost a
# time slice on a busy CPU (see scripts/bench_streaming.py). Must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from asr.data.features import SAMPLE_RATE  # noqa: E402
from asr.decode.hotwords import add_hotword_arguments, biasing_from_args  # noqa: E402
from asr.decode.scoring import Scoring, add_scoring_arguments, case_warning, scoring_from_args  # noqa: E402
from asr.decode.options import (add_checkpoint_argument, add_chunk_arguments, add_search_arguments,  # noqa: E402
                                options_from_args)
from asr.lm import add_lm_arguments, fusion_from_args  # noqa: E402
from asr.streaming.vad import add_vad_arguments, vad_from_args  # noqa: E402


def load_checkpoint(path: str):
    """(model, tokenizer, cfg) from a training checkpoint (kept apart so tests can swap it)."""
    from asr.train.checkpoint import load_model

    return load_model(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("audio", nargs="+", help="audio files (wav/flac/...; any rate, mono or stereo), folders, "
                                                 "a data.list, a wav.scp, a NeMo or Lhotse manifest")
    parser.add_argument("--text", help="references: Kaldi-style 'key transcript' lines (key: a file's name "
                                       "without its suffix)")
    parser.add_argument("--out-dir", type=Path, help="write stream.jsonl and stream.text (key final-text) here")
    add_checkpoint_argument(parser)
    parser.add_argument("--chunk-ms", type=float, default=640.0, help="audio fed per call, in ms (default 640)")
    add_chunk_arguments(parser)
    add_search_arguments(parser)
    parser.add_argument("--device", default="cpu", help="torch device for the model (default cpu)")
    add_lm_arguments(parser)
    add_hotword_arguments(parser)
    add_vad_arguments(parser)
    add_scoring_arguments(parser)
    args = parser.parse_args(argv)
    if args.chunk_ms <= 0:
        parser.error(f"--chunk-ms ({args.chunk_ms}) must be > 0")
    if args.chunk_size <= 0:
        parser.error(f"--chunk-size ({args.chunk_size}) must be > 0 for streaming")
    args.options = options_from_args(args, parser)
    return args


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def stream_file(recognizer, wave: torch.Tensor, piece_samples: int, out=None) -> dict:
    """Feed one utterance piece by piece; print partials, final text and timing to out (default stdout).

    Returns:
        {text, duration_s, rtf, pieces, latency_ms_p50, latency_ms_p95, latency_ms_max, final_pass_ms}
    """
    out = out or sys.stdout
    recognizer.reset()
    duration = wave.numel() / SAMPLE_RATE
    last = ""
    wall_start = time.perf_counter()
    for start in range(0, wave.numel(), piece_samples):
        partial = recognizer.accept_waveform(wave[start : start + piece_samples])
        if partial != last:
            fed = min(start + piece_samples, wave.numel()) / SAMPLE_RATE
            print(f"  partial {fed:7.2f}s: {partial}", file=out, flush=True)
            last = partial
    text = recognizer.finalize()
    wall = time.perf_counter() - wall_start
    pieces = [t.seconds * 1000 for t in recognizer.timings[:-1]]  # finalize is reported apart
    stats = {
        "text": text,
        "duration_s": duration,
        "rtf": wall / duration if duration > 0 else float("nan"),
        "pieces": len(pieces),
        "latency_ms_p50": percentile(pieces, 50) if pieces else 0.0,
        "latency_ms_p95": percentile(pieces, 95) if pieces else 0.0,
        "latency_ms_max": max(pieces) if pieces else 0.0,
        "final_pass_ms": recognizer.timings[-1].seconds * 1000,
    }
    print(f"  final: {text}", file=out)
    print(
        f"  RTF {stats['rtf']:.3f} | latency per {len(pieces)} pieces: p50 {stats['latency_ms_p50']:.1f} ms, "
        f"p95 {stats['latency_ms_p95']:.1f} ms, max {stats['latency_ms_max']:.1f} ms | "
        f"final pass {stats['final_pass_ms']:.1f} ms",
        file=out,
        flush=True,
    )
    return stats


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from asr.data.audio import AudioError
    from asr.data.features import FbankExtractor, FeatureConfig
    from asr.data.inputs import InputError, stream_items
    from asr.streaming.recognizer import StreamingRecognizer
    from asr.train.checkpoint import CheckpointError

    try:
        model, tokenizer, cfg = load_checkpoint(args.checkpoint)
    except CheckpointError as err:  # names the checkpoint and what is wrong with it
        print(f"error: {err}", file=sys.stderr)
        return 2
    model = model.to(args.device).eval()
    features = FeatureConfig.from_dict(cfg.features)
    min_samples = FbankExtractor(features).min_samples
    try:
        recognizer = StreamingRecognizer(
            model, tokenizer, args.options, features=features,
            fusion=fusion_from_args(args, tokenizer), hotwords=biasing_from_args(args, tokenizer),
            vad=vad_from_args(args),
        )
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    piece_samples = max(1, round(args.chunk_ms * SAMPLE_RATE / 1000))
    try:
        found = stream_items(args.audio, args.text)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in found.errors:
        print(f"error: {line}", file=sys.stderr, flush=True)
    failed, records = len(found.errors), []
    for item in found.items:
        try:
            wave = item.load()
        except AudioError as err:
            where = "" if isinstance(item.source, Path) else f"{item.key}: "  # the error names a file already
            print(f"error: {where}{err}", file=sys.stderr, flush=True)
            failed += 1
            continue
        if wave.numel() < min_samples:
            print(f"skipped: {item.name}: {wave.numel()} samples, shorter than one fbank frame ({min_samples}): "
                  "nothing to recognize (audio_too_short)", file=sys.stderr, flush=True)
            found.skipped["audio_too_short"] += 1
            continue
        print(f"== {item.name} ({wave.numel() / SAMPLE_RATE:.2f} s)", flush=True)
        stats = stream_file(recognizer, wave, piece_samples)
        records.append({"key": item.key, "ref": item.text, "hyp": stats["text"], "seconds": stats["duration_s"]})
    report_streamed(records, found.skipped, args.out_dir, scoring_from_args(args))
    if failed:
        print(f"{failed} of {len(found.items) + len(found.errors)} inputs failed", file=sys.stderr)
    return 1 if failed else 0


def report_streamed(records: list[dict], skipped, out_dir: Path | None, scoring: Scoring = Scoring()) -> None:
    """Score the final texts that have references (WER/CER, normalized by ``scoring``), say what was
    skipped, write them to out_dir."""
    from asr.data.inputs import hypothesis_lines
    from asr.decode.wer import ErrorCounter

    if skipped:
        print(f"skipped entries: {', '.join(f'{k} {n}' for k, n in sorted(skipped.items()))}")
    scored = ErrorCounter(scoring)
    for r in records:
        if r["ref"] is not None:
            scored.add(r["ref"], r["hyp"], key=r["key"])
    if scored.records:
        print(f"WER {100 * scored.wer:.2f}% CER {100 * scored.cer:.2f}% over the {len(scored.records)} of "
              f"{len(records)} utterances with references ({scoring.describe()})")
        for line in case_warning({"final": scored.summary()}, scoring):
            print(line, file=sys.stderr)
    elif records:
        print("no references: no WER computed")
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "stream.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                                              encoding="utf-8")
        (out_dir / "stream.text").write_text(hypothesis_lines(records), encoding="utf-8")
        print(f"results: {out_dir}")


if __name__ == "__main__":
    sys.exit(main())
