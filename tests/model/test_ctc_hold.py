"""asr.model.ctc.hold_to_blank: frames held to blank in the CTC loss, against a float64 reference."""

import itertools

import torch
import torch.nn.functional as F

from asr.model.ctc import HELD_LOG_PROB, ctc_loss, hold_to_blank


def _case(T=12, B=3, V=5, U=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, V, (B, U), generator=g)
    lens = torch.tensor([T, T - 2, T - 1])
    token_lens = torch.tensor([U, U - 1, U])
    held = torch.zeros(B, T, dtype=torch.bool)
    held[0, 2:5] = True
    held[2, 7:9] = True
    return logits, tokens, lens, token_lens, held


def _brute_force_nll(log_probs, tokens, T, blank=0):
    """-log of the summed probability of every frame labelling that collapses to ``tokens`` (float64)."""
    total = torch.zeros((), dtype=torch.float64)
    for path in itertools.product(range(log_probs.shape[-1]), repeat=T):
        collapsed, prev = [], None
        for k in path:
            if k != prev and k != blank:
                collapsed.append(k)
            prev = k
        if collapsed == tokens:
            total = total + log_probs[torch.arange(T), list(path)].sum().exp()
    return -total.log()


def test_held_loss_equals_a_brute_force_sum_over_alignments_that_keep_blank():
    T, V = 6, 3
    g = torch.Generator().manual_seed(1)
    log_probs = torch.randn(1, T, V, generator=g, dtype=torch.float64).log_softmax(-1)
    held = torch.zeros(1, T, dtype=torch.bool)
    held[0, 1:3] = True
    tokens = [1, 2]
    reference = log_probs.clone()
    reference[0, 1:3, 1:] = -float("inf")  # only blank on frames 1 and 2
    expected = _brute_force_nll(reference[0], tokens, T)
    ours = ctc_loss(hold_to_blank(log_probs.float(), held), torch.tensor([T]), torch.tensor([tokens]), torch.tensor([2]))
    assert torch.allclose(ours.double(), expected, rtol=1e-5)
    free = ctc_loss(log_probs.float(), torch.tensor([T]), torch.tensor([tokens]), torch.tensor([2]))
    assert ours > free  # fewer alignments


def test_held_loss_and_gradient_match_float64_ctc_with_minus_infinity():
    logits, tokens, lens, token_lens, held = _case()
    x32 = logits.float().requires_grad_()
    ours = ctc_loss(hold_to_blank(x32.log_softmax(-1), held), lens, tokens, token_lens)
    ours.backward()
    x64 = logits.clone().requires_grad_()
    lp = x64.log_softmax(-1).masked_fill(held[..., None] & (torch.arange(5) != 0), -float("inf"))
    ref = F.ctc_loss(lp.transpose(0, 1), tokens, lens, token_lens, blank=0, reduction="sum",
                     zero_infinity=True) / tokens.shape[0]
    ref.backward()
    assert torch.allclose(ours.double(), ref, rtol=1e-5)
    assert torch.isfinite(x32.grad).all()
    assert torch.allclose(x32.grad.double(), x64.grad, atol=1e-5)


def test_held_frames_keep_only_blank_and_the_rest_is_untouched():
    logits, _, _, _, held = _case()
    lp = logits.float().log_softmax(-1)
    out = hold_to_blank(lp, held)
    assert (out[held][:, 1:] == HELD_LOG_PROB).all()
    assert torch.equal(out[held][:, 0], lp[held][:, 0])
    assert torch.equal(out[~held], lp[~held])
    assert torch.equal(hold_to_blank(lp, held, blank_id=4)[held][:, 4], lp[held][:, 4])
