"""Typed state of a chunk-streaming Conformer encoder.

Axis letters: B batch, F feature bins, D model dim, H heads, Dh head dim,
M cached frames, C chunk size (encoder frames). Empty parts are None, never
placeholder zero-size tensors.

Everything here is bounded when ``left_chunks >= 0``: M <= left_chunks * C per
layer, the conv cache is kernel-1 frames, the feature buffer holds fewer frames
than the subsampling window and the pending encoder frames fewer than C + r (r: the
encoder's ``chunk_lookahead``).

Rows need not be in lock-step: a state built by stacking streams that started at
different times (``asr.serve.batching``) gives each row its own absolute time
(``row_times``) and its own count of valid cached frames (``cache_lengths``; the
caches are left-padded to a common M and the padding is masked out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerCache:
    """Per-layer memory.

    key, value: (B, H, M, Dh) attention keys/values of the last M encoder frames.
    conv: (B, D, kernel-1) last depthwise-conv inputs of the causal conv module.
    """

    key: torch.Tensor | None = None
    value: torch.Tensor | None = None
    conv: torch.Tensor | None = None

    @property
    def cached_frames(self) -> int:
        return 0 if self.key is None else self.key.size(2)

    def store_attention(self, kv: tuple[torch.Tensor, torch.Tensor], budget: int) -> None:
        """Keep the last ``budget`` frames of ``kv`` ((B, H, K, Dh) each); budget -1 keeps all."""
        key, value = kv
        if budget == 0:
            self.key = self.value = None
            return
        if budget > 0 and key.size(2) > budget:
            # Clone so the trimmed cache does not pin the whole (B, H, K, Dh) buffer in memory.
            key, value = key[:, :, -budget:].clone(), value[:, :, -budget:].clone()
        self.key, self.value = key, value


@dataclass
class StreamState:
    """Everything a stream carries between ``stream_step`` calls.

    Attributes:
        batch_size: B, fixed for the stream.
        chunk_size: C > 0 encoder frames per attention chunk.
        left_chunks: chunks of left context, -1 for all.
        layers: one :class:`LayerCache` per Conformer block.
        feats: (B, n, F) normalized feature frames not yet subsampled; they start
            at input frame ``rate * (frames subsampled so far)``.
        pending: (B, p, D) subsampled frames (p < C + r) waiting for a whole chunk and its r frames of
            lookahead (the encoder's ``chunk_lookahead``).
        time: absolute encoder time of the next frame to emit (= frames emitted).
        finished: set by ``final=True``; the state cannot be fed afterwards.
        row_times: (B,) absolute time of each row's next frame when rows are not in
            lock-step; None: every row is at ``time``.
        cache_lengths: (B,) valid cached attention frames per row, the same in every
            layer; a row's valid frames are the LAST ``cache_lengths[b]`` of the M
            cached ones (the rest is left padding, masked out). None: all M are valid.
    """

    batch_size: int
    chunk_size: int
    left_chunks: int
    layers: list[LayerCache] = field(default_factory=list)
    feats: torch.Tensor | None = None
    pending: torch.Tensor | None = None
    time: int = 0
    finished: bool = False
    row_times: list[int] | None = None
    cache_lengths: list[int] | None = None

    @property
    def cache_budget(self) -> int:
        """Attention frames kept per layer: ``left_chunks * C``, or -1 (all)."""
        return -1 if self.left_chunks < 0 else self.left_chunks * self.chunk_size

    def times(self) -> list[int]:
        """Absolute time of each row's next frame."""
        return list(self.row_times) if self.row_times is not None else [self.time] * self.batch_size

    def key_mask(self, new_frames: int) -> torch.Tensor | None:
        """Bool (B, 1, M + new_frames) mask of the keys each row may attend to, None if all.

        Only left padding of the caches is masked; the chunk's own frames are always valid.
        """
        if self.cache_lengths is None or not self.layers:
            return None
        cached = self.layers[0].cached_frames
        lengths = torch.tensor(self.cache_lengths)  # (B,)
        key_pos = torch.arange(cached + new_frames)  # (K,)
        return (key_pos[None, :] >= (cached - lengths)[:, None])[:, None, :]  # (B, 1, K)

    def advance_rows(self, new_frames: int) -> None:
        """Book ``new_frames`` more frames per row after a chunk (times and valid cache lengths)."""
        self.time += new_frames
        if self.row_times is not None:
            self.row_times = [t + new_frames for t in self.row_times]
        if self.cache_lengths is not None:
            cached = self.layers[0].cached_frames if self.layers else 0
            grown = [n + new_frames for n in self.cache_lengths]
            lengths = [min(n, cached) for n in grown]
            self.cache_lengths = None if all(n == cached for n in lengths) else lengths

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the state holds (for size accounting and device moves)."""
        parts = [self.feats, self.pending]
        for layer in self.layers:
            parts += [layer.key, layer.value, layer.conv]
        return [t for t in parts if t is not None]

    def numel(self) -> int:
        """Total number of cached elements, which stops growing after warm-up when left_chunks >= 0."""
        return sum(t.numel() for t in self.tensors())

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())
