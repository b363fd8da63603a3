"""The fused attention routes (asr.model.scorers.routes, .fused) against the explicit scorer paths in float64.

On the CPU: the ``sdpa_bias`` and ``joint_sdpa`` routes forward and backward in float64 (SDPA's math
kernel takes a float bias and returns its gradient; rel_xl's ``joint_sdpa`` is tested further in
test_rel_xl_joint.py), which checks every bias construction and its
gradients; the ``flex`` routes forward and backward in float64 through FlexAttention's eager
reference (the same score_mods, BlockMasks and log-sum-exps, computed densely; torch refuses a
CPU backward only by a device check, which the ``eager_flex`` fixture lifts); FlexAttention's masks
by evaluating their mask_mod densely; the compiled flex kernel forward in float32 (slow: compiling
flex on the CPU takes minutes; it has no CPU backward and no log-sum-exp there, so not for shaw).
On CUDA (ids with ``cuda``): every route forward and backward, float32 and bfloat16, against the
float64 explicit path on the CPU.

Shapes: offline (C = K) with key padding, dense chunk masks (phase, left context) and a
ChunkMask, and streaming-shaped calls (the C queries are the last of K keys, a cache of
K - C frames, rows left-padded by the key mask), plus rows that see no key.
"""

import copy

import pytest
import torch
import torch.nn.attention.flex_attention as flex_module

from asr.model.masks import ChunkMask, attention_mask
from asr.model.positions import build_position_scheme
from asr.model.scorers import blocked, fused
from asr.model.scorers.fused import build_flex_mask, flex_mask
from asr.model.scorers.routes import (CUDA_ROUTES, EXPLICIT, FLEX, FUSED_ROUTES, JOINT_SDPA, SDPA_BIAS,
                                      forced_route, route_for)

SCHEMES = {"rel_xl": {}, "wenet_rel": {}, "rel_bias": {"max_distance": 3}, "shaw": {"max_distance": 3}}
B, H, DH = 2, 2, 16  # Dh 16: a head dim every CUDA kernel (flex, memory-efficient SDPA) takes
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def make_scorer(name, **options):
    """The scheme's float64 scorer with random parameters (non-zero position terms); ``options``
    replace the scheme's in SCHEMES."""
    s = build_position_scheme(name, H * DH, H, **{**SCHEMES[name], **options}).make_scorer(H, DH, 0.0).double()
    if name == "rel_xl":
        s.query_block = 4  # several BD query blocks, a front-padded one among them
    with torch.no_grad():
        gen = torch.Generator().manual_seed(3)
        for p in s.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5)
    return s


def inputs(c, kk, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, DH, generator=gen, dtype=torch.float64) for n in (c, kk, kk)]


def run(scorer, qkv, mask, device="cpu", dtype=torch.float64, route=EXPLICIT):
    """Output and the gradients of q, k, v and every parameter (float64, on the CPU) for a fixed
    upstream gradient; the scorer runs as a copy on ``device`` in ``dtype`` on ``route``."""
    scorer = _copy(scorer).to(device, dtype)
    qkv = [t.to(device, dtype).requires_grad_() for t in qkv]
    if isinstance(mask, torch.Tensor):
        mask = mask.to(device)
    elif isinstance(mask, ChunkMask):
        mask = ChunkMask(mask.lengths.to(device), mask.size, mask.chunk_size, mask.left_chunks, mask.phase)
    with forced_route(route):
        out = scorer(*qkv, mask)
    weight = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out).to(device, dtype)
    (out * weight).sum().backward()
    return [t.detach().cpu().double() for t in (out, *(x.grad for x in (*qkv, *scorer.parameters())))]


def _copy(scorer):
    return copy.deepcopy(scorer)


def explicit(scorer, qkv, mask):
    """The float64 oracle: the explicit path with the dense mask (these sizes are far below the blocked
    path's threshold, checked here)."""
    c, kk = qkv[0].size(2), qkv[1].size(2)
    assert not blocked.use_blocked(B, H, c, kk, grad=True)
    return run(scorer, qkv, mask.dense() if isinstance(mask, ChunkMask) else mask)


def offline_masks():
    """(id, C, K, mask) for offline calls: none, padding, dense chunk masks, ChunkMasks."""
    t = 11
    lengths = torch.tensor([11, 7])
    return [
        ("none", t, t, None),
        ("padding", t, t, attention_mask(lengths, t)),  # (B, 1, K)
        ("chunk", t, t, attention_mask(lengths, t, chunk_size=4)),  # (B, C, K), padded queries see keys
        ("chunk_left_phase", t, t, attention_mask(lengths, t, chunk_size=3, left_chunks=1, phase=2)),
        ("chunkmask_left", t, t, ChunkMask(lengths, t, chunk_size=3, left_chunks=1)),
        ("chunkmask_empty_rows", t, t, ChunkMask(torch.tensor([11, 2]), t, chunk_size=2, left_chunks=0, phase=1)),
        ("chunkmask_full", t, t, ChunkMask(lengths, t)),
    ]


def streaming_masks():
    """(id, C, K, mask) for streaming-shaped calls: the C queries are the last of K keys."""
    keys = torch.ones(B, 1, 9, dtype=torch.bool)
    keys[1, :, :4] = False  # row 1 has a shorter cache, left-padded
    chunk = torch.ones(B, 3, 9, dtype=torch.bool)
    chunk[0, 0] = False  # one query row with no key
    return [("cache", 3, 9, keys), ("cache_chunk", 3, 9, chunk), ("one_query", 1, 6, None)]


CASES = offline_masks() + streaming_masks()
CASE_IDS = [case[0] for case in CASES]


def assert_close(got, want, rtol, what):
    for name, g, w in zip(["out", "dq", "dk", "dv", *[f"param{i}" for i in range(10)]], got, want):
        scale = w.abs().max().clamp_min(1e-3)  # a zero gradient (a softmax-invariant shift) is compared absolutely
        err = (g - w).abs().max() / scale
        assert err <= rtol, f"{what}: {name} differs by {float(err):.2e} of its largest value"


def sdpa_route(name):
    return JOINT_SDPA if name == "wenet_rel" else SDPA_BIAS


SDPA_SCHEMES = [name for name in sorted(SCHEMES) if sdpa_route(name) in FUSED_ROUTES[name]]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("name", SDPA_SCHEMES)
def test_sdpa_routes_equal_the_explicit_path_in_float64(name, case):
    _, c, kk, mask = case
    scorer = make_scorer(name)
    qkv = inputs(c, kk)
    want = explicit(scorer, qkv, mask)
    got = run(scorer, qkv, mask, route=sdpa_route(name))
    assert_close(got, want, 1e-10, f"{name} {sdpa_route(name)}")


def test_wenet_rel_joint_route_keeps_the_stream_clock():
    scorer = make_scorer("wenet_rel")
    q, k, v = inputs(3, 9)
    starts = torch.tensor([20, 5])
    want = scorer(q, k, v, None, start_time=starts)
    with forced_route(JOINT_SDPA):
        got = scorer(q, k, v, None, start_time=starts)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", [c for c in CASES if c[3] is not None], ids=[c[0] for c in CASES if c[3] is not None])
def test_flex_masks_equal_the_prepared_dense_mask(case):
    """The BlockMask's mask_mod, evaluated densely, is the dense mask with empty rows opened, and
    row_valid marks exactly the rows that see a key."""
    _, c, kk, mask = case
    built = build_flex_mask(mask, B, c, kk, torch.device("cpu"))
    dense = mask.dense() if isinstance(mask, ChunkMask) else mask
    dense = dense.expand(B, c, kk)
    row_valid = dense.any(-1)  # (B, C)
    want = dense | ~row_valid[..., None]
    mod = built.block_mask.mask_mod
    got = flex_module.create_mask(mod, B, 1, c, kk, device="cpu")[:, 0]
    assert torch.equal(got, want)
    assert torch.equal(built.row_valid.expand(B, 1, c, 1)[:, 0, :, 0], row_valid)


def test_flex_mask_is_built_once_per_mask_object():
    mask = ChunkMask(torch.tensor([11, 7]), 11, chunk_size=3, left_chunks=1)
    first = flex_mask(mask, B, 11, 11, torch.device("cpu"))
    assert flex_mask(mask, B, 11, 11, torch.device("cpu")) is first
    other = ChunkMask(torch.tensor([11, 7]), 11, chunk_size=3, left_chunks=1)
    assert flex_mask(other, B, 11, 11, torch.device("cpu")) is not first


def test_routes_table_and_forcing():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for scheme, route in CUDA_ROUTES.items():
        assert route_for(scheme, cpu) == EXPLICIT
        assert route_for(scheme, cuda) == route
        assert route == EXPLICIT or route in FUSED_ROUTES[scheme]
    with forced_route(SDPA_BIAS):
        assert route_for("rel_xl", cpu) == SDPA_BIAS
        with pytest.raises(ValueError, match="wenet_rel has no 'sdpa_bias'"):
            route_for("wenet_rel", cpu)
    with forced_route(EXPLICIT):
        assert route_for("rel_xl", cuda) == EXPLICIT
    with blocked.forced():  # the memory guard's O(C + K) budget rules out a (C, K) bias, not a bias-free kernel
        assert route_for("rel_xl", cuda) == JOINT_SDPA
        assert route_for("wenet_rel", cuda) == CUDA_ROUTES["wenet_rel"]
    with pytest.raises(ValueError, match="unknown attention route"):
        with forced_route("fast"):
            pass
    scorer = build_position_scheme("shaw", H * DH, H).make_scorer(H, DH, 0.0)
    with forced_route(SDPA_BIAS), pytest.raises(ValueError, match="shaw has no 'sdpa_bias'"):
        scorer(*[torch.zeros(1, H, 4, DH) for _ in range(3)], None)


FLEX_SCHEMES = [name for name in sorted(SCHEMES) if FLEX in FUSED_ROUTES[name]]


@pytest.fixture
def eager_flex(monkeypatch):
    """The flex routes call FlexAttention's eager (dense, differentiable) reference, on the CPU too."""
    monkeypatch.setattr(flex_module, "_validate_device", lambda *tensors: None)
    monkeypatch.setattr(fused, "compiled", lambda kernel: kernel)


# Every case for shaw (its value term has the most cases); for the others, one of each mask kind.
FLEX_CASES = [pytest.param(name, case, id=f"{name}-{case[0]}") for name in FLEX_SCHEMES for i, case in enumerate(CASES)
              if name == "shaw" or i in (1, 3, 5, 8, 9)]


@pytest.mark.parametrize("name,case", FLEX_CASES)
def test_flex_routes_equal_the_explicit_path_in_float64(name, case, eager_flex):
    _, c, kk, mask = case
    scorer = make_scorer(name)
    qkv = inputs(c, kk)
    want = explicit(scorer, qkv, mask)
    got = run(scorer, qkv, mask, route=FLEX)
    assert_close(got, want, 1e-10, f"{name} flex")


@pytest.mark.parametrize("max_distance", [0, 1, 20])
def test_shaw_flex_at_the_bucket_edge_cases(max_distance, eager_flex):
    """One bucket (every key), no interior bucket, and every key interior (d > K)."""
    scorer = make_scorer("shaw", max_distance=max_distance)
    _, c, kk, mask = CASES[8]  # streaming: a cache, chunked queries, a row with no key
    qkv = inputs(c, kk)
    assert_close(run(scorer, qkv, mask, route=FLEX), explicit(scorer, qkv, mask), 1e-10, f"shaw d={max_distance}")


@pytest.mark.slow
@pytest.mark.parametrize("case", [CASES[i] for i in (4, 8)], ids=[CASE_IDS[i] for i in (4, 8)])
@pytest.mark.parametrize("name", [name for name in FLEX_SCHEMES if name != "shaw"])
def test_flex_route_forward_on_cpu_equals_the_explicit_path(name, case):
    """Compiled FlexAttention forward on the CPU (float32; it has no CPU backward). Not shaw: its
    route needs the log-sum-exp, which compiled flex on the CPU does not return."""
    _, c, kk, mask = case
    scorer = make_scorer(name)
    qkv = inputs(c, kk)
    want = explicit(scorer, qkv, mask)[0]
    fast = _copy(scorer).float()
    with torch.no_grad(), forced_route(FLEX):
        got = fast(*[t.float() for t in qkv], mask).double()
    assert_close([got], [want], 1e-5, f"{name} flex")


CUDA_CASES = [CASES[i] for i in (1, 4, 5, 8)]  # padding, chunks + left context, empty rows, streaming
ROUTES = [(name, route) for name in sorted(SCHEMES) for route in FUSED_ROUTES[name]]


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
@pytest.mark.parametrize("name,route", ROUTES, ids=[f"{n}-{r}" for n, r in ROUTES])
def test_fused_route_on_cuda_forward_and_backward(name, route, case, dtype):
    """Every route on CUDA, outputs and all gradients, against the float64 explicit path on the CPU."""
    _, c, kk, mask = case
    scorer = make_scorer(name)
    qkv = inputs(c, kk)
    check_on_cuda(scorer, qkv, mask, dtype, route, want=explicit(scorer, qkv, mask), what=f"{name} {route}")


def check_on_cuda(scorer, qkv, mask, dtype, route, want, what):
    """``run`` on CUDA in ``dtype`` (TF32 off) against the float64 results ``want``."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        got = run(scorer, qkv, mask, device="cuda", dtype=dtype, route=route)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    assert_close(got, want, 2e-5 if dtype == torch.float32 else 3e-2, f"{what} {dtype}")


@CUDA
@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_default_cuda_route_at_length_512_cuda(name):
    """The route CUDA_ROUTES picks, at a training-like size (L = 512, a padded row, chunks with left
    context as a ChunkMask), bf16 forward and backward against float64."""
    t = 512
    mask = ChunkMask(torch.tensor([512, 300]), t, chunk_size=16, left_chunks=4)
    scorer = make_scorer(name)
    qkv = inputs(t, t)
    want = explicit(scorer, qkv, mask)
    got = run(scorer, qkv, mask, device="cuda", dtype=torch.bfloat16, route=CUDA_ROUTES[name])
    assert_close(got, want, 3e-2, f"{name} {CUDA_ROUTES[name]} bf16 L=512")


@CUDA
@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_default_cuda_route_under_bf16_autocast_cuda(name):
    """As in training: float32 parameters, bf16 activations, autocast on (the position-biased
    queries come out float32 there and must meet bf16 keys)."""
    _, c, kk, mask = CASES[8]
    scorer = make_scorer(name)
    qkv = inputs(c, kk)
    want = explicit(scorer, qkv, mask)
    fast = _copy(scorer).to("cuda", torch.float32)
    q, k, v = [t.to("cuda", torch.bfloat16).requires_grad_() for t in qkv]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = fast(q, k, v, mask.to("cuda"))
    weight = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out).to("cuda", out.dtype)
    (out * weight).sum().backward()
    got = [t.detach().cpu().double() for t in (out, q.grad, k.grad, v.grad, *(p.grad for p in fast.parameters()))]
    assert_close(got, want, 3e-2, f"{name} {CUDA_ROUTES[name]} autocast")


def check_encoder_route(name, route):
    """The whole encoder on ``route`` against the explicit path (every layer sharing the batch's mask,
    padded rows, chunks with left context and full context), output and every parameter gradient, float64."""
    from test_compiled import batch as make_batch
    from test_compiled import tiny_encoder

    enc = tiny_encoder(name).double().eval()  # eval: no dropout; gradients still flow
    feats, lengths, _, _ = make_batch(3, 41, seed=5)
    for chunk_size, left_chunks in ((4, 1), (0, -1)):
        results = []
        for each in (EXPLICIT, route):
            enc.zero_grad(set_to_none=True)
            with forced_route(each):
                out, out_lens = enc(feats.double(), lengths, chunk_size, left_chunks)
            valid = (torch.arange(out.size(1))[None, :] < out_lens[:, None])[..., None]
            (out * valid).pow(2).sum().backward()
            results.append([out.detach()] + [p.grad.clone() for p in enc.parameters() if p.grad is not None])
        assert len(results[0]) == len(results[1])
        assert_close(results[1], results[0], 1e-10, f"{name} {route} encoder chunk {chunk_size}")


@pytest.mark.parametrize("name", FLEX_SCHEMES)
def test_encoder_on_the_flex_route_equals_the_explicit_path(name, eager_flex):
    check_encoder_route(name, FLEX)
