"""The fused attention calls behind the ``sdpa_bias``, ``flex`` and ``joint_sdpa`` routes
(``asr.model.scorers.routes`` says which scheme takes which, and why).

Axis legend: B batch, H heads, C queries (the last C of the K keys), K keys, Dh head dim.

Every call here takes queries already scaled by 1/sqrt(Dh) (the schemes fold the scale into
their query side) and returns (B, H, C, Dh), zeros for query rows with no allowed key, as the
explicit paths do (``prepare_mask``).

Flex masks: a :class:`FlexMask` (the ``BlockMask`` plus the rows that see some key) is built
from the mask object the encoder hands every layer, and kept for the next call with the same
object, shape and device: the layers of one forward share one mask object, so the block mask
is built once per batch. A :class:`~asr.model.masks.ChunkMask` gives an arithmetic
``mask_mod`` (no (B, T', T') tensor); a dense bool mask is read per element.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import sdpa_kernel
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from asr.model.masks import ChunkMask
from asr.model.scorers.base import CUDA_SDPA_BACKENDS, check_mask, prepare_mask
from asr.model.scorers.blocked import Mask
from asr.model.tracing import tracing

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def sdpa_attend(q: Tensor, k: Tensor, v: Tensor, mask: Mask, dropout: float = 0.0,
                bias: Optional[Tensor] = None) -> Tensor:
    """SDPA on pre-scaled queries, with an optional additive float ``bias`` (B|1, H, C, K).

    Args:
        q: (B, H, C, Dq) scaled queries; k: (B, H, K, Dq); v: (B, H, K, Dh) (Dq may differ from Dh).
        mask: None, bool (B, C|1, K) or a ChunkMask (made dense: SDPA takes a tensor).
        dropout: attention dropout rate (0 outside training).
        bias: None (a bool mask keeps the flash kernels) or the position term, which is given the
            mask as -inf and goes in as SDPA's float ``attn_mask`` (its gradient flows).
    Returns:
        (B, H, C, Dh).
    """
    b, _, c, _ = q.shape
    mask4, row_valid = prepare_mask(mask, b, c, k.size(2))  # (B, 1, C|1, K), (B, 1, C|1, 1)
    attn_mask = mask4
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if mask4 is not None:
            attn_mask = attn_mask.masked_fill(~mask4, float("-inf"))  # (B, H, C, K)
    kernels = sdpa_kernel(list(CUDA_SDPA_BACKENDS)) if q.is_cuda else contextlib.nullcontext()
    with kernels:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout, scale=1.0)
    return out if row_valid is None else out * row_valid


@dataclass
class FlexMask:
    """A mask as FlexAttention takes it: ``block_mask`` (None: every key allowed) and ``row_valid``
    (B, 1, C, 1) bool, False for query rows that see no key (their output is zeroed; the mask_mod
    opens them to every key so that no row is empty), or None."""

    block_mask: Optional[BlockMask]
    row_valid: Optional[Tensor]


def _chunk_mask_mod(mask: ChunkMask, device: torch.device):
    """(mask_mod, row_valid (B, T')) of a ChunkMask, by arithmetic on the frame indices."""
    lengths = mask.lengths.to(device)  # (B,)
    size, chunk, left, phase = mask.size, mask.chunk_size, mask.left_chunks, mask.phase
    times = torch.arange(size, device=device)  # (T',)
    if chunk == 0 or left < 0:
        first_key = torch.zeros_like(times)
    else:  # the first frame of the oldest chunk a query sees
        first_key = (((times + phase) // chunk - left) * chunk - phase).clamp_min(0)  # (T',)
    row_valid = first_key[None, :] < lengths[:, None]  # (B, T')

    def mask_mod(b, h, qi, kj):
        allowed = kj < lengths[b]
        if chunk > 0:
            q_chunk, k_chunk = (qi + phase) // chunk, (kj + phase) // chunk
            allowed = allowed & (k_chunk <= q_chunk)
            if left >= 0:
                allowed = allowed & (k_chunk >= q_chunk - left)
        return allowed | ~row_valid[b, qi]

    return mask_mod, row_valid


def _dense_mask_mod(mask: Tensor, batch: int, queries: int, keys: int):
    """(mask_mod, row_valid (B, C|1)) of a bool (B, C|1, K) mask, rows without keys opened."""
    mask4, row_valid = prepare_mask(mask, batch, queries, keys)
    rows = mask4[:, 0]  # (B, C|1, K)
    if rows.size(1) == 1:
        return (lambda b, h, qi, kj: rows[b, 0, kj]), row_valid[:, 0, :, 0]
    return (lambda b, h, qi, kj: rows[b, qi, kj]), row_valid[:, 0, :, 0]


def build_flex_mask(mask: Mask, batch: int, queries: int, keys: int, device: torch.device) -> FlexMask:
    """The :class:`FlexMask` of ``mask`` (None, bool (B, C|1, K), or a ChunkMask) for C queries, K keys."""
    check_mask(mask, batch, queries, keys)
    if mask is None:
        return FlexMask(None, None)
    if isinstance(mask, ChunkMask):
        mask_mod, valid = _chunk_mask_mod(mask, device)
    else:
        mask_mod, valid = _dense_mask_mod(mask.to(device), batch, queries, keys)
    block_mask = create_block_mask(mask_mod, batch, None, queries, keys, device=device)
    return FlexMask(block_mask, valid[:, None, :, None])  # (B, 1, C|1, 1)


# The last mask object seen and its FlexMask: every layer of a forward passes the same object.
_LAST_MASK: list = [None, None, None]  # [weakref to the mask, (B, C, K, device), FlexMask]


def flex_mask(mask: Mask, batch: int, queries: int, keys: int, device: torch.device) -> FlexMask:
    """:func:`build_flex_mask`, reused while the same mask object comes back with the same shape.
    While tracing it is built in the graph each time (the compiler sees no cache)."""
    if mask is None or tracing():
        return build_flex_mask(mask, batch, queries, keys, device)
    ref, key, cached = _LAST_MASK
    shape = (batch, queries, keys, device)
    if ref is not None and ref() is mask and key == shape:
        return cached
    built = build_flex_mask(mask, batch, queries, keys, device)
    _LAST_MASK[:] = [weakref.ref(mask), shape, built]
    return built


_COMPILED_FLEX: list = []


def _flex() -> Callable:
    """flex_attention compiled (eager flex is an unfused reference); as it is inside a traced graph."""
    if tracing():
        return flex_attention
    if not _COMPILED_FLEX:
        _COMPILED_FLEX.append(torch.compile(flex_attention))
    return _COMPILED_FLEX[0]


def flex_attend(q: Tensor, k: Tensor, v: Tensor, mask: Mask, score_mod: Optional[ScoreMod]) -> Tensor:
    """FlexAttention on pre-scaled queries with the scheme's ``score_mod`` and the mask's BlockMask.

    Args:
        q: (B, H, C, Dh) scaled queries; k, v: (B, H, K, Dh).
        mask: None, bool (B, C|1, K) or a ChunkMask.
        score_mod: (score, b, h, q_idx, kv_idx) -> score, reading the position term from
            tensors it captures (their gradients flow on CUDA).
    Returns:
        (B, H, C, Dh).
    """
    b, _, c, _ = q.shape
    masks = flex_mask(mask, b, c, k.size(2), q.device)
    out = _flex()(q, k, v, score_mod=score_mod, block_mask=masks.block_mask, scale=1.0)
    return out if masks.row_valid is None else out * masks.row_valid


def bias_score_mod(bias: Tensor) -> ScoreMod:
    """A score_mod adding ``bias`` (B, H, C, K) at each (query, key)."""

    def score_mod(score, b, h, qi, kj):
        return score + bias[b, h, qi, kj]

    return score_mod
