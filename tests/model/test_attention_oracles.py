"""Every scorer fast path against an explicit float64 definition.

Shapes cover offline (M = 0, C = K) and streaming (M > 0, C < K, C = 1) calls.
Query a of a call sits at local time M + a, key b at time b.
"""

import math

import pytest
import torch

from asr.model.positions import build_position_scheme
from asr.model.scorers import rel_shift, rel_shift_gather
from asr.model.sinusoid import sinusoid_table

SHAPES = [(5, 5), (3, 7), (1, 6), (4, 9)]  # (C, K)
B, H, DH = 2, 3, 4
D = H * DH


@pytest.fixture(autouse=True)
def _float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(old)


def make_qkv(c, k, requires_grad=False):
    q = torch.randn(B, H, c, DH, requires_grad=requires_grad)
    keys = torch.randn(B, H, k, DH, requires_grad=requires_grad)
    v = torch.randn(B, H, k, DH, requires_grad=requires_grad)
    return q, keys, v


def scorer(name, **options):
    s = build_position_scheme(name, D, H, **options).make_scorer(H, DH, 0.0).double().eval()
    with torch.no_grad():  # non-trivial values for tables that may start small
        for p in s.parameters():
            p.normal_()
    return s


def random_mask(c, k, generator_seed=1):
    g = torch.Generator().manual_seed(generator_seed)
    mask = torch.rand(B, c, k, generator=g) > 0.4
    mask[0, 0] = False  # one row with no allowed key
    mask[1, -1] = True
    return mask


def softmax_reference(logits, v, mask):
    """Plain masked softmax with fully-masked rows set to zero."""
    if mask is not None:
        logits = logits.masked_fill(~mask[:, None], float("-inf"))
    probs = torch.softmax(logits, -1).nan_to_num(0.0)
    return probs


def explicit_sinusoid(position, dim):
    return torch.tensor(
        [
            math.sin(position * 10000.0 ** (-(2 * (ch // 2)) / dim))
            if ch % 2 == 0
            else math.cos(position * 10000.0 ** (-(2 * (ch // 2)) / dim))
            for ch in range(dim)
        ]
    )


@pytest.mark.parametrize("c, k", SHAPES)
def test_strided_rel_shift_equals_index_gather(c, k):
    bd_full = torch.randn(B, H, c, k + c - 1)
    torch.testing.assert_close(rel_shift(bd_full, k), rel_shift_gather(bd_full, k), rtol=0, atol=0)
    # Also on a non-contiguous input (the shift must follow the real strides).
    wide = torch.randn(B, c, H, k + c - 1).transpose(1, 2)
    torch.testing.assert_close(rel_shift(wide, k), rel_shift_gather(wide, k), rtol=0, atol=0)
    # A view, not a copy: the very same storage (a copy would get a fresh one).
    assert rel_shift(bd_full, k).untyped_storage().data_ptr() == bd_full.untyped_storage().data_ptr()
    assert rel_shift(wide, k).untyped_storage().data_ptr() == wide.untyped_storage().data_ptr()
    with pytest.raises(ValueError, match="K\\+C-1"):
        rel_shift(bd_full, k + 1)


@pytest.mark.parametrize("c, k", SHAPES)
@pytest.mark.parametrize("query_block", [64, 2, 1])
def test_rel_xl_logits_equal_explicit_loop_over_i_j(c, k, query_block):
    s = scorer("rel_xl")
    s.query_block = query_block  # 2: several blocks, padded when C is odd
    q, keys, _ = make_qkv(c, k)
    m = k - c
    expected = torch.empty(B, H, c, k)
    for a in range(c):
        for b in range(k):
            r = (m + a) - b  # query time minus key time
            p_r = s.linear_pos(explicit_sinusoid(r, D)).view(H, DH)  # W_R R_{i-j}
            ac = ((q[:, :, a] + s.pos_bias_u) * keys[:, :, b]).sum(-1)
            bd = ((q[:, :, a] + s.pos_bias_v) * p_r).sum(-1)
            expected[:, :, a, b] = (ac + bd) / math.sqrt(DH)
    torch.testing.assert_close(s.logits(q, keys), expected)


@pytest.mark.parametrize("c, k", SHAPES)
@pytest.mark.parametrize("query_block", [64, 2])
def test_rel_xl_output_equals_softmax_of_logits(c, k, query_block):
    s = scorer("rel_xl")
    s.query_block = query_block
    q, keys, v = make_qkv(c, k)
    mask = random_mask(c, k)
    expected = softmax_reference(s.logits(q, keys), v, mask) @ v
    torch.testing.assert_close(s(q, keys, v, mask), expected)
    torch.testing.assert_close(s(q, keys, v, mask[:, :1]), softmax_reference(s.logits(q, keys), v, mask[:, :1]) @ v)


def shaw_naive(s, q, keys, v, mask):
    """Shaw et al. with explicit (C, K, Dh) tables a^K_ij, a^V_ij."""
    c, k = q.size(2), keys.size(2)
    m = k - c
    dist = torch.tensor([[max(-s.max_distance, min(s.max_distance, b - (m + a))) for b in range(k)] for a in range(c)])
    a_k = s.rel_k[dist + s.max_distance]  # (C, K, Dh)
    a_v = s.rel_v[dist + s.max_distance]  # (C, K, Dh)
    logits = (torch.einsum("bhcd,bhkd->bhck", q, keys) + torch.einsum("bhcd,ckd->bhck", q, a_k)) / math.sqrt(DH)
    probs = softmax_reference(logits, v, mask)
    return logits, probs @ v + torch.einsum("bhck,ckd->bhcd", probs, a_v)


@pytest.mark.parametrize("c, k", SHAPES)
@pytest.mark.parametrize("max_distance", [0, 2, 16])
def test_shaw_equals_naive_tables(c, k, max_distance):
    s = scorer("shaw", max_distance=max_distance)
    q, keys, v = make_qkv(c, k)
    mask = random_mask(c, k)
    logits, out = shaw_naive(s, q, keys, v, mask)
    torch.testing.assert_close(s.logits(q, keys), logits)
    torch.testing.assert_close(s(q, keys, v, mask), out)
    torch.testing.assert_close(s(q, keys, v, None), shaw_naive(s, q, keys, v, None)[1])


@pytest.mark.parametrize("c, k", SHAPES)
def test_rel_bias_equals_definition(c, k):
    s = scorer("rel_bias", max_distance=2)
    q, keys, v = make_qkv(c, k)
    m = k - c
    expected = torch.einsum("bhcd,bhkd->bhck", q, keys) / math.sqrt(DH)
    for a in range(c):
        for b in range(k):
            expected[:, :, a, b] += s.rel_bias[:, max(-2, min(2, b - (m + a))) + 2]
    torch.testing.assert_close(s.logits(q, keys), expected)
    mask = random_mask(c, k)
    torch.testing.assert_close(s(q, keys, v, mask), softmax_reference(expected, v, mask) @ v)


@pytest.mark.parametrize("c, k", SHAPES)
def test_rel_bias_table_gradient_equals_the_indexed_reference(c, k):
    """The dense bias's backward (band sums) against autograd through plain indexing, float64."""
    from asr.model.scorers.band import clipped_distance_index

    s = scorer("rel_bias", max_distance=2)
    grad = torch.randn(H, c, k, dtype=torch.float64, generator=torch.Generator().manual_seed(c * 31 + k))
    (s.bias(c, k) * grad).sum().backward()
    table = s.rel_bias.detach().clone().requires_grad_()
    (table[:, clipped_distance_index(c, k, 2, table.device)] * grad).sum().backward()
    torch.testing.assert_close(s.bias(c, k), table[:, clipped_distance_index(c, k, 2, table.device)])
    torch.testing.assert_close(s.rel_bias.grad, table.grad)


def rope_explicit(x, positions, base):
    """Rotate each pair (x_m, x_{m+Dh/2}) as the complex number x_m + i x_{m+Dh/2}."""
    half = x.size(-1) // 2
    theta = torch.tensor([base ** (-2.0 * m / x.size(-1)) for m in range(half)])
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(
        torch.ones(len(positions), half), torch.tensor(positions, dtype=torch.float64)[:, None] * theta
    )
    return torch.cat((z.real, z.imag), dim=-1)


@pytest.mark.parametrize("c, k", SHAPES)
def test_rope_equals_definition_and_is_relative(c, k):
    s = scorer("rope", base=100.0)
    q, keys, v = make_qkv(c, k)
    rq = rope_explicit(q, list(range(k - c, k)), 100.0)
    rk = rope_explicit(keys, list(range(k)), 100.0)
    logits = rq @ rk.transpose(-2, -1) / math.sqrt(DH)
    torch.testing.assert_close(s.logits(q, keys), logits)
    mask = random_mask(c, k)
    torch.testing.assert_close(s(q, keys, v, mask), softmax_reference(logits, v, mask) @ v)
    # Shifting every position by the same offset leaves the logits unchanged.
    shifted = rope_explicit(q, list(range(k - c + 50, k + 50)), 100.0) @ rope_explicit(
        keys, list(range(50, k + 50)), 100.0
    ).transpose(-2, -1) / math.sqrt(DH)
    torch.testing.assert_close(shifted, logits)


@pytest.mark.parametrize("name", ["abs_sin", "abs_learned", "none"])
@pytest.mark.parametrize("c, k", SHAPES + [(4, 2)])  # K < C: cross-attention to a short memory
def test_plain_sdpa_path_equals_reference(name, c, k):
    s = scorer(name)
    q, keys, v = make_qkv(c, k)
    mask = random_mask(c, k)
    logits = q @ keys.transpose(-2, -1) / math.sqrt(DH)
    torch.testing.assert_close(s(q, keys, v, mask), softmax_reference(logits, v, mask) @ v)
    torch.testing.assert_close(s(q, keys, v, mask), s.reference(q, keys, v, mask))
    torch.testing.assert_close(s(q, keys, v, None), softmax_reference(logits, v, None) @ v)


ALL = ["rel_xl", "wenet_rel", "shaw", "rel_bias", "rope", "abs_sin", "abs_learned", "none"]


@pytest.mark.parametrize("name", ALL)
def test_fully_masked_rows_give_zeros_and_finite_grads(name):
    s = scorer(name)
    q, keys, v = make_qkv(3, 5, requires_grad=True)
    mask = torch.ones(B, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    mask[1] = False  # a whole utterance of empty rows
    out = s(q, keys, v, mask)
    assert torch.all(out[0, :, 1] == 0) and torch.all(out[1] == 0)
    assert torch.all(out[0, :, 0].abs().sum(-1) > 0)
    out.sum().backward()
    for t in (q, keys, v, *s.parameters()):
        assert torch.isfinite(t.grad).all()
    assert torch.all(q.grad[1] == 0)


@pytest.mark.parametrize("name", ALL)
def test_padding_mask_broadcasts_like_full_mask(name):
    s = scorer(name)
    q, keys, v = make_qkv(3, 6)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, :]  # (B, 1, K)
    torch.testing.assert_close(s(q, keys, v, pad), s(q, keys, v, pad.expand(B, 3, 6)))


def test_bad_mask_and_shapes_raise_with_values():
    s = scorer("rel_xl")
    q, keys, v = make_qkv(3, 6)
    with pytest.raises(ValueError, match="bool"):
        s(q, keys, v, torch.ones(B, 3, 6))
    with pytest.raises(ValueError, match=r"\(2, 3, 6\)"):
        s(q, keys, v, torch.ones(B, 3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="K >= C"):
        s(q, keys[:, :, :2], v[:, :, :2], None)


@pytest.mark.parametrize("name, query_block", [("rel_xl", 64), ("rel_xl", 2), ("shaw", None)])
def test_gradcheck(name, query_block):
    # Small (H=2, Dh=2) so the numerical Jacobian over the parameters stays cheap.
    options = {"max_distance": 2} if name == "shaw" else {}
    s = build_position_scheme(name, 4, 2, **options).make_scorer(2, 2, 0.0).double()
    if query_block:
        s.query_block = query_block  # 2 with C = 3: two blocks, one padded row
    q, keys, v = (torch.randn(1, 2, n, 2, requires_grad=True) for n in (3, 5, 5))
    mask = torch.ones(1, 3, 5, dtype=torch.bool)
    mask[0, 0, 4] = False
    assert torch.autograd.gradcheck(lambda q, k, v: s(q, k, v, mask), (q, keys, v))
    # ...and through the scheme's own parameters (functional_call keeps them in the graph).
    names = [n for n, _ in s.named_parameters()]

    def fn(*ps):
        return torch.func.functional_call(s, dict(zip(names, ps)), (q.detach(), keys.detach(), v.detach(), mask))

    inputs = tuple(p.detach().clone().requires_grad_() for p in s.parameters())
    assert torch.autograd.gradcheck(fn, inputs)


def test_dropout_only_in_training():
    s = build_position_scheme("rel_xl", D, H).make_scorer(H, DH, 0.5).double()
    q, keys, v = make_qkv(4, 4)
    s.eval()
    torch.testing.assert_close(s(q, keys, v, None), s(q, keys, v, None))
    s.train()
    assert not torch.allclose(s(q, keys, v, None), s.eval()(q, keys, v, None))


@pytest.mark.parametrize("with_shaw_values", [False, True])
def test_fused_softmax_values_match_plain_autograd(with_shaw_values):
    """The in-place backward of the fused path equals autograd through the plain ops
    (the dropout branch, run with p so small that it keeps every value)."""
    from asr.model.scorers.attend import attend
    from asr.model.scorers.base import prepare_mask

    c, k = 4, 7
    logits = torch.randn(B, H, c, k, requires_grad=True)
    v = torch.randn(B, H, k, DH, requires_grad=True)
    rel_v = torch.randn(5, DH, requires_grad=True) if with_shaw_values else None
    mask4, _ = prepare_mask(random_mask(c, k), B, c, k)
    leaves = [t for t in (logits, v, rel_v) if t is not None]
    g = torch.randn(B, H, c, DH)

    def grads(dropout, training):
        out = attend(logits.clone(), v, mask4, dropout, training, rel_v)
        return (out, *torch.autograd.grad(out, leaves, g))

    for fused, plain in zip(grads(0.0, False), grads(1e-12, True)):
        torch.testing.assert_close(fused, plain)


def largest_saved_for_backward(fn, *inputs) -> int:
    """Run fn(*inputs).sum() under saved-tensor hooks; the largest numel autograd kept for backward."""
    sizes = [0]

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*inputs).sum()
    out.backward()
    return max(sizes)


def naive_shaw(s, q, keys, v):
    """Shaw with explicit (C, K, Dh) tables: the layout the fast path must never build."""
    c, kk = q.size(2), keys.size(2)
    bucket = ((torch.arange(kk)[None, :] - torch.arange(kk - c, kk)[:, None]).clamp(-s.max_distance, s.max_distance)
              + s.max_distance)  # (C, K)
    a_k, a_v = s.rel_k[bucket], s.rel_v[bucket]  # (C, K, Dh) each
    logits = (q @ keys.transpose(-1, -2) + torch.einsum("bhcd,ckd->bhck", q, a_k)) * s.scale
    probs = torch.softmax(logits, -1)
    return probs @ v + torch.einsum("bhck,ckd->bhcd", probs, a_v)


def naive_rel_xl(s, q, keys, v):
    """Transformer-XL with W_R R_{i-j} gathered for every (i, j): a (C, K, D) tensor."""
    c, kk = q.size(2), keys.size(2)
    r = torch.arange(kk - c, kk)[:, None] - torch.arange(kk)[None, :]  # (C, K) query time - key time
    h, dh = s.num_heads, s.head_dim
    p = s.linear_pos(sinusoid_table(r.flatten().to(q.dtype), h * dh)).view(c, kk, h, dh)  # (C, K, H, Dh)
    ac = (q + s.pos_bias_u[:, None]) @ keys.transpose(-1, -2)
    bd = torch.einsum("bhcd,ckhd->bhck", q + s.pos_bias_v[:, None], p)
    return torch.softmax((ac + bd) * s.scale, -1) @ v


@pytest.mark.parametrize("name, naive", [("shaw", naive_shaw), ("rel_xl", naive_rel_xl)])
def test_fast_paths_save_no_length_squared_by_head_dim_tensor(name, naive):
    """L = 100 > 64: rel_xl splits its queries into two blocks (one padded) and Shaw's
    band sums run over two row blocks. B * H = 2 < Dh = 8, so the (B, H, L, L)
    probabilities are a quarter of the L * L * Dh bound; a per-pair table is not."""
    length, heads, dh = 100, 2, 8
    s = build_position_scheme(name, heads * dh, heads).make_scorer(heads, dh, 0.0).double().train()
    assert name != "rel_xl" or s.query_block < length
    q, keys, v = (torch.randn(1, heads, length, dh, requires_grad=True) for _ in range(3))
    mask = torch.ones(1, length, length, dtype=torch.bool).tril()  # causal, so every row is masked differently
    bound = length * length * dh
    fast = largest_saved_for_backward(lambda *t: s(*t, mask), q, keys, v)
    assert length * length <= fast < bound, (fast, bound)  # the hook sees the probabilities, nothing bigger
    # The hook does catch a per-pair table: the explicit reference saves one.
    assert largest_saved_for_backward(lambda *t: naive(s, *t), q, keys, v) >= bound
