"""One utterance whose CTC target cannot fit its frames must not poison its batch.

A target of U tokens with r adjacent repeats needs U + r frames. When an
utterance has fewer, its CTC loss is +inf; the batch loss must stay finite and
the other utterances must still send their gradients (the training step's
non-finite guard would otherwise drop the whole batch).
"""

import torch

from asr.model.ctc import ctc_loss
from test_asr_model import make_model


def _frames_needed(target: list[int]) -> int:
    """Shortest CTC alignment: one frame per token plus a blank between equal neighbours."""
    return len(target) + sum(a == b for a, b in zip(target, target[1:]))


def _padded(targets: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """targets -> tokens (B, U) padded with -1, token_lens (B,)"""
    tokens = torch.full((len(targets), max(map(len, targets))), -1)
    for b, t in enumerate(targets):
        tokens[b, : len(t)] = torch.tensor(t)
    return tokens, torch.tensor([len(t) for t in targets])


def test_ctc_loss_ignores_an_impossible_row_and_keeps_the_others_gradients():
    g = torch.Generator().manual_seed(0)
    frames = torch.tensor([8, 6, 8])
    # row 1: 5 tokens fit 6 frames by count, but the repeats need 8
    targets = [[1, 2, 3], [4, 4, 4, 5, 5], [2, 3, 3, 1]]
    assert _frames_needed(targets[1]) > frames[1] and all(_frames_needed(targets[b]) <= frames[b] for b in (0, 2))
    tokens, token_lens = _padded(targets)
    logits = torch.randn(3, 8, 6, generator=g, requires_grad=True)  # (B, T', V)
    loss = ctc_loss(logits.log_softmax(-1), frames, tokens, token_lens)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(logits.grad).all() and logits.grad[1].abs().max() == 0.0
    assert logits.grad[0].abs().max() > 0 and logits.grad[2].abs().max() > 0

    # the batch loss (sum / B) and gradients are those of the good rows alone
    good = logits.detach()[[0, 2]].requires_grad_(True)
    good_tokens, good_lens = _padded([targets[0], targets[2]])
    ref = ctc_loss(good.log_softmax(-1), frames[[0, 2]], good_tokens, good_lens) * 2 / 3
    ref.backward()
    assert torch.allclose(loss, ref, rtol=1e-5)
    assert torch.allclose(logits.grad[[0, 2]], good.grad, atol=1e-6)


def test_asr_model_loss_stays_finite_and_every_parameter_gets_a_finite_gradient():
    model = make_model()  # CTC, left-to-right and right-to-left decoders, 4x subsampling
    feat_lens = torch.tensor([60, 12, 48])  # the middle utterance is 2 encoder frames long
    feats = torch.randn(3, 60, 20)
    for b, n in enumerate(feat_lens.tolist()):
        feats[b, n:] = 0.0
    targets = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 1, 2]]
    tokens, token_lens = _padded(targets)
    _, enc_lens = model.encode(feats, feat_lens)
    assert _frames_needed(targets[1]) > enc_lens[1] and all(_frames_needed(targets[b]) <= enc_lens[b] for b in (0, 2))

    out = model(feats, feat_lens, tokens, token_lens)
    out["loss"].backward()
    assert all(torch.isfinite(out[k]) for k in out)
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    # the CTC head learns from the two good utterances
    assert grads["ctc_proj.weight"].abs().max() > 0

    # and the CTC loss is theirs alone: padding the good pair to the same length gives the same sum
    keep = torch.tensor([0, 2])
    good_ctc = model(feats[keep], feat_lens[keep], *_padded([targets[0], targets[2]]))["loss_ctc"]
    assert torch.allclose(out["loss_ctc"] * 3, good_ctc * 2, rtol=1e-4)
