"""The Transformer sinusoid table, shared by the encoder's position schemes and the decoder.

Angles are computed in float64 and cast to the caller's dtype at the end: in
float32 the fast channels lose their phase at a few thousand positions (an
absolute stream time, or a relative distance over a long utterance).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sinusoid_table(positions: Tensor, dim: int) -> Tensor:
    """Transformer sinusoid at arbitrary (possibly negative) positions.

    Args:
        positions: (N,) float positions; pass float64 (see the module docstring).
        dim: embedding size; channel 2m holds sin(p w_m), 2m+1 cos(p w_m),
            w_m = 10000^(-2m/dim).
    Returns:
        (N, dim) table in ``positions.dtype``.
    """
    half = (dim + 1) // 2
    inv_freq = torch.exp(
        torch.arange(half, device=positions.device, dtype=positions.dtype)
        * (-2.0 * math.log(10000.0) / dim)
    )
    angles = positions[:, None] * inv_freq  # (N, half)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (N, half, 2)
    return table.flatten(1)[:, :dim]  # (N, dim)


def absolute_sinusoids(start: int, length: int, dim: int, like: Tensor) -> Tensor:
    """Rows for the absolute positions start .. start+length-1, angles in float64.

    Returns:
        (length, dim) in the dtype and on the device of ``like``.
    """
    positions = torch.arange(start, start + length, device=like.device, dtype=torch.float64)  # (N,)
    return sinusoid_table(positions, dim).to(like.dtype)
