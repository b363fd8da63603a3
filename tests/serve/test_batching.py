"""Stacked streams: one batched stream_step equals every stream run alone (every position scheme)."""

import pytest
import torch

from asr.model import POSITION_SCHEMES, build_encoder
from asr.serve.batching import split_state, stack_states

torch.set_num_threads(1)
F = 12


def tiny(pos_enc: str):
    torch.manual_seed(0)
    options = {"shaw": {"max_distance": 3}, "rel_bias": {"max_distance": 3}, "abs_learned": {"max_len": 512}}
    return build_encoder(pos_enc, input_dim=F, d_model=16, num_heads=2, num_layers=2, ffn_dim=32,
                         conv_kernel=3, **options.get(pos_enc, {})).eval()


def alone(enc, feats, chunk_size, left_chunks):
    """(1, T', D) encoder frames of whole chunks for one stream fed at once."""
    state = enc.init_state(1, chunk_size, left_chunks)
    out, _ = enc.stream_step(feats[None], state)
    return out


def run_batched(enc, streams, joins, chunk_size, left_chunks):
    """Each stream joins at round ``joins[i]``; every round stacks all streams with a whole chunk left."""
    sub = enc.subsampling
    span, step = sub.window + sub.rate * (chunk_size - 1), sub.rate * chunk_size
    states = [enc.init_state(1, chunk_size, left_chunks) for _ in streams]
    consumed = [0] * len(streams)
    outputs = [[] for _ in streams]
    batch_sizes = []
    for round_ in range(200):
        ready = [i for i, f in enumerate(streams) if joins[i] <= round_ and f.size(0) - consumed[i] >= span]
        if not ready:
            if all(joins[i] <= round_ for i in range(len(streams))):
                break
            continue
        feats = torch.stack([streams[i][consumed[i] : consumed[i] + span] for i in ready])  # (B, span, F)
        batched = stack_states([states[i] for i in ready])
        out, batched = enc.stream_step(feats, batched)
        batched.feats = None  # the caller keeps the feature overlap itself
        for row, i in enumerate(ready):
            outputs[i].append(out[row : row + 1])
            consumed[i] += step
        for i, state in zip(ready, split_state(batched)):
            states[i] = state
        batch_sizes.append(len(ready))
    return [torch.cat(o, dim=1) for o in outputs], batch_sizes


@pytest.mark.parametrize("left_chunks", [2, -1])
@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_batched_step_equals_each_stream_alone(pos_enc, left_chunks):
    enc = tiny(pos_enc)
    C = 4
    g = torch.Generator().manual_seed(1)
    lengths = [150, 120, 200, 100]
    streams = [torch.randn(n, F, generator=g) for n in lengths]
    joins = [0, 2, 3, 5]  # later joiners have shorter caches and earlier times than the others
    with torch.no_grad():
        batched, batch_sizes = run_batched(enc, streams, joins, C, left_chunks)
        for feats, out in zip(streams, batched):
            ref = alone(enc, feats, C, left_chunks)
            assert out.shape == ref.shape
            assert torch.allclose(out, ref, atol=1e-5), (out - ref).abs().max()
    # The test exercised mixed batches, not only single streams.
    assert max(batch_sizes) == len(streams)


def test_stack_rejects_states_with_buffered_frames():
    enc = tiny("rel_xl")
    state = enc.init_state(1, 4, 2)
    enc.stream_step(torch.randn(1, 5, F), state)  # 5 frames: not a whole subsampled frame plus window
    with pytest.raises(ValueError, match="chunk border"):
        stack_states([state, enc.init_state(1, 4, 2)])
    with pytest.raises(ValueError, match="chunk_size"):
        stack_states([enc.init_state(1, 4, 2), enc.init_state(1, 8, 2)])


def test_split_trims_each_row_to_its_own_cache():
    enc = tiny("rel_xl")
    C = 4
    sub = enc.subsampling
    span = sub.window + sub.rate * (C - 1)
    old, new = enc.init_state(1, C, 3), enc.init_state(1, C, 3)
    with torch.no_grad():
        for _ in range(2):
            enc.stream_step(torch.randn(1, span, F), old)
            old.feats = None
        batched = stack_states([old, new])
        assert batched.cache_lengths == [2 * C, 0] and batched.row_times == [2 * C, 0]
        enc.stream_step(torch.randn(2, span, F), batched)
        batched.feats = None
    rows = split_state(batched)
    assert [r.layers[0].cached_frames for r in rows] == [3 * C, C]
    assert [r.time for r in rows] == [3 * C, C]
