"""The scorer interface, its mask handling, and the plain (position-free) scorer.

Axis legend: B batch, H heads, C queries, K = M + C keys (M cached frames),
Dh head dim. For every scorer with a position term the queries are the LAST C
of the K keys, so a cache needs no special case: query a sits at local time
M + a, key b at local time b.
"""

from __future__ import annotations

import contextlib
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from asr.model.masks import ChunkMask
from asr.model.scorers.attend import attend


def per_head_dim(d_model: int, num_heads: int) -> int:
    """Dh = D / H, the one place a model size is checked against its head count."""
    if d_model <= 0 or num_heads <= 0 or d_model % num_heads != 0:
        raise ValueError(f"d_model ({d_model}) must be a positive multiple of num_heads ({num_heads}).")
    return d_model // num_heads


def check_max_distance(scheme: str, max_distance: int) -> None:
    """The clipped-distance schemes' (shaw, rel_bias) bound k must be >= 0."""
    if max_distance < 0:
        raise ValueError(f"{scheme} max_distance ({max_distance}) must be >= 0.")


def check_mask(mask: Union[None, Tensor, ChunkMask], batch: int, queries: int, keys: int) -> None:
    """A bool (B, C, K) / (B, 1, K) mask, or a :class:`ChunkMask` of B rows over K = C frames, or None."""
    if mask is None:
        return
    if isinstance(mask, ChunkMask):
        if mask.batch != batch or mask.size != keys or queries != keys:
            raise ValueError(f"ChunkMask of B={mask.batch}, T'={mask.size} does not fit (B, C, K) = "
                             f"({batch}, {queries}, {keys}) (it describes self-attention, C = K = T').")
        return
    if mask.dtype != torch.bool:
        raise ValueError(f"attention mask must be bool (True = may attend), got {mask.dtype}.")
    if mask.dim() != 3 or mask.size(0) != batch or mask.size(1) not in (1, queries) or mask.size(2) != keys:
        raise ValueError(
            f"attention mask shape {tuple(mask.shape)} does not match (B, C, K) = "
            f"({batch}, {queries}, {keys}) or (B, 1, K)."
        )


def prepare_mask(
    mask: Union[None, Tensor, ChunkMask], batch: int, queries: int, keys: int
) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """Validate a bool attention mask and make rows without any allowed key safe.

    A row with no allowed key would give softmax(-inf, ..., -inf) = NaN, and the NaN
    would also poison the gradients of every other row through the shared k, v.
    Such rows are therefore opened to all keys here and zeroed afterwards by
    multiplying the scorer output with ``row_valid``.

    Args:
        mask: None, bool (B, C, K) / (B, 1, K), True = may attend, or a :class:`ChunkMask`
            (made dense here: the explicit paths need the tensor).
    Returns:
        (mask4 (B, 1, C|1, K) bool or None, row_valid (B, 1, C|1, 1) bool or None).
    """
    check_mask(mask, batch, queries, keys)
    if mask is None:
        return None, None
    if isinstance(mask, ChunkMask):
        mask = mask.dense()
    row_valid = mask.any(dim=-1, keepdim=True)  # (B, C|1, 1)
    mask = mask | ~row_valid
    return mask.unsqueeze(1), row_valid.unsqueeze(1)  # (B,1,C|1,K), (B,1,C|1,1)


def check_qkv(q: Tensor, k: Tensor, v: Tensor, queries_last: bool = True) -> tuple[int, int, int, int, int]:
    """Check scorer inputs; returns (B, H, C, K, Dh).

    ``queries_last``: the C queries are the last C of the K keys, so K >= C (every
    scorer with a position term; cross-attention has no such relation).
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be (B, H, *, Dh); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}."
        )
    b, h, c, dh = q.shape
    kk = k.size(2)
    if k.shape != (b, h, kk, dh) or v.shape != k.shape or (queries_last and kk < c):
        raise ValueError(
            f"need q (B,H,C,Dh), k and v (B,H,K,Dh){' with K >= C' if queries_last else ''}; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}."
        )
    return b, h, c, kk, dh


def xl_position_parameters(num_heads: int, head_dim: int) -> tuple[nn.Linear, nn.Parameter, nn.Parameter]:
    """Transformer-XL's learned position parameters (rel_xl, wenet_rel): a bias-free
    ``linear_pos`` (D -> D) for the sinusoid table and ``pos_bias_u``, ``pos_bias_v`` (H, Dh),
    Xavier-initialised as Wenet does."""
    d_model = num_heads * head_dim
    u, v = nn.Parameter(torch.empty(num_heads, head_dim)), nn.Parameter(torch.empty(num_heads, head_dim))
    nn.init.xavier_uniform_(u)
    nn.init.xavier_uniform_(v)
    return nn.Linear(d_model, d_model, bias=False), u, v


class AttentionScorer(nn.Module):
    """Per-layer attention core: per-head q, k, v in, per-head output out.

    Subclasses hold the layer's positional parameters (if any).

    Args:
        num_heads: H.
        head_dim: Dh; logits are scaled by 1/sqrt(Dh).
        dropout: dropout on the attention probabilities, training only.
    """

    # Queries are the last C of the K keys (K >= C); checked by ``check_qkv``.
    queries_last = True
    # Builds (B, H, C, K) logits itself (not SDPA's fused kernel), and has the exact blocked
    # path of asr.model.scorers.blocked for long calls: what the decoding memory guard assumes.
    explicit_logits = True
    has_blocked_path = False
    # The logits depend on the keys' absolute stream time (wenet_rel): ``forward`` then
    # takes ``start_time``, the absolute time of the first query (int or (B,) tensor).
    absolute_keys = False

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        if num_heads <= 0 or head_dim <= 0:
            raise ValueError(f"num_heads ({num_heads}) and head_dim ({head_dim}) must be > 0.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"attention dropout ({dropout}) must be in [0, 1).")
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dropout = dropout
        self.scale = head_dim**-0.5

    def logits(self, q: Tensor, k: Tensor) -> Tensor:
        """Scaled, unmasked logits (B, H, C, K) for q (B,H,C,Dh), k (B,H,K,Dh)."""
        return torch.matmul(q * self.scale, k.transpose(-2, -1))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        """Attend.

        Args:
            q: (B, H, C, Dh) queries, the last C of the K key times.
            k: (B, H, K, Dh) keys (cached M + new C), v: (B, H, K, Dh) values.
            mask: None or bool (B, C, K) / (B, 1, K), True = may attend.
        Returns:
            (B, H, C, Dh); zeros for query rows with no allowed key.
        """
        b, _, c, kk, _ = check_qkv(q, k, v)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        out = attend(self.logits(q, k), v, mask4, self.dropout, self.training)  # (B, H, C, Dh)
        return out if row_valid is None else out * row_valid

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, dropout={self.dropout}"


# SDPA's kernels on CUDA, without cuDNN's: cuDNN builds an execution plan for every new shape
# (about 0.1 s of host time a call on an H200), and duration-bucketed batches and their token
# lengths bring a new shape at almost every training step, which made a bf16 step of a small model
# five times slower than its fp32 step. The other kernels need no plan.
CUDA_SDPA_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


class PlainScorer(AttentionScorer):
    """Scaled dot-product attention with no positional term (abs_sin, abs_learned, none,
    and the decoder's self- and cross-attention).

    Fast path: ``F.scaled_dot_product_attention`` with a bool mask (the mask carries
    no gradient, so SDPA keeps its fused kernel; a float mask would fall to the
    slow math kernel on CPU). The inherited ``logits`` / :meth:`reference` path is
    the oracle. Without a position term the keys need not end at the queries, so
    K < C (cross-attention to a short memory) is allowed.
    """

    queries_last = False
    explicit_logits = False

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        b, _, c, kk, _ = check_qkv(q, k, v, self.queries_last)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        kernels = sdpa_kernel(list(CUDA_SDPA_BACKENDS)) if q.is_cuda else contextlib.nullcontext()
        with kernels:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask4, dropout_p=self.dropout if self.training else 0.0,
                scale=self.scale,
            )  # (B, H, C, Dh)
        return out if row_valid is None else out * row_valid

    def reference(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        """Explicit softmax path without dropout; the oracle for :meth:`forward`."""
        b, _, c, kk, _ = check_qkv(q, k, v, self.queries_last)
        mask4, row_valid = prepare_mask(mask, b, c, kk)
        logits = AttentionScorer.logits(self, q, k)
        if mask4 is not None:
            logits = logits.masked_fill(~mask4, float("-inf"))
        out = torch.matmul(torch.softmax(logits, dim=-1), v)  # (B, H, C, Dh)
        return out if row_valid is None else out * row_valid


class ClippedDistanceScorer(AttentionScorer):
    """Base of the scorers with learned tables over clip(j - i, -k, k) (shaw, rel_bias).

    Args:
        max_distance: k; distances beyond +-k share the edge rows.
    """

    scheme = ""  # the position scheme's name, for error messages

    def __init__(self, num_heads: int, head_dim: int, dropout: float = 0.0, max_distance: int = 16) -> None:
        super().__init__(num_heads, head_dim, dropout)
        check_max_distance(self.scheme, max_distance)
        self.max_distance = max_distance

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_distance={self.max_distance}"
