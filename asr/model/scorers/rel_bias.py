"""T5 / Swin style relative bias: a learned scalar per head and clipped distance.

    logit_ij = q_i . k_j / sqrt(Dh) + table[h, clip(j - i, -k, k) + k]

On CUDA (``asr.model.scorers.routes``) FlexAttention's score_mod reads the table at each pair's
bucket (:func:`table_kernel`), or SDPA takes the expanded (H, C, K) table as a float bias.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.attention.flex_attention import flex_attention

from asr.model.scorers.band import add_band_, band_expand_summed, band_sums
from asr.model.scorers.base import ClippedDistanceScorer, check_qkv
from asr.model.scorers.blocked import Mask, PositionTerm, blocked_attention, needs_grad, use_blocked
from asr.model.scorers.fused import flex_attend, lse_request, sdpa_attend
from asr.model.scorers.routes import EXPLICIT, FLEX, route_for


class RelBiasScorer(ClippedDistanceScorer):
    """Relative-bias scorer for one layer: ``rel_bias`` table (H, 2k+1), k = max_distance."""

    has_blocked_path = True
    scheme = "rel_bias"

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, max_distance: int = 16) -> None:
        super().__init__(num_heads, head_dim, dropout, max_distance)
        self.rel_bias = nn.Parameter(torch.empty(num_heads, 2 * max_distance + 1))
        nn.init.normal_(self.rel_bias, std=0.02)

    def bias(self, queries: int, keys: int) -> Tensor:
        """The (H, C, K) logit bias for C queries that are the last of K keys.

        Why band_expand_summed: indexing the table by the (C, K) bucket index has a backward that adds
        C*K gradients into 2k+1 entries a head, which a GPU serializes on atomic adds (dense rel_bias
        was the slowest scheme on an H200); its backward sums each bucket's band with dense reductions.
        """
        table = self.rel_bias[:, None, :].expand(self.num_heads, queries, self.rel_bias.size(1))  # (H, C, N)
        return band_expand_summed(table, keys)  # (H, C, K)

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        logits = torch.matmul(q * self.scale, k.transpose(-2, -1))  # (B, H, C, K)
        return logits.add_(self.bias(q.size(2), k.size(2)))

    def _fused(self, route: str, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        """The ``flex`` or ``sdpa_bias`` route (``asr.model.scorers.routes``)."""
        c, kk = q.size(2), k.size(2)
        dropout = self.dropout if self.training else 0.0
        if route == FLEX and dropout == 0.0:
            first_query = torch.full((), kk - c, device=q.device)  # a tensor: no recompile per cache length
            return flex_attend(q * self.scale, k, v, mask, table_kernel, self.rel_bias, first_query)
        return sdpa_attend(q * self.scale, k, v, mask, dropout, bias=self.bias(c, kk)[None])  # bias (1, H, C, K)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Tensor:
        b, _, c, kk, _ = check_qkv(q, k, v)
        route = route_for(self.scheme, q.device)
        if route != EXPLICIT:
            return self._fused(route, q, k, v, mask)
        if use_blocked(b, self.num_heads, c, kk, needs_grad(q, k, v, self.rel_bias)):
            return blocked_attention(q * self.scale, k, v, mask, RelBiasTerm(self.rel_bias),
                                     dropout=self.dropout if self.training else 0.0)
        return super().forward(q, k, v, mask)


def table_kernel(q: Tensor, k: Tensor, v: Tensor, block_mask, table: Tensor, first_query: Tensor,
                 return_lse: bool = False):
    """The flex kernel of rel_bias: the score_mod adds ``table`` (H, 2k+1) at each pair's bucket,
    clip(key - query time, -k, k) + k with the queries from local time ``first_query`` (0-dim) on;
    no (C, K) tensor is built."""
    d = (table.size(1) - 1) // 2

    def score_mod(score, b, h, qi, kj):
        return score + table[h, (kj - qi - first_query).clamp(-d, d) + d]

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=1.0,
                          return_aux=lse_request(return_lse))


class RelBiasTerm(PositionTerm):
    """The blocked attention's (``asr.model.scorers.blocked``) term for rel_bias:
    tensor table (H, N), one scalar per head and clipped distance."""

    def start(self, batch, heads, queries, keys, offset, backward) -> None:
        super().start(batch, heads, queries, keys, offset, backward)
        if backward:
            self.grad_table = torch.zeros_like(self.tensors[0])

    def logits(self, q, k, a0, a1, b0, b1):
        s = torch.bmm(q, k.transpose(1, 2))  # (B*H, c, k)
        table = self.tensors[0]  # (H, N)
        c = a1 - a0
        per_head = table[:, None, :].expand(self.heads, c, table.size(1))  # (H, c, N)
        view = s.view(self.batch, self.heads, c, b1 - b0)
        add_band_(view, per_head, self.pair_offset(a0, b0))
        return s

    def backward(self, ds, a0, a1, b0, b1) -> None:
        d = (self.tensors[0].size(1) - 1) // 2
        per_row = band_sums(ds.view(self.batch, self.heads, a1 - a0, b1 - b0).sum(0), d,
                            self.pair_offset(a0, b0))  # (H, c, N)
        self.grad_table += per_row.sum(1)

    def finish(self):
        return [self.grad_table]
