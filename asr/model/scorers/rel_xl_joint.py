"""rel_xl's exact logits as plain SDPA over joint channels: the ``joint_sdpa`` route of rel_xl.

Axis legend: B batch, H heads, C queries (the last C of the K keys), K keys, Dh head dim,
D = H * Dh the model dim, F = D rounded up to even (whole sin/cos pairs), J the joint width.

Transformer-XL's position term, per head h, for a query at time i and a key at time j, is
``(q_i + v) . W_h R(i - j)`` with W_h the head's (Dh, D) rows of ``linear_pos`` and R the
sinusoid of the signed distance (channel 2m = sin(r w_m), 2m+1 = cos(r w_m)). Moving W_h to
the query side, ``g_i = (q_i + v) W_h`` (D channels, g_s and g_c per frequency), the term is
``g_i . R(i - j)``, and the sinusoid of a difference is a rotation:

    sin((i-j) w) = sin(iw) cos(jw) - cos(iw) sin(jw)
    cos((i-j) w) = cos(iw) cos(jw) + sin(iw) sin(jw)

so ``g_i . R(i - j) = G_i . R(j)``, R(j) the sinusoid of the KEY's time and G_i the query's g
rotated by its own time, per frequency m:

    G[2m]   = g_c sin(iw) - g_s cos(iw)        (pairs with sin(jw))
    G[2m+1] = g_s sin(iw) + g_c cos(iw)        (pairs with cos(jw))

Both logit terms are then one dot product, ``[q_i + u, G_i] . [k_j ; R(j)] / sqrt(Dh)``, over
Dh + F channels, with no term per (query, key) pair: plain SDPA with the bool mask computes
rel_xl's exact logits with its fused kernels, O((C + K) J) memory, at any length. For an odd D
the last frequency has a sin channel only: g is padded with g_c = 0 and R(j) keeps that
frequency's cos (F = D + 1). Only i - j matters, so the times are local to the call: key b at
b - K // 2 and query a at M + a - K // 2 (M = K - C, the queries are the last C keys), which
keeps every angle below K/2 radians; angles are taken in float64 and cast (fp32 loses the fast
channels' phase at thousands of frames).

Kernels and the value width: the joint width J is Dh + F rounded up to a multiple of 8 (zero
channels; SDPA's memory-efficient CUDA kernel wants 8-aligned head dims in half precision).
CUDA's memory-efficient kernel takes values narrower than the queries, so there v goes in
as it is (8-aligned); the CPU's flash kernel needs one head dim for q, k and v (with unequal ones
SDPA falls to its math kernel, which builds the (C, K) logits), so on the CPU v is zero-padded to
J and the output sliced back to Dh. Attention dropout is SDPA's ``dropout_p`` (on the CPU that
runs the math kernel: its flash kernel has no dropout).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from asr.model.scorers.blocked import Mask
from asr.model.scorers.fused import sdpa_attend
from asr.model.sinusoid import sinusoid_angles

# Joint and value widths are rounded up to this many channels (see the module docstring).
CHANNEL_ALIGN = 8


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def joint_queries_keys(q: Tensor, k: Tensor, pos_bias_u: Tensor, pos_bias_v: Tensor, pos_weight: Tensor,
                       scale: float) -> tuple[Tensor, Tensor]:
    """rel_xl's joint queries and keys: ``[q + u, G] * scale`` and ``[k ; R(j)]``.

    Args:
        q: (B, H, C, Dh) queries, the last C of the K keys; k: (B, H, K, Dh).
        pos_bias_u, pos_bias_v: (H, Dh).
        pos_weight: ``linear_pos.weight`` (D, D), D = H * Dh (P = R W^T).
        scale: 1 / sqrt(Dh), folded into the queries.
    Returns:
        (queries (B, H, C, J), keys (B, H, K, J)): their dot product is rel_xl's scaled logit.
    """
    b, h, c, dh = q.shape
    kk = k.size(2)
    d_model = h * dh
    half = (d_model + 1) // 2
    width = _round_up(dh + 2 * half, CHANNEL_ALIGN)
    origin = kk // 2  # only i - j matters: centring the call's times keeps the angles small
    key_times = torch.arange(kk, device=q.device, dtype=torch.float64) - origin  # (K,)
    angles = sinusoid_angles(key_times, d_model)  # (K, half), float64
    sin_k, cos_k = angles.sin().to(q.dtype), angles.cos().to(q.dtype)  # (K, half) each
    # The query a is key M + a: its angles are rows M.. of the keys'.
    sin_q, cos_q = sin_k[kk - c :], cos_k[kk - c :]  # (C, half)

    q_u = torch.add(pos_bias_u[:, None, :] * scale, q, alpha=scale)  # (B, H, C, Dh)
    q_v = torch.add(pos_bias_v[:, None, :] * scale, q, alpha=scale)
    g = torch.matmul(q_v, pos_weight.view(h, dh, d_model))  # (B, H, C, D): the term is g . R(i - j)
    if d_model % 2:
        g = F.pad(g, (0, 1))  # (B, H, C, 2*half): the last frequency's cos coefficient is 0
    g_s, g_c = g.unflatten(-1, (half, 2)).unbind(-1)  # (B, H, C, half) each
    rotated = torch.stack((g_c * sin_q - g_s * cos_q, g_s * sin_q + g_c * cos_q), dim=-1)  # (B, H, C, half, 2)
    pad = width - dh - 2 * half
    queries = torch.cat((q_u, rotated.flatten(-2)), dim=-1)  # (B, H, C, Dh + 2*half)
    key_table = torch.stack((sin_k, cos_k), dim=-1).flatten(-2)  # (K, 2*half): R(j) with whole pairs
    keys = torch.cat((k, key_table.expand(b, h, kk, 2 * half)), dim=-1)  # (B, H, K, Dh + 2*half)
    if pad:
        queries, keys = F.pad(queries, (0, pad)), F.pad(keys, (0, pad))  # (B, H, C|K, J)
    return queries, keys


def joint_attend(q: Tensor, k: Tensor, v: Tensor, mask: Mask, pos_bias_u: Tensor, pos_bias_v: Tensor,
                 pos_weight: Tensor, scale: float, dropout: float = 0.0) -> Tensor:
    """rel_xl attention through SDPA on the joint channels (arguments as :func:`joint_queries_keys`;
    ``mask`` None, bool (B, C|1, K) or a ChunkMask; ``dropout`` the rate, 0 outside training).

    Returns:
        (B, H, C, Dh); zeros for query rows with no allowed key.
    """
    queries, keys = joint_queries_keys(q, k, pos_bias_u, pos_bias_v, pos_weight, scale)  # (B, H, C|K, J)
    dh = v.size(-1)
    value_width = queries.size(-1) if v.device.type == "cpu" else _round_up(dh, CHANNEL_ALIGN)
    values = F.pad(v, (0, value_width - dh)) if value_width > dh else v  # (B, H, K, Dv)
    return sdpa_attend(queries, keys, values, mask, dropout)[..., :dh]  # (B, H, C, Dh)


__all__ = ["joint_attend", "joint_queries_keys"]
