"""wenet_rel (Wenet's rel_pos attention, no rel_shift) against a float64 oracle written from the formula.

Per head, query i and key j at absolute encoder time t_j:

    logit_ij = ((q_i + u) . k_j + (q_i + v) . W_P PE(t_j)) / sqrt(Dh)

with PE(t)[2m] = sin(t / 10000^(2m/D)), PE(t)[2m+1] = cos(t / 10000^(2m/D)). A call's
queries are the last C of its K keys, so the keys sit at start_time - (K - C) + b.
"""

import math

import pytest
import torch

from asr.model.positions import build_position_scheme
from asr.model.scorers.wenet_rel import key_times
from tests.model.test_attention_oracles import _float64  # noqa: F401  (autouse: float64, seed 0)

B, H, DH = 2, 3, 4
D = H * DH


def scorer():
    s = build_position_scheme("wenet_rel", D, H).make_scorer(H, DH, 0.0).double().eval()
    with torch.no_grad():
        for p in s.parameters():
            p.normal_()
    return s


def pe(t):
    """The sinusoid of one absolute time, channel by channel, in Python floats."""
    return [
        math.sin(t / 10000.0 ** (2 * (ch // 2) / D)) if ch % 2 == 0 else math.cos(t / 10000.0 ** (2 * (ch // 2) / D))
        for ch in range(D)
    ]


def oracle(s, q, k, v, mask, starts):
    """Masked attention output (B, H, C, Dh) from the formula; starts: first-query time per row."""
    c, kk = q.size(2), k.size(2)
    w = s.linear_pos.weight  # (D, D): P = W PE
    logits = torch.empty(B, H, c, kk)
    for b in range(B):
        for j in range(kk):
            p = (w @ torch.tensor(pe(starts[b] - (kk - c) + j))).view(H, DH)  # (H, Dh)
            for h in range(H):
                for i in range(c):
                    ac = torch.dot(q[b, h, i] + s.pos_bias_u[h], k[b, h, j])
                    bd = torch.dot(q[b, h, i] + s.pos_bias_v[h], p[h])
                    logits[b, h, i, j] = (ac + bd) / math.sqrt(DH)
    masked = logits if mask is None else logits.masked_fill(~mask[:, None], float("-inf"))
    probs = torch.softmax(masked, -1).nan_to_num(0.0)  # a row with no key gives zeros
    return probs @ v, logits


@pytest.mark.parametrize("c, k", [(5, 5), (3, 7), (1, 6)])
@pytest.mark.parametrize("starts", [(0, 0), (9, 9), (4, 13000)])
def test_equals_the_formula(c, k, starts):
    s = scorer()
    q, keys, v = (torch.randn(B, H, n, DH) for n in (c, k, k))
    mask = torch.rand(B, c, k) > 0.3
    mask[0, 0] = False  # a row with no allowed key
    same_clock = starts[0] == starts[1]
    start = starts[0] if same_clock else torch.tensor(starts)  # int, or one clock per row
    with torch.no_grad():
        expected, expected_logits = oracle(s, q, keys, v, mask, starts)
        torch.testing.assert_close(s.logits(q, keys, start), expected_logits)
        torch.testing.assert_close(s(q, keys, v, mask, start_time=start), expected)


def test_not_translation_invariant():
    """The same q, k at another stream clock score differently: the position term reads key times."""
    s = scorer()
    q, keys = torch.randn(B, H, 3, DH), torch.randn(B, H, 7, DH)
    with torch.no_grad():
        assert (s.logits(q, keys, 20) - s.logits(q, keys, 500)).abs().max() > 1e-3


def test_key_times_put_the_queries_last():
    assert key_times(10, 3, 7, torch.device("cpu")).tolist() == [[6, 7, 8, 9, 10, 11, 12]]
    per_row = key_times(torch.tensor([0, 100]), 2, 3, torch.device("cpu"))
    assert per_row.tolist() == [[-1, 0, 1], [99, 100, 101]]
    with pytest.raises(ValueError, match=r"\(B,\)"):
        key_times(torch.tensor([[1]]), 1, 1, torch.device("cpu"))


def test_gradcheck_through_inputs_and_parameters():
    s = build_position_scheme("wenet_rel", 4, 2).make_scorer(2, 2, 0.0).double()
    q, keys, v = (torch.randn(1, 2, n, 2, requires_grad=True) for n in (3, 5, 5))
    mask = torch.ones(1, 3, 5, dtype=torch.bool)
    mask[0, 0, 4] = False
    assert torch.autograd.gradcheck(lambda q, k, v: s(q, k, v, mask, start_time=7), (q, keys, v))
    names = [n for n, _ in s.named_parameters()]

    def fn(*ps):
        return torch.func.functional_call(s, dict(zip(names, ps)), (q.detach(), keys.detach(), v.detach(), mask),
                                          {"start_time": 7})

    assert torch.autograd.gradcheck(fn, tuple(p.detach().clone().requires_grad_() for p in s.parameters()))
