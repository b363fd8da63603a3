"""Decode a cut set through the multi-stream recognizer with several encoder backends: WER, RTF, agreement.

The serving question after an export is "what did it cost?": the same utterances
through the eager batched step, the exported ONNX step and its int8 version, each
decoded as a server would (:class:`~asr.serve.multi_stream.MultiStreamRecognizer`, endpointing
off, every utterance one stream of the same batch), with the word errors against
the references, the real-time factor from the process CPU clock (what a core
pays, not the wall time of a shared machine), and how many final texts equal
the eager backend's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.decode.wer import ErrorCounter
from asr.decode.endpoint import EndpointConfig
from asr.serve.multi_stream import MultiStreamRecognizer


@dataclass
class BackendResult:
    """One backend over the cut set: error totals, CPU seconds, audio seconds, the final texts."""

    name: str
    errors: ErrorCounter
    cpu_s: float
    audio_s: float
    texts: list[str]

    @property
    def rtf(self) -> float:
        return self.cpu_s / self.audio_s if self.audio_s > 0 else float("nan")


def decode_streams(recognizer: MultiStreamRecognizer, waves: Sequence[torch.Tensor], piece_s: float = 0.1,
                   batch: int = 16) -> list[str]:
    """Final texts of ``waves`` fed as ``batch`` concurrent streams in ``piece_s`` pieces (server-like)."""
    texts: list[str] = []
    piece = max(1, int(piece_s * SAMPLE_RATE))
    for start in range(0, len(waves), batch):
        group = waves[start : start + batch]
        streams = [recognizer.create_stream() for _ in group]
        longest = max(w.numel() for w in group)
        for offset in range(0, longest, piece):
            for stream, wave in zip(streams, group):
                if offset < wave.numel():
                    stream.accept_waveform(SAMPLE_RATE, wave[offset : offset + piece])
                    if offset + piece >= wave.numel():
                        stream.finish()
            recognizer.decode()
        recognizer.decode()
        texts += [s.result().text for s in streams]
    return texts


def compare_backends(
    backends: dict[str, Callable[[], MultiStreamRecognizer]],
    waves: Sequence[torch.Tensor],
    references: Sequence[str],
    keys: Sequence[str] | None = None,
) -> list[BackendResult]:
    """Run each backend's recognizer (built by its factory) over the same waves; the first is the reference."""
    if len(waves) != len(references):
        raise ValueError(f"{len(waves)} waves but {len(references)} references")
    keys = list(keys) if keys is not None else [str(i) for i in range(len(waves))]
    audio_s = sum(w.numel() for w in waves) / SAMPLE_RATE
    results = []
    for name, build in backends.items():
        recognizer = build()
        cpu0 = time.process_time()
        texts = decode_streams(recognizer, waves)
        cpu_s = time.process_time() - cpu0
        errors = ErrorCounter()
        for key, ref, hyp in zip(keys, references, texts):
            errors.add(ref, hyp, key)
        results.append(BackendResult(name, errors, cpu_s, audio_s, texts))
    return results


def format_table(results: Sequence[BackendResult]) -> str:
    """A Markdown table: backend, WER, CER, RTF (CPU), finals equal to the first backend's."""
    reference = results[0].texts
    lines = ["| backend | WER % | CER % | RTF (process CPU) | finals == " + results[0].name + " |",
             "|---|---:|---:|---:|---:|"]
    for r in results:
        same = sum(a == b for a, b in zip(r.texts, reference))
        lines.append(f"| {r.name} | {100 * r.errors.wer:.2f} | {100 * r.errors.cer:.2f} | {r.rtf:.4f} | "
                     f"{same}/{len(reference)} |")
    return "\n".join(lines)


def recognizer_factory(model, tokenizer, options: DecodeOptions, onnx_path: str | None = None, threads: int = 1,
                       features=None) -> Callable[[], MultiStreamRecognizer]:
    """A factory for a MultiStreamRecognizer on the eager step (``onnx_path`` None) or an exported one (made
    for the same chunking); ``features``: the model's ``FeatureConfig`` (None: LEGACY)."""

    def build() -> MultiStreamRecognizer:
        chunk_encoder = None
        if onnx_path is not None:
            from asr.serve.encoders import OnnxChunkEncoder
            from asr.serve.export import OnnxEncoderStep

            chunk_encoder = OnnxChunkEncoder(OnnxEncoderStep(onnx_path, threads=threads), model.encoder,
                                             options.chunk_size, options.left_chunks)
        return MultiStreamRecognizer(model, tokenizer, options, endpoint=EndpointConfig(enabled=False),
                                     chunk_encoder=chunk_encoder, features=features)

    return build
