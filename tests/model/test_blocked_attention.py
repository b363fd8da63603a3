"""The blocked attention (asr.model.scorers.blocked) against the explicit scorer paths in float64.

Outputs and every gradient (q, k, v and the scheme's own parameters), with blocks small
enough that a call has many query and key blocks (so the online softmax rescales), for
offline calls (C = K) and streaming-shaped ones (C < K), without a mask, with a dense
(B, C, K) mask holding a row with no allowed key, with key padding (B, 1, K) and with a
ChunkMask (padding plus chunks and bounded left context).
"""

import pytest
import torch

from asr.model.masks import ChunkMask
from asr.model.positions import build_position_scheme
from asr.model.scorers import blocked

SCHEMES = {"rel_xl": {}, "shaw": {"max_distance": 3}, "rel_bias": {"max_distance": 2}, "wenet_rel": {}}
B, H, DH = 2, 3, 4


def make_scorer(name, dtype=torch.float64):
    """The scheme's scorer with random float64 parameters (the same draws whatever ``dtype``)."""
    s = build_position_scheme(name, H * DH, H, **SCHEMES[name]).make_scorer(H, DH, 0.0).double()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(3)
        for p in s.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return s.to(dtype)


def inputs(c, kk, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, DH, generator=gen, dtype=torch.float64).to(dtype).requires_grad_()
            for n in (c, kk, kk)]


def run(scorer, qkv, mask):
    """Output and the gradients of q, k, v and every parameter for a fixed upstream gradient."""
    for t in (*qkv, *scorer.parameters()):
        t.grad = None
    out = scorer(*qkv, mask)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    (out * weight).sum().backward()
    return [out.detach()] + [t.grad.clone() for t in (*qkv, *scorer.parameters())]


@pytest.fixture
def force_blocked(monkeypatch):
    """Every call takes the blocked path, in blocks of 3 queries by 4 keys."""
    monkeypatch.setattr(blocked, "BLOCKED_MIN_LOGITS", 0)
    monkeypatch.setattr(blocked, "DEFAULT_BLOCKING", blocked.Blocking(query_block=3, key_block=4))


def explicit(scorer, qkv, mask):
    old = blocked.BLOCKED_MIN_LOGITS
    blocked.BLOCKED_MIN_LOGITS = 1 << 62
    try:
        return run(scorer, qkv, mask.dense() if isinstance(mask, ChunkMask) else mask)
    finally:
        blocked.BLOCKED_MIN_LOGITS = old


def masks(c, kk):
    gen = torch.Generator().manual_seed(c * kk)
    dense = torch.rand(B, c, kk, generator=gen) > 0.4
    dense[0, c // 2] = False  # a row with no allowed key
    padding = (torch.arange(kk)[None, :] < torch.tensor([kk, kk - 3])[:, None])[:, None, :]
    cases = {"none": None, "dense": dense, "padding": padding}
    if c == kk:
        lengths = torch.tensor([kk, kk - 5])
        cases |= {"chunk_full": ChunkMask(lengths, kk), "chunk2_left1": ChunkMask(lengths, kk, 2, 1),
                  "chunk3_all_left": ChunkMask(lengths, kk, 3, -1), "chunk4_left0": ChunkMask(lengths, kk, 4, 0),
                  "chunk4_left1_phase3": ChunkMask(lengths, kk, 4, 1, 3)}
    return cases


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("c, kk", [(13, 13), (5, 11), (1, 9), (17, 17)])
def test_blocked_equals_explicit_in_float64_with_gradients(force_blocked, name, c, kk):
    scorer = make_scorer(name)
    for label, mask in masks(c, kk).items():
        qkv = inputs(c, kk)
        got = run(scorer, qkv, mask)
        want = explicit(scorer, qkv, mask)
        for i, (g, w) in enumerate(zip(got, want)):
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=lambda m: f"{label} tensor {i}: {m}")


@pytest.mark.parametrize("name", SCHEMES)
def test_blocked_fp32_is_within_1e_5_of_the_float64_oracle(force_blocked, name):
    c = kk = 40
    mask = ChunkMask(torch.tensor([40, 31]), kk, 4, 2)
    oracle = explicit(make_scorer(name), inputs(c, kk), mask)
    scorer32 = make_scorer(name, torch.float32)
    got = run(scorer32, inputs(c, kk, torch.float32), mask)
    for i, (g, w) in enumerate(zip(got, oracle)):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5, msg=lambda m: f"tensor {i}: {m}")


@pytest.mark.parametrize("start_time", [37, torch.tensor([5, 900])])
def test_wenet_rel_in_blocks_keeps_the_stream_clock(force_blocked, start_time):
    """wenet_rel scores the keys' absolute times: a streaming-shaped call (C < K) at a clock, one
    per row or shared, equals the explicit path there, gradients included; and the clock matters."""
    scorer = make_scorer("wenet_rel")
    qkv = inputs(5, 11)
    mask = masks(5, 11)["padding"]

    def call(threshold):
        old = blocked.BLOCKED_MIN_LOGITS
        blocked.BLOCKED_MIN_LOGITS = threshold
        try:
            for t in (*qkv, *scorer.parameters()):
                t.grad = None
            out = scorer(*qkv, mask, start_time=start_time)
            out.mul(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
            return [out.detach()] + [t.grad.clone() for t in (*qkv, *scorer.parameters())]
        finally:
            blocked.BLOCKED_MIN_LOGITS = old

    got, want = call(0), call(1 << 62)
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=lambda m: f"tensor {i}: {m}")
    assert not torch.allclose(got[0], scorer(*qkv, mask).detach())


def test_chunk_mask_blocks_skip_what_the_chunks_hide(force_blocked):
    """With bounded left context a query block visits only the key blocks of its band."""
    mask = ChunkMask(torch.tensor([64]), 64, 4, 1)
    spans = list(blocked._query_blocks(64, 64, mask, blocked.Blocking(query_block=8, key_block=4), rows=1))
    for a0, a1, s in spans:
        lo, hi = s[0][0], s[-1][1]
        assert lo == max(0, (a0 // 4 - 1) * 4) and hi == ((a1 - 1) // 4 + 1) * 4
    assert sum(len(s) for *_, s in spans) < (64 // 8) * (64 // 4) / 2


def test_dispatch_by_size_and_forced():
    assert not blocked.use_blocked(8, 4, 500, 500)  # a training batch
    assert blocked.use_blocked(8, 4, 600, 600, grad=False)  # decoding such a batch
    assert not blocked.use_blocked(30, 4, 75, 75, grad=False)  # short utterances
    assert blocked.use_blocked(1, 4, 7500, 7500)  # a 5-minute file
    with blocked.forced():
        assert blocked.use_blocked(1, 4, 16, 80, grad=False)
    assert not blocked.use_blocked(1, 4, 16, 80, grad=False)


@pytest.mark.parametrize("name", SCHEMES)
def test_attention_dropout_in_blocks_replays_its_masks_in_backward(force_blocked, name):
    """With dropout the forward is still a fixed function of the seed: gradcheck it in float64; the
    keep masks are those of the forward (else the gradients would not match), and they do drop."""
    scorer = build_position_scheme(name, H * DH, H, **SCHEMES[name]).make_scorer(H, DH, 0.3).double().train()
    q, k, v = inputs(7, 7)
    mask = ChunkMask(torch.tensor([7, 5]), 7, 2, 1)

    def seeded(q, k, v):
        torch.manual_seed(11)
        return scorer(q, k, v, mask)

    assert torch.autograd.gradcheck(seeded, (q, k, v))
    dropped = seeded(q, k, v)
    torch.testing.assert_close(seeded(q, k, v), dropped, rtol=0, atol=0)
    assert not torch.allclose(dropped, scorer.eval()(q, k, v, mask))


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("chunk, left, phase", [(0, -1, 0), (3, 1, 0), (4, -1, 0), (4, 1, 2)])
def test_encoder_forward_in_blocks_equals_the_explicit_forward(monkeypatch, name, chunk, left, phase):
    """The whole encoder (ChunkMask from the encoder, padding rows, several layers), float64."""
    from asr.model import build_encoder

    monkeypatch.setattr(blocked, "DEFAULT_BLOCKING", blocked.Blocking(query_block=5, key_block=7))
    torch.manual_seed(0)
    enc = build_encoder(pos_enc=name, input_dim=12, d_model=16, num_heads=2, num_layers=2, ffn_dim=32,
                        conv_kernel=3, **{k: v for k, v in SCHEMES[name].items()}).double().eval()
    feats = torch.randn(2, 130, 12, dtype=torch.float64)
    lens = torch.tensor([130, 91])
    explicit_out, n = enc(feats, lens, chunk, left, chunk_phase=phase)
    with blocked.forced():
        blocked_out, n2 = enc(feats, lens, chunk, left, chunk_phase=phase)
    assert torch.equal(n, n2)
    for b, length in enumerate(n.tolist()):
        torch.testing.assert_close(blocked_out[b, :length], explicit_out[b, :length], rtol=1e-10, atol=1e-10)


def test_long_inputs_are_subsampled_in_pieces_to_the_same_frames(monkeypatch):
    from asr.model import build_encoder, encoder

    torch.manual_seed(0)
    enc = build_encoder(pos_enc="rel_xl", input_dim=12, d_model=16, num_heads=2, num_layers=1, ffn_dim=32,
                        conv_kernel=3).eval()
    feats = torch.randn(2, 301, 12)
    whole = enc._embed(feats)
    monkeypatch.setattr(encoder, "EMBED_PIECE", 8)
    pieces = enc._embed(feats)
    assert pieces.shape == whole.shape == (2, enc.output_length(301), 16)
    torch.testing.assert_close(pieces, whole, rtol=1e-5, atol=1e-5)


def test_eager_entry_points_do_not_import_torch_dynamo():
    """torch._dynamo takes seconds to import, and decode, serve and export run eagerly: the blocked
    path's exclusion from compiled graphs is made only under torch.compile."""
    import subprocess
    import sys

    code = ("import sys, asr.model, asr.decode, asr.cli.serve, asr.cli.export; "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
