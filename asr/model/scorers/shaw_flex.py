"""Shaw's relative attention through FlexAttention, exactly, value term included.

Axis legend: B batch, H heads, C queries (the last C of K keys: query a at local time M + a,
M = K - C), K keys, Dh head dim, d = max_distance, N = 2d + 1 buckets,
bucket(a, j) = clip(j - M - a, -d, d) + d; W = 2d - 1 interior buckets.

The key term is a score_mod: ``rel = q aK^T`` (B, H, C, N) is tiny, and the score_mod reads it at
each pair's bucket. The value term ``sum_j p_aj aV[bucket(a, j)]`` is not a score_mod (it mixes
values, not logits); with the row's probability mass per bucket it is
``sum_n mass_an aV_n``, and the masses follow from quantities the kernel gives exactly:

* the W interior buckets hold one key each (j = M + a + n - d): their probabilities are
  ``exp(s_aj - lse_a)``, the row's own logit (a (C, W) band, cheap) minus the kernel's row
  log-sum-exp;
* the far-left bucket (j <= M + a - d) holds ``exp(lse_left_a - lse_a)``, lse_left from a second
  flex call restricted to those keys (block-sparse: about half the work of the first);
* the far-right bucket holds the rest, ``1 - left - sum(interior)`` (a row's probabilities sum to 1).

Gradients flow through both log-sum-exps (FlexAttention differentiates them), the band and the
captured ``rel``. So the value term costs a band of C x W logits and half an attention, instead
of the explicit path's (C, K) probabilities; no kernel offers the per-bucket mass directly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.flex_attention import flex_attention

from asr.model.scorers.blocked import Mask
from asr.model.scorers.fused import flex_attend, flex_mask, lse_request


def shaw_flex(q: Tensor, k: Tensor, v: Tensor, mask: Mask, rel_k: Tensor, rel_v: Tensor) -> Tensor:
    """Shaw attention (see the module docstring).

    Args:
        q: (B, H, C, Dh) queries scaled by 1/sqrt(Dh), the last C of the K keys.
        k, v: (B, H, K, Dh).
        mask: None, bool (B, C|1, K) or a ChunkMask.
        rel_k, rel_v: the (N, Dh) key and value tables.
    Returns:
        (B, H, C, Dh), zeros for rows without keys.
    """
    b, h, c, _ = q.shape
    kk = k.size(2)
    d = (rel_k.size(0) - 1) // 2
    m = kk - c
    rel = torch.matmul(q, rel_k.t())  # (B, H, C, N)
    first_query = torch.full((), m, device=q.device)  # a tensor: no recompile per cache length
    out, lse = flex_attend(q, k, v, mask, key_term_kernel, rel, first_query, return_lse=True)  # (B,H,C,Dh), (B,H,C)
    masks = flex_mask(mask, b, c, kk, q.device)
    work = torch.promote_types(q.dtype, torch.float32)  # the masses in float32 at least
    valid = None if masks.row_valid is None else masks.row_valid.to(work)  # (B, 1, C|1, 1)
    if d == 0:  # one bucket: every row's whole mass
        values = rel_v[0].to(work).expand(b, h, c, -1)
    else:
        def far_left(bi, hi, qi, kj):
            return kj - qi - m <= -d

        _, lse_left = flex_attend(q, k, v, mask, key_term_kernel, rel, first_query,
                                  region=(("shaw_far_left", m, d), far_left), return_lse=True)
        interior = _interior_probabilities(q, k, rel, lse.to(work), masks.block_mask, m, d)  # (B, H, C, W)
        left = (lse_left.to(work) - lse.to(work)).exp()[..., None]  # (B, H, C, 1); 0 where no key is that far back
        right = 1.0 - left - interior.sum(-1, keepdim=True)
        table = rel_v.to(work)
        values = interior @ table[1 : 2 * d] + left * table[0] + right * table[2 * d]  # (B, H, C, Dh)
    if valid is not None:
        values = values * valid
    return out + values.to(out.dtype)


def key_term_kernel(q: Tensor, k: Tensor, v: Tensor, block_mask, rel: Tensor, first_query: Tensor,
                    return_lse: bool = False):
    """The flex kernel of Shaw's key term: the score_mod adds ``rel`` (B, H, C, N) = q aK^T at each
    pair's bucket, clip(key - query time, -d, d) + d, queries from local time ``first_query`` (0-dim) on."""
    d = (rel.size(-1) - 1) // 2

    def score_mod(score, b, h, qi, kj):
        return score + rel[b, h, qi, (kj - qi - first_query).clamp(-d, d) + d]

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=1.0,
                          return_aux=lse_request(return_lse))


def _interior_probabilities(q: Tensor, k: Tensor, rel: Tensor, lse: Tensor, block_mask, m: int, d: int) -> Tensor:
    """p_aj (B, H, C, W) in the dtype of ``lse`` for the one key j = M + a + n - d of each interior bucket n = 1..2d-1;
    0 where that key is outside [0, K) or masked."""
    b, h, c, dh = q.shape
    kk = k.size(2)
    w = 2 * d - 1
    # Window t of the keys zero-padded by d-1 on both sides holds keys t-(d-1) .. t+d-1: query a takes t = M + a.
    windows = F.pad(k, (0, 0, d - 1, d - 1)).unfold(2, w, 1)[:, :, m : m + c]  # (B, H, C, Dh, W)
    work = lse.dtype
    band = (q.to(work).unsqueeze(-2) @ windows.to(work)).squeeze(-2) + rel[..., 1 : 2 * d].to(work)  # (B, H, C, W)
    keys = m + torch.arange(c, device=q.device)[:, None] + torch.arange(1 - d, d, device=q.device)  # (C, W)
    allowed = (keys >= 0) & (keys < kk)  # (C, W)
    if block_mask is not None:
        rows = torch.arange(b, device=q.device)[:, None, None]
        queries = torch.arange(c, device=q.device)[None, :, None]
        allowed = allowed & block_mask.mask_mod(rows, 0, queries, keys.clamp(0, kk - 1)[None])  # (B, C, W)
    probs = (band - lse[..., None]).exp()
    return probs.masked_fill(~allowed.expand(b, c, w)[:, None], 0.0)
