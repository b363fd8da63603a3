"""ConformerEncoder.forward: shapes, padding invariance, chunk masking, CMVN, long inputs, argument checks."""

import pytest
import torch

from asr.model import POSITION_SCHEMES, build_encoder

torch.set_num_threads(1)
F = 16
OPTIONS = {"shaw": {"max_distance": 4}, "rel_bias": {"max_distance": 4}, "abs_learned": {"max_len": 256}}


def tiny(pos_enc: str, **kw):
    torch.manual_seed(0)
    args = dict(input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=3)
    args.update(OPTIONS.get(pos_enc, {}))
    args.update(kw)
    return build_encoder(pos_enc, **args)


def test_defaults_and_shapes():
    enc = build_encoder()
    assert (enc.output_size, enc.subsampling_rate, enc.right_context) == (144, 4, 6)
    assert enc.cmvn_mean.shape == (80,) and torch.all(enc.cmvn_istd == 1)
    assert set(POSITION_SCHEMES) == {"rel_xl", "wenet_rel", "shaw", "abs_sin", "abs_learned", "rel_bias", "rope", "none"}
    enc = tiny("rel_xl", subsampling=6)
    out, lens = enc(torch.randn(3, 70, F), torch.tensor([70, 40, 11]))
    assert out.shape == (3, 10, 16) and lens.tolist() == [10, 5, 1] and lens.dtype == torch.int64
    assert enc.subsampling_rate == 6 and enc.right_context == 10


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
@pytest.mark.parametrize("chunk_size,left_chunks", [(0, -1), (2, 1)])
def test_padding_invariance(pos_enc, chunk_size, left_chunks):
    """An utterance alone == the same utterance padded inside a batch (train mode, dropout 0)."""
    enc = tiny(pos_enc).train()
    short = torch.randn(1, 45, F)
    batch = torch.cat([torch.cat([short, torch.randn(1, 30, F)], 1), torch.randn(1, 75, F)])
    alone, alone_len = enc(short, torch.tensor([45]), chunk_size, left_chunks)
    out, lens = enc(batch, torch.tensor([45, 75]), chunk_size, left_chunks)
    n = int(alone_len[0])
    assert lens.tolist() == [n, 18]
    assert torch.allclose(out[0, :n], alone[0], atol=1e-5)


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_chunk_mask_hides_the_future(pos_enc):
    """Chunk 1 (encoder frames 2, 3 with C=2) needs input frames <= 4*3+6 = 18; later frames cannot change it."""
    enc = tiny(pos_enc).eval()
    x = torch.randn(1, 60, F)
    lens = torch.tensor([60])
    out, _ = enc(x, lens, chunk_size=2, left_chunks=-1)
    x2 = x.clone()
    x2[:, 19:] = torch.randn(1, 41, F)
    out2, _ = enc(x2, lens, chunk_size=2, left_chunks=-1)
    assert torch.allclose(out[:, :4], out2[:, :4], atol=1e-6)
    assert not torch.allclose(out[:, 4], out2[:, 4], atol=1e-3)
    full, _ = enc(x2, lens)  # full context: the future reaches the first frames
    assert not torch.allclose(out[:, :4], full[:, :4], atol=1e-3)


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_every_parameter_gets_a_gradient(pos_enc):
    """No dead parameters (DDP would need find_unused_parameters) and finite gradients under a chunk mask."""
    enc = tiny(pos_enc, dropout=0.1).train()
    out, lens = enc(torch.randn(2, 60, F), torch.tensor([60, 41]), chunk_size=3, left_chunks=1)
    valid = torch.arange(out.size(1))[None, :] < lens[:, None]
    out[valid].pow(2).mean().backward()
    bad = [n for n, p in enc.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not bad


def test_non_causal_conv_leaks_future_through_chunks():
    """Why streaming requires causal=True: a centered conv sees the next chunk even under a chunk mask."""
    enc = tiny("rel_xl", causal=False).eval()
    x = torch.randn(1, 60, F)
    x2 = x.clone()
    x2[:, 19:] = torch.randn(1, 41, F)
    out, _ = enc(x, torch.tensor([60]), chunk_size=2)
    out2, _ = enc(x2, torch.tensor([60]), chunk_size=2)
    assert not torch.allclose(out[:, 3], out2[:, 3], atol=1e-4)


def test_cmvn_applied_first():
    enc = tiny("rel_xl").eval()
    x = torch.randn(2, 40, F) * 3 + 1
    lens = torch.tensor([40, 33])
    mean, istd = torch.randn(F), torch.rand(F) + 0.5
    plain, _ = enc((x - mean) * istd, lens)
    enc.set_cmvn(mean, istd)
    normed, _ = enc(x, lens)
    assert torch.allclose(normed, plain, atol=1e-5)
    assert torch.equal(enc.state_dict()["cmvn_mean"], mean)
    with pytest.raises(ValueError, match=r"\(16,\)"):
        enc.set_cmvn(torch.zeros(80), torch.ones(80))


@pytest.mark.parametrize("pos_enc", ["rel_xl", "shaw", "rel_bias", "rope", "none", "abs_sin"])
def test_long_input_has_no_length_limit(pos_enc):
    """T' = 6000 encoder frames (a 4-minute utterance) runs for every scheme without a table limit."""
    enc = tiny(pos_enc, d_model=8, num_layers=1, ffn_dim=8).eval()
    frames = 4 * 6000 + 3
    with torch.no_grad():
        out, lens = enc(torch.randn(1, frames, F), torch.tensor([frames]))
    assert out.shape == (1, 6000, 8) and lens.tolist() == [6000]
    assert torch.isfinite(out).all()


def test_abs_learned_beyond_max_len_raises():
    enc = tiny("abs_learned", max_len=20).eval()
    enc(torch.randn(1, 4 * 20 + 3, F), torch.tensor([83]))  # exactly max_len frames is fine
    with pytest.raises(ValueError, match="max_len=20"):
        enc(torch.randn(1, 4 * 21 + 3, F), torch.tensor([87]))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(d_model=15, num_heads=2), "multiple of num_heads"),
        (dict(num_layers=0), "num_layers"),
        (dict(dropout=1.0), "dropout"),
        (dict(subsampling=5), "one of"),
        (dict(pos_enc="alibi"), "rel_xl"),
        (dict(pos_enc="rel_xl", max_distance=3), "max_distance"),
        (dict(conv_kernel=4, causal=False), "odd"),
    ],
)
def test_bad_constructor_args(kwargs, match):
    pos_enc = kwargs.pop("pos_enc", "none")
    with pytest.raises(ValueError, match=match):
        tiny(pos_enc, **kwargs)


def test_bad_forward_args():
    enc = tiny("none")
    x, lens = torch.randn(2, 30, F), torch.tensor([30, 20])
    with pytest.raises(ValueError, match="chunk_size"):
        enc(x, lens, chunk_size=-1)
    with pytest.raises(ValueError, match="left_chunks"):
        enc(x, lens, chunk_size=4, left_chunks=-3)
    with torch.no_grad(), pytest.raises(ValueError, match="exceeds"):
        enc(x, torch.tensor([31, 20]))
    with pytest.raises(RuntimeError, match="lengths exceed"):  # training: checked by the kernel, no host read
        enc(x, torch.tensor([31, 20]))
    with pytest.raises(ValueError, match=r"\(B, T, 16\)"):
        enc(torch.randn(2, 30, 80), lens)
    with pytest.raises(ValueError, match="at least 7"):
        enc(torch.randn(2, 6, F), torch.tensor([6, 6]))
