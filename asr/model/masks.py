"""Boolean attention masks: key padding and chunk (streaming) masks.

Axis letters: B batch, T' encoder frames, C chunk size in encoder frames.
Every mask here is bool with True = "may attend".

Chunks are aligned at encoder time 0: frame t belongs to chunk ``t // C``. A
query in chunk c sees keys in chunks ``[c - left_chunks, c]`` (all earlier
chunks when ``left_chunks == -1``), which is exactly what the streaming
encoder (``ConformerEncoder.stream_step`` in ``asr/model/encoder.py``) sees with
a K/V cache of ``left_chunks * C`` frames; ``tests/streaming/test_stream_exact.py``
checks that the two agree.
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


def chunk_mask(size: int, chunk_size: int, left_chunks: int = -1, device: torch.device | None = None) -> torch.Tensor:
    """Query/key visibility for chunked attention over ``size`` frames.

    Args:
        size: number of encoder frames T'.
        chunk_size: C > 0 frames per chunk; 0 returns an all-True (full context) mask.
        left_chunks: number of earlier chunks visible, -1 for all of them.
    Returns:
        (T', T') bool, ``[i, j]`` True when query i may attend key j.
    """
    check_chunk_args(chunk_size, left_chunks)
    if chunk_size == 0:
        return torch.ones(size, size, dtype=torch.bool, device=device)
    chunk = torch.arange(size, device=device) // chunk_size  # (T',)
    q_chunk, k_chunk = chunk[:, None], chunk[None, :]  # (T', 1), (1, T')
    visible = k_chunk <= q_chunk
    if left_chunks >= 0:
        visible = visible & (k_chunk >= q_chunk - left_chunks)
    return visible  # (T', T')


def attention_mask(lengths: torch.Tensor, max_len: int, chunk_size: int = 0, left_chunks: int = -1) -> torch.Tensor:
    """Chunk mask combined with key padding, the mask the encoder's self-attention uses.

    Args:
        lengths: (B,) valid encoder frames per row.
        max_len: T', padded width.
        chunk_size, left_chunks: as in :func:`chunk_mask`.
    Returns:
        (B, T', T') bool, ``[b, i, j]`` True when query i may attend key j of row b;
        for full context (chunk_size 0) the same as a broadcastable (B, 1, T').
        A query row may have no visible key (padding, or a row of length 0);
        MultiHeadAttention returns zeros there, and callers ignore padded rows.
    """
    keys = padding_mask(lengths, max_len)[:, None, :]  # (B, 1, T')
    if chunk_size == 0:
        return keys  # (B, 1, T'): every query sees the same keys
    return keys & chunk_mask(max_len, chunk_size, left_chunks, device=lengths.device)[None]  # (B, T', T')
