"""Decode audio with sherpa-onnx itself and with our streaming recognizer, and compare the texts.

sherpa-onnx ends its process (``_Exit``) on a model file it does not accept, so it runs in a
child process (``python -m asr.interop.sherpa_check``): a bad export is a clear error here,
never a dead test run or script.

Both sides get the same audio: the utterance then ``tail_seconds`` of zeros. sherpa-onnx
decodes a chunk only once more than its window of frames is there and drops the last partial
chunk, so without the tail it would never decode the end of an utterance (its own examples
and servers add one, 0.66-0.8 s); our recognizer decodes the tail as well (blanks).

Either export format runs (``asr.interop.sherpa_onnx``'s NeMo CTC, ``asr.interop.sherpa_wenet``'s
Wenet CTC, told apart by its metadata). What is compared is the greedy path: sherpa-onnx's result
tokens, mapped back to ids through tokens.txt, against ours; both become text through our
tokenizer (sherpa-onnx's own text spells ``<unk>`` out, and loses the ``<`` of a leading one).
Identical ids give identical text.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asr.data.features import SAMPLE_RATE
from asr.data.tokenizer import SPACE
from asr.extras import require
from asr.interop.sherpa_onnx import tail_seconds

UNK_SYMBOL = "<unk>"  # sherpa-onnx prints every symbol; our tokenizers drop <unk> from text


def with_tail(layout, waves: list[np.ndarray], lead_s: float = 0.0) -> list[np.ndarray]:
    """Each wave (float32) after ``lead_s`` seconds of zeros and before the zeros sherpa-onnx needs to
    decode its end (:func:`tail_seconds`)."""
    if lead_s < 0:
        raise ValueError(f"lead_s ({lead_s}) must be >= 0.")
    lead = np.zeros(int(lead_s * SAMPLE_RATE), np.float32)
    tail = np.zeros(int(tail_seconds(layout) * SAMPLE_RATE), np.float32)
    return [np.concatenate([lead, np.asarray(w, np.float32), tail]) for w in waves]


def with_onsets(waves: list[np.ndarray], jitter_s: float, seed: int = 0) -> list[np.ndarray]:
    """Each wave after its own run of zeros, uniform in [0, ``jitter_s``) seconds (seeded): speech that starts
    anywhere in a chunk, as a microphone's does, where a trimmed file's starts with the first chunk."""
    if jitter_s < 0:
        raise ValueError(f"jitter_s ({jitter_s}) must be >= 0.")
    leads = np.random.default_rng(seed).uniform(0.0, jitter_s, len(waves))  # all 0 when jitter_s is 0
    return [np.concatenate([np.zeros(int(lead * SAMPLE_RATE), np.float32), np.asarray(w, np.float32)])
            for lead, w in zip(leads, waves)]


def normalize(text: str) -> str:
    """Lower case, <unk> dropped (our tokenizers drop it from text), single spaces."""
    return " ".join(text.replace(UNK_SYMBOL, "").lower().split())


def export_layout(export_dir: str | Path):
    """The layout of an export of either format (``SherpaLayout`` or ``WenetLayout``), from its metadata."""
    from asr.interop.sherpa_onnx import SherpaRunner
    from asr.interop.sherpa_wenet import WenetRunner

    path = Path(export_dir) / "model.onnx"
    try:
        return WenetRunner(path).layout
    except ValueError:
        return SherpaRunner(path).layout


def sherpa_tokens(export_dir: str | Path, waves: list[np.ndarray], threads: int = 1,
                  timeout_s: float = 600.0) -> list[list[int]]:
    """sherpa-onnx's greedy token ids of each wave (float32 in [-1, 1], tail included), in a child process."""
    from asr.interop.sherpa_wenet import WenetLayout

    with tempfile.TemporaryDirectory(prefix="asr_sherpa_") as tmp:
        audio = Path(tmp) / "waves.npz"
        np.savez(audio, *[np.asarray(w, np.float32) for w in waves])
        command = [sys.executable, "-m", "asr.interop.sherpa_check", str(export_dir), str(audio), "--threads",
                   str(threads)]
        try:
            layout = export_layout(export_dir)
        except Exception:  # noqa: BLE001  (not an export ORT reads: sherpa-onnx gives the error)
            layout = None
        if isinstance(layout, WenetLayout):
            command += ["--wenet", str(layout.chunk_size), str(layout.left_chunks), str(layout.input_dim)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"sherpa-onnx failed on {export_dir} (exit {proc.returncode}): {tail}")
    symbols = json.loads(proc.stdout.strip().splitlines()[-1])
    if len(symbols) != len(waves):
        raise RuntimeError(f"sherpa-onnx returned {len(symbols)} results for {len(waves)} waves.")
    table = read_tokens(Path(export_dir) / "tokens.txt")
    return [symbols_to_ids(row, table) for row in symbols]


def read_tokens(path: Path) -> dict[str, int]:
    """symbol -> id of a tokens.txt."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return {symbol: int(i) for symbol, i in (line.split() for line in lines if line.strip())}


def symbols_to_ids(symbols: list[str], table: dict[str, int]) -> list[int]:
    """sherpa-onnx's result tokens -> ids (it shows a symbol's leading "▁" as a space)."""
    return [table[sym.replace(" ", SPACE, 1) if sym.startswith(" ") else sym] for sym in symbols]


def our_greedy_tokens(model, tokenizer, features, chunk_size: int, left_chunks: int,
                      waves: list[np.ndarray]) -> list[list[int]]:
    """Our streaming recognizer's CTC greedy ids of each wave: its frontend and ``stream_step``,
    then the greedy path through the streamed CTC log-probs."""
    from asr.decode import ctc_greedy
    from asr.decode.options import DecodeOptions
    from asr.streaming.recognizer import StreamingRecognizer

    recognizer = StreamingRecognizer(model, tokenizer,
                                     DecodeOptions(chunk_size=chunk_size, left_chunks=left_chunks, beam=1),
                                     features=features)
    texts = []
    for wave in waves:
        recognizer.reset()
        recognizer.accept_waveform(torch.as_tensor(wave))
        recognizer.finalize()
        enc = recognizer.encoder_output()  # (1, T', D)
        with torch.no_grad():
            texts.append(list(ctc_greedy(model.ctc_log_probs(enc), torch.tensor([enc.size(1)]))[0]))
    return texts


def our_greedy_texts(model, tokenizer, features, chunk_size: int, left_chunks: int,
                     waves: list[np.ndarray]) -> list[str]:
    """:func:`our_greedy_tokens` as text."""
    return [tokenizer.decode(ids) for ids in our_greedy_tokens(model, tokenizer, features, chunk_size, left_chunks,
                                                                waves)]


@dataclass
class Comparison:
    """Per utterance: both greedy paths (ids) and texts (normalized); identical = the same ids."""

    keys: list[str]
    our_ids: list[list[int]]
    sherpa_ids: list[list[int]]
    ours: list[str]
    sherpa: list[str]

    @property
    def identical(self) -> int:
        return sum(a == b for a, b in zip(self.our_ids, self.sherpa_ids))

    def differing(self) -> list[tuple[str, str, str]]:
        return [(k, a, b) for k, a, b, x, y in zip(self.keys, self.ours, self.sherpa, self.our_ids, self.sherpa_ids)
                if x != y]


def compare(export_dir: str | Path, model, tokenizer, features, keys: list[str], waves: list[np.ndarray],
            threads: int = 1, lead_s: float = 0.0) -> Comparison:
    """Both decoders on the same audio: each wave after ``lead_s`` of zeros (what sherpa-onnx's own command line
    puts first: ``--left-padding``, 0.5 s unless told) and before the tail sherpa-onnx needs."""
    layout = export_layout(export_dir)
    padded = with_tail(layout, waves, lead_s)
    ours = our_greedy_tokens(model, tokenizer, features, layout.chunk_size, layout.left_chunks, padded)
    sherpa = sherpa_tokens(export_dir, padded, threads)
    texts = [[normalize(tokenizer.decode(ids)) for ids in side] for side in (ours, sherpa)]
    return Comparison(list(keys), ours, sherpa, *texts)


def sherpa_frames_agreement(layout, model, tokenizer, features, waves: list[np.ndarray],
                            result: Comparison, lead_s: float = 0.0) -> int | None:
    """For a Wenet CTC export whose frontend differs from the model's frames: how many utterances our
    streaming recognizer, fed sherpa-onnx's own frames, decodes to sherpa-onnx's very ids (all of them
    when the graph is exact). None for an export whose frames are the model's."""
    from dataclasses import replace

    from asr.interop.sherpa_wenet import SHERPA_WENET, WenetLayout, feature_gap

    if not isinstance(layout, WenetLayout) or not feature_gap(features):
        return None
    padded = with_tail(layout, waves, lead_s)  # the audio :func:`compare` gave both sides
    theirs = replace(SHERPA_WENET, num_mel_bins=features.num_mel_bins)
    ours = our_greedy_tokens(model, tokenizer, theirs, layout.chunk_size, layout.left_chunks, padded)
    return sum(a == b for a, b in zip(ours, result.sherpa_ids))


def _decode_in_this_process(export_dir: str, audio: str, threads: int, wenet: list[int] | None) -> list[list[str]]:
    """``wenet``: (chunk_size, left_chunks, feature bins) of a Wenet CTC export (sherpa-onnx takes them as
    options); None: a NeMo CTC export."""
    sherpa_onnx = require("sherpa_onnx", "sherpa", "decoding with sherpa-onnx")
    folder = Path(export_dir)
    files = {"tokens": str(folder / "tokens.txt"), "model": str(folder / "model.onnx"), "num_threads": threads,
             "sample_rate": SAMPLE_RATE, "decoding_method": "greedy_search"}
    if wenet:
        recognizer = sherpa_onnx.OnlineRecognizer.from_wenet_ctc(
            **files, chunk_size=wenet[0], num_left_chunks=wenet[1], feature_dim=wenet[2])
    else:
        recognizer = sherpa_onnx.OnlineRecognizer.from_nemo_ctc(**files)
    texts = []
    with np.load(audio) as waves:
        for name in sorted(waves.files, key=lambda n: int(n.split("_")[1])):
            stream = recognizer.create_stream()
            stream.accept_waveform(SAMPLE_RATE, waves[name])
            stream.input_finished()
            while recognizer.is_ready(stream):
                recognizer.decode_stream(stream)
            texts.append(list(recognizer.get_result_all(stream).tokens))
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Decode waves (.npz) with sherpa-onnx; print the result tokens "
                                                 "(symbols) of each as JSON.")
    parser.add_argument("export_dir")
    parser.add_argument("audio")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--wenet", type=int, nargs=3, metavar=("CHUNK", "LEFT", "BINS"),
                        help="a Wenet CTC export: its chunk size, left chunks and feature bins")
    args = parser.parse_args(argv)
    print(json.dumps(_decode_in_this_process(args.export_dir, args.audio, args.threads, args.wenet)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
