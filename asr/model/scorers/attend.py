"""Masked softmax and value mixing shared by the explicit-logit scorers.

Axis legend: B batch, H heads, C queries, K keys, Dh head dim, N = 2k+1
distance buckets (Shaw).

Why a custom autograd Function: on CPU every fresh (B, H, C, K) buffer costs
page faults on the order of a full pass over it, and plain autograd allocates
three in backward (grad of the probabilities, the softmax gradient, and for Shaw
a second probability gradient plus their sum). :class:`_SoftmaxValues` needs one:
the softmax backward runs in place, using the flash-attention identity
``sum_j p_ij dp_ij = g_i . out_i`` (true because out_i = sum_j p_ij value_ij).
With attention dropout in training the plain autograd path is used instead, and so it
is under ``torch.compile`` / ``torch.export`` tracing: the graph compiler plans its own
buffers and fuses the mask, softmax and its backward, and it cannot trace a Function that
modifies its input in place (``mark_dirty``) when the next one writes to that output again.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from asr.model.scorers.band import band_expand, band_sums
from asr.model.tracing import tracing


def _bucket_sums(probs: Tensor, rel_v: Tensor) -> Tensor:
    """Sum each row's probabilities per distance bucket: (B, H, C, K) -> (B, H, C, N), N = rows of rel_v."""
    return band_sums(probs, (rel_v.size(0) - 1) // 2)


class _MaskBeforeSoftmax(torch.autograd.Function):
    """``logits.masked_fill_(~mask, -inf)`` whose backward passes the gradient through.

    Only valid right before a softmax: masked logits get probability 0, so the
    softmax gradient there is already exactly 0 and the usual masked_fill
    backward (a fresh (C, K) buffer) would only rewrite zeros.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, mask4: Tensor) -> Tensor:
        ctx.mark_dirty(logits)
        return logits.masked_fill_(~mask4, float("-inf"))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _SoftmaxValues(torch.autograd.Function):
    """out = softmax(logits) v [+ bucket_sums(probs) rel_v] with an in-place backward.

    Args (forward):
        logits: (B, H, C, K) masked logits; v: (B, H, K, Dh);
        rel_v: None or (N, Dh) Shaw value table, N = 2k + 1 clipped-distance buckets
            (``asr.model.scorers.band``).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, v: Tensor, rel_v: Optional[Tensor]) -> Tensor:
        probs = torch.softmax(logits, dim=-1)  # (B, H, C, K)
        out = torch.matmul(probs, v)  # (B, H, C, Dh)
        bins = None
        if rel_v is not None:
            bins = _bucket_sums(probs, rel_v)  # (B, H, C, N)
            out = out.add_(torch.matmul(bins, rel_v))
        ctx.save_for_backward(probs, v, out, rel_v, bins)
        ctx.dtypes = (logits.dtype, v.dtype, None if rel_v is None else rel_v.dtype)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        probs, v, out, rel_v, bins = ctx.saved_tensors
        # Under autocast the saved tensors can mix dtypes (fp32 softmax, bf16 v) and
        # backward runs outside autocast: work in the probabilities' dtype.
        work = probs.dtype
        grad, v, out = grad.to(work), v.to(work), out.to(work)
        if rel_v is not None:
            rel_v, bins = rel_v.to(work), bins.to(work)
        b, h, c, kk = probs.shape
        dh = v.size(-1)
        grad3 = grad.reshape(b * h, c, dh)
        v_t = v.reshape(b * h, kk, dh).transpose(1, 2)  # (B*H, Dh, K)
        grad_rel_v = None
        if rel_v is None:
            grad_logits = torch.bmm(grad3, v_t)  # (B*H, C, K): d out / d probs
        else:
            # d/d p_ij of p_ij rel_v[bucket(i,j)] is g_i . rel_v[bucket]: expand the band, then add g v^T.
            grad_logits = band_expand(torch.matmul(grad3, rel_v.t()), kk)  # (B*H, C, K)
            grad_logits = grad_logits.baddbmm_(grad3, v_t)
            grad_rel_v = torch.matmul(bins.reshape(-1, bins.size(-1)).t(), grad.reshape(-1, dh))  # (N, Dh)
        row_dot = (grad * out).sum(-1).reshape(b * h, c, 1)  # sum_j p_ij dp_ij
        grad_logits = grad_logits.sub_(row_dot).mul_(probs.reshape(b * h, c, kk))
        grad_v = torch.matmul(probs.transpose(-2, -1), grad)  # (B, H, K, Dh)
        logits_dtype, v_dtype, rel_v_dtype = ctx.dtypes
        if grad_rel_v is not None:
            grad_rel_v = grad_rel_v.to(rel_v_dtype)
        return grad_logits.view(b, h, c, kk).to(logits_dtype), grad_v.to(v_dtype), grad_rel_v


def mask_before_softmax(logits: Tensor, mask: Tensor) -> Tensor:
    """Fill ``logits`` with -inf where ``mask`` (broadcastable bool) is False, in place
    (out of place while tracing, see the module docstring).

    ``logits`` must be a fresh tensor that is not a view (autograd would copy the
    whole gradient for an in-place op on a view) and must go straight into a softmax.
    """
    if tracing():
        return logits.masked_fill(~mask, float("-inf"))
    return _MaskBeforeSoftmax.apply(logits, mask)


def attend(
    logits: Tensor,
    v: Tensor,
    mask4: Optional[Tensor],
    dropout: float,
    training: bool,
    rel_v: Optional[Tensor] = None,
) -> Tensor:
    """Masked softmax over keys, attention dropout, value mixing.

    Args:
        logits: (B, H, C, K) scaled logits; a fresh non-view tensor when masked (in place).
        v: (B, H, K, Dh).
        mask4: (B, 1, C|1, K) bool from ``prepare_mask`` (no empty rows), or None.
        rel_v: Shaw's value table (N, Dh) over clipped-distance buckets, or None.
    Returns:
        (B, H, C, Dh).
    """
    if mask4 is not None:
        logits = mask_before_softmax(logits, mask4)
    if not (training and dropout > 0.0) and not tracing():
        return _SoftmaxValues.apply(logits, v, rel_v)
    probs = F.dropout(torch.softmax(logits, dim=-1), p=dropout, training=training)
    out = torch.matmul(probs, v)
    if rel_v is not None:
        out = out + torch.matmul(_bucket_sums(probs, rel_v), rel_v)
    return out
