"""Streaming state: bounded memory, translation invariance, argument checks."""

import pytest
import torch

from asr.model import POSITION_SCHEMES, build_encoder

torch.set_num_threads(1)
F = 12


def tiny(pos_enc: str, **kw):
    torch.manual_seed(0)
    options = {"shaw": {"max_distance": 3}, "rel_bias": {"max_distance": 3}, "abs_learned": {"max_len": 512}}
    args = dict(input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=3)
    args.update(options.get(pos_enc, {}), **kw)
    return build_encoder(pos_enc, **args).eval()


def run_stream(enc, feats, chunk_size, left_chunks, piece=16):
    state = enc.init_state(feats.size(0), chunk_size, left_chunks)
    outs = []
    for start in range(0, feats.size(1), piece):
        out, state = enc.stream_step(feats[:, start : start + piece], state)
        outs.append(out)
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_translation_invariance(pos_enc):
    """Same window after different histories: relative (and position-free) schemes give the same
    output once the history is beyond the receptive field; absolute schemes do not."""
    enc = tiny(pos_enc)
    C, L = 4, 1
    torch.manual_seed(1)
    window = torch.randn(1, 4 * 40, F)  # 40 encoder frames
    prefix_a, prefix_b = torch.randn(1, 4 * 12, F), torch.randn(1, 4 * 28, F)  # whole chunks: same alignment
    with torch.no_grad():
        out_a = run_stream(enc, torch.cat([prefix_a, window], 1), C, L)
        out_b = run_stream(enc, torch.cat([prefix_b, window], 1), C, L)
    # Receptive field per layer: L*C + C-1 attention frames + kernel-1 conv frames = 9; 2 layers: 18.
    # Window frames [24, 36) depend only on window frames [6, 36 + 1] (+ subsampling lookahead).
    a, b = out_a[:, 12 + 24 : 12 + 36], out_b[:, 28 + 24 : 28 + 36]
    same = torch.allclose(a, b, atol=1e-5)
    if pos_enc in ("abs_sin", "abs_learned", "wenet_rel"):  # wenet_rel scores absolute key times
        assert not same
    else:
        assert same, (a - b).abs().max()
    # The first frames of the window still see the different histories.
    assert not torch.allclose(out_a[:, 12], out_b[:, 28], atol=1e-4)


def test_state_stops_growing_with_bounded_left_context():
    enc = tiny("rel_xl")
    C, L = 4, 4
    state = enc.init_state(2, C, L)
    cache_sizes, total_sizes = [], []
    for _ in range(60):
        _, state = enc.stream_step(torch.randn(2, 4 * C, F), state)  # one chunk per call
        layer_tensors = [t for layer in state.layers for t in (layer.key, layer.value, layer.conv) if t is not None]
        cache_sizes.append(sum(t.numel() for t in layer_tensors))
        total_sizes.append(state.numel())
    warm = L + 2  # the first call ends one encoder frame short of a chunk
    assert len(set(cache_sizes[warm:])) == 1  # constant after warm-up
    assert cache_sizes[0] < cache_sizes[warm]
    # Per layer: K and V of L*C frames (B*H*Dh = B*D each) + conv cache (B, D, kernel-1).
    per_layer = 2 * (2 * L * C * 16) + 2 * 16 * 2
    assert cache_sizes[-1] == 2 * per_layer
    # Feature leftovers < window frames of F, pending < C encoder frames of D.
    assert max(total_sizes) <= cache_sizes[-1] + 2 * (enc.subsampling.window * F + C * 16)
    assert all(layer.cached_frames == L * C for layer in state.layers)
    assert state.time == C * (enc.output_length(60 * 4 * C) // C)  # whole chunks only
    assert not any(t.requires_grad for t in state.tensors())  # no autograd graph over the stream


def test_unbounded_left_context_keeps_everything():
    enc = tiny("rel_xl")
    state = enc.init_state(1, 4, -1)
    for _ in range(10):
        _, state = enc.stream_step(torch.randn(1, 16, F), state)
    assert all(layer.cached_frames == 36 for layer in state.layers)  # 160 frames -> 39 -> 9 whole chunks
    state0 = enc.init_state(1, 4, 0)
    _, state0 = enc.stream_step(torch.randn(1, 64, F), state0)
    assert all(layer.key is None and layer.value is None for layer in state0.layers)


def test_empty_and_short_pieces():
    enc = tiny("rel_xl")
    state = enc.init_state(1, 2, 1)
    out, state = enc.stream_step(torch.randn(1, 0, F), state)
    assert out.shape == (1, 0, 16) and state.feats is None and state.pending is None
    out, state = enc.stream_step(torch.randn(1, 6, F), state)  # < window: nothing yet
    assert out.shape == (1, 0, 16) and state.feats.shape == (1, 6, F)
    out, state = enc.stream_step(torch.randn(1, 1, F), state)  # 1 encoder frame pending, chunk of 2
    assert out.shape == (1, 0, 16) and state.pending.shape == (1, 1, 16)
    out, state = enc.stream_step(torch.randn(1, 0, F), state, final=True)  # flush the partial chunk
    assert out.shape == (1, 1, 16) and state.time == 1


def test_streaming_argument_errors():
    with pytest.raises(ValueError, match="causal=False"):
        tiny("rel_xl", causal=False).init_state(1, 4, 1)
    enc = tiny("rel_xl")
    with pytest.raises(ValueError, match="chunk_size > 0"):
        enc.init_state(1, 0, 1)
    with pytest.raises(ValueError, match="left_chunks"):
        enc.init_state(1, 4, -2)
    with pytest.raises(ValueError, match="batch_size"):
        enc.init_state(0, 4, 1)
    state = enc.init_state(2, 4, 1)
    with pytest.raises(ValueError, match="batch_size \\(2\\)"):
        enc.stream_step(torch.randn(3, 10, F), state)
    with pytest.raises(ValueError, match=f"\\(B, T, {F}\\)"):
        enc.stream_step(torch.randn(2, 10, F + 1), state)
    _, state = enc.stream_step(torch.randn(2, 10, F), state, final=True)
    with pytest.raises(ValueError, match="finished"):
        enc.stream_step(torch.randn(2, 10, F), state)


def test_abs_learned_stream_past_max_len_raises():
    enc = tiny("abs_learned", max_len=8)
    state = enc.init_state(1, 4, 1)
    _, state = enc.stream_step(torch.randn(1, 4 * 8 + 3, F), state)  # 8 frames = 2 chunks: fine
    with pytest.raises(ValueError, match="max_len=8"):
        enc.stream_step(torch.randn(1, 16, F), state)
