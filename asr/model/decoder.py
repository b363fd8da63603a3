"""Transformer attention decoder for the CTC + attention hybrid (U2 / U2++).

Axis legend: B batch (or beam), U tokens, T' encoder frames, D model dim,
H heads, Dh head dim, V vocab.

The decoder reads token prefixes that start with <sos> and predicts the next
token at every position. A right-to-left decoder (U2++) is simply a second
instance of the same class trained on reversed targets, so no separate class
exists for it.

Two paths: ``forward`` (whole prefixes, training and the reference) and
``init_state`` / ``step`` (one token per call with cached self-attention keys
and values and cross-attention keys/values computed once), used by beam
search so that a step costs O(U) instead of re-running the O(U^2) prefix.

Attention is the encoder's :class:`~asr.model.attention.MultiHeadAttention`
without a position scheme: its scorer is the position-free SDPA path, and masks
are bool with True = "may attend" (a bool mask keeps the fused CPU kernels).
Token positions are the shared sinusoid table, added once at the input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from asr.model.attention import MultiHeadAttention
from asr.model.masks import padding_mask
from asr.model.sinusoid import absolute_sinusoids


class DecoderLayer(nn.Module):
    """Pre-norm block: causal self-attention, cross-attention, feed-forward."""

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float) -> None:
        super().__init__()
        self.norm_self = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.norm_cross = nn.LayerNorm(d_model)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.norm_ffn = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, ffn_dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ffn_dim, d_model)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, self_mask: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor
    ) -> torch.Tensor:
        """x (B, U, D), self_mask (B, U, U), memory (1|B, T', D), memory_mask (1|B, 1, T') -> (B, U, D).

        A memory of batch 1 is shared by every row: its keys and values are computed once and broadcast.
        """
        attended, _ = self.self_attn(self.norm_self(x), self_mask)
        x = x + self.dropout(attended)
        B = x.shape[0]
        memory_kv = tuple(t.expand(B, -1, -1, -1) for t in self.cross_attn.memory_kv(memory))  # (B, H, T', Dh)
        x = x + self.dropout(self.cross_attn.cross(self.norm_cross(x), memory_kv, memory_mask.expand(B, -1, -1)))
        return x + self.dropout(self.ffn(self.norm_ffn(x)))

    def step(
        self,
        x: torch.Tensor,
        self_kv: tuple[torch.Tensor, torch.Tensor] | None,
        cross_kv: tuple[torch.Tensor, torch.Tensor],
        memory_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One new position x (N, 1, D) given the cached self-attention k, v (N, H, u, Dh) of
        the earlier positions, cross_kv (1|N, H, T', Dh) and memory_mask (1|N, 1, T');
        returns (N, 1, D) and the k, v extended to u + 1."""
        # The new position is the last one: it may see every cached key, so no mask.
        attended, kv = self.self_attn(self.norm_self(x), None, self_kv)
        x = x + attended
        N = x.shape[0]
        cross_kv = tuple(t.expand(N, -1, -1, -1) for t in cross_kv)  # (N, H, T', Dh) views
        x = x + self.cross_attn.cross(self.norm_cross(x), cross_kv, memory_mask.expand(N, -1, -1))
        return x + self.ffn(self.norm_ffn(x)), kv


@dataclass
class DecoderState:
    """Incremental decoding state of N hypotheses over one shared memory.

    self_kv: per layer, keys/values (N, H, u, Dh) of the u tokens fed so far (None before the first).
    cross_kv: per layer, memory keys/values (1 or N, H, T', Dh), computed once.
    memory_mask: (1 or N, 1, T') bool.
    length: u, tokens fed so far (the next token's position).
    """

    self_kv: list[tuple[torch.Tensor, torch.Tensor] | None]
    cross_kv: list[tuple[torch.Tensor, torch.Tensor]]
    memory_mask: torch.Tensor
    length: int = 0

    def select(self, index: torch.Tensor) -> "DecoderState":
        """Keep hypotheses ``index`` (N',) of the self-attention cache (beam reordering)."""
        kv = [None if c is None else (c[0][index], c[1][index]) for c in self.self_kv]
        return DecoderState(kv, self.cross_kv, self.memory_mask, self.length)


class TransformerDecoder(nn.Module):
    """Token embedding + sinusoid positions, N pre-norm layers, final norm, output linear.

    Args:
        vocab_size: V, including blank and <sos/eos>.
        d_model: D, must equal the encoder output size (cross-attention keys).
        num_heads: H; must divide d_model.
        ffn_dim: hidden size of the feed-forward blocks.
        num_layers: N >= 1.
        dropout: dropout on embeddings, attention weights and residual branches.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int = 4,
        ffn_dim: int = 1024,
        num_layers: int = 3,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers ({num_layers}) must be >= 1.")
        if vocab_size < 2:
            raise ValueError(f"vocab_size ({vocab_size}) must be >= 2.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout ({dropout}) must be in [0, 1).")
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.embed_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [DecoderLayer(d_model, num_heads, ffn_dim, dropout) for _ in range(num_layers)]
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, vocab_size)

    def forward(
        self,
        memory: torch.Tensor,
        memory_lens: torch.Tensor,
        tokens: torch.Tensor,
        token_lens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Next-token logits at every prefix position.

        Args:
            memory: (B, T', D) encoder output, or (1, T', D) shared by every row (hypotheses of one
                utterance: its cross-attention keys and values are then computed once, not B times).
            memory_lens: (B,) (or (1,) with a shared memory) valid encoder frames per row. A row with 0 frames
                (audio too short for the subsampling; the data module filters
                these) gets a zero cross-attention context, so it stays finite.
            tokens: (B, U) decoder input ids starting with <sos>; padding must be a
                valid id (it is masked out as a key, and its outputs are junk).
            token_lens: (B,) valid tokens per row; None = all U valid.
        Returns:
            (B, U, V) logits; position u depends only on tokens[:, :u+1].
        """
        B, U = tokens.shape
        if memory.shape[0] not in (1, B):
            raise ValueError(f"memory batch ({memory.shape[0]}) must be 1 (shared) or the tokens batch ({B}).")
        device = tokens.device
        causal = torch.ones(U, U, dtype=torch.bool, device=device).tril()  # (U, U)
        if token_lens is None:
            self_mask = causal.expand(B, U, U)
        else:
            # Key padding on top of causality; row u still sees key 0 (<sos>), so no row is empty.
            self_mask = causal[None] & padding_mask(token_lens, U)[:, None, :]  # (B, U, U)
        memory_mask = padding_mask(memory_lens, memory.shape[1])[:, None, :]  # (1|B, 1, T')

        x = self.embed(tokens) * math.sqrt(self.d_model)  # (B, U, D)
        x = x + absolute_sinusoids(0, U, self.d_model, x)  # (U, D) broadcast over B
        x = self.embed_dropout(x)
        for layer in self.layers:
            x = layer(x, self_mask, memory, memory_mask)
        return self.output(self.final_norm(x))  # (B, U, V)

    def init_state(self, memory: torch.Tensor, memory_lens: torch.Tensor) -> DecoderState:
        """Start incremental decoding over memory (B, T', D), memory_lens (B,).

        Pass B = 1 to share one utterance's memory between all hypotheses: the
        cross-attention keys/values then broadcast over any number of rows.
        """
        memory_mask = padding_mask(memory_lens, memory.shape[1])[:, None, :]  # (B, 1, T')
        cross = [layer.cross_attn.memory_kv(memory) for layer in self.layers]
        return DecoderState([None] * len(self.layers), cross, memory_mask)

    def step(self, tokens: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """Feed one token per hypothesis; equals ``forward`` on the whole prefixes (eval mode).

        Args:
            tokens: (N,) the token at position ``state.length`` (<sos> first).
        Returns:
            logits (N, V) for the next position, and the advanced state.
        """
        if self.training:
            raise ValueError("step() is for decoding: call .eval() first (it applies no dropout).")
        x = self.embed(tokens[:, None]) * math.sqrt(self.d_model)  # (N, 1, D)
        x = x + absolute_sinusoids(state.length, 1, self.d_model, x)  # (1, D)
        new_kv = []
        for layer, kv, cross in zip(self.layers, state.self_kv, state.cross_kv):
            x, kv = layer.step(x, kv, cross, state.memory_mask)
            new_kv.append(kv)
        logits = self.output(self.final_norm(x))[:, 0]  # (N, V)
        return logits, DecoderState(new_kv, state.cross_kv, state.memory_mask, state.length + 1)
