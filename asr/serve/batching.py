"""Stack single-stream encoder states into one batched state and split it again.

Axis legend: B streams, H heads, M cached frames, Dh head dim, D model dim.

Streams that started at different times have different numbers of cached
attention frames and different absolute times. :func:`stack_states` left-pads the
K/V caches to the longest one and records each row's valid length and time in the
batched :class:`~asr.streaming.state.StreamState` (``cache_lengths``,
``row_times``), which ``ConformerEncoder.stream_step`` masks and embeds per row; a
conv cache that does not exist yet (a stream's first chunk) is the zeros the conv
module would pad with. :func:`split_state` cuts each row back to its own length.

Only the encoder memory is stacked: the caller keeps each stream's feature
frames itself and feeds whole chunks, so the states carry no feature buffer or
pending frames (checked).
"""

from __future__ import annotations

import torch

from asr.streaming.state import LayerCache, StreamState


def _check_stackable(states: list[StreamState]) -> None:
    if not states:
        raise ValueError("stack_states needs at least one state.")
    first = states[0]
    for i, s in enumerate(states):
        if s.batch_size != 1:
            raise ValueError(f"state {i} has batch_size {s.batch_size}; only single-stream states are stacked.")
        if (s.chunk_size, s.left_chunks, len(s.layers)) != (first.chunk_size, first.left_chunks, len(first.layers)):
            raise ValueError(
                f"state {i} (chunk_size {s.chunk_size}, left_chunks {s.left_chunks}, {len(s.layers)} layers) "
                f"differs from state 0 ({first.chunk_size}, {first.left_chunks}, {len(first.layers)})."
            )
        if s.finished or s.feats is not None or s.pending is not None:
            raise ValueError(
                f"state {i} is finished or holds buffered frames; stacked states must sit at a chunk border."
            )


def _stack_padded(parts: list[torch.Tensor | None], template: torch.Tensor, frames: int) -> torch.Tensor:
    """Left-pad (1, H, M_b, Dh) parts (None = no frames) to (B, H, frames, Dh) and stack them."""
    h, dh = template.size(1), template.size(3)
    rows = []
    for part in parts:
        have = 0 if part is None else part.size(2)
        if have == frames:
            rows.append(part)
            continue
        pad = template.new_zeros(1, h, frames - have, dh)
        rows.append(pad if part is None else torch.cat([pad, part], dim=2))
    return torch.cat(rows, dim=0)


def stack_states(states: list[StreamState]) -> StreamState:
    """One batched state (B = len(states)) whose row b continues ``states[b]``."""
    _check_stackable(states)
    first = states[0]
    layers = []
    for i in range(len(first.layers)):
        caches = [s.layers[i] for s in states]
        keyed = [c for c in caches if c.key is not None]
        layer = LayerCache()
        if keyed:
            frames = max(c.cached_frames for c in keyed)
            layer.key = _stack_padded([c.key for c in caches], keyed[0].key, frames)  # (B, H, M, Dh)
            layer.value = _stack_padded([c.value for c in caches], keyed[0].value, frames)
        convs = [c.conv for c in caches]
        present = next((c for c in convs if c is not None), None)
        if present is not None:
            # A missing conv cache means "start of stream": the causal conv pads with zeros there.
            layer.conv = torch.cat([present.new_zeros(present.shape) if c is None else c for c in convs])
        layers.append(layer)
    lengths = [s.layers[0].cached_frames if s.layers else 0 for s in states]
    cached = layers[0].cached_frames if layers else 0
    times = [s.time for s in states]
    return StreamState(
        batch_size=len(states),
        chunk_size=first.chunk_size,
        left_chunks=first.left_chunks,
        layers=layers,
        time=times[0],
        row_times=None if len(set(times)) == 1 else times,
        cache_lengths=None if all(n == cached for n in lengths) else lengths,
    )


def split_state(state: StreamState) -> list[StreamState]:
    """Single-stream states, row by row, each trimmed to its own valid cache (views, no copies)."""
    if state.feats is not None or state.pending is not None:
        raise ValueError("split_state needs a state at a chunk border (no buffered feature or pending frames).")
    cached = state.layers[0].cached_frames if state.layers else 0
    lengths = state.cache_lengths if state.cache_lengths is not None else [cached] * state.batch_size
    rows = []
    for b, (time, length) in enumerate(zip(state.times(), lengths)):
        layers = []
        for layer in state.layers:
            row = LayerCache()
            if layer.key is not None and length > 0:
                row.key = layer.key[b : b + 1, :, cached - length :]  # (1, H, length, Dh)
                row.value = layer.value[b : b + 1, :, cached - length :]
            if layer.conv is not None:
                row.conv = layer.conv[b : b + 1]  # (1, D, kernel-1)
            layers.append(row)
        rows.append(
            StreamState(batch_size=1, chunk_size=state.chunk_size, left_chunks=state.left_chunks,
                        layers=layers, time=time, finished=state.finished)
        )
    return rows
