"""Attention rescoring (U2 / U2++ second pass) of a CTC n-best list.

Axis legend: N hypotheses, T' encoder frames, D model dim.
"""

from __future__ import annotations

import torch

from asr.decode.context_graph import ContextGraph
from asr.lm.fusion import Fusion


@torch.no_grad()
def rescoring_scores(
    model, enc_out: torch.Tensor, enc_len, nbest: list[tuple[list[int], float]], ctc_weight: float,
    reverse_weight: float, fusion: Fusion | None = None, context: ContextGraph | None = None,
    context_weight: float = 1.0,
) -> torch.Tensor:
    """Combined score of each n-best entry.

    ``attention(y) + ctc_weight * ctc(y)`` where attention(y) mixes the
    left-to-right and right-to-left decoder log-likelihoods (eos included)
    by ``reverse_weight`` (see ``AsrModel.score_hypotheses``); with ``fusion``,
    plus its sentence score (LM weight * log P_lm(y, </s>) + length bonus * |y|);
    with ``context``, plus ``context_weight`` times the hotword bonus y keeps (its completed phrases).

    Args:
        enc_out: (1, T', D); enc_len: int or (1,) tensor.
        nbest: (tokens, CTC log-probability) pairs, e.g. from ``ctc_prefix_beam_search``.
    Returns:
        (N,) float64 scores.
    """
    hyps = [h for h, _ in nbest]
    att = model.score_hypotheses(enc_out, enc_len, hyps, reverse_weight=reverse_weight).double()  # (N,)
    ctc = torch.tensor([s for _, s in nbest], dtype=torch.float64, device=att.device)  # (N,)
    scores = att + ctc_weight * ctc
    if fusion is not None:
        scores = scores + torch.tensor([fusion.sentence_score(h) for h in hyps], dtype=torch.float64,
                                       device=att.device)  # (N,)
    if context is not None and context_weight != 0.0:
        scores = scores + context_weight * torch.tensor([context.sentence_score(h) for h in hyps],
                                                        dtype=torch.float64, device=att.device)  # (N,)
    return scores


def attention_rescoring(
    model, enc_out: torch.Tensor, enc_len, nbest: list[tuple[list[int], float]], ctc_weight: float,
    reverse_weight: float, fusion: Fusion | None = None, context: ContextGraph | None = None,
    context_weight: float = 1.0,
) -> list[int]:
    """The n-best entry with the best combined score.

    An empty list gives []; enc_len 0 (no encoder frame to attend to) keeps the CTC best.
    """
    if not nbest:
        return []
    if int(enc_len) == 0:
        return list(nbest[0][0])
    scores = rescoring_scores(model, enc_out, enc_len, nbest, ctc_weight, reverse_weight, fusion, context,
                              context_weight)
    return list(nbest[int(scores.argmax())][0])
