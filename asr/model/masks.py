"""Boolean attention masks: key padding and chunk (streaming) masks.

Axis letters: B batch, T' encoder frames, C chunk size in encoder frames.
Every mask here is bool with True = "may attend".

Chunks are aligned at encoder time 0: frame t belongs to chunk ``t // C``. A
query in chunk c sees keys in chunks ``[c - left_chunks, c]`` (all earlier
chunks when ``left_chunks == -1``), which is exactly what the streaming
encoder (``ConformerEncoder.stream_step`` in ``asr/model/encoder.py``) sees with
a K/V cache of ``left_chunks * C`` frames; ``tests/streaming/test_stream_exact.py``
checks that the two agree.

Training may shift the grid by a *phase* p in [0, C): frame t belongs to chunk ``(t + p) // C``, so the
first chunk holds C - p frames. A live stream's speech starts anywhere within a chunk; a trimmed
training utterance always starts at a chunk's first frame unless the grid moves.
"""

from __future__ import annotations

import torch


def check_chunk_args(chunk_size: int, left_chunks: int) -> None:
    """Validate ``chunk_size`` (0 = full context) and ``left_chunks`` (-1 = unlimited)."""
    if chunk_size < 0:
        raise ValueError(f"chunk_size ({chunk_size}) must be >= 0 (0 means full context).")
    if left_chunks < -1:
        raise ValueError(f"left_chunks ({left_chunks}) must be >= 0, or -1 for unlimited left context.")


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Valid-frame mask from lengths.

    Args:
        lengths: (B,) int number of valid frames per row.
        max_len: width of the mask; defaults to ``lengths.max()``.
    Returns:
        (B, T') bool, True where ``t < lengths[b]``.
    """
    if max_len is None:
        max_len = int(lengths.max().item()) if lengths.numel() > 0 else 0
    t = torch.arange(max_len, device=lengths.device)
    return t[None, :] < lengths[:, None]  # (B, T')


def check_chunk_phase(chunk_size: int, phase: int) -> None:
    """The grid's phase is in [0, C) (0 for full context)."""
    if not 0 <= phase < max(chunk_size, 1):
        raise ValueError(f"chunk phase ({phase}) must be in [0, chunk_size) = [0, {max(chunk_size, 1)}).")


def chunk_mask(size: int, chunk_size: int, left_chunks: int = -1, device: torch.device | None = None,
               phase: int = 0) -> torch.Tensor:
    """Query/key visibility for chunked attention over ``size`` frames.

    Args:
        size: number of encoder frames T'.
        chunk_size: C > 0 frames per chunk; 0 returns an all-True (full context) mask.
        left_chunks: number of earlier chunks visible, -1 for all of them.
        phase: the grid's shift p in [0, C): frame t is in chunk (t + p) // C.
    Returns:
        (T', T') bool, ``[i, j]`` True when query i may attend key j.
    """
    check_chunk_args(chunk_size, left_chunks)
    check_chunk_phase(chunk_size, phase)
    if chunk_size == 0:
        return torch.ones(size, size, dtype=torch.bool, device=device)
    times = torch.arange(size, device=device)  # (T',)
    return chunk_visibility(times, times, chunk_size, left_chunks, phase)  # (T', T')


def attention_mask(lengths: torch.Tensor, max_len: int, chunk_size: int = 0, left_chunks: int = -1,
                   phase: int = 0) -> torch.Tensor:
    """Chunk mask combined with key padding, the mask the encoder's self-attention uses.

    Args:
        lengths: (B,) valid encoder frames per row.
        max_len: T', padded width.
        chunk_size, left_chunks, phase: as in :func:`chunk_mask`.
    Returns:
        (B, T', T') bool, ``[b, i, j]`` True when query i may attend key j of row b;
        for full context (chunk_size 0) the same as a broadcastable (B, 1, T').
        A query row may have no visible key (padding, or a row of length 0);
        MultiHeadAttention returns zeros there, and callers ignore padded rows.
    """
    keys = padding_mask(lengths, max_len)[:, None, :]  # (B, 1, T')
    if chunk_size == 0:
        return keys  # (B, 1, T'): every query sees the same keys
    return keys & chunk_mask(max_len, chunk_size, left_chunks, lengths.device, phase)[None]  # (B, T', T')


class ChunkMask:
    """:func:`attention_mask` held as its parameters, so the (B, T', T') tensor need not exist.

    Exact attention in blocks (``asr.model.scorers.blocked``) asks it for one block at a time
    and for the keys a query block can see at all (with bounded left context, a band); every
    other scorer asks for :meth:`dense`, the very tensor :func:`attention_mask` returns.
    The encoder builds one per offline forward: queries and keys are the same T' frames.

    Args:
        lengths: (B,) valid encoder frames per row.
        size: T'.
        chunk_size, left_chunks, phase: as in :func:`chunk_mask` (chunk 0: full context).
    """

    def __init__(self, lengths: torch.Tensor, size: int, chunk_size: int = 0, left_chunks: int = -1,
                 phase: int = 0) -> None:
        check_chunk_args(chunk_size, left_chunks)
        check_chunk_phase(chunk_size, phase)
        if lengths.dim() != 1:
            raise ValueError(f"lengths must be (B,), got {tuple(lengths.shape)}.")
        self.lengths = lengths
        self.size = size
        self.chunk_size = chunk_size
        self.left_chunks = left_chunks
        self.phase = phase

    @property
    def batch(self) -> int:
        return self.lengths.size(0)

    def dense(self) -> torch.Tensor:
        """(B, T', T') bool, or (B, 1, T') for full context: :func:`attention_mask`."""
        return attention_mask(self.lengths, self.size, self.chunk_size, self.left_chunks, self.phase)

    def key_span(self, q0: int, q1: int) -> tuple[int, int]:
        """Keys [lo, hi) that some query in [q0, q1) may see (q0 < q1); none outside."""
        hi = min(self.size, int(self.lengths.max()) if self.batch else 0)
        if self.chunk_size == 0:
            return 0, hi
        c, p = self.chunk_size, self.phase
        hi = min(hi, ((q1 - 1 + p) // c + 1) * c - p)  # the end of the last query's chunk
        lo = 0 if self.left_chunks < 0 else max(0, ((q0 + p) // c - self.left_chunks) * c - p)
        return lo, max(lo, hi)

    def block(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor | None:
        """Bool (B, q1-q0 | 1, k1-k0) mask of queries [q0, q1) against keys [k0, k1); None if all may attend."""
        keys = torch.arange(k0, k1, device=self.lengths.device)  # (k,)
        valid = keys[None, :] < self.lengths[:, None]  # (B, k)
        mask = None if bool(valid.all()) else valid[:, None, :]  # (B, 1, k)
        if self.chunk_size == 0:
            return mask
        c, p = self.chunk_size, self.phase
        # Every query sees every key of the block when the first query's chunk ends after the last
        # key and the last query's left context starts before the first key: the rule adds nothing.
        if k1 <= ((q0 + p) // c + 1) * c - p and (
                self.left_chunks < 0 or k0 >= ((q1 - 1 + p) // c - self.left_chunks) * c - p):
            return mask
        visible = chunk_visibility(torch.arange(q0, q1, device=keys.device), keys, c, self.left_chunks, p)  # (q, k)
        return visible[None] if mask is None else visible[None] & mask


def chunk_visibility(query_times: torch.Tensor, key_times: torch.Tensor, chunk_size: int,
                     left_chunks: int, phase: int = 0) -> torch.Tensor:
    """(q, k) bool: query time i may see key time j under the chunk rule (chunk of t: (t + phase) // C)."""
    q_chunk = (query_times[:, None] + phase) // chunk_size
    k_chunk = (key_times[None, :] + phase) // chunk_size
    visible = k_chunk <= q_chunk
    if left_chunks >= 0:
        visible = visible & (k_chunk >= q_chunk - left_chunks)
    return visible
