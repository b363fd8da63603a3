"""Training losses of the hybrid model: CTC and label-smoothed attention loss.

Axis legend: B batch, T' encoder frames, U tokens, V vocab.
Both losses are summed over tokens/frames and divided by the batch size
(Wenet's default, ``normalize_length=False``), so a batch loss times B equals
the sum of the per-utterance losses.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


# F.ctc_loss as one graph node for torch.compile. Its ATen kernel has no meta (shape)
# function for tensor lengths, and with concatenated targets its second output's size
# depends on the data, so tracing F.ctc_loss breaks the graph. With padded (B, S) targets
# the sizes are known from the shapes alone: the negative log-likelihood (B,) and the
# forward variables (B, T', 2S + 1) that the backward reuses. The same ATen kernels run in
# eager mode and compiled, so both give identical numbers; the shape functions also let the
# loss run on the meta device (tests/model/test_devices.py).
@torch.library.custom_op("asr::ctc_nll", mutates_args=())
def _ctc_nll(
    log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor, target_lengths: torch.Tensor,
    blank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(T', B, V) log-probs, (B, S) padded targets -> (nll (B,) with inf for impossible rows, log_alpha)."""
    nll, log_alpha = torch.ops.aten._ctc_loss.Tensor(
        log_probs, targets, input_lengths, target_lengths, blank, True
    )
    return nll, log_alpha


@_ctc_nll.register_fake
def _(log_probs, targets, input_lengths, target_lengths, blank):
    frames, batch, _ = log_probs.shape
    return log_probs.new_empty(batch), log_probs.new_empty(batch, frames, 2 * targets.size(1) + 1)


def _ctc_nll_setup(ctx, inputs, output) -> None:
    log_probs, targets, input_lengths, target_lengths, blank = inputs
    ctx.save_for_backward(log_probs, targets, input_lengths, target_lengths, *output)
    ctx.blank = blank


@torch.library.custom_op("asr::ctc_nll_backward", mutates_args=())
def _ctc_nll_grad(
    grad_nll: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
    target_lengths: torch.Tensor, nll: torch.Tensor, log_alpha: torch.Tensor, blank: int,
) -> torch.Tensor:
    """d loss / d log_probs (T', B, V); zero_infinity: an impossible row (nll = inf) sends none."""
    return torch.ops.aten._ctc_loss_backward.Tensor(
        grad_nll, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank, True
    )


@_ctc_nll_grad.register_fake
def _(grad_nll, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank):
    # Contiguous (T', B, V), as the ATen kernel allocates it, whatever log_probs' layout: ctc_loss passes a
    # transposed view, and empty_like would claim its strides. Inductor checks the real output against
    # these strides (a mismatch failed the whole-model compile: tests/model/test_ctc_op.py).
    return log_probs.new_empty(log_probs.shape)


def _ctc_nll_backward(ctx, grad_nll, grad_log_alpha):
    log_probs, targets, input_lengths, target_lengths, nll, log_alpha = ctx.saved_tensors
    grad = _ctc_nll_grad(grad_nll, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, ctx.blank)
    return grad, None, None, None, None


_ctc_nll.register_autograd(_ctc_nll_backward, setup_context=_ctc_nll_setup)


def ctc_loss(
    log_probs: torch.Tensor,
    log_prob_lens: torch.Tensor,
    tokens: torch.Tensor,
    token_lens: torch.Tensor,
    blank_id: int = 0,
) -> torch.Tensor:
    """CTC loss, summed over the batch and divided by B.

    Args:
        log_probs: (B, T', V) log-softmax outputs.
        log_prob_lens: (B,) valid frames.
        tokens: (B, U) targets; entries past token_lens are ignored whatever they hold.
        token_lens: (B,)
    Returns:
        scalar. Impossible alignments (too few frames) give 0, not inf
        (``zero_infinity``), so one bad utterance cannot poison a batch.
    """
    B = tokens.size(0)
    # Padded (B, U) targets: the kernel reads row b's first token_lens[b] entries only,
    # so the padding (made a valid id here) never counts.
    nll, _ = _ctc_nll(
        log_probs.float().transpose(0, 1),  # (T', B, V)
        tokens.clamp(min=0), log_prob_lens, token_lens, blank_id,
    )  # (B,)
    return torch.where(torch.isinf(nll), torch.zeros_like(nll), nll).sum() / B


def label_smoothing_loss(
    logits: torch.Tensor, targets: torch.Tensor, smoothing: float, ignore_id: int = -1
) -> torch.Tensor:
    """KL(q || p) to a label-smoothed target q, summed over valid tokens, divided by B.

    q puts ``1 - smoothing`` on the target and ``smoothing / (V - 1)`` on every
    other class (Wenet/ESPnet convention). Written in closed form instead of
    building the (B, U, V) target distribution; with smoothing 0 it equals the
    summed cross entropy.

    Args:
        logits: (B, U, V)
        targets: (B, U) ids, ``ignore_id`` at padding.
    Returns:
        scalar.
    """
    B, U, V = logits.shape
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, U, V)
    valid = targets != ignore_id  # (B, U)
    safe = targets.masked_fill(~valid, 0)
    nll = -logp.gather(-1, safe[..., None]).squeeze(-1)  # (B, U)
    confidence = 1.0 - smoothing
    if smoothing > 0.0:
        off = smoothing / (V - 1)
        # Cross entropy to q: confidence * nll + off * (sum over the other classes of -logp).
        cross = confidence * nll + off * (-logp.sum(-1) - nll)
        entropy = confidence * math.log(confidence) + smoothing * math.log(off)  # sum q log q
        per_token = cross + entropy
    else:
        per_token = nll
    return (per_token * valid).sum() / B
