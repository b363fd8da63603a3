"""Shaw et al. (2018) relative position representations, without (L, L, Dh) tensors.

Per head, with learned tables aK, aV of 2k+1 rows (shared across heads, as in
the paper) and bucket d(i, j) = clip(j - i, -k, k):

    logit_ij = q_i . (k_j + aK_d(i,j)) / sqrt(Dh)
    z_i      = sum_j p_ij (v_j + aV_d(i,j))

Key term: S = q aK^T is only (B, H, C, 2k+1); expand it to (B, H, C, K).
Value term: sum_j p_ij aV_d(i,j) = sum_d (sum_{j in bucket d} p_ij) aV_d, so the
probabilities are summed into 2k+1 bins and multiplied by aV. The buckets form a
band (diagonals plus two triangles), so expanding and summing use strided views,
not an index gather / scatter (``asr.model.scorers.band``). On CUDA the whole scorer runs
in FlexAttention (``asr.model.scorers.shaw_flex``).
"""

from __future__ import annotations


import torch
from torch import Tensor, nn

from asr.model.scorers.attend import attend, mask_before_softmax
from asr.model.scorers.band import add_band_, band_expand, band_expand_summed, band_sums, one_edge_bucket
from asr.model.scorers.base import ClippedDistanceScorer, check_qkv, prepare_mask
from asr.model.scorers.blocked import Mask, PositionTerm, blocked_attention, needs_grad, use_blocked
from asr.model.scorers.routes import FLEX, route_for
from asr.model.scorers.shaw_flex import shaw_flex


class ShawScorer(ClippedDistanceScorer):
    """Shaw scorer for one layer: ``rel_k``, ``rel_v`` tables (2k+1, Dh), k = max_distance."""

    has_blocked_path = True
    scheme = "shaw"

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, max_distance: int = 16) -> None:
        super().__init__(num_heads, head_dim, dropout, max_distance)
        self.rel_k = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))
        self.rel_v = nn.Parameter(torch.empty(2 * max_distance + 1, head_dim))
        nn.init.normal_(self.rel_k, std=head_dim**-0.5)
        nn.init.normal_(self.rel_v, std=head_dim**-0.5)

    def _logits(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled unmasked logits as (B*H, C, K), a fresh tensor (not a view)."""
        b, h, c, dh = q.shape
        kk = k.size(2)
        q_s = (q * self.scale).reshape(b * h, c, dh)
        rel = torch.matmul(q_s, self.rel_k.t())  # (B*H, C, 2k+1)
        logits = band_expand_summed(rel, kk)  # (B*H, C, K)
        # Accumulate q k^T into the gathered key term: no second (C, K) buffer.
        return logits.baddbmm_(q_s, k.reshape(b * h, kk, dh).transpose(1, 2))

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled unmasked logits (B, H, C, K), the same numbers ``forward`` uses."""
        return self._logits(q, k).view(q.size(0), q.size(1), q.size(2), k.size(2))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        b, h, c, kk, _ = check_qkv(q, k, v)
        if route_for(self.scheme, q.device) == FLEX and not (self.training and self.dropout > 0.0):
            return shaw_flex(q * self.scale, k, v, mask, self.rel_k, self.rel_v)
        if use_blocked(b, self.num_heads, c, kk, needs_grad(q, k, v, self.rel_k)):
            q_s = q * self.scale
            rel = torch.matmul(q_s, self.rel_k.t())  # (B, H, C, 2k+1)
            return blocked_attention(q_s, k, v, mask, ShawTerm(rel), rel_v=self.rel_v,
                                     dropout=self.dropout if self.training else 0.0)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        logits = self._logits(q, k)  # (B*H, C, K)
        if mask4 is not None:
            # Masked while 3-d: the in-place fill must hit the tensor, not a view of it.
            logits = mask_before_softmax(logits, mask4.expand(b, h, -1, -1).reshape(b * h, -1, kk))
        out = attend(logits.view(b, h, c, kk), v, None, self.dropout, self.training, self.rel_v)
        return out if row_valid is None else out * row_valid


class ShawTerm(PositionTerm):
    """The blocked attention's (``asr.model.scorers.blocked``) term for shaw, the key term:
    tensor rel (B, H, C, N) = (q / sqrt(Dh)) aK^T, read per pair at the buckets."""

    def start(self, batch, heads, queries, keys, offset, backward) -> None:
        super().start(batch, heads, queries, keys, offset, backward)
        self.rel = self.tensors[0].reshape(batch * heads, queries, -1)  # (B*H, C, N)
        if backward:
            self.grad_rel = torch.zeros_like(self.rel)

    def logits(self, q, k, a0, a1, b0, b1):
        offset = self.pair_offset(a0, b0)
        if one_edge_bucket(offset, self.rel.size(-1), a1 - a0, b1 - b0):
            return add_band_(torch.bmm(q, k.transpose(1, 2)), self.rel[:, a0:a1], offset)
        # The gathered key term is the fresh tensor q k^T accumulates into: no second (c, k) pass.
        return band_expand(self.rel[:, a0:a1], b1 - b0, offset).baddbmm_(q, k.transpose(1, 2))

    def backward(self, ds, a0, a1, b0, b1) -> None:
        d = (self.rel.size(-1) - 1) // 2
        self.grad_rel[:, a0:a1] += band_sums(ds, d, self.pair_offset(a0, b0))

    def finish(self):
        return [self.grad_rel.view(self.tensors[0].shape)]
