"""The fused attention calls behind the ``sdpa_bias``, ``flex`` and ``joint_sdpa`` routes
(``asr.model.scorers.routes`` says which scheme takes which, and why).

Axis legend: B batch, H heads, C queries (the last C of the K keys), K keys, Dh head dim.

Every call here takes queries already scaled by 1/sqrt(Dh) (the schemes fold the scale into
their query side) and returns (B, H, C, Dh), zeros for query rows with no allowed key, as the
explicit paths do (``prepare_mask``).

Flex masks: a :class:`FlexMask` (the ``BlockMask`` plus the rows that see some key) is built
from the mask object the encoder hands every layer, and kept for the next calls with the same
object, shape and device: the layers of one forward share one mask object, so the block mask
is built once per batch. A :class:`~asr.model.masks.ChunkMask` gives an arithmetic
``mask_mod`` (no (B, T', T') tensor); a dense bool mask is read per element.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Callable, Hashable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import sdpa_kernel
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, and_masks, create_block_mask, flex_attention

from asr.model.masks import ChunkMask
from asr.model.scorers.base import CUDA_SDPA_BACKENDS, check_mask, prepare_mask
from asr.model.scorers.blocked import Mask
from asr.model.tracing import tracing

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


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
    q, k = q.to(v.dtype), k.to(v.dtype)  # under autocast the parameter-biased queries come out float32
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


def build_flex_mask(mask: Mask, batch: int, queries: int, keys: int, device: torch.device,
                    region: Optional[MaskMod] = None) -> FlexMask:
    """The :class:`FlexMask` of ``mask`` (None, bool (B, C|1, K), or a ChunkMask) for C queries, K keys;
    ``region``: a mask_mod further restricting the keys (rows it leaves empty stay empty: lse -inf)."""
    check_mask(mask, batch, queries, keys)
    if mask is None and region is None:
        return FlexMask(None, None)
    valid = None
    if mask is None:
        mask_mod = region
    else:
        if isinstance(mask, ChunkMask):
            mask_mod, valid = _chunk_mask_mod(mask, device)
        else:
            mask_mod, valid = _dense_mask_mod(mask.to(device), batch, queries, keys)
        valid = valid[:, None, :, None]  # (B, 1, C|1, 1)
        if region is not None:
            mask_mod = and_masks(mask_mod, region)
    block_mask = create_block_mask(mask_mod, batch, None, queries, keys, device=device)
    return FlexMask(block_mask, valid)


# FlexMasks of the mask objects seen last, keyed by (id, shape, device, region tag), each with a weak
# reference that tells a reused id from the same object: every layer of a forward passes the same object.
_CACHE: dict[tuple, tuple[Optional[weakref.ref], FlexMask]] = {}
_CACHE_SIZE = 4


def flex_mask(mask: Mask, batch: int, queries: int, keys: int, device: torch.device,
              region: Optional[tuple[Hashable, MaskMod]] = None) -> FlexMask:
    """:func:`build_flex_mask`, reused while the same mask object comes back with the same shape and
    region (``region``: (a hashable tag that names it, its mask_mod)). While tracing it is built in
    the graph each time (the compiler sees no cache)."""
    region_mod = None if region is None else region[1]
    if tracing() or (mask is None and region is None):
        return build_flex_mask(mask, batch, queries, keys, device, region_mod)
    key = (None if mask is None else id(mask), batch, queries, keys, device, None if region is None else region[0])
    hit = _CACHE.get(key)
    if hit is not None and (mask is None or hit[0]() is mask):
        return hit[1]
    built = build_flex_mask(mask, batch, queries, keys, device, region_mod)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (None if mask is None else weakref.ref(mask), built)
    return built


# Compiled kernels, one per kernel function: each is its own compiled frame, so the schemes' score_mods
# do not share (and exhaust) one frame's recompile budget.
_COMPILED: dict[Callable, Callable] = {}


def compiled(kernel: Callable) -> Callable:
    """``kernel`` compiled (eager flex is an unfused reference); as it is inside a traced graph."""
    if tracing():
        return kernel
    if kernel not in _COMPILED:
        _COMPILED[kernel] = torch.compile(kernel)
    return _COMPILED[kernel]


def flex_attend(q: Tensor, k: Tensor, v: Tensor, mask: Mask, kernel: Callable, *tensors: Tensor,
                region: Optional[tuple[Hashable, MaskMod]] = None, return_lse: bool = False):
    """FlexAttention on pre-scaled queries through a scheme's ``kernel`` and the mask's BlockMask.

    Args:
        q: (B, H, C, Dh) scaled queries; k, v: (B, H, K, Dh).
        mask: None, bool (B, C|1, K) or a ChunkMask.
        kernel: ``kernel(q, k, v, block_mask, *tensors, return_lse=...)``, a module-level function
            that builds the scheme's score_mod from ``tensors`` (the position term; their gradients
            flow on CUDA) and returns :func:`flex_attention`'s output (out, or (out, aux) with the lse).
        region: (tag, mask_mod) restricting the keys further (see :func:`flex_mask`).
        return_lse: also return each row's log-sum-exp of the modified scores (B, H, C) float32
            (-inf for a row without keys), through which gradients flow.
    Returns:
        out (B, H, C, Dh), zeros for rows without keys; with ``return_lse``, (out, lse).
    """
    b, _, c, _ = q.shape
    q, k = q.to(v.dtype), k.to(v.dtype)  # under autocast the parameter-biased queries come out float32
    masks = flex_mask(mask, b, c, k.size(2), q.device, region)
    result = compiled(kernel)(q, k, v, masks.block_mask, *tensors, return_lse=return_lse)
    out, lse = (result[0], result[1].lse) if return_lse else (result, None)
    if masks.row_valid is not None:
        out = out * masks.row_valid
    return (out, lse) if return_lse else out


def lse_request(return_lse: bool) -> Optional[AuxRequest]:
    """flex_attention's ``return_aux`` for a kernel asked for the log-sum-exp or not."""
    return AuxRequest(lse=True) if return_lse else None


def bias_kernel(q: Tensor, k: Tensor, v: Tensor, block_mask: Optional[BlockMask], bias: Tensor,
                return_lse: bool = False):
    """A flex kernel adding ``bias`` (B, H, C, K) at each (query, key)."""

    def score_mod(score, b, h, qi, kj):
        return score + bias[b, h, qi, kj]

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=1.0,
                          return_aux=lse_request(return_lse))
