"""T5 / Swin style relative bias: a learned scalar per head and clipped distance.

    logit_ij = q_i . k_j / sqrt(Dh) + table[h, clip(j - i, -k, k) + k]
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from asr.model.scorers.band import clipped_distance_index
from asr.model.scorers.base import ClippedDistanceScorer, check_qkv
from asr.model.scorers.blocked import Mask, RelBiasTerm, blocked_attention, needs_grad, use_blocked


class RelBiasScorer(ClippedDistanceScorer):
    """Relative-bias scorer for one layer: ``rel_bias`` table (H, 2k+1), k = max_distance."""

    has_blocked_path = True
    scheme = "rel_bias"

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, max_distance: int = 16) -> None:
        super().__init__(num_heads, head_dim, dropout, max_distance)
        self.rel_bias = nn.Parameter(torch.empty(num_heads, 2 * max_distance + 1))
        nn.init.normal_(self.rel_bias, std=0.02)

    def bias(self, queries: int, keys: int) -> Tensor:
        """The (H, C, K) logit bias for C queries that are the last of K keys."""
        index = clipped_distance_index(queries, keys, self.max_distance, self.rel_bias.device)  # (C, K)
        return self.rel_bias[:, index]  # (H, C, K)

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        logits = torch.matmul(q * self.scale, k.transpose(-2, -1))  # (B, H, C, K)
        return logits.add_(self.bias(q.size(2), k.size(2)))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        b, _, c, kk, _ = check_qkv(q, k, v)
        if use_blocked(b, self.num_heads, c, kk, needs_grad(q, k, v, self.rel_bias)):
            return blocked_attention(q * self.scale, k, v, mask, RelBiasTerm(self.rel_bias),
                                     dropout=self.dropout if self.training else 0.0)
        return super().forward(q, k, v, mask)
