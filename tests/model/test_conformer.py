"""Conformer pieces: causal conv module with cache, padding handling, block caches."""

import pytest
import torch

from asr.model.conformer import ConformerBlock, ConvModule
from asr.model.positions import build_position_scheme

torch.set_num_threads(1)
D = 16


@pytest.fixture(scope="module", params=["depthwise", "input"])
def causal_conv(request):
    torch.manual_seed(0)
    return ConvModule(D, kernel=5, causal=True, causal_pad=request.param).eval()


def test_causal_conv_ignores_future(causal_conv):
    x = torch.randn(2, 12, D)
    y, _ = causal_conv(x)
    x2 = x.clone()
    x2[:, 7:] = torch.randn(2, 5, D)
    y2, _ = causal_conv(x2)
    assert torch.allclose(y[:, :7], y2[:, :7], atol=1e-6)
    assert not torch.allclose(y[:, 7], y2[:, 7], atol=1e-3)


@pytest.mark.parametrize("pieces", [[1] * 9, [3, 1, 5], [2, 2, 2, 3]])
def test_conv_cache_reproduces_whole_sequence(causal_conv, pieces):
    x = torch.randn(2, sum(pieces), D)
    full, _ = causal_conv(x)
    cache, outs, start = None, [], 0
    for n in pieces:
        out, cache = causal_conv(x[:, start : start + n], cache=cache)
        assert cache.shape == (2, D, 4)  # always kernel-1 frames, even after a 1-frame piece
        outs.append(out)
        start += n
    assert torch.allclose(torch.cat(outs, 1), full, atol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_conv_padding_is_invisible(causal):
    torch.manual_seed(0)
    conv = ConvModule(D, kernel=5, causal=causal).train()  # LayerNorm: train mode is padding-invariant too
    x = torch.randn(1, 6, D)
    alone, _ = conv(x)
    padded = torch.cat([x, torch.randn(1, 4, D)], 1)
    y, _ = conv(padded, pad_mask=torch.arange(10)[None] < 6)
    assert torch.allclose(y[:, :6], alone, atol=1e-6)


def test_input_pad_is_zero_frames_before_the_module():
    """causal_pad='input' (Wenet's): the left context is kernel-1 zero INPUT frames, which go through
    the pointwise conv and GLU like real frames; the default pads the depthwise input with zeros."""
    torch.manual_seed(0)
    wenet = ConvModule(D, kernel=5, causal=True, causal_pad="input").eval()
    ours = ConvModule(D, kernel=5, causal=True).eval()
    ours.load_state_dict(wenet.state_dict())
    x = torch.randn(2, 7, D)
    y, _ = wenet(x)
    prefixed, _ = ours(torch.cat([torch.zeros(2, 4, D), x], 1))
    torch.testing.assert_close(y, prefixed[:, 4:])
    assert (y[:, 0] - ours(x)[0][:, 0]).abs().max() > 1e-4  # the two pads differ at the start
    # Padded frames are zeroed at the input: invisible to the valid (earlier) frames.
    padded, _ = wenet(torch.cat([x, torch.randn(2, 3, D)], 1), pad_mask=torch.arange(10)[None] < 7)
    torch.testing.assert_close(padded[:, :7], y)


def test_conv_norm_none_is_no_normalization():
    conv = ConvModule(D, kernel=3, causal=True, norm="none")
    assert isinstance(conv.norm, torch.nn.Identity) and not list(conv.norm.parameters())


def test_conv_module_args():
    with pytest.raises(ValueError, match="batch_norm"):
        ConvModule(D, kernel=3, causal=True, norm="batch_norm")
    with pytest.raises(ValueError, match="needs causal=True"):
        ConvModule(D, kernel=3, causal=False, causal_pad="input")
    with pytest.raises(ValueError, match="conv_causal_pad"):
        ConvModule(D, kernel=3, causal=True, causal_pad="left")
    with pytest.raises(ValueError, match="odd"):
        ConvModule(D, kernel=4, causal=False)
    with pytest.raises(ValueError, match="conv_kernel"):
        ConvModule(D, kernel=0, causal=True)
    assert ConvModule(D, kernel=1, causal=True)(torch.randn(1, 3, D))[1] is None
    with pytest.raises(ValueError, match="causal"):
        ConvModule(D, kernel=3, causal=False)(torch.randn(1, 3, D), cache=torch.zeros(1, D, 2))


@pytest.mark.parametrize("pos_enc", ["rel_xl", "shaw"])
def test_block_with_caches_matches_causal_mask(pos_enc):
    """Two halves with attention and conv caches == one pass with a lower-triangular mask."""
    torch.manual_seed(0)
    scheme = build_position_scheme(pos_enc, D, 2)
    block = ConformerBlock(D, 2, 32, conv_kernel=3, causal=True, scheme=scheme).eval()
    x = torch.randn(2, 8, D)
    mask = torch.ones(8, 8, dtype=torch.bool).tril()[None].expand(2, -1, -1)  # (B, C, K)
    full, (k, v), _ = block(x, mask)
    assert k.shape == (2, 2, 8, D // 2)
    first, kv, conv = block(x[:, :5], mask[:, :5, :5])
    second, kv2, _ = block(x[:, 5:], mask[:, 5:], None, kv, conv)  # queries are the last 3 of 8 keys
    assert kv2[0].shape == (2, 2, 8, D // 2)
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-5)
