"""The CTC custom ops (asr/model/ctc.py) tell the compiler the truth: their fake (shape) functions give
the real kernels' shapes, dtypes and strides, for the transposed (T', B, V) view ctc_loss passes in.
Inductor checks a compiled graph's real outputs against these strides; a wrong stride failed the
whole-model compile (`test_inductor_trains_like_eager_every_scheme[*-model]`, -m slow)."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import asr.model.ctc  # noqa: F401 - registers torch.ops.asr.ctc_nll and ctc_nll_backward


def _inputs(device, T=9, B=3, V=6, S=3):
    g = torch.Generator().manual_seed(0)
    log_probs = torch.randn(B, T, V, generator=g).log_softmax(-1).transpose(0, 1).to(device)  # (T', B, V) view
    targets = torch.randint(1, V, (B, S), generator=g).to(device)
    input_lengths = torch.tensor([T, T - 2, T - 1], device=device)
    target_lengths = torch.tensor([S, S - 1, S], device=device)
    return log_probs, targets, input_lengths, target_lengths


def _meta(outputs):
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return [(tuple(t.shape), t.dtype, t.stride()) for t in outputs]


def _fake_and_real(op, args):
    real = op(*args)
    with FakeTensorMode() as mode:
        fake = op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    return _meta(fake), _meta(real)


def test_forward_and_backward_fakes_match_the_kernels(device):
    log_probs, targets, input_lengths, target_lengths = _inputs(device)
    assert not log_probs.is_contiguous()  # the layout ctc_loss hands over
    forward = (log_probs, targets, input_lengths, target_lengths, 0)
    fake, real = _fake_and_real(torch.ops.asr.ctc_nll.default, forward)
    assert fake == real
    nll, log_alpha = torch.ops.asr.ctc_nll.default(*forward)
    backward = (torch.ones_like(nll), log_probs, targets, input_lengths, target_lengths, nll, log_alpha, 0)
    fake, real = _fake_and_real(torch.ops.asr.ctc_nll_backward.default, backward)
    assert fake == real, "the backward's fake must claim the strides the kernel returns"
