"""The batch type every data loader yields."""

from __future__ import annotations

from typing import NamedTuple

import torch


class Batch(NamedTuple):
    """One padded batch.

    feats (B, T, F) float32, zero padded; feat_lens (B,) int64;
    tokens (B, U) int64 padded with -1; token_lens (B,) int64;
    keys: cut ids; texts: reference transcripts.
    """

    feats: torch.Tensor
    feat_lens: torch.Tensor
    tokens: torch.Tensor
    token_lens: torch.Tensor
    keys: list[str]
    texts: list[str]

    def to(self, device: torch.device | str) -> Batch:
        return self._replace(
            feats=self.feats.to(device), feat_lens=self.feat_lens.to(device),
            tokens=self.tokens.to(device), token_lens=self.token_lens.to(device),
        )

    @staticmethod
    def collate(
        feats: list[torch.Tensor], tokens: list[list[int]], keys: list[str], texts: list[str], num_mel_bins: int = 80
    ) -> Batch:
        """Pad per-utterance (T_i, F) features with 0 and token lists with -1. An empty list gives B = 0."""
        bsz = len(feats)
        max_t = max((f.shape[0] for f in feats), default=0)
        max_u = max((len(t) for t in tokens), default=0)
        feat_pad = torch.zeros(bsz, max_t, num_mel_bins, dtype=torch.float32)  # (B, T, F)
        tok_pad = torch.full((bsz, max_u), -1, dtype=torch.int64)  # (B, U)
        for i, (f, t) in enumerate(zip(feats, tokens)):
            feat_pad[i, : f.shape[0]] = f
            tok_pad[i, : len(t)] = torch.tensor(t, dtype=torch.int64)
        return Batch(
            feats=feat_pad,
            feat_lens=torch.tensor([f.shape[0] for f in feats], dtype=torch.int64),
            tokens=tok_pad,
            token_lens=torch.tensor([len(t) for t in tokens], dtype=torch.int64),
            keys=list(keys),
            texts=list(texts),
        )
