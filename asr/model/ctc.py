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
    B, U = tokens.shape
    valid = torch.arange(U, device=tokens.device)[None, :] < token_lens[:, None]  # (B, U)
    targets = tokens[valid]  # (sum U_b,) concatenated form: padding never reaches F.ctc_loss
    loss = F.ctc_loss(
        log_probs.float().transpose(0, 1),  # (T', B, V)
        targets,
        log_prob_lens,
        token_lens,
        blank=blank_id,
        reduction="sum",
        zero_infinity=True,
    )
    return loss / B


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
