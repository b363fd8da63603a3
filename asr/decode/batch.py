"""Decode a batch of features with one of the four decoding modes.

Axis legend: B batch, T input frames, T' encoder frames, F feature dim, V vocab.
"""

from __future__ import annotations

import torch

from asr.decode.attention_beam import attention_beam_search
from asr.decode.ctc_greedy import ctc_greedy
from asr.decode.ctc_prefix_beam import ctc_prefix_beam_search
from asr.decode.long_audio import encode_batch
from asr.decode.rescoring import attention_rescoring
from asr.lm.fusion import Fusion

MODES = ("ctc_greedy", "ctc_prefix_beam", "attention", "attention_rescoring")
FUSED_MODES = ("ctc_prefix_beam", "attention_rescoring")


@torch.no_grad()
def decode_batch(
    model,
    feats: torch.Tensor,
    feat_lens: torch.Tensor,
    mode: str,
    beam: int = 10,
    chunk_size: int = 0,
    left_chunks: int = -1,
    ctc_weight: float = 0.5,
    reverse_weight: float = 0.0,
    fusion: Fusion | None = None,
) -> list[list[int]]:
    """Token ids of every utterance.

    Args:
        model: an ``AsrModel`` (put it in eval mode first: this function does not).
        feats: (B, T, F) zero-padded; feat_lens (B,).
        mode: one of ``MODES``.
        beam: width of the CTC prefix beam and of the attention beam.
        chunk_size, left_chunks: encoder attention context (0 = full context); with
            ``left_chunks >= 0`` the encoder runs chunk by chunk (``asr.decode.long_audio``).
        ctc_weight, reverse_weight: ``attention_rescoring`` score mixing.
        fusion: a language model for ``ctc_prefix_beam`` and ``attention_rescoring`` (both passes);
            the greedy and attention-beam modes do not use one and refuse it.
    Returns:
        B token lists (no blank, <sos> or <eos>).
    """
    if mode not in MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {', '.join(MODES)}.")
    if fusion is not None and mode not in FUSED_MODES:
        raise ValueError(f"mode {mode!r} takes no language model; shallow fusion works with {', '.join(FUSED_MODES)}.")
    # Bounded left context streams each utterance through the encoder (memory independent of its length).
    enc_out, enc_lens = encode_batch(model, feats, feat_lens, chunk_size, left_chunks)  # (B, T', D)
    lens = enc_lens.tolist()
    if mode == "attention":
        # Each utterance runs its own beam; at most one token per encoder frame, as CTC allows.
        return [
            attention_beam_search(model, enc_out[b : b + 1], n, beam, max_len=n) for b, n in enumerate(lens)
        ]
    log_probs = model.ctc_log_probs(enc_out)  # (B, T', V)
    if mode == "ctc_greedy":
        return ctc_greedy(log_probs, enc_lens, model.blank_id)
    hyps = []
    for b, n in enumerate(lens):
        nbest = ctc_prefix_beam_search(log_probs[b, :n], beam, model.blank_id, fusion)
        if mode == "ctc_prefix_beam":
            hyps.append(nbest[0][0] if nbest else [])
        else:
            hyps.append(attention_rescoring(model, enc_out[b : b + 1], n, nbest, ctc_weight, reverse_weight, fusion))
    return hyps
