"""Transformer-XL relative attention (Dai et al. 2019, section 3.3) with a real rel_shift.

Per head, with r = i - j (query time minus key time):

    logit_ij = ((q_i + u) . k_j + (q_i + v) . W_R R_r) / sqrt(Dh)

R is a sinusoid over the SIGNED distance r, computed for the lengths asked (no
max_len). In one call r spans [-(C-1), K-1]: the K + C - 1 rows of P = W_R R are
ordered r = K-1 down to -(C-1), BD = (q + v) P^T is (B, H, C, K+C-1), and query
row a (time M + a) needs the K consecutive columns starting at C-1-a:

    bd[a, b] = BD[a, (C-1-a) + b]        (row a shifted left by C-1-a)

:func:`rel_shift` reads that as a zero-copy strided view; :func:`rel_shift_gather`
is the explicit index version kept as the oracle.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from asr.model.scorers.base import AttentionScorer, sinusoid_table


def rel_shift(bd_full: Tensor, keys: int) -> Tensor:
    """Relative-to-absolute shift as a strided view (no copy).

    Args:
        bd_full: (B, H, C, K+C-1), column n holds distance r = K-1-n.
        keys: K.
    Returns:
        (B, H, C, K) view with out[..., a, b] = bd_full[..., a, C-1-a+b] (distance M+a-b).
    """
    b, h, c, width = bd_full.shape
    if width != keys + c - 1:
        raise ValueError(f"rel_shift needs K+C-1 = {keys + c - 1} columns, got {width} (C={c}, K={keys}).")
    sb, sh, sc, sr = bd_full.stride()
    # Element (a, b) lives at (C-1)*sr + a*(sc-sr) + b*sr: stepping one query row
    # moves one row down and one column left, i.e. stride sc - sr.
    return bd_full.as_strided(
        (b, h, c, keys), (sb, sh, sc - sr, sr), bd_full.storage_offset() + (c - 1) * sr
    )


def rel_shift_gather(bd_full: Tensor, keys: int) -> Tensor:
    """Explicit-index oracle for :func:`rel_shift`; same contract, returns a copy."""
    b, h, c, _ = bd_full.shape
    rows = torch.arange(c, device=bd_full.device)[:, None]
    cols = torch.arange(keys, device=bd_full.device)[None, :]
    index = (c - 1 - rows + cols).expand(b, h, c, keys)  # (B, H, C, K)
    return bd_full.gather(-1, index)


# (dim, device, dtype, inference_mode) -> table over r = N-1 down to -(N-1).
# One growing table per key instead of one per (K, C): dynamic chunk training
# asks for many (K, C) pairs and each is a contiguous slice of the big one.
_TABLES: dict[tuple, Tensor] = {}


def relative_sinusoids(keys: int, queries: int, dim: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Sinusoid rows for r = K-1 down to -(C-1): (K+C-1, dim), a view of a cached table.

    Inference-mode tensors cannot be saved for backward, so they are cached apart.
    """
    key = (dim, device, dtype, torch.is_inference_mode_enabled())
    need = max(keys, queries)
    table = _TABLES.get(key)
    if table is None or (table.size(0) + 1) // 2 < need:
        n = max(need, 2 * ((table.size(0) + 1) // 2) if table is not None else 256)
        # float64 angles: fp32 loses the fast channels' phase at thousands of frames.
        r = torch.arange(n - 1, -n, -1, device=device, dtype=torch.float64)  # (2n-1,)
        table = sinusoid_table(r, dim).to(dtype)
        _TABLES[key] = table
    center = (table.size(0) - 1) // 2  # row of r = 0
    return table[center - (keys - 1) : center + queries]


class RelXLScorer(AttentionScorer):
    """Transformer-XL scorer for one layer: learned ``pos_bias_u``, ``pos_bias_v`` (H, Dh)
    and a bias-free ``linear_pos`` (D -> D) projecting the relative sinusoid.

    Fast path: two matmuls (ac against K keys, BD against K+C-1 positions), a
    strided rel_shift view added in place, masked softmax. Only the (C, K+C-1) band
    of positional logits is computed, so streaming pays for what it uses.
    """

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__(num_heads, head_dim, dropout)
        d_model = num_heads * head_dim
        self.linear_pos = nn.Linear(d_model, d_model, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(num_heads, head_dim))
        self.pos_bias_v = nn.Parameter(torch.empty(num_heads, head_dim))
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def position_keys(self, queries: int, keys: int, like: Tensor) -> Tensor:
        """P = W_R R for r = K-1 down to -(C-1): (H, K+C-1, Dh), dtype/device of ``like``."""
        d_model = self.num_heads * self.head_dim
        table = relative_sinusoids(keys, queries, d_model, like.device, like.dtype)  # (K+C-1, D)
        p = self.linear_pos(table)  # (K+C-1, D); learned, so projected on every call
        return p.view(-1, self.num_heads, self.head_dim).transpose(0, 1)  # (H, K+C-1, Dh)

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled unmasked logits (B, H, C, K); ``forward`` uses exactly this."""
        c, kk = q.size(2), k.size(2)
        p = self.position_keys(c, kk, q)  # (H, K+C-1, Dh)
        # Scale folded into the (small) query side instead of the (C, K) logits.
        q_u = (q + self.pos_bias_u[:, None, :]) * self.scale  # (B, H, C, Dh)
        q_v = (q + self.pos_bias_v[:, None, :]) * self.scale  # (B, H, C, Dh)
        bd_full = torch.matmul(q_v, p.transpose(-2, -1))  # (B, H, C, K+C-1)
        ac = torch.matmul(q_u, k.transpose(-2, -1))  # (B, H, C, K)
        return ac.add_(rel_shift(bd_full, kk))  # (B, H, C, K)
