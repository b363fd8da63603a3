"""Lead-in probe: what a stretch of silence before speech costs a streamed model, and where the cost sits.

A live stream (a browser microphone, a call) often starts before its speaker does. The
quickstart model reads its test split at about 26% WER as fresh C16/L4 streams and at about
48% after a 2.56 s lead-in of quiet noise (the translation probe's lead-in, at a 0 s clock).
Two things carry the silence into the utterance: the attention cache (the first chunks
attend to the lead-in's frames) and, for a model with online CMN, the running mean (the
lead-in pulls it towards silence). This probe decodes the same utterances four ways, CTC
greedy, all at chunk ``C`` with ``L`` left chunks and the clock at 0 s:

=============  ===========================  ======================================
row            attention cache holds        online CMN's running mean has seen
=============  ===========================  ======================================
fresh          nothing before the utterance  the utterance only
lead-in        the lead-in                  the lead-in, then the utterance (live)
CMN restarted  the lead-in                  the utterance only
cache clear    nothing before the utterance  the lead-in, then the utterance
=============  ===========================  ======================================

"lead-in" minus "CMN restarted" is what the running mean costs; "lead-in" minus "cache clear"
is what the cache costs (the two interact, so they need not add up). For a model without
online CMN, "CMN restarted" equals "lead-in" and "cache clear" equals "fresh".

The numbers are the chunk-masked forward's (``asr.ablation.translation.shifted_log_probs``),
which the streaming contract makes equal to ``stream_step``. A restarted or pre-run running
mean is computed with :class:`asr.model.normalization.OnlineCmn` and fed to a copy of the
model whose encoder does not normalize again.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from asr.ablation.translation import CHUNK, LEFT, greedy_result, shifted_log_probs
from asr.evaluation.split import ModeResult, Utterance

ROWS = ("fresh", "lead-in", "CMN restarted", "cache clear")


@torch.no_grad()
def lead_in_log_probs(model, feats: Sequence[torch.Tensor], lead_in: torch.Tensor, chunk_size: int = CHUNK,
                      left_chunks: int = LEFT) -> dict[str, list[torch.Tensor]]:
    """Per row of :data:`ROWS`, the CTC log-probs (T'_i, V) of each utterance's own frames (module docstring).

    Args:
        feats: per utterance (T_i, F) feature frames, not normalized (the model's fbank).
        lead_in: (L, F) frames streamed before each utterance; L a whole number of ``chunk_size`` encoder
            chunks (``asr.ablation.translation.lead_in_features``).
    """
    empty = lead_in[:0]
    norm = model.encoder.online_cmn()
    rows = {"fresh": shifted_log_probs(model, feats, 0, empty, chunk_size, left_chunks),
            "lead-in": shifted_log_probs(model, feats, 0, lead_in, chunk_size, left_chunks)}
    if norm is None:  # nothing runs over the lead-in but the cache
        rows["CMN restarted"], rows["cache clear"] = rows["lead-in"], rows["fresh"]
        return rows
    plain = copy.deepcopy(model)
    plain.encoder.online_cmn_frames = 0.0  # the frames below arrive normalized already
    # A running mean that starts at the utterance has seen nothing of the lead-in, whose frames then get
    # the global mean alone: m_t = global mean gives them back unchanged.
    rows["CMN restarted"] = shifted_log_probs(plain, [norm(f) for f in feats], 0, lead_in, chunk_size, left_chunks)
    after_lead = [norm(torch.cat([lead_in, f]))[lead_in.size(0):] for f in feats]
    rows["cache clear"] = shifted_log_probs(plain, after_lead, 0, empty, chunk_size, left_chunks)
    return rows


def lead_in_probe(model, tokenizer, utts: Sequence[Utterance], lead_in: torch.Tensor, chunk_size: int = CHUNK,
                  left_chunks: int = LEFT) -> dict[str, ModeResult]:
    """CTC greedy results of ``utts`` for each of :data:`ROWS` (:func:`lead_in_log_probs`)."""
    if not utts:
        raise ValueError("no utterances for the lead-in probe")
    rows = lead_in_log_probs(model, [u.feats for u in utts], lead_in, chunk_size, left_chunks)
    return {row: greedy_result(model, tokenizer, utts, rows[row]) for row in ROWS}
