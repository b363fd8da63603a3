"""Multi-head attention for the encoder and the decoder: projections, cache, scorer.

Axis legend: B batch, C new frames or tokens (queries), M cached frames, K keys
(K = M + C for self-attention, K = T' memory frames for cross-attention),
D model dim, H heads, Dh = D / H.

The per-head attention is a scorer: the encoder's position scheme builds one
per layer; without a scheme (the decoder) it is the position-free
:class:`~asr.model.scorers.PlainScorer`, whose bool mask keeps SDPA's fused CPU
kernels. So self-attention with a cache (encoder chunks, decoder steps) and
cross-attention differ only in where the keys and values come from.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from asr.model.positions import PositionScheme
from asr.model.scorers import PlainScorer
from asr.model.scorers.base import per_head_dim


class MultiHeadAttention(nn.Module):
    """Self-attention over cache + new frames, or cross-attention to a memory.

    One (D, 3D) projection ``in_proj`` holds the q, k and v weights (one gemm for
    self-attention; cross-attention uses its q rows on the queries and its k, v
    rows on the memory), and ``out_proj`` merges the heads.

    Args:
        d_model: D, a multiple of ``num_heads``.
        num_heads: H.
        scheme: the encoder's position scheme; it builds this layer's scorer (and so
            this layer's own positional parameters). None: no position term.
        dropout: dropout on the attention probabilities (training only).
    """

    def __init__(
        self, d_model: int, num_heads: int, scheme: Optional[PositionScheme] = None, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.head_dim = per_head_dim(d_model, num_heads)
        self.d_model = d_model
        self.num_heads = num_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        if scheme is None:
            self.scorer = PlainScorer(num_heads, self.head_dim, dropout)
        else:
            self.scorer = scheme.make_scorer(num_heads, self.head_dim, dropout)

    def _heads(self, x: Tensor, rows: slice, parts: int) -> tuple[Tensor, ...]:
        """Project x (B, L, D) with ``in_proj`` rows ``rows`` into ``parts`` per-head (B, H, L, Dh) tensors."""
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"attention input must be (B, L, {self.d_model}), got {tuple(x.shape)}.")
        b, n, _ = x.shape
        y = F.linear(x, self.in_proj.weight[rows], self.in_proj.bias[rows])  # (B, L, parts*D)
        return y.view(b, n, parts, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def _merge(self, out: Tensor) -> Tensor:
        """Scorer output (B, H, C, Dh) -> projected (B, C, D)."""
        b, _, c, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, c, self.d_model))

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor] = None,
        cache: Optional[tuple[Tensor, Tensor]] = None,
        start_time: int | Tensor = 0,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Self-attention from the C new frames to the M cached plus C new frames.

        Args:
            x: (B, C, D) new frames.
            mask: None or bool (B, C, K) / (B, 1, K), True = may attend; K = M + C.
            cache: None or (k, v), each (B, H, M, Dh): projected per-head keys and
                values of the previous frames (rope: before rotation).
            start_time: absolute stream time of the first new frame (int, or (B,) int
                tensor for rows at different times); only a scorer with ``absolute_keys``
                (wenet_rel) reads it, the others are translation invariant or take their
                positions at the input.
        Returns:
            out (B, C, D) and the new cache (k, v), each (B, H, K, Dh) = cache + new;
            the caller trims it to the left context it keeps.
        """
        q, k, v = self._heads(x, slice(None), 3)  # each (B, H, C, Dh)
        if cache is not None:
            k_cache, v_cache = cache
            b = x.size(0)
            expected = (b, self.num_heads, k_cache.size(2) if k_cache.dim() == 4 else -1, self.head_dim)
            if k_cache.dim() != 4 or k_cache.shape != expected or v_cache.shape != k_cache.shape:
                raise ValueError(
                    f"cache must be two (B, H, M, Dh) = ({b}, {self.num_heads}, M, {self.head_dim}) "
                    f"tensors, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}."
                )
            k = torch.cat((k_cache, k), dim=2)  # (B, H, K, Dh)
            v = torch.cat((v_cache, v), dim=2)  # (B, H, K, Dh)
        if self.scorer.absolute_keys:
            return self._merge(self.scorer(q, k, v, mask, start_time=start_time)), (k, v)
        return self._merge(self.scorer(q, k, v, mask)), (k, v)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention keys and values, computed once per memory.

        Args:
            memory: (B, K, D), e.g. the encoder output.
        Returns:
            k, v, each (B, H, K, Dh).
        """
        d = self.d_model
        k, v = self._heads(memory, slice(d, 3 * d), 2)
        return k, v

    def cross(self, x: Tensor, memory_kv: tuple[Tensor, Tensor], mask: Optional[Tensor]) -> Tensor:
        """Cross-attention from x (B, C, D) to the memory behind ``memory_kv`` (from :meth:`memory_kv`).

        Args:
            mask: None or bool (B, C, K) / (B, 1, K), True = may attend.
        Returns:
            (B, C, D).
        """
        (q,) = self._heads(x, slice(0, self.d_model), 1)  # (B, H, C, Dh)
        return self._merge(self.scorer(q, *memory_kv, mask))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # Checkpoints written before the decoder shared this class hold separate
        # w_q, w_k, w_v, w_out linears: stack them into in_proj / out_proj.
        # A partial old layout is left alone: load_state_dict then names the missing keys.
        old = {kind: [f"{prefix}w_{name}.{kind}" for name in ("q", "k", "v", "out")] for kind in ("weight", "bias")}
        if all(key in state_dict for keys in old.values() for key in keys):
            for kind, (q, k, v, out) in old.items():
                stacked = [state_dict.pop(q), state_dict.pop(k), state_dict.pop(v)]
                state_dict[f"{prefix}in_proj.{kind}"] = torch.cat(stacked)  # (3D, D) or (3D,)
                state_dict[f"{prefix}out_proj.{kind}"] = state_dict.pop(out)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
