"""Small stand-ins shared by the training tests (tiny model, random batches)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from asr.model.asr_model import build_asr_model

VOCAB = 12  # blank 0, letters 1..10, sos/eos 11


class FakeBatch(NamedTuple):
    feats: torch.Tensor
    feat_lens: torch.Tensor
    tokens: torch.Tensor
    token_lens: torch.Tensor
    keys: list
    texts: list


class LetterTokenizer:
    """ids 1..10 <-> letters a..j; enough for decoding hypotheses to text."""

    vocab_size = VOCAB
    blank_id = 0
    unk_id = 1
    sos_eos_id = VOCAB - 1

    def decode(self, ids):
        return " ".join(chr(ord("a") + i - 1) for i in ids if 0 < i < VOCAB - 1)


def tiny_model_kwargs(pos_enc: str = "rel_xl") -> dict:
    return {
        "vocab_size": VOCAB,
        "sos_eos_id": VOCAB - 1,
        "encoder_kwargs": {"pos_enc": pos_enc, "input_dim": 8, "d_model": 16, "num_heads": 2,
                           "num_layers": 1, "ffn_dim": 32, "conv_kernel": 3, "subsampling": 4},
        "decoder_layers": 1,
        "decoder_heads": 2,
        "decoder_ffn_dim": 32,
        "decoder_dropout": 0.0,
    }


def tiny_model(pos_enc: str = "rel_xl"):
    return build_asr_model(**tiny_model_kwargs(pos_enc))


def random_batches(n: int, batch_size: int = 2, frames: int = 40, seed: int = 0) -> list[FakeBatch]:
    g = torch.Generator().manual_seed(seed)
    batches = []
    for i in range(n):
        feats = torch.randn(batch_size, frames, 8, generator=g)
        feat_lens = torch.full((batch_size,), frames, dtype=torch.long)
        feat_lens[-1] = frames - 7
        tokens = torch.randint(1, VOCAB - 1, (batch_size, 3), generator=g)
        tokens[-1, -1] = -1
        token_lens = torch.tensor([3] * (batch_size - 1) + [2])
        keys = [f"b{i}u{j}" for j in range(batch_size)]
        texts = [LetterTokenizer().decode(t[t >= 0].tolist()) for t in tokens]
        batches.append(FakeBatch(feats, feat_lens, tokens, token_lens, keys, texts))
    return batches
