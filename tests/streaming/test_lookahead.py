"""Chunk lookahead: each chunk is encoded with the next r frames, exactly alike offline and streamed.

The chunked forward of a lookahead encoder is a loop over chunks (``_forward_chunks``). With r = 0
that loop must equal the chunk-masked forward (its values and its gradients), which makes it a
reference; with r > 0 a stream must equal it, for every scheme, and a chunk's output must depend on
its r lookahead frames and on nothing later.
"""

import random

import pytest
import torch

from asr.model import POSITION_SCHEMES, build_encoder

F = 10
OPTIONS = {"shaw": {"max_distance": 3}, "rel_bias": {"max_distance": 3}, "abs_learned": {"max_len": 96}}


def tiny(pos_enc: str, lookahead: int, dtype=torch.float64):
    torch.manual_seed(0)
    enc = build_encoder(pos_enc, input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=5,
                        chunk_lookahead=lookahead, **OPTIONS.get(pos_enc, {}))
    enc.set_cmvn(torch.randn(F) * 0.1, torch.rand(F) + 0.5)
    return enc.to(dtype).eval()


def embedded(enc, feats):
    """The frames ``forward`` hands to its blocks (no online CMN, no dropout in eval mode)."""
    return enc.scheme.embed_input(enc._embed((feats - enc.cmvn_mean) * enc.cmvn_istd), 0)


def batch(seed: int, lengths=(150, 117, 61)):
    gen = torch.Generator().manual_seed(seed)
    feats = torch.randn(len(lengths), max(lengths), F, generator=gen, dtype=torch.float64)
    lens = torch.tensor(lengths)
    for b, n in enumerate(lengths):
        feats[b, n:] = 0.0
    return feats, lens


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
@pytest.mark.parametrize("chunk_size,left_chunks,phase", [(1, 3, 0), (4, 2, 3), (7, -1, 2), (16, 0, 0)])
def test_the_loop_without_lookahead_equals_the_chunk_masked_forward(pos_enc, chunk_size, left_chunks, phase):
    enc = tiny(pos_enc, 0)
    feats, lens = batch(chunk_size)
    expected, out_lens = enc(feats, lens, chunk_size, left_chunks, chunk_phase=phase)
    got, _ = enc._forward_chunks(embedded(enc, feats), out_lens, chunk_size, left_chunks, phase, 0, 0)
    for b in range(feats.size(0)):
        n = int(out_lens[b])
        torch.testing.assert_close(got[b, :n], expected[b, :n], rtol=0, atol=1e-12)


@pytest.mark.parametrize("pos_enc", ["rel_xl", "shaw", "rope"])
def test_the_loop_without_lookahead_has_the_chunk_masked_gradients(pos_enc):
    enc = tiny(pos_enc, 0).train()  # dropout is 0: train mode changes nothing but autograd's path
    feats, lens = batch(5)
    out_lens = enc.output_length(lens)
    weights = torch.randn(feats.size(0), int(out_lens.max()), 16, dtype=torch.float64)
    valid = (torch.arange(weights.size(1))[None] < out_lens[:, None])[..., None]
    grads = []
    for loop in (False, True):
        enc.zero_grad()
        if loop:
            out, _ = enc._forward_chunks(embedded(enc, feats), out_lens, 4, 2, 1, 0, 0)
        else:
            out, _ = enc(feats, lens, 4, 2, chunk_phase=1)
        (out * weights * valid).sum().backward()
        grads.append({name: p.grad.clone() for name, p in enc.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=0, atol=1e-10, msg=name)


def stream_row(enc, feats, chunk_size, left_chunks, seed):
    """One row streamed in random pieces; before the end only whole chunks whose lookahead arrived come out."""
    rng = random.Random(seed)
    state = enc.init_state(1, chunk_size, left_chunks)
    outs, fed = [], 0
    while fed < feats.size(1):
        n = min(rng.choice([0, 1, 2, 5, 9, 30]), feats.size(1) - fed)
        out, state = enc.stream_step(feats[:, fed : fed + n], state)
        fed += n
        outs.append(out)
        ready = max(0, int(enc.output_length(fed)) - enc.chunk_lookahead)
        assert sum(o.size(1) for o in outs) == chunk_size * (ready // chunk_size)
    out, state = enc.stream_step(feats[:, :0], state, final=True)
    outs.append(out)
    return torch.cat(outs, dim=1)[0]


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
@pytest.mark.parametrize("lookahead,chunk_size,left_chunks", [(1, 2, 2), (3, 4, 0), (4, 4, -1), (8, 5, 1)])
def test_a_stream_with_lookahead_equals_the_chunked_forward(pos_enc, lookahead, chunk_size, left_chunks):
    enc = tiny(pos_enc, lookahead)
    feats, lens = batch(lookahead * 100 + chunk_size, lengths=(103, 45))
    with torch.no_grad():
        expected, out_lens = enc(feats, lens, chunk_size, left_chunks)
    for b in range(feats.size(0)):
        got = stream_row(enc, feats[b : b + 1, : int(lens[b])], chunk_size, left_chunks, seed=b)
        assert got.size(0) == int(out_lens[b])
        torch.testing.assert_close(got, expected[b, : int(out_lens[b])], rtol=0, atol=1e-12)


@pytest.mark.parametrize("pos_enc", ["rel_xl", "abs_sin"])
def test_a_chunk_hears_its_lookahead_and_nothing_after_it(pos_enc):
    chunk, lookahead = 4, 3
    enc = tiny(pos_enc, lookahead)
    feats, lens = batch(1, lengths=(120,))
    sub = enc.subsampling
    base, _ = enc(feats, lens, chunk, -1)
    # feature frames that only encoder frames >= t reach: t * rate + window - rate onwards
    def changed_from(t):
        moved = feats.clone()
        moved[:, sub.rate * (t - 1) + sub.window :] += 1.0
        out, _ = enc(moved, lens, chunk, -1)
        return (out - base).abs().amax(dim=(0, 2)) > 1e-9  # (T',) which frames changed
    inside = changed_from(chunk + lookahead - 1)  # the last lookahead frame of chunk 0
    assert inside[:chunk].any(), "the first chunk does not read its lookahead"
    beyond = changed_from(chunk + lookahead)
    assert not beyond[:chunk].any(), "the first chunk reads past its lookahead"
    without, _ = tiny(pos_enc, 0)(feats, lens, chunk, -1)
    assert not torch.allclose(without, base), "lookahead changed nothing"


def test_lookahead_is_checked():
    with pytest.raises(ValueError, match="chunk_lookahead"):
        build_encoder("rel_xl", input_dim=F, d_model=16, num_heads=2, chunk_lookahead=-1)
    with pytest.raises(ValueError, match="causal"):
        build_encoder("rel_xl", input_dim=F, d_model=16, num_heads=2, causal=False, chunk_lookahead=2)
    feats, lens = batch(2)
    with pytest.raises(ValueError, match="phase"):
        tiny("rel_xl", 2)(feats, lens, 4, 1, chunk_phase=4)


def test_full_context_ignores_lookahead():
    feats, lens = batch(3)
    with_lookahead, _ = tiny("rel_xl", 4)(feats, lens)
    plain, _ = tiny("rel_xl", 0)(feats, lens)
    torch.testing.assert_close(with_lookahead, plain, rtol=0, atol=0)


@pytest.mark.parametrize("pos_enc", ["rel_xl", "rope", "wenet_rel"])
def test_lookahead_streams_exactly_on_each_device(device, pos_enc):
    """float32 on every device the suite has (cuda where present): stream == chunked forward, and the
    training loop's gradients reach the lookahead frames' inputs."""
    enc = tiny(pos_enc, 3, torch.float32).to(device)
    feats, lens = batch(9)
    feats, lens = feats.float().to(device), lens.to(device)
    with torch.no_grad():
        expected, out_lens = enc(feats, lens, 4, 2)
    got = stream_row(enc, feats[:1], 4, 2, seed=0)
    torch.testing.assert_close(got, expected[0, : int(out_lens[0])], rtol=0, atol=1e-5)
    x = feats[:1].clone().requires_grad_(True)
    out, _ = enc.train()(x, lens[:1], 4, 2)
    # The first chunk, weighted (a plain sum of a LayerNorm's output has no gradient): its lookahead's feature
    # frames get gradient, later ones none.
    weights = torch.randn(4, out.size(2), generator=torch.Generator().manual_seed(0)).to(device)
    (out[0, :4] * weights).sum().backward()
    sub = enc.subsampling
    seen = sub.rate * (4 + 3 - 1) + sub.window  # feature frames the chunk's last lookahead frame reads up to
    only_last = slice(seen - sub.rate, seen)  # read by that frame and no earlier one
    assert x.grad[0, only_last].abs().sum() > 0 and x.grad[0, seen:].abs().sum() == 0
