"""Wenet's ``rel_pos`` attention as Wenet ships it: the position term scores the KEY's absolute time.

Wenet's ``RelPositionMultiHeadedAttention`` keeps Transformer-XL's learned ``pos_bias_u``,
``pos_bias_v`` and a bias-free ``linear_pos``, but comments ``rel_shift`` out. Its table
``pos_emb`` holds the sinusoid of the keys' own stream times (``forward_chunk`` asks for
positions ``offset - cache .. offset + chunk``), so per head, for query i and key j at
absolute encoder time t_j:

    logit_ij = ((q_i + u) . k_j + (q_i + v) . W_P PE(t_j)) / sqrt(Dh)

The second term depends on where the key sits in the stream, not on i - j: a query
scores key positions, and the same window of audio scores differently at another
time. That is exactly what the ablation compares with ``rel_xl``.

Here the table is computed for the times asked (float64 angles, no 5000-frame limit).
A call's queries are the last C of its K keys, so the keys sit at
``start_time - (K - C) + [0, K)`` where ``start_time`` is the absolute time of the first
query: 0 offline, the stream clock when streaming, one value per row for stacked streams
(rows left-padded to a common cache length keep that relation; their padding is masked).

Both logit terms are one dot product over 2 Dh channels, ``[q + u, q + v] . [k ; P]``, with
no term per (query, key) pair: the long-input path is therefore the plain blocked attention
(``asr.model.scorers.blocked``, online softmax, nothing of size C x K kept) on those joint
queries and keys, and the values as they are.

Axis legend: B batch, H heads, C queries, K keys, Dh head dim, D = H * Dh.
"""

from __future__ import annotations

from typing import Union

import torch
from torch import Tensor

from asr.model.scorers.attend import attend
from asr.model.scorers.base import AttentionScorer, check_qkv, prepare_mask, xl_position_parameters
from asr.model.scorers.blocked import Mask, PositionTerm, blocked_attention, needs_grad, use_blocked
from asr.model.scorers.fused import sdpa_attend
from asr.model.scorers.routes import JOINT_SDPA, route_for
from asr.model.sinusoid import sinusoid_table

StartTime = Union[int, Tensor]


def key_times(start_time: StartTime, queries: int, keys: int, device: torch.device) -> Tensor:
    """Absolute times of the K keys of a call whose C queries start at ``start_time``.

    Args:
        start_time: int, or (B,) int tensor (one clock per row).
    Returns:
        (1, K) or (B, K) int64.
    """
    local = torch.arange(keys, device=device) - (keys - queries)  # (K,): key b relative to the first query
    if isinstance(start_time, Tensor):
        if start_time.dim() != 1:
            raise ValueError(f"start_time tensor must be (B,), got shape {tuple(start_time.shape)}.")
        return start_time.to(device=device, dtype=torch.long)[:, None] + local  # (B, K)
    return (local + int(start_time))[None]  # (1, K)


class WenetRelScorer(AttentionScorer):
    """Wenet rel_pos scorer for one layer: learned ``pos_bias_u``, ``pos_bias_v`` (H, Dh) and a
    bias-free ``linear_pos`` (D -> D) projecting the sinusoid of each key's absolute time.

    Fast path: the two logit terms as ONE matmul, ``[q + u, q + v] . [k ; P]`` over 2 Dh
    channels, so no second (B, H, C, K) buffer is made for the position term; then masked
    softmax. Long calls (:func:`~asr.model.scorers.blocked.use_blocked`) attend the same joint
    queries and keys in blocks. :func:`wenet_rel_reference` in the tests is the float64 oracle.
    """

    absolute_keys = True
    has_blocked_path = True
    scheme = "wenet_rel"

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__(num_heads, head_dim, dropout)
        self.linear_pos, self.pos_bias_u, self.pos_bias_v = xl_position_parameters(num_heads, head_dim)

    def position_keys(self, times: Tensor, like: Tensor) -> Tensor:
        """P = W_P PE(t) for key times (R, K), R = 1 or B: (R, H, Dh, K) in the dtype of ``like``."""
        rows, keys = times.shape
        d_model = self.num_heads * self.head_dim
        # float64 angles: float32 loses the fast channels' phase at thousands of frames.
        table = sinusoid_table(times.reshape(-1).to(torch.float64), d_model).to(like.dtype)  # (R*K, D)
        p = self.linear_pos(table).view(rows, keys, self.num_heads, self.head_dim)  # (R, K, H, Dh)
        return p.permute(0, 2, 3, 1)  # (R, H, Dh, K)

    def joint(self, q: Tensor, k: Tensor, start_time: StartTime = 0) -> tuple[Tensor, Tensor]:
        """The two terms as one: scaled queries ``[q + u, q + v] / sqrt(Dh)`` (B, H, C, 2Dh) and
        keys ``[k ; P]`` (B, H, K, 2Dh), P the projected sinusoid of each key's absolute time."""
        b, h, c, dh = q.shape
        kk = k.size(2)
        times = key_times(start_time, c, kk, q.device)  # (1|B, K)
        if times.size(0) not in (1, b):
            raise ValueError(f"start_time has {times.size(0)} rows for a batch of {b}.")
        p = self.position_keys(times, q).expand(b, h, dh, kk)  # (B, H, Dh, K)
        # Scale folded into the (small) query side instead of the (C, K) logits.
        q_u = torch.add(self.pos_bias_u[:, None, :] * self.scale, q, alpha=self.scale)  # (B, H, C, Dh)
        q_v = torch.add(self.pos_bias_v[:, None, :] * self.scale, q, alpha=self.scale)
        return torch.cat((q_u, q_v), dim=-1), torch.cat((k, p.transpose(-2, -1)), dim=-1)

    def logits(self, q: Tensor, k: Tensor, start_time: StartTime = 0) -> Tensor:
        """Scaled unmasked logits (B, H, C, K), a fresh tensor; ``start_time`` as in the module docstring."""
        queries, keys = self.joint(q, k, start_time)
        return torch.matmul(queries, keys.transpose(-2, -1))  # (B, H, C, K)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask, start_time: StartTime = 0) -> Tensor:
        """Attend (shapes as :meth:`AttentionScorer.forward`); ``start_time``: absolute time of the first query."""
        b, _, c, kk, _ = check_qkv(q, k, v)
        if route_for(self.scheme, q.device) == JOINT_SDPA:  # the joint logits are exact in plain SDPA
            queries, keys = self.joint(q, k, start_time)
            return sdpa_attend(queries, keys, v, mask, self.dropout if self.training else 0.0)
        if use_blocked(b, self.num_heads, c, kk, needs_grad(q, k, v, self.pos_bias_u)):
            # No pair term: the base PositionTerm's q k^T over the 2 Dh joint channels is the whole logit.
            queries, keys = self.joint(q, k, start_time)
            return blocked_attention(queries, keys, v, mask, PositionTerm(),
                                     dropout=self.dropout if self.training else 0.0)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        out = attend(self.logits(q, k, start_time), v, mask4, self.dropout, self.training)  # (B, H, C, Dh)
        return out if row_valid is None else out * row_valid


__all__ = ["WenetRelScorer", "key_times"]
