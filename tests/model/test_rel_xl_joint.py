"""rel_xl's ``joint_sdpa`` route (asr.model.scorers.rel_xl_joint) against the explicit path in float64.

The rotation identity itself (joint queries . joint keys == the rel_shifted logits, long distances and
cached calls included), then the route's output and the gradients of q, k, v, u, v-bias and linear_pos
under every mask of test_fused_attention (padding, dense chunk masks with phase and left context,
ChunkMasks, rows with no key, cached calls of C queries against K keys), an odd model dim, a long
call against the blocked path, dropout, and the whole encoder. On CUDA (ids with ``cuda``): the
memory-efficient kernel with the joint widths, and a long call in bfloat16 and float32.
"""

import pytest
import torch
import torch.nn.functional as F
from test_fused_attention import (CASE_IDS, CASES, CUDA, DH, H, assert_close, check_encoder_route, check_on_cuda,
                                  explicit, inputs, make_scorer, run)
from torch.nn.attention import SDPBackend, sdpa_kernel

from asr.model.masks import ChunkMask, attention_mask
from asr.model.scorers import RelXLScorer, blocked
from asr.model.scorers.rel_xl_joint import CHANNEL_ALIGN, joint_queries_keys
from asr.model.scorers.routes import JOINT_SDPA, forced_route


def random_scorer(heads, head_dim, seed=3):
    """A float64 rel_xl scorer with random (non-zero) position parameters."""
    scorer = RelXLScorer(heads, head_dim).double()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for p in scorer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * 0.5)
    return scorer


def joint_logits(scorer, q, k):
    queries, keys = joint_queries_keys(q, k, scorer.pos_bias_u, scorer.pos_bias_v, scorer.linear_pos.weight,
                                       scorer.scale)
    return torch.matmul(queries, keys.transpose(-2, -1))  # (B, H, C, K)


@pytest.mark.parametrize("heads,head_dim", [(2, 8), (3, 5)], ids=["even_d", "odd_d"])
@pytest.mark.parametrize("c,kk", [(7, 7), (3, 9), (1, 6), (5, 4000)], ids=["offline", "cache", "one_query", "far"])
def test_joint_channels_give_the_shifted_logits(heads, head_dim, c, kk):
    """The rotation identity: [q + u, G] . [k ; R(j)] equals the rel_shifted logits, distances up to 4000
    (angles in float64: the fast channels keep their phase), odd D (a sin-only last frequency)."""
    scorer = random_scorer(heads, head_dim)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, heads, c, head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(2, heads, kk, head_dim, generator=gen, dtype=torch.float64)
    queries, _ = joint_queries_keys(q, k, scorer.pos_bias_u, scorer.pos_bias_v, scorer.linear_pos.weight, scorer.scale)
    assert queries.size(-1) % CHANNEL_ALIGN == 0
    torch.testing.assert_close(joint_logits(scorer, q, k), scorer.logits(q, k), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_joint_route_equals_the_explicit_path_in_float64(case):
    _, c, kk, mask = case
    scorer = make_scorer("rel_xl")
    qkv = inputs(c, kk)
    assert_close(run(scorer, qkv, mask, route=JOINT_SDPA), explicit(scorer, qkv, mask), 1e-10, "rel_xl joint_sdpa")


def test_joint_route_with_an_odd_model_dim():
    scorer = random_scorer(3, 5)  # D = 15
    gen = torch.Generator().manual_seed(2)
    qkv = [torch.randn(2, 3, n, 5, generator=gen, dtype=torch.float64) for n in (4, 10, 10)]
    mask = attention_mask(torch.tensor([10, 6]), 10)  # (B, 1, K)
    assert_close(run(scorer, qkv, mask, route=JOINT_SDPA), run(scorer, qkv, mask), 1e-10, "odd D")


def check_against_the_blocked_path(t, chunk_size):
    """Forward and every gradient of a T-frame call (a padded row; chunks with left context or full
    context) against the blocked path."""
    qkv = [x[:, :1, :, :8].contiguous() for x in inputs(t, t, seed=4)]  # one head of Dh 8: a quick oracle
    scorer = random_scorer(1, 8)
    mask = ChunkMask(torch.tensor([t, 2100]), t, chunk_size=chunk_size, left_chunks=2 if chunk_size else -1)
    with blocked.forced():
        want = run(scorer, qkv, mask)
    assert_close(run(scorer, qkv, mask, route=JOINT_SDPA), want, 1e-9, f"T={t} chunk {chunk_size}")


@pytest.mark.parametrize("chunk_size", [0, 16], ids=["full", "chunk16_left2"])
def test_joint_route_equals_the_blocked_path(chunk_size):
    check_against_the_blocked_path(600, chunk_size)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_size", [0, 64], ids=["full", "chunk64_left2"])
def test_long_call_equals_the_blocked_path(chunk_size):
    check_against_the_blocked_path(3000, chunk_size)


def test_joint_route_applies_attention_dropout():
    """Training with dropout drops probabilities on this route too (SDPA's dropout_p); eval does not."""
    scorer = RelXLScorer(H, DH, dropout=0.5).double()
    q, k, v = inputs(6, 6)
    with forced_route(JOINT_SDPA):
        scorer.eval()
        clean = scorer(q, k, v, None)
        scorer.train()
        torch.manual_seed(0)
        dropped = scorer(q, k, v, None)
    scorer.eval()
    torch.testing.assert_close(clean, scorer(q, k, v, None), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(dropped, clean)


def test_encoder_on_the_joint_route_equals_the_explicit_path():
    check_encoder_route("rel_xl", JOINT_SDPA)


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_memory_efficient_kernel_takes_the_joint_widths_cuda(dtype):
    """The route passes CUDA values narrower than the joint queries: the memory-efficient kernel must
    take them (else SDPA would fall to the math kernel and its (C, K) logits)."""
    scorer = random_scorer(4, 36).to("cuda", dtype)  # D = 144: J = 36 + 144 = 180, rounded to 184
    q, k, v = [torch.randn(2, 4, 64, 36, device="cuda", dtype=dtype) for _ in range(3)]
    queries, keys = joint_queries_keys(q, k, scorer.pos_bias_u, scorer.pos_bias_v, scorer.linear_pos.weight,
                                       scorer.scale)
    values = F.pad(v, (0, 4))  # Dh 36 rounded to 40, as the route does
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        out = F.scaled_dot_product_attention(queries.to(dtype), keys.to(dtype), values, scale=1.0)
    assert out.shape == (2, 4, 64, 40)


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_long_call_on_cuda_cuda(dtype):
    """L = 4096 with padding and chunks with left context, forward and backward against float64."""
    t = 4096
    scorer = random_scorer(1, 16)
    qkv = [x[:, :1].contiguous() for x in inputs(t, t, seed=6)]
    mask = ChunkMask(torch.tensor([t, 3000]), t, chunk_size=32, left_chunks=4)
    with blocked.forced():
        want = run(scorer, qkv, mask)
    check_on_cuda(scorer, qkv, mask, dtype, JOINT_SDPA, want=want, what=f"joint_sdpa L={t}")
