"""OnlineCmn: the running mean of a float64 reference, streamed == whole, padding-proof in forward()."""

import pytest
import torch

from asr.model import build_encoder
from asr.model.normalization import OnlineCmn


def reference(feats, mean, prior):
    """Frame by frame in float64, straight from the formula."""
    out, total = [], torch.zeros_like(mean, dtype=torch.float64)
    for t, frame in enumerate(feats.double()):
        total = total + frame
        running = (prior * mean.double() + total) / (prior + t + 1)
        out.append(frame - running + mean.double())
    return torch.stack(out)


@pytest.mark.parametrize("prior", [0.5, 30.0, 1000.0])
def test_matches_the_float64_reference_and_streams_exactly(prior):
    g = torch.Generator().manual_seed(int(prior))
    mean = 10 + 3 * torch.randn(16, generator=g)
    feats = 8 + 2 * torch.randn(300, 16, generator=g)
    norm = OnlineCmn(mean, prior)
    whole = norm(feats)
    assert whole.dtype == torch.float32
    assert torch.allclose(whole.double(), reference(feats, mean, prior), atol=1e-5)
    stream = norm.stream()
    cuts = [0, 1, 1, 40, 41, 299, 300]
    streamed = torch.cat([stream.push(feats[a:b]) for a, b in zip(cuts, cuts[1:])])
    assert torch.allclose(streamed, whole, atol=1e-6)
    stream.reset()
    assert torch.allclose(stream.push(feats[:10]), whole[:10], atol=1e-6)
    # a constant offset on every frame (another channel's gain) is gone once the prior is outweighed
    shifted = norm(feats + 4.0)
    assert (shifted[-50:] - whole[-50:]).abs().max() < 4.0 * (prior + 1) / (prior + 250) + 1e-4


def test_batch_rows_are_independent_and_padding_never_reaches_earlier_frames():
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(8, generator=g)
    norm = OnlineCmn(mean, 20.0)
    a, b = torch.randn(50, 8, generator=g), torch.randn(30, 8, generator=g)
    batch = torch.zeros(2, 50, 8)
    batch[0], batch[1, :30] = a, b
    out = norm(batch)
    assert torch.allclose(out[0], norm(a), atol=1e-6) and torch.allclose(out[1, :30], norm(b), atol=1e-6)


def test_encoder_forward_applies_it_and_a_padded_row_encodes_as_alone():
    torch.manual_seed(0)
    enc = build_encoder(pos_enc="rel_xl", input_dim=16, d_model=32, num_heads=2, num_layers=1, ffn_dim=32,
                        conv_kernel=3, causal=True, subsampling=4, dropout=0.0, online_cmn_frames=25.0).eval()
    enc.set_cmvn(torch.full((16,), 3.0), torch.full((16,), 0.5))
    assert isinstance(enc.online_cmn(), OnlineCmn) and enc.online_cmn().prior_frames == 25.0
    g = torch.Generator().manual_seed(2)
    long, short = 3 + torch.randn(1, 80, 16, generator=g), 3 + torch.randn(1, 48, 16, generator=g)
    batch = torch.zeros(2, 80, 16)
    batch[0], batch[1, :48] = long[0], short[0]
    with torch.no_grad():
        out, lens = enc(batch, torch.tensor([80, 48]))
        alone, alone_lens = enc(short, torch.tensor([48]))
    # full context: frames past a row's length are masked, so its valid frames match exactly
    assert torch.allclose(out[1, : int(alone_lens[0])], alone[0], atol=1e-5)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="prior_frames"):
        OnlineCmn(torch.zeros(4), 0.0)
    with pytest.raises(ValueError, match=r"\(F,\)"):
        OnlineCmn(torch.zeros(2, 4), 10.0)
    with pytest.raises(ValueError, match="bins"):
        OnlineCmn(torch.zeros(4), 10.0)(torch.zeros(3, 5))
    with pytest.raises(ValueError, match="online_cmn_frames"):
        build_encoder(pos_enc="rel_xl", input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=16,
                      online_cmn_frames=-1.0)
    off = build_encoder(pos_enc="rel_xl", input_dim=8, d_model=16, num_heads=2, num_layers=1, ffn_dim=16)
    assert off.online_cmn() is None
