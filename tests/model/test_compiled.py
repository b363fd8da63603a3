"""The compiled model equals the eager one (1e-5, fp32) for every position scheme, in training
(loss and every gradient, full context and chunk masks) and in streaming (stream_step through
compiled blocks equals the eager chunk-masked forward), with no graph break.

The cases compile with the ``aot_eager`` backend: dynamo traces the model (its traced forms,
``asr.model.tracing``) and AOT autograd derives the backward, as with inductor, without the
minutes of C++ code generation a 2-core CPU spends (one tiny inductor case took 7 min on a
loaded 2-core machine). The default suite runs the schemes whose traced forms differ (rel_xl:
pad-reshape shift and gathered windows; shaw: gather and scatter bands; rope); every scheme,
the whole-model scope and inductor itself are marked slow (``python -m pytest -m slow``;
scripts/gpu_check.py runs them on a GPU machine).
"""

import copy

import pytest
import torch

from asr.data.batch import Batch
from asr.data.buckets import pad_to_buckets
from asr.model import POSITION_SCHEMES, build_encoder
from asr.model.asr_model import AsrModel
from asr.train.compile import CompileConfig, compile_model, compiled_graph_count

F_IN, V, SOS = 12, 11, 10
OPTIONS = {"shaw": {"max_distance": 3}, "rel_bias": {"max_distance": 3}, "abs_learned": {"max_len": 64}}
# (B, T, chunk_size, left_chunks): full context, a bounded and an unbounded chunk mask, at other lengths
STEPS = [(3, 71, 0, -1), (2, 97, 4, 1), (4, 58, 3, -1), (3, 84, 0, -1)]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def tiny_encoder(pos_enc: str, online_cmn: float = 20.0):
    torch.manual_seed(0)
    enc = build_encoder(pos_enc, input_dim=F_IN, d_model=16, num_heads=2, num_layers=2, ffn_dim=32, conv_kernel=5,
                        online_cmn_frames=online_cmn, **OPTIONS.get(pos_enc, {}))
    enc.set_cmvn(torch.linspace(-0.2, 0.2, F_IN), torch.linspace(0.8, 1.2, F_IN))
    return enc


def tiny_model(pos_enc: str, online_cmn: float = 20.0) -> AsrModel:
    # Both decoders (U2++) so every compiled region of the model is exercised.
    return AsrModel(tiny_encoder(pos_enc, online_cmn), V, SOS, decoder_layers=1, r2l_decoder_layers=1,
                    decoder_heads=2, decoder_ffn_dim=32, decoder_dropout=0.0, reverse_weight=0.3)


def batch(b: int, t: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    feat_lens = torch.randint(t // 2, t + 1, (b,), generator=g)
    feat_lens[0] = t
    feats = torch.randn(b, t, F_IN, generator=g) * (torch.arange(t)[None, :, None] < feat_lens[:, None, None])
    token_lens = torch.randint(1, 5, (b,), generator=g)
    tokens = torch.randint(1, SOS, (b, int(token_lens.max())), generator=g)
    tokens[torch.arange(tokens.size(1))[None] >= token_lens[:, None]] = -1
    return feats, feat_lens, tokens, token_lens


def loss_and_grads(model, step):
    b, t, chunk, left = step
    model.zero_grad(set_to_none=True)
    out = model(*batch(b, t, seed=t), chunk_size=chunk, left_chunks=left)
    out["loss"].backward()
    return [out[k].detach() for k in ("loss", "loss_ctc", "loss_att", "loss_r2l")], {
        name: p.grad for name, p in model.named_parameters() if p.grad is not None
    }


def assert_no_graph_break():
    breaks = dict(torch._dynamo.utils.counters["graph_break"])
    assert not breaks, f"graph breaks: {breaks}"


def check_training(pos_enc: str, scope: str, backend: str, steps=STEPS, graph_breaks: bool = False) -> list[int]:
    """Loss and every gradient of the compiled model equal the eager one's at each step; returns the
    graphs compiled so far after each step. ``graph_breaks``: the compiled model may leave its graphs."""
    eager = tiny_model(pos_enc).train()
    compiled = copy.deepcopy(eager)
    regions = compile_model(compiled, CompileConfig(enabled=True, scope=scope, backend=backend))
    assert regions
    graph_counts = []
    for step in steps:
        losses, grads = loss_and_grads(eager, step)
        c_losses, c_grads = loss_and_grads(compiled, step)
        for a, e in zip(c_losses, losses):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
        assert c_grads.keys() == grads.keys() and len(grads) == len(list(eager.parameters()))
        for name in grads:
            # A gradient entry is a float32 sum over B x T' terms that inductor may order differently,
            # so its rounding scales with the tensor's largest entry, not with the entry itself (abs_learned
            # at T' = 24: 1.9e-5 on an entry of a bias gradient whose largest is 3.9, the loss bit-equal).
            scale = max(1.0, float(grads[name].abs().max()))
            torch.testing.assert_close(c_grads[name], grads[name], rtol=1e-5, atol=1e-5 * scale, msg=name)
        graph_counts.append(compiled_graph_count())
    assert graph_counts[-1] > 0  # the compiled path ran (no silent eager fallback)
    if not graph_breaks:
        assert_no_graph_break()
    return graph_counts


def check_streaming(pos_enc: str, backend: str, chunk: int = 4, left: int = 2) -> None:
    """stream_step through compiled blocks == the eager chunk-masked forward; and the compiled
    chunk-masked forward == the eager one."""
    eager = tiny_encoder(pos_enc).eval()
    compiled = copy.deepcopy(eager)
    for block in compiled.blocks:
        block.compile(backend=backend, dynamic=True)
    feats = torch.randn(2, 90, F_IN, generator=torch.Generator().manual_seed(5))
    lens = torch.full((2,), 90)
    with torch.no_grad():
        expected, _ = eager(feats, lens, chunk, left)
        masked, _ = compiled(feats, lens, chunk, left)
        state = compiled.init_state(2, chunk, left)
        frontend = compiled.online_cmn().stream()  # a stream's own running mean, frame by frame
        outs = []
        for start in range(0, 90, 13):
            piece = frontend.push(feats[:, start : start + 13])
            out, state = compiled.stream_step(piece, state, final=start + 13 >= 90)
            outs.append(out)
    torch.testing.assert_close(masked, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.cat(outs, dim=1), expected, rtol=1e-5, atol=1e-5)
    assert compiled_graph_count() > 0
    assert_no_graph_break()


DEFAULT = ("rel_xl", "shaw", "rope")  # the other schemes trace the plain path that rope's rotation wraps
EVERY = [pytest.param(s, marks=() if s in DEFAULT else pytest.mark.slow) for s in POSITION_SCHEMES]


@pytest.mark.parametrize("pos_enc", EVERY)
def test_compiled_blocks_train_like_eager(pos_enc):
    check_training(pos_enc, "blocks", "aot_eager")


@pytest.mark.parametrize("pos_enc", EVERY)
def test_streaming_through_compiled_blocks_equals_the_masked_forward(pos_enc):
    check_streaming(pos_enc, "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_compiled_model_trains_like_eager(pos_enc):
    check_training(pos_enc, "model", "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["blocks", "model"])
@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_inductor_trains_like_eager_every_scheme(pos_enc, scope):
    check_training(pos_enc, scope, "inductor")


@pytest.mark.slow
@pytest.mark.parametrize("pos_enc", POSITION_SCHEMES)
def test_inductor_streams_like_eager_every_scheme(pos_enc):
    check_streaming(pos_enc, "inductor")


# One mask layout (full context) at three frame counts: T' = 17, 23, 20 after the 4x front end.
THREE_LENGTHS = [(3, 71, 0, -1), (3, 97, 0, -1), (3, 84, 0, -1)]


@pytest.mark.parametrize("pos_enc", [pytest.param(s, marks=() if s == "abs_sin" else pytest.mark.slow)
                                     for s in POSITION_SCHEMES])
def test_inductor_compiles_once_for_three_lengths(pos_enc):
    """Inductor serves new lengths with the first length's graphs and computes the eager numbers.
    With inductor's layout optimization on (its CPU default), each block's backward specialized on
    T' (a graph per length), and abs_sin, rope and none stopped at the third length with inductor's
    stride AssertionError (asr.train.compile)."""
    counts = check_training(pos_enc, "blocks", "inductor", steps=THREE_LENGTHS)
    assert counts[0] == counts[-1], f"graphs compiled after each length: {counts}"


@pytest.mark.parametrize("c,kk", [(1, 1), (1, 7), (4, 9), (6, 6), (64, 150)])
def test_rel_shift_reshape_equals_the_gather_oracle(c, kk):
    """The traced rel_xl shift (pad + reshape) against the explicit index gather, values and gradients."""
    from asr.model.scorers.rel_xl import rel_shift_gather, rel_shift_reshape

    bd = torch.randn(2, 3, c, kk + c - 1, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(2, 3, c, kk, dtype=torch.float64)
    out = rel_shift_reshape(bd, kk)
    expected = rel_shift_gather(bd, kk)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    (g_out,) = torch.autograd.grad(out, bd, grad)
    (g_expected,) = torch.autograd.grad(expected, bd, grad)
    torch.testing.assert_close(g_out, g_expected, rtol=0, atol=0)


def test_chunk_draws_do_not_recompile_the_blocks():
    """The per-batch chunk draw reaches compiled blocks as a dense mask tensor, not as the ChunkMask's
    ints (which dynamo's guards specialize on): after one full-context and one chunked batch, other
    chunk sizes, left contexts (bounded or not), batch sizes and lengths compile nothing new.
    (With the ints, bounded and unbounded left context are two graphs, and at quickstart scale they
    fill dynamo's recompile limit: asr/train/compile.py, data/results/speed.md.)"""
    graphs = [0]

    def counting_backend(gm, example_inputs):
        graphs[0] += 1
        return gm.forward

    model = tiny_model("rel_xl").train()
    compile_model(model, CompileConfig(enabled=True, scope="blocks", backend=counting_backend))
    draws = [(3, 71, 0, -1), (2, 97, 4, 1), (4, 58, 3, -1), (3, 84, 0, -1), (5, 120, 8, 2), (2, 66, 5, 0),
             (6, 90, 16, -1), (3, 140, 2, 3), (2, 101, 7, 1), (3, 88, 1, -1)]  # B < 16, T' <= 64: one rel_xl case
    counts = []
    for b, t, chunk, left in draws:
        model(*batch(b, t, seed=t), chunk_size=chunk, left_chunks=left)["loss"].backward()
        counts.append(graphs[0])
    assert counts[1] > counts[0] > 0 and counts[-1] == counts[1], counts


def test_blocked_attention_leaves_the_compiled_graph_and_trains_like_eager():
    """The blocked path (a Python loop over block pairs with its own backward) runs eagerly between
    the compiled block's graphs, and the step reads as eager."""
    from asr.model.scorers import blocked

    with blocked.forced():
        check_training("rel_xl", "blocks", "aot_eager", steps=STEPS[:2], graph_breaks=True)
    assert torch._dynamo.utils.counters["graph_break"], "the blocked call was traced into the graph"


def test_blocks_get_a_dense_mask_below_the_blocked_size_and_the_chunk_mask_above():
    from asr.model.masks import ChunkMask
    from asr.model.scorers import blocked

    encoder = tiny_encoder("rel_xl").eval()
    seen = []
    encoder.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[1]))
    feats, lens = torch.randn(2, 60, F_IN), torch.tensor([60, 41])
    with torch.no_grad():
        dense_out, _ = encoder(feats, lens, 4, 1)
        with blocked.forced():
            blocked_out, _ = encoder(feats, lens, 4, 1)
    assert isinstance(seen[0], torch.Tensor) and seen[0].shape == (2, 14, 14) and isinstance(seen[1], ChunkMask)
    torch.testing.assert_close(blocked_out, dense_out, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk_size", [0, 4])
def test_bucket_padding_leaves_the_loss_as_it_was(chunk_size):
    """Frames padded with zeros to a bucket and tokens with -1 to a multiple (asr.data.buckets, fewer shapes for a
    compiled step or oneDNN's per-shape kernels): every mask ignores the padding, so the loss is the same in float64."""
    torch.manual_seed(0)
    model = tiny_model("rel_xl").double().eval()
    feats, feat_lens, tokens, token_lens = batch(3, 37, seed=5)
    padded = Batch(feats, feat_lens, tokens, token_lens, ["a", "b", "c"], ["", "", ""])
    padded = pad_to_buckets(padded, (48, 64), token_multiple=8)
    assert padded.feats.shape[1] == 48 and padded.tokens.shape[1] == 8
    plain = model(feats.double(), feat_lens, tokens, token_lens, chunk_size=chunk_size, left_chunks=2)
    bucketed = model(padded.feats.double(), feat_lens, padded.tokens, token_lens, chunk_size=chunk_size, left_chunks=2)
    for key in ("loss_ctc", "loss_att", "loss"):
        torch.testing.assert_close(bucketed[key], plain[key], rtol=1e-9, atol=1e-9)
