"""Cut long audio at its pauses, so each piece is decoded like the single sentences a model knows.

Why: the models here are trained on single sentences. Across the pauses of a passage they merge
words: the default model reads the 5 s dev probes (two sentences) at 43% WER greedy where the
sentences alone read at 27%, and a 5-minute file at 55%. Production systems read long audio the
same way: a voice activity detector cuts it, every piece is decoded on its own (sherpa-onnx's
VAD + offline recognizer, Whisper's and NeMo's segmented long-form modes). Cutting also bounds
the full-context forward by the longest piece instead of the whole file.

The detector reads the log-mel fbank the model reads anyway, so it needs neither the audio nor
a model of its own: a frame's level is its total mel energy in dB; a pause is a run of at least
``min_pause_s`` of frames below a threshold set between the file's quiet and loud levels (its
5th and 95th percentiles); a file without that much contrast is one piece. Speech runs are
padded by ``pad_s`` into the pauses, and a piece longer than ``max_piece_s`` is split again at
its quietest 0.2 s. Frames in pauses are not decoded; :class:`Pieces` says how many there were.

The default minimum pause, 0.15 s, was chosen on the dev probes (passages of 5-160 s by dev voices,
pauses of 0.15-0.5 s between sentences) with the default quickstart model, greedy, full context; it
costs single sentences a little, the few cut at a pause inside them (data/results/long_audio.md).
Speech with longer pauses inside its sentences wants a longer ``min_pause_s`` (decode.py --min-pause).

Axis legend: T feature frames (10 ms), F mel bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from asr.data.features import DB_PER_NEPER, FRAME_SHIFT_S


@dataclass(frozen=True)
class PauseSegmenter:
    """Where to cut: pauses of at least ``min_pause_s``; see the module docstring.

    min_pause_s: shortest quiet run that separates two pieces (shorter ones, stop closures and
        breaths inside a sentence, stay inside a piece).
    pad_s: speech kept on either side of a piece (never past the middle of the pause).
    max_piece_s: a longer piece is split at its quietest 0.2 s (the encoder's full context and
        memory grow with the piece).
    min_speech_s: a louder run shorter than this (a click) is not a piece.
    threshold: where the pause threshold sits between the quiet and the loud level (0: quiet, 1: loud).
    min_contrast_db: a file whose loud level is less than this above its quiet one has no pauses.
    """

    min_pause_s: float = 0.15
    pad_s: float = 0.1
    max_piece_s: float = 20.0
    min_speech_s: float = 0.1
    threshold: float = 0.3
    min_contrast_db: float = 15.0

    def __post_init__(self) -> None:
        for name in ("min_pause_s", "pad_s", "min_speech_s"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"{name} ({getattr(self, name)}) must be >= 0")
        if not self.max_piece_s >= 1.0:
            raise ValueError(f"max_piece_s ({self.max_piece_s}) must be >= 1 s")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold ({self.threshold}) must lie in (0, 1)")
        if not self.min_contrast_db > 0.0:
            raise ValueError(f"min_contrast_db ({self.min_contrast_db}) must be > 0")

    def find(self, feats: torch.Tensor) -> list[tuple[int, int]]:
        """Pieces of one utterance: (start, end) frame ranges of ``feats`` (T, F) log-mel, in order,
        disjoint; empty when every frame is quiet (nothing to decode)."""
        if feats.dim() != 2:
            raise ValueError(f"feats must be one utterance (T, F), got {tuple(feats.shape)}")
        total = feats.size(0)
        if total == 0:
            return []
        level = torch.logsumexp(feats.double(), dim=1) * DB_PER_NEPER  # (T,) dB
        quiet, loud = _percentiles(level, 0.05, 0.95)
        if loud - quiet < self.min_contrast_db:
            runs = [(0, total)]
        else:
            speech = level > quiet + self.threshold * (loud - quiet)  # (T,) bool
            runs = _speech_runs(speech, _frames(self.min_pause_s), _frames(self.min_speech_s))
        pieces = _padded(runs, _frames(self.pad_s), total)
        longest = max(_frames(self.max_piece_s), 1)
        return [part for piece in pieces for part in _split_long(piece, level, longest)]


def _percentiles(values: torch.Tensor, *shares: float) -> list[float]:
    """The values at these shares of the sorted (T,) ``values`` (nearest rank; torch.quantile refuses
    inputs over 2^24 elements, 46 hours of frames)."""
    ordered = values.sort().values
    last = ordered.numel() - 1
    return [float(ordered[round(share * last)]) for share in shares]


def _frames(seconds: float) -> int:
    return int(round(seconds / FRAME_SHIFT_S))


def _runs(mask: list[bool]) -> list[tuple[bool, int, int]]:
    """(value, start, end) of the maximal constant runs of ``mask``."""
    runs, start = [], 0
    for t in range(1, len(mask) + 1):
        if t == len(mask) or mask[t] != mask[start]:
            runs.append((mask[start], start, t))
            start = t
    return runs


def _speech_runs(speech: torch.Tensor, min_pause: int, min_speech: int) -> list[tuple[int, int]]:
    """Speech (start, end) runs after quiet runs shorter than ``min_pause`` between speech are
    filled and speech runs shorter than ``min_speech`` dropped."""
    mask = speech.tolist()
    runs = _runs(mask)
    for k, (loud, start, end) in enumerate(runs):
        inner = 0 < k < len(runs) - 1
        if not loud and inner and end - start < min_pause:
            mask[start:end] = [True] * (end - start)
    return [(s, e) for loud, s, e in _runs(mask) if loud and e - s >= max(min_speech, 1)]


def _padded(runs: list[tuple[int, int]], pad: int, total: int) -> list[tuple[int, int]]:
    """Each run widened by ``pad`` frames a side, within [0, total) and never past the middle
    of the gap to its neighbour."""
    out = []
    for k, (start, end) in enumerate(runs):
        low = 0 if k == 0 else (runs[k - 1][1] + start + 1) // 2
        high = total if k == len(runs) - 1 else (end + runs[k + 1][0]) // 2
        out.append((max(start - pad, low), min(end + pad, high)))
    return out


def _split_long(piece: tuple[int, int], level: torch.Tensor, longest: int) -> list[tuple[int, int]]:
    """``piece`` cut at its quietest 0.2 s (within its middle half, so both parts shrink) until
    no part is longer than ``longest`` frames."""
    start, end = piece
    if end - start <= longest:
        return [piece]
    width = min(20, max((end - start) // 4, 1))
    smooth = torch.nn.functional.avg_pool1d(level[None, None, start:end], width, stride=1)[0, 0]  # (n - width + 1,)
    low, high = (end - start) // 4, 3 * (end - start) // 4
    window = smooth[low : max(high - width + 1, low + 1)]
    cut = start + low + int(torch.argmin(window)) + width // 2
    return _split_long((start, cut), level, longest) + _split_long((cut, end), level, longest)


@dataclass(frozen=True)
class Pieces:
    """How an utterance was cut: its ``ranges`` (frame ranges decoded) out of ``frames``."""

    ranges: tuple[tuple[int, int], ...]
    frames: int

    @property
    def pause_frames(self) -> int:
        """Frames in no piece (read as pauses, not decoded)."""
        return self.frames - sum(end - start for start, end in self.ranges)
