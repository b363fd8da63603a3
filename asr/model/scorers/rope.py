"""Rotary position embedding (Su et al. 2021) applied inside the scorer.

Positions are local to the call (keys 0..K-1, queries K-C..K-1): RoPE logits
depend only on i - j, so any cache length gives the same result and the cache
stores keys before rotation. Channel m pairs with m + Dh/2 (half-split layout)
and rotates by angle p * base^(-2m/Dh).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from asr.model.scorers.base import PlainScorer


def check_rope_args(head_dim: int, base: float) -> None:
    """Rotation pairs channel m with m + Dh/2, so Dh must be even; base^(-2m/Dh) must decay."""
    if head_dim % 2 != 0:
        raise ValueError(f"rope needs an even head dim (d_model / num_heads), got {head_dim}.")
    if not base > 1.0:
        raise ValueError(f"rope base ({base}) must be > 1.")


def rope_angles(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos and sin (N, Dh/2) of p * base^(-2m/Dh) for positions (N,) float64."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float64) / head_dim)
    angles = positions[:, None] * inv_freq  # (N, Dh/2)
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x_m, x_{m+Dh/2}) of x (B, H, N, Dh) by the angles of cos/sin (N, Dh/2)."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, H, N, Dh/2) each
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RopeScorer(PlainScorer):
    """Rotary scorer: rotate q and k, then the plain SDPA path (no float bias needed)."""

    queries_last = True  # the rotation puts query a at local time K - C + a

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, base: float = 10000.0) -> None:
        super().__init__(num_heads, head_dim, dropout)
        check_rope_args(head_dim, base)
        self.base = float(base)

    def rotate_qk(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Rotated (q, k): keys at local times 0..K-1, queries at K-C..K-1."""
        c, kk = q.size(2), k.size(2)
        positions = torch.arange(kk, device=q.device, dtype=torch.float64)
        cos, sin = rope_angles(positions, self.head_dim, self.base)  # (K, Dh/2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        return rotate(q, cos[kk - c :], sin[kk - c :]), rotate(k, cos, sin)

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        q, k = self.rotate_qk(q, k)
        return super().logits(q, k)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        q, k = self.rotate_qk(q, k)
        return super().forward(q, k, v, mask)

    def reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        """Explicit softmax path on rotated q, k (eval mode); the oracle for ``forward``."""
        q, k = self.rotate_qk(q, k)
        return super().reference(q, k, v, mask)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"
