"""stream_step == forward(chunk_size=C, left_chunks=L) for every scheme, C, L and feeding pattern."""

import itertools
import random

import pytest
import torch

from asr.model import POSITION_SCHEMES, build_encoder

torch.set_num_threads(1)
F = 12
T = 166  # 40 encoder frames: 2 whole chunks of 16 plus a partial one; 2 frames never complete a window
OPTIONS = {"shaw": {"max_distance": 3}, "rel_bias": {"max_distance": 3}, "abs_learned": {"max_len": 64}}
CHUNKS = (1, 4, 16)
LEFTS = (0, 1, 4, -1)
PATTERNS = ("one_frame", "random", "all_at_once")


def tiny(pos_enc: str):
    torch.manual_seed(0)
    enc = build_encoder(
        pos_enc, input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=5,
        **OPTIONS.get(pos_enc, {}),
    )
    enc.set_cmvn(torch.randn(F) * 0.1, torch.rand(F) + 0.5)
    return enc.eval()


@pytest.fixture(scope="module")
def encoders():
    return {name: tiny(name) for name in POSITION_SCHEMES}


def pieces_for(pattern: str, total: int, seed: int) -> list[int]:
    if pattern == "one_frame":
        return [1] * total
    if pattern == "all_at_once":
        return [total]
    rng, out = random.Random(seed), []
    while sum(out) < total:
        out.append(min(rng.choice([0, 1, 2, 3, 5, 8, 13, 30]), total - sum(out)))
    return out


def stream(enc, feats, chunk_size, left_chunks, pieces, final_empty):
    """Feed ``pieces`` frames at a time; check that only whole chunks come out before the end."""
    state = enc.init_state(feats.size(0), chunk_size, left_chunks)
    outs, start = [], 0
    for i, n in enumerate(pieces):
        last = i == len(pieces) - 1 and not final_empty
        out, state = enc.stream_step(feats[:, start : start + n], state, final=last)
        start += n
        outs.append(out)
        if not last:
            emitted = sum(o.size(1) for o in outs)
            assert emitted == chunk_size * (enc.output_length(start) // chunk_size)
    if final_empty:
        out, state = enc.stream_step(feats[:, :0], state, final=True)
        outs.append(out)
    assert state.finished
    return torch.cat(outs, dim=1)


# Every scheme x C x L once; the pattern and batch size rotate so that each scheme
# meets every pattern and both batch sizes across the grid.
GRID = [
    (name, c, l, PATTERNS[(i + j) % 3], (1, 3)[(i + j) % 2])
    for i, name in enumerate(POSITION_SCHEMES)
    for j, (c, l) in enumerate(itertools.product(CHUNKS, LEFTS))
]


@pytest.mark.parametrize("pos_enc,chunk_size,left_chunks,pattern,batch", GRID)
def test_stream_equals_chunked_forward(encoders, pos_enc, chunk_size, left_chunks, pattern, batch):
    enc = encoders[pos_enc]
    torch.manual_seed(chunk_size * 10 + left_chunks)
    feats = torch.randn(batch, T, F)
    with torch.no_grad():
        expected, lens = enc(feats, torch.full((batch,), T), chunk_size, left_chunks)
        got = stream(enc, feats, chunk_size, left_chunks, pieces_for(pattern, T, chunk_size), pattern == "one_frame")
    assert got.shape == expected.shape == (batch, 40, 16)
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()


@pytest.mark.parametrize("pattern", PATTERNS)
def test_all_patterns_for_rel_xl(encoders, pattern):
    """The main scheme, each feeding pattern, batch 3, a mid-size setting."""
    enc = encoders["rel_xl"]
    feats = torch.randn(3, T, F)
    with torch.no_grad():
        expected, _ = enc(feats, torch.full((3,), T), 4, 1)
        got = stream(enc, feats, 4, 1, pieces_for(pattern, T, 7), final_empty=False)
    assert torch.allclose(got, expected, atol=1e-5)


def test_grid_covers_everything():
    covered = {(name, c, l) for name, c, l, _, _ in GRID}
    assert covered == set(itertools.product(POSITION_SCHEMES, CHUNKS, LEFTS))
    for name in POSITION_SCHEMES:
        assert {p for n, _, _, p, _ in GRID if n == name} == set(PATTERNS)
        assert {b for n, _, _, _, b in GRID if n == name} == {1, 3}


@pytest.mark.parametrize("pos_enc", ["wenet_rel", "abs_sin"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_wenet_layout_streams_exactly(pos_enc, pattern):
    """An imported Wenet model's layout (conv left context in input space, no conv norm) streams exactly too."""
    torch.manual_seed(0)
    enc = build_encoder(pos_enc, input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=5,
                        conv_norm="none", conv_causal_pad="input").eval()
    feats = torch.randn(2, T, F)
    with torch.no_grad():
        expected, _ = enc(feats, torch.full((2,), T), 4, 2)
        got = stream(enc, feats, 4, 2, pieces_for(pattern, T, 3), final_empty=False)
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()


@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_stream_with_a_late_clock_equals_the_forward_at_that_time(encoders, pos_enc):
    """A stream started at clock 600 s (init_state(start_time=15000)) == forward(start_time=15000)."""
    enc = encoders[pos_enc] if pos_enc != "abs_learned" else None
    if enc is None:  # its 64-row table cannot reach 600 s: a long one
        torch.manual_seed(0)
        enc = build_encoder("abs_learned", input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32,
                            conv_kernel=5, max_len=16000).eval()
    feats = torch.randn(2, T, F)
    with torch.no_grad():
        expected, _ = enc(feats, torch.full((2,), T), 4, 2, start_time=15000)
        state = enc.init_state(2, 4, 2, start_time=15000)
        got, _ = enc.stream_step(feats, state, final=True)
        at_zero, _ = enc(feats, torch.full((2,), T), 4, 2)
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    assert state.time == 15000 + 40
    if pos_enc in ("abs_sin", "abs_learned", "wenet_rel"):
        assert not torch.allclose(expected, at_zero, atol=1e-3)
