"""Clipped-distance bucket maps without an index tensor: the two adjoint maps Shaw needs.

Axis legend: C queries, K keys, M = K - C (query a sits at time M + a, key b at
time b), k = max_distance, N = 2k + 1 buckets, bucket(a, b) = clip(b - M - a, -k, k) + k.
The blocked attention (``asr.model.scorers.blocked``) passes any ``offset`` for M: a block
pair's first query may sit before, inside or after its key block.

* ``band_expand``: (..., C, N) table -> (..., C, K) with out[a, b] = table[a, bucket(a, b)];
* ``band_sums``: (..., C, K) -> (..., C, N), the sum of each row's entries per bucket
  (the adjoint of ``band_expand``);
* ``band_expand_summed``: ``band_expand`` with ``band_sums`` as its backward, for tables that train;
* ``add_band_``: ``band_expand`` added into existing logits, one column when the whole block is
  in an edge bucket (``one_edge_bucket``).

Why not ``scatter_add_`` over the (C, K) bucket index for the sums: it reads an int64
index per element and does a read-modify-write per element into a tiny output, the
largest kernel of Shaw attention on CPU (~6 ms against ~2 ms for the softmax at
B*H = 32, C = K = 256), and Shaw needs it twice per layer (value bins forward, key
table gradient backward). The buckets are a band: the two edge buckets are a lower
and an upper triangle (dense row sums plus small corners), and the 2k - 1 interior
buckets of a row are consecutive keys, read for all rows at once through one
strided view. The scatter form stays in the tests as the reference.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asr.model.tracing import tracing


def clipped_distance_index(queries: int, keys: int, max_distance: int, device: torch.device,
                           offset: int | None = None) -> Tensor:
    """Bucket of each (query, key) pair for Shaw / rel_bias tables.

    Query a sits at local time M + a (M = ``offset``, by default K - C), key b at time b;
    the bucket is clip(b - (M + a), -k, k) + k, in [0, 2k].

    Returns:
        (C, K) int64.
    """
    first_query = keys - queries if offset is None else offset
    query_time = torch.arange(first_query, first_query + queries, device=device)[:, None]  # (C, 1)
    key_time = torch.arange(keys, device=device)[None, :]  # (1, K)
    return (key_time - query_time).clamp_(-max_distance, max_distance).add_(max_distance)


def _lower_sums(x: Tensor, offset: int, block: int = 64) -> Tensor:
    """(..., C, K) -> (..., C): per row a, the sum of x[a, b] over b <= a + offset.

    Row blocks of ``block``: the columns every row of the block keeps are a dense
    slice summed in place; only a (block x block) corner needs a triangle (a small
    copy). torch.tril over the whole matrix would copy all of it.
    """
    c, kk = x.shape[-2:]
    out = x.new_zeros(x.shape[:-1])
    for a0 in range(0, c, block):
        a1 = min(c, a0 + block)
        full = min(kk, max(0, a0 + offset + 1))  # columns [0, full) are kept by every row
        if full > 0:
            out[..., a0:a1] = x[..., a0:a1, :full].sum(-1)
        ragged = min(kk, max(0, a1 + offset))  # columns [full, ragged) by some rows
        if ragged > full:
            corner = torch.tril(x[..., a0:a1, full:ragged], diagonal=a0 + offset - full)
            out[..., a0:a1] += corner.sum(-1)
    return out


def _upper_sums(x: Tensor, offset: int, block: int = 64) -> Tensor:
    """(..., C, K) -> (..., C): per row a, the sum of x[a, b] over b >= a + offset."""
    c, kk = x.shape[-2:]
    out = x.new_zeros(x.shape[:-1])
    for a0 in range(0, c, block):
        a1 = min(c, a0 + block)
        full = min(kk, max(0, a1 - 1 + offset))  # columns [full, K) are kept by every row
        if full < kk:
            out[..., a0:a1] = x[..., a0:a1, full:].sum(-1)
        ragged = min(kk, max(0, a0 + offset))  # columns [ragged, full) by some rows
        if full > ragged:
            corner = torch.triu(x[..., a0:a1, ragged:full], diagonal=a0 + offset - ragged)
            out[..., a0:a1] += corner.sum(-1)
    return out


def band_sums(x: Tensor, max_distance: int, offset: int | None = None) -> Tensor:
    """(..., C, K) -> (..., C, 2k+1): per row, the sum of x over the keys of each bucket.

    ``offset``: M, the time of query 0 minus the time of key 0 (default K - C).
    """
    c, kk = x.shape[-2:]
    k = max_distance
    if tracing() and offset is None:
        # The row blocks below branch on the sizes in Python, which a compiled graph turns
        # into one recompile per range of lengths; the compiler makes the scatter one loop.
        index = clipped_distance_index(c, kk, k, x.device).expand(x.shape)  # (..., C, K)
        return x.new_zeros(*x.shape[:-1], 2 * k + 1).scatter_add_(-1, index, x)
    m = kk - c if offset is None else offset
    out = x.new_zeros(*x.shape[:-2], c, 2 * k + 1)
    if k == 0:
        out[..., 0] = x.sum(-1)
        return out
    if m - k >= kk - 1 or m + k <= 1 - c:  # every key is k or more behind (ahead of) every query
        out[..., 0 if m - k >= kk - 1 else 2 * k] = x.sum(-1)
        return out
    out[..., 0] = _lower_sums(x, m - k)  # b <= M + a - k
    out[..., 2 * k] = _upper_sums(x, m + k)  # b >= M + a + k
    # Interior buckets 1..2k-1 of row a are the 2k-1 consecutive keys b = M + a - k + 1 + w,
    # read for many rows at once through one strided view (row stride K + 1).
    lo, hi = max(0, k - 1 - m), min(c, kk - m - k + 1)  # rows whose window lies inside the row
    if x.stride(-1) != 1 or x.stride(-2) != kk:
        x = x.contiguous()
    if hi > lo:
        out[..., lo:hi, 1:2 * k] = _windows(x, lo, hi - lo, m - k + 1, 2 * k - 1)
    # The rows whose window leaves the row but meets it (near the ends; any row of a block pair
    # far off the diagonal): zero-pad those rows by 2k on both sides (a small copy), then the
    # same view works.
    for r0, r1 in ((max(0, 1 - m - k), min(lo, c)), (max(hi, lo), min(c, kk + k - m - 1))):
        if r1 > r0:
            padded = torch.nn.functional.pad(x[..., r0:r1, :], (2 * k, 2 * k))  # (..., rows, K + 4k)
            out[..., r0:r1, 1:2 * k] = _windows(padded, 0, r1 - r0, r0 + m + k + 1, 2 * k - 1)
    return out


def _windows(x: Tensor, first_row: int, rows: int, start: int, width: int) -> Tensor:
    """A (..., rows, width) view of a row-contiguous (..., R, L) x whose element [r, w] is
    x[first_row + r, first_row + r + start + w]; the caller keeps every window inside its row."""
    length = x.shape[-1]
    return x.as_strided(
        (*x.shape[:-2], rows, width), (*x.stride()[:-2], length + 1, 1),
        x.storage_offset() + first_row * length + first_row + start,
    )


def band_expand(table: Tensor, keys: int, offset: int | None = None) -> Tensor:
    """(..., C, 2k+1) -> a fresh contiguous (..., C, K) with out[a, b] = table[a, bucket(a, b)].

    A gather over the bucket index: measured as fast as filling edges and band
    separately (1.5 ms at B*H = 32, C = K = 256); only its adjoint needed a rewrite.
    ``offset``: M as in :func:`band_sums`.
    """
    c, buckets = table.shape[-2:]
    index = clipped_distance_index(c, keys, (buckets - 1) // 2, table.device, offset)  # (C, K)
    return table.gather(-1, index.expand(*table.shape[:-1], keys))


class BandExpand(torch.autograd.Function):
    """``band_expand`` whose backward is ``band_sums`` (no index gather / scatter)."""

    @staticmethod
    def forward(ctx, table: Tensor, keys: int) -> Tensor:
        ctx.max_distance = (table.shape[-1] - 1) // 2
        return band_expand(table, keys)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return band_sums(grad, ctx.max_distance), None


def band_expand_summed(table: Tensor, keys: int) -> Tensor:
    """``band_expand`` (default offset) for a table that trains: through :class:`BandExpand`, whose
    backward sums each bucket's band instead of scattering every (C, K) gradient into its bucket.
    Traced, plain autograd: BandExpand's backward branches on the sizes in Python."""
    return band_expand(table, keys) if tracing() else BandExpand.apply(table, keys)


def one_edge_bucket(offset: int, buckets: int, queries: int, keys: int) -> bool:
    """Whether every (query, key) pair of ``queries`` x ``keys`` falls in one edge bucket of ``buckets``
    (= 2k + 1); ``offset``: M as in :func:`band_sums`, any sign (a block pair of the blocked attention)."""
    d = (buckets - 1) // 2
    return offset - d >= keys - 1 or offset + d <= 1 - queries


def add_band_(x: Tensor, table: Tensor, offset: int) -> Tensor:
    """x (..., C, K) += table (..., C, N) read at each (query, key)'s bucket, in place; ``offset``: M as in
    :func:`band_sums`. A pair all in one edge bucket adds that column without building the band."""
    buckets, kk, c = table.size(-1), x.size(-1), x.size(-2)
    if one_edge_bucket(offset, buckets, c, kk):  # one edge bucket: the first (keys behind) or the last (ahead)
        return x.add_(table[..., :1] if offset > 0 else table[..., -1:])
    return x.add_(band_expand(table, kk, offset))
