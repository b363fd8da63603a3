"""The Transformer sinusoid table, shared by the encoder's position schemes and the decoder.

Angles are computed in float64 and cast to the caller's dtype at the end: in
float32 the fast channels lose their phase at a few thousand positions (an
absolute stream time, or a relative distance over a long utterance).

An exported ONNX graph takes another road to the same numbers: runtimes built without
float64 Sin and Cos (sherpa-onnx's) cannot run the float64 one. There each angle's phase is
reduced modulo one turn exactly, in int64 fixed point, and only then taken to float32
(:func:`exported_table`).
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
    if torch.onnx.is_in_onnx_export():
        return exported_table(positions, dim)
    angles = sinusoid_angles(positions, dim)  # (N, half)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (N, half, 2)
    return table.flatten(1)[:, :dim]  # (N, dim)


def sinusoid_angles(positions: Tensor, dim: int) -> Tensor:
    """The angles p w_m of the table's frequencies, w_m = 10000^(-2m/dim), every one of them: for an
    odd ``dim`` the last frequency's cos channel, which the table drops, has its angle here too.

    Args:
        positions: (N,) float positions (float64: see the module docstring).
    Returns:
        (N, ceil(dim / 2)) in ``positions.dtype``.
    """
    half = (dim + 1) // 2
    inv_freq = torch.exp(
        torch.arange(half, device=positions.device, dtype=positions.dtype)
        * (-2.0 * math.log(10000.0) / dim)
    )
    return positions[:, None] * inv_freq  # (N, half)


# Phases in units of 2^-PHASE_BITS of a turn: p * step stays below 2^63 for |p| < 2^25 positions.
PHASE_BITS = 40


def exported_table(positions: Tensor, dim: int) -> Tensor:
    """:func:`sinusoid_table` of integer positions without float64 trigonometry (what an exported graph
    computes). The phase of p w_m is ``p * round(w_m / 2pi * 2^40) mod 2^40`` in int64, exact up to the
    step's rounding, then sin and cos are taken in float32 of an angle below 2 pi. Measured against the
    float64 table: 6e-7 up to |p| = 10^5 (over an hour of 40 ms frames), 3e-6 at 10^6, 1e-4 at 2^25.
    """
    half = (dim + 1) // 2
    steps = [round(10000.0 ** (-2.0 * m / dim) / (2 * math.pi) * 2**PHASE_BITS) for m in range(half)]
    step = torch.tensor(steps, dtype=torch.int64, device=positions.device)  # (half,)
    phase = torch.remainder(positions.to(torch.int64)[:, None] * step, 2**PHASE_BITS)  # (N, half) in [0, 2^40)
    angles = phase.to(torch.float32) * (2 * math.pi / 2**PHASE_BITS)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (N, half, 2)
    return table.flatten(1)[:, :dim].to(positions.dtype)  # (N, dim)


def absolute_sinusoids(start: int, length: int, dim: int, like: Tensor) -> Tensor:
    """Rows for the absolute positions start .. start+length-1, angles in float64.

    Returns:
        (length, dim) in the dtype and on the device of ``like``.
    """
    positions = torch.arange(start, start + length, device=like.device, dtype=torch.float64)  # (N,)
    return sinusoid_table(positions, dim).to(like.dtype)
