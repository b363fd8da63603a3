"""A tiny randomly initialised U2++ model shared by the decoding tests."""

import pytest
import torch

from asr.model import build_encoder
from asr.model.asr_model import AsrModel

VOCAB, SOS_EOS = 8, 7
FEAT_DIM = 20


@pytest.fixture(scope="module")
def tiny_model() -> AsrModel:
    torch.manual_seed(0)
    enc = build_encoder(pos_enc="rel_xl", input_dim=FEAT_DIM, d_model=32, num_heads=2, num_layers=1, ffn_dim=64,
                        conv_kernel=3, causal=True, subsampling=4, dropout=0.0)
    model = AsrModel(enc, VOCAB, SOS_EOS, decoder_layers=1, r2l_decoder_layers=1, decoder_heads=2,
                     decoder_ffn_dim=64, decoder_dropout=0.0, ctc_weight=0.3, reverse_weight=0.3)
    return model.eval()


@pytest.fixture(scope="module")
def tiny_feats() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    lens = torch.tensor([70, 52, 40])
    feats = torch.randn(3, 70, FEAT_DIM, generator=g)
    for b, n in enumerate(lens.tolist()):
        feats[b, n:] = 0.0
    return feats, lens

