"""Multi-head self-attention over a chunk plus cached keys/values.

Axis legend: B batch, C new frames (queries), M cached frames, K = M + C keys,
D model dim, H heads, Dh = D / H.

The position scheme's scorer does the per-head attention, so this module is the
same for every scheme: project, append to the cache, score, merge heads.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from asr.model.positions import PositionScheme


class MultiHeadAttention(nn.Module):
    """Self-attention whose queries are the new frames and whose keys are cache + new.

    Args:
        d_model: D, a multiple of ``num_heads``.
        num_heads: H.
        scheme: the encoder's position scheme; it builds this layer's scorer
            (and so this layer's own positional parameters).
        dropout: dropout on the attention probabilities (training only).
    """

    def __init__(self, d_model: int, num_heads: int, scheme: PositionScheme, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model <= 0 or num_heads <= 0 or d_model % num_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be a positive multiple of num_heads ({num_heads}).")
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        # One (D, 3D) projection: a single gemm instead of three for q, k, v.
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.scorer = scheme.make_scorer(num_heads, self.head_dim, dropout)

    def forward(
        self,
        x: Tensor,
        mask: Optional[Tensor] = None,
        cache: Optional[tuple[Tensor, Tensor]] = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Attend from the C new frames to the M cached plus C new frames.

        Args:
            x: (B, C, D) new frames.
            mask: None or bool (B, C, K) / (B, 1, K), True = may attend; K = M + C.
            cache: None or (k, v), each (B, H, M, Dh): projected per-head keys and
                values of the previous frames (rope: before rotation).
        Returns:
            out (B, C, D) and the new cache (k, v), each (B, H, K, Dh) = cache + new;
            the caller trims it to the left context it keeps.
        """
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"x must be (B, C, {self.d_model}), got {tuple(x.shape)}.")
        b, c, _ = x.shape
        qkv = self.in_proj(x).view(b, c, 3, self.num_heads, self.head_dim)  # (B, C, 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, C, Dh)
        if cache is not None:
            k_cache, v_cache = cache
            expected = (b, self.num_heads, k_cache.size(2) if k_cache.dim() == 4 else -1, self.head_dim)
            if k_cache.dim() != 4 or k_cache.shape != expected or v_cache.shape != k_cache.shape:
                raise ValueError(
                    f"cache must be two (B, H, M, Dh) = ({b}, {self.num_heads}, M, {self.head_dim}) "
                    f"tensors, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}."
                )
            k = torch.cat((k_cache, k), dim=2)  # (B, H, K, Dh)
            v = torch.cat((v_cache, v), dim=2)  # (B, H, K, Dh)
        out = self.scorer(q, k, v, mask)  # (B, H, C, Dh)
        out = out.transpose(1, 2).reshape(b, c, self.d_model)  # (B, C, D)
        return self.out_proj(out), (k, v)
