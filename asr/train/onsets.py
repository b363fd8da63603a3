"""Speech onsets moved to a chunk's right edge in training.

A streaming encoder computes each chunk without seeing the next one, and later chunks read its
frames from the cache as they were. When speech starts in the last few encoder frames of a chunk,
those frames encode the first sound without what follows it, and the first word is read wrong far
more often ("thomas" read "turnomas"): at C16 an onset 2-5 frames before the chunk's end costs the
most. A live stream's onset lands there about one time in four, and a runtime's fixed left padding
puts every trimmed file's onset at the same place (sherpa-onnx's 0.5 s: 5 frames before the end).

Dynamic chunk training meets this case only when a batch's chunk grid happens to place an
onset at an edge. :func:`place_onsets_at_chunk_edges` makes it happen on purpose: for a chunked
batch it prepends background frames to chosen utterances so that the first encoder frame that
sees their speech is one of the last frames of its chunk. Only the stream's start moves; the
speech, its transcript and the chunk grid stay as they were.

Axis letters: B batch, T feature frames, F mel bins.
"""

from __future__ import annotations

import math

import torch

# A frame is speech when its energy is within this many dB of the utterance's loudest frame: room
# tone and hum sit 35 dB or more under synthesized speech, a fricative onset within 30.
SPEECH_BELOW_PEAK_DB = 30.0
_NEPER_PER_DB = math.log(10.0) / 10.0


def speech_onsets(feats: torch.Tensor, feat_lens: torch.Tensor, below_peak_db: float = SPEECH_BELOW_PEAK_DB) -> torch.Tensor:
    """(B,) int64: each utterance's first feature frame within ``below_peak_db`` of its loudest.

    feats (B, T, F) natural-log mel energies (Kaldi fbank, before any normalization); feat_lens (B,).
    A frame's energy is the log of its summed mel energies; padding frames never count, nor do frames
    with every bin equal: SpecAugment's time masks fill frames with the utterance's mean, which can
    sit within the margin of the peak, and no recorded frame is flat across all its bins.
    """
    energy = torch.logsumexp(feats.float(), dim=-1)  # (B, T)
    flat = (feats == feats[..., :1]).all(dim=-1)  # (B, T)
    valid = (torch.arange(feats.shape[1], device=feats.device)[None, :] < feat_lens[:, None]) & ~flat
    energy = energy.masked_fill(~valid, -math.inf)
    peak = energy.max(dim=1, keepdim=True).values  # (B, 1)
    speech = energy >= peak - below_peak_db * _NEPER_PER_DB
    # the first True along T (argmax returns the first maximum); an empty utterance reads 0
    return speech.to(torch.int8).argmax(dim=1)


def first_seeing_frame(feature_frame: torch.Tensor, rate: int, window: int) -> torch.Tensor:
    """The first encoder frame whose input window ``[rate * t, rate * t + window)`` reaches
    ``feature_frame`` (int tensor, any shape): ``ceil((frame - window + 1) / rate)``, at least 0."""
    reach = feature_frame - (window - 1)
    return torch.div(reach + rate - 1, rate, rounding_mode="floor").clamp(min=0)


def edge_shifts(
    onsets: torch.Tensor,
    chosen: torch.Tensor,
    edge_offsets: torch.Tensor,
    chunk_size: int,
    phase: int,
    rate: int,
    window: int,
) -> torch.Tensor:
    """(B,) int64 feature frames to prepend so each chosen utterance's onset lands at a chunk edge.

    onsets (B,) feature frames; chosen (B,) bool; edge_offsets (B,) in [1, chunk_size]: the target
    is the encoder frame ``chunk_size - edge_offset`` of its chunk (1: the chunk's last frame).
    The chunk of encoder frame t is ``(t + phase) // chunk_size`` (``asr.model.masks``). Utterances
    not chosen, or whose onset is within the first ``window`` frames (no background before the
    speech to repeat), get 0. Every shift is below ``rate * chunk_size``.
    """
    shifts = torch.arange(rate * chunk_size, device=onsets.device)  # (K,) candidate shifts
    frames = first_seeing_frame(onsets[:, None] + shifts[None, :], rate, window)  # (B, K)
    target = (chunk_size - edge_offsets)[:, None]
    hits = (frames + phase) % chunk_size == target  # (B, K); every target is hit within K
    first_hit = hits.to(torch.int8).argmax(dim=1)
    usable = chosen & (onsets >= window)
    return torch.where(usable, first_hit, torch.zeros_like(first_hit))


def prepend_background(feats: torch.Tensor, feat_lens: torch.Tensor, shifts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each utterance i gains ``shifts[i]`` copies of its own first frame (its background) in front.

    feats (B, T, F), feat_lens (B,), shifts (B,) >= 0 -> feats (B, T + max(shifts), F) zero padded,
    feat_lens + shifts. Returns the inputs themselves when no shift is positive.
    """
    if shifts.numel() == 0 or int(shifts.max()) <= 0:
        return feats, feat_lens
    bsz, _, bins = feats.shape
    new_lens = feat_lens + shifts
    out = feats.new_zeros(bsz, int(new_lens.max()), bins)
    for i in range(bsz):
        s, n = int(shifts[i]), int(feat_lens[i])
        out[i, :s] = feats[i, :1]
        out[i, s:s + n] = feats[i, :n]
    return out, new_lens


def place_onsets_at_chunk_edges(
    feats: torch.Tensor,
    feat_lens: torch.Tensor,
    chosen: torch.Tensor,
    edge_offsets: torch.Tensor,
    chunk_size: int,
    phase: int,
    rate: int,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch with each chosen utterance's speech onset moved to its chunk's last frames.

    feats (B, T, F) log-mel, feat_lens (B,); chosen (B,) bool and edge_offsets (B,) in
    [1, chunk_size] (drawn by ``DynamicChunkSampler.onset_edges``); chunk_size >= 1 and phase the
    batch's chunk grid; rate and window the subsampling's (``Conv2dSubsampling.rate``, ``.window``).
    Returns feats (B, T2, F) and feat_lens (B,).
    """
    onsets = speech_onsets(feats, feat_lens)
    shifts = edge_shifts(onsets, chosen, edge_offsets, chunk_size, phase, rate, window)
    return prepend_background(feats, feat_lens, shifts)
