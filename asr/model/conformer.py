"""Conformer building blocks: feed-forward, convolution module (with cache), block.

Axis letters: B batch, C frames in this call (a chunk, or all T' offline),
D model dim, H heads, Dh head dim, M cached frames, K = M + C keys.

The block is written once for both paths: offline training passes a (B, C, K)
mask and no caches; streaming passes the caches of earlier chunks and no mask.
"""

from __future__ import annotations

import torch
from torch import nn

from asr.model.attention import MultiHeadAttention
from asr.model.positions import PositionScheme


class FeedForward(nn.Module):
    """Position-wise Linear -> SiLU -> Dropout -> Linear: (B, C, D) -> (B, C, D)."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, ffn_dim), nn.SiLU(), nn.Dropout(dropout), nn.Linear(ffn_dim, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


CONV_NORMS = ("layer_norm", "none")
CONV_CAUSAL_PADS = ("depthwise", "input")


class ConvModule(nn.Module):
    """Pointwise conv + GLU, depthwise conv, norm, SiLU, pointwise conv.

    LayerNorm instead of BatchNorm: statistics per frame, so the output of a
    frame never depends on the other rows or the padding of the batch, in train
    mode as well as in eval mode.

    Args:
        d_model: D.
        kernel: depthwise kernel size (odd when not causal).
        causal: pad only on the left with ``kernel - 1`` frames, so a frame sees
            no future frame; required for streaming.
        norm: ``layer_norm``, or ``none`` (no normalization: what an imported Wenet
            model with batch norm gets, its eval-mode BatchNorm folded into the depthwise
            conv, ``asr.interop.wenet``).
        causal_pad: where the causal left context lives. ``depthwise`` (default): the
            last kernel-1 depthwise inputs, zeros before the stream starts. ``input``:
            the last kernel-1 inputs of the module, zeros before the start that then go
            through the pointwise conv and GLU like real frames (Wenet's convolution
            module; its start-of-stream frames differ from ``depthwise``). The cache has
            the same shape (B, D, kernel-1) either way.
    """

    def __init__(
        self, d_model: int, kernel: int, causal: bool, norm: str = "layer_norm", causal_pad: str = "depthwise"
    ) -> None:
        super().__init__()
        if kernel < 1:
            raise ValueError(f"conv_kernel ({kernel}) must be >= 1.")
        if not causal and kernel % 2 == 0:
            raise ValueError(f"conv_kernel ({kernel}) must be odd for a non-causal (centered) convolution.")
        if norm not in CONV_NORMS:
            raise ValueError(f"conv_norm {norm!r} is not one of {CONV_NORMS}.")
        if causal_pad not in CONV_CAUSAL_PADS:
            raise ValueError(f"conv_causal_pad {causal_pad!r} is not one of {CONV_CAUSAL_PADS}.")
        if causal_pad == "input" and not causal:
            raise ValueError("conv_causal_pad='input' places a causal convolution's left context; it needs causal=True.")
        # Pointwise convs as Linear on (B, C, D): the same map, no transposes, and
        # faster than a kernel-1 Conv1d on CPU.
        self.pointwise_in = nn.Linear(d_model, 2 * d_model)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel, groups=d_model)
        self.norm = nn.LayerNorm(d_model) if norm == "layer_norm" else nn.Identity()
        self.act = nn.SiLU()
        self.pointwise_out = nn.Linear(d_model, d_model)
        self.kernel = kernel
        self.causal = causal
        self.causal_pad = causal_pad

    @staticmethod
    def _left_context(
        h: torch.Tensor, cache: torch.Tensor | None, context: int, lookahead: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prepend the cache (or ``context`` zero frames) to h (B, D, C); returns it and the new cache, the
        ``context`` frames that end ``lookahead`` frames before h's end (lookahead frames come again next call)."""
        h = nn.functional.pad(h, (context, 0)) if cache is None else torch.cat([cache, h], dim=2)  # (B, D, context + C)
        end = h.size(2) - lookahead
        return h, (h[:, :, end - context : end] if context > 0 else None)

    def forward(
        self, x: torch.Tensor, pad_mask: torch.Tensor | None = None, cache: torch.Tensor | None = None,
        lookahead: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Apply the module.

        Args:
            x: (B, C, D).
            pad_mask: (B, C) bool, True on valid frames; padded frames are zeroed
                before the depthwise conv so they look like the conv's own padding.
            cache: (B, D, kernel-1) causal left context of the frames just before x
                (see ``causal_pad``); None at the start of a stream (zeros).
            lookahead: x's last frames that belong to the next call too (a chunk's lookahead): the new
                cache ends before them.
        Returns:
            out (B, C, D) and the new cache (B, D, kernel-1), or None when kernel == 1
            or the module is not causal.
        """
        if cache is not None and not self.causal:
            raise ValueError("a conv cache needs a causal conv module (causal=True).")
        context = self.kernel - 1
        new_cache = None
        if self.causal_pad == "input":
            if pad_mask is not None:
                x = x.masked_fill(~pad_mask[:, :, None], 0.0)
            xt, new_cache = self._left_context(x.transpose(1, 2), cache, context, lookahead)  # (B, D, context + C)
            h = nn.functional.glu(self.pointwise_in(xt.transpose(1, 2)), dim=-1).transpose(1, 2)  # (B, D, context + C)
        else:
            h = nn.functional.glu(self.pointwise_in(x), dim=-1)  # (B, C, 2D) -> (B, C, D)
            if pad_mask is not None:
                h = h.masked_fill(~pad_mask[:, :, None], 0.0)
            h = h.transpose(1, 2)  # (B, D, C): channels first for the depthwise conv
            if self.causal:
                h, new_cache = self._left_context(h, cache, context, lookahead)
            else:
                h = nn.functional.pad(h, (context // 2, context // 2))
        h = self.depthwise(h)  # (B, D, C)
        h = self.act(self.norm(h.transpose(1, 2)))  # (B, C, D)
        return self.pointwise_out(h), new_cache


class ConformerBlock(nn.Module):
    """Macaron Conformer block: FF/2, MHSA, conv, FF/2, LayerNorm (all pre-norm residual).

    Args:
        d_model: D.
        num_heads: H.
        ffn_dim: hidden size of both feed-forward modules.
        conv_kernel: depthwise kernel size.
        causal: causal conv module (needed for streaming).
        scheme: the encoder's position scheme; the attention builds its scorer from it.
        dropout: residual, feed-forward and attention dropout.
        conv_norm, conv_causal_pad: the conv module's ``norm`` and ``causal_pad``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        conv_kernel: int,
        causal: bool,
        scheme: PositionScheme,
        dropout: float = 0.0,
        conv_norm: str = "layer_norm",
        conv_causal_pad: str = "depthwise",
    ) -> None:
        super().__init__()
        self.ff_in = FeedForward(d_model, ffn_dim, dropout)
        self.attn = MultiHeadAttention(d_model, num_heads, scheme, dropout)
        self.conv = ConvModule(d_model, conv_kernel, causal, conv_norm, conv_causal_pad)
        self.ff_out = FeedForward(d_model, ffn_dim, dropout)
        self.norm_ff_in = nn.LayerNorm(d_model)
        self.norm_attn = nn.LayerNorm(d_model)
        self.norm_conv = nn.LayerNorm(d_model)
        self.norm_ff_out = nn.LayerNorm(d_model)
        self.norm_final = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        pad_mask: torch.Tensor | None = None,
        attn_cache: tuple[torch.Tensor, torch.Tensor] | None = None,
        conv_cache: torch.Tensor | None = None,
        start_time: int | torch.Tensor = 0,
        lookahead: int = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor | None]:
        """Run the block on C query frames.

        Args:
            x: (B, C, D).
            mask: (B, C, K) bool attention mask (True = attend) or None (all keys).
            pad_mask: (B, C) bool valid frames (for the conv module) or None.
            attn_cache: (k, v), each (B, H, M, Dh), of the M frames before x, or None.
            conv_cache: (B, D, kernel-1) or None, see :class:`ConvModule`.
            start_time: absolute time of x's first frame (int or (B,) tensor), for
                position schemes whose attention reads absolute key times (wenet_rel).
            lookahead: x's last frames that the next call encodes again as its own (a chunk's
                lookahead); neither the returned (k, v) nor the conv cache holds them.
        Returns:
            out (B, C, D); (k, v) each (B, H, K - lookahead, Dh) = cache + this call's frames but the
            lookahead (the caller trims it to its left-context budget); new conv cache.
        """
        x = x + 0.5 * self.dropout(self.ff_in(self.norm_ff_in(x)))
        a, (k, v) = self.attn(self.norm_attn(x), mask, attn_cache, start_time)
        kept = k.size(2) - lookahead
        x = x + self.dropout(a)
        c, conv_cache = self.conv(self.norm_conv(x), pad_mask, conv_cache, lookahead)
        x = x + self.dropout(c)
        x = x + 0.5 * self.dropout(self.ff_out(self.norm_ff_out(x)))
        return self.norm_final(x), (k[:, :, :kept], v[:, :, :kept]), conv_cache
