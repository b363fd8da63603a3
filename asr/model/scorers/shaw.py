"""Shaw et al. (2018) relative position representations, without (L, L, Dh) tensors.

Per head, with learned tables aK, aV of 2k+1 rows (shared across heads, as in
the paper) and bucket d(i, j) = clip(j - i, -k, k):

    logit_ij = q_i . (k_j + aK_d(i,j)) / sqrt(Dh)
    z_i      = sum_j p_ij (v_j + aV_d(i,j))

Key term: S = q aK^T is only (B, H, C, 2k+1); gather it to (B, H, C, K).
Value term: sum_j p_ij aV_d(i,j) = sum_d (sum_{j in bucket d} p_ij) aV_d, so the
probabilities are scatter-added into 2k+1 bins and multiplied by aV.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from asr.model.scorers.base import (
    AttentionScorer,
    check_qkv,
    clipped_distance_index,
    prepare_mask,
    softmax_attend,
)


class ShawScorer(AttentionScorer):
    """Shaw scorer for one layer: ``rel_k``, ``rel_v`` tables (2k+1, Dh).

    Args:
        max_distance: k; distances beyond +-k share the edge rows.
    """

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, max_distance: int = 16) -> None:
        super().__init__(num_heads, head_dim, dropout)
        if max_distance < 0:
            raise ValueError(f"shaw max_distance ({max_distance}) must be >= 0.")
        self.max_distance = max_distance
        self.rel_k = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))
        self.rel_v = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))
        nn.init.normal_(self.rel_k, std=head_dim**-0.5)
        nn.init.normal_(self.rel_v, std=head_dim**-0.5)

    def _index(self, q: Tensor, k: Tensor) -> Tensor:
        b, h, c, _ = q.shape
        index = clipped_distance_index(c, k.size(2), self.max_distance, q.device)  # (C, K)
        return index.expand(b, h, c, k.size(2))  # (B, H, C, K), a view

    def logits(self, q: Tensor, k: Tensor, index: Optional[Tensor] = None) -> Tensor:
        """Scaled unmasked logits (B, H, C, K); ``index`` from ``_index`` if the caller has it."""
        if index is None:
            index = self._index(q, k)
        q_s = q * self.scale  # (B, H, C, Dh)
        rel = torch.matmul(q_s, self.rel_k.t())  # (B, H, C, 2k+1)
        logits = torch.matmul(q_s, k.transpose(-2, -1))  # (B, H, C, K)
        return logits.add_(rel.gather(-1, index))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        b, _, c, kk, _ = check_qkv(q, k, v)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        index = self._index(q, k)
        probs = softmax_attend(self.logits(q, k, index), mask4, self.dropout, self.training)
        bins = probs.new_zeros(probs.shape[:-1] + (self.rel_v.size(0),))  # (B, H, C, 2k+1)
        bins = bins.scatter_add_(-1, index, probs)
        out = torch.matmul(probs, v)  # (B, H, C, Dh)
        out = out.add_(torch.matmul(bins, self.rel_v))
        return out if row_valid is None else out * row_valid

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_distance={self.max_distance}"
