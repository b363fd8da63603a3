"""MultiHeadAttention: cache == masked full call, padding and translation invariance, long inputs."""

import pytest
import torch

from asr.model.attention import MultiHeadAttention
from asr.model.positions import POSITION_SCHEMES, build_position_scheme

D, H = 16, 4


def layer(name, dropout=0.0):
    torch.manual_seed(0)
    scheme = build_position_scheme(name, D, H)
    mha = MultiHeadAttention(D, H, scheme, dropout).double().eval()
    with torch.no_grad():
        for p in mha.scorer.parameters():
            p.normal_()
    return scheme.double(), mha


def chunk_mask(t, chunk, left_chunks):
    """(T, T) bool: frame i sees its chunk and `left_chunks` chunks before (-1: all)."""
    idx = torch.arange(t)
    q_chunk, k_chunk = (idx // chunk)[:, None], (idx // chunk)[None, :]
    allowed = k_chunk <= q_chunk
    if left_chunks >= 0:
        allowed &= k_chunk >= q_chunk - left_chunks
    return allowed


@pytest.mark.parametrize("name", POSITION_SCHEMES)
@pytest.mark.parametrize("chunk, left_chunks", [(3, 1), (4, -1), (2, 0)])
def test_chunk_by_chunk_with_cache_equals_masked_full_call(name, chunk, left_chunks):
    scheme, mha = layer(name)
    t = 11
    x = scheme.embed_input(torch.randn(2, t, D, dtype=torch.float64), 0)
    full, _ = mha(x, chunk_mask(t, chunk, left_chunks).expand(2, t, t))
    outs, cache = [], None
    for start in range(0, t, chunk):
        piece = x[:, start : start + chunk]
        m = 0 if cache is None else cache[0].size(2)
        # start_time: the absolute time of the piece (only wenet_rel reads it: absolute key times).
        out, cache = mha(piece, torch.ones(2, piece.size(1), m + piece.size(1), dtype=torch.bool), cache, start)
        assert cache[0].shape == (2, H, m + piece.size(1), D // H)
        keep = cache[0].size(2) if left_chunks < 0 else left_chunks * chunk
        cache = tuple(c[:, :, c.size(2) - keep :] for c in cache) if keep > 0 else None
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=1), full, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", POSITION_SCHEMES)
def test_padding_does_not_change_valid_frames(name):
    scheme, mha = layer(name)
    x = torch.randn(2, 7, D, dtype=torch.float64)
    lengths = torch.tensor([7, 4])
    pad = (torch.arange(7)[None, :] < lengths[:, None])[:, None, :]  # (B, 1, K)
    batched, _ = mha(scheme.embed_input(x, 0), pad)
    alone, _ = mha(scheme.embed_input(x[1:, :4], 0), None)
    torch.testing.assert_close(batched[1:, :4], alone)


RELATIVE = [n for n in POSITION_SCHEMES if build_position_scheme(n, D, H).is_relative]
# Schemes whose output depends on absolute time: abs_* add their table at the input,
# wenet_rel scores each key's absolute time inside the attention.
ABSOLUTE = ["abs_sin", "abs_learned", "wenet_rel"]
# "none" is in neither list: without positions nothing can tell two times apart.


def periodic_outputs(name, chunk=3, left_chunks=1, periods=6):
    """Layer outputs over a period-``chunk`` input under a chunk mask with bounded left context.

    Returns (out[t], out[t + chunk]) for every t whose left context is full: both
    queries see the same contents at the same distances, so only absolute
    positions can make them differ.
    """
    scheme, mha = layer(name)
    x = torch.randn(1, chunk, D, dtype=torch.float64).repeat(1, periods, 1)  # (1, T, D)
    t = x.size(1)
    out, _ = mha(scheme.embed_input(x, 0), chunk_mask(t, chunk, left_chunks)[None])
    first = left_chunks * chunk
    return out[:, first : t - chunk], out[:, first + chunk :]


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_schemes_are_translation_invariant_with_bounded_left_context(name):
    earlier, later = periodic_outputs(name)
    torch.testing.assert_close(later, earlier, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ABSOLUTE)
def test_absolute_schemes_are_not_translation_invariant(name):
    earlier, later = periodic_outputs(name)
    assert (later - earlier).abs().max() > 1e-3


def test_scheme_lists_cover_every_scheme_but_none():
    assert sorted(RELATIVE + ABSOLUTE + ["none"]) == sorted(POSITION_SCHEMES)


def test_bad_inputs_raise_with_shapes():
    _, mha = layer("rel_xl")
    with pytest.raises(ValueError, match=r"\(2, 3, 8\)"):
        mha(torch.randn(2, 3, 8, dtype=torch.float64))
    x = torch.randn(2, 3, D, dtype=torch.float64)
    with pytest.raises(ValueError, match="cache"):
        mha(x, None, (torch.zeros(2, H, 5, 3), torch.zeros(2, H, 5, 3)))
    with pytest.raises(ValueError, match="multiple"):
        MultiHeadAttention(10, 4, build_position_scheme("none", 12, 4))


@pytest.mark.parametrize("name", ["rel_xl", "wenet_rel", "shaw", "rel_bias", "rope"])
def test_relative_schemes_have_no_length_limit(name):
    """T' = 6000 offline in one call; the last query row equals a C = 1 streaming call
    (wenet_rel's table is computed for the times asked too: no 5000-frame limit)."""
    torch.manual_seed(0)
    heads, dh, t = 4, 4, 6000
    scorer = build_position_scheme(name, heads * dh, heads).make_scorer(heads, dh, 0.0).eval()
    q, k, v = (torch.randn(1, heads, t, dh) for _ in range(3))
    with torch.no_grad():
        time = {"start_time": t - 1} if scorer.absolute_keys else {}  # the last query's time
        full = scorer(q, k, v, None)
        last = scorer(q[:, :, -1:], k, v, None, **time)
    assert full.shape == (1, heads, t, dh) and torch.isfinite(full).all()
    torch.testing.assert_close(full[:, :, -1:], last, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", POSITION_SCHEMES)
def test_bf16_autocast_forward_and_backward_track_fp32(name):
    """Custom backward passes see mixed dtypes under autocast (fp32 softmax, bf16 values)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, build_position_scheme(name, 32, 4))
    x = torch.randn(2, 70, 32, requires_grad=True)  # 70 > one rel_xl query block
    mask = torch.ones(2, 70, 70, dtype=torch.bool)
    mask[1, :, 50:] = False
    ref, _ = mha(x, mask)
    (grad_ref,) = torch.autograd.grad(ref.sum(), x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = mha(x, mask)
    (grad,) = torch.autograd.grad(out.float().sum(), x)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max() < 0.02
    assert (grad - grad_ref).abs().max() < 0.03 * grad_ref.abs().max()
