"""Decode a batch of features with one of the four decoding modes.

Axis legend: B batch, T input frames, T' encoder frames, F feature dim, V vocab.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from asr.decode.attention_beam import attention_beam_search
from asr.decode.ctc_greedy import ctc_greedy
from asr.decode.ctc_prefix_beam import ctc_prefix_beam_search
from asr.decode.hotwords import DEFAULT_RESCORE_WEIGHT, Biasing
from asr.decode.long_audio import encode_batch
from asr.decode.rescoring import attention_rescoring
from asr.lm.fusion import Fusion
from asr.decode.options import DEFAULT_BEAM, DEFAULT_CTC_WEIGHT

MODES = ("ctc_greedy", "ctc_prefix_beam", "attention", "attention_rescoring")
FUSED_MODES = ("ctc_prefix_beam", "attention_rescoring")


@torch.no_grad()
def decode_batch(
    model,
    feats: torch.Tensor,
    feat_lens: torch.Tensor,
    mode: str,
    beam: int = DEFAULT_BEAM,
    chunk_size: int = 0,
    left_chunks: int = -1,
    ctc_weight: float = DEFAULT_CTC_WEIGHT,
    reverse_weight: float = 0.0,
    fusion: Fusion | None = None,
    biasing: Biasing | Sequence[Biasing | None] | None = None,
    hotword_rescore_weight: float = DEFAULT_RESCORE_WEIGHT,
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
        biasing: hotwords (``asr.decode.hotwords``) for the same modes: one for the whole batch or one
            (or None) per utterance; their words join the word LM's lexicon.
        hotword_rescore_weight: share of the hotword bonus the rescoring keeps.
    Returns:
        B token lists (no blank, <sos> or <eos>).
    """
    _check_mode(mode, fusion, biasing)
    # Bounded left context streams long utterances through the encoder (memory independent of their length).
    enc_out, enc_lens = encode_batch(model, feats, feat_lens, chunk_size, left_chunks)  # (B, T', D)
    return search_encoded(model, enc_out, enc_lens, mode, beam, ctc_weight, reverse_weight, fusion, biasing,
                          hotword_rescore_weight)


def _check_mode(mode: str, fusion, biasing) -> None:
    """Fail before the encoder runs: an unknown mode, or LMs or hotwords for a mode that ignores them."""
    if mode not in MODES:
        raise ValueError(f"mode ({mode!r}) must be one of {', '.join(MODES)}.")
    if mode not in FUSED_MODES and (fusion is not None or biasing is not None):
        raise ValueError(f"mode {mode!r} takes no language model or hotwords; they work with {', '.join(FUSED_MODES)}.")


def _per_utterance(biasing: Biasing | Sequence[Biasing | None] | None, batch: int) -> list[Biasing | None]:
    if biasing is None or isinstance(biasing, Biasing):
        return [biasing] * batch
    if len(biasing) != batch:
        raise ValueError(f"biasing holds {len(biasing)} entries for a batch of {batch} utterances")
    return list(biasing)


@torch.no_grad()
def search_encoded(
    model, enc_out: torch.Tensor, enc_lens: torch.Tensor, mode: str, beam: int = DEFAULT_BEAM,
    ctc_weight: float = DEFAULT_CTC_WEIGHT, reverse_weight: float = 0.0, fusion: Fusion | None = None,
    biasing: Biasing | Sequence[Biasing | None] | None = None,
    hotword_rescore_weight: float = DEFAULT_RESCORE_WEIGHT,
) -> list[list[int]]:
    """:func:`decode_batch` after the encoder: enc_out (B, T', D), enc_lens (B,); the other arguments as there."""
    _check_mode(mode, fusion, biasing)
    biases = _per_utterance(biasing, enc_out.size(0))
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
        bias = biases[b]
        fused = fusion.with_words(bias.words) if fusion is not None and bias is not None else fusion
        graph = bias.graph if bias is not None else None
        nbest = ctc_prefix_beam_search(log_probs[b, :n], beam, model.blank_id, fused, graph)
        if mode == "ctc_prefix_beam":
            hyps.append(nbest[0][0] if nbest else [])
        else:
            hyps.append(attention_rescoring(model, enc_out[b : b + 1], n, nbest, ctc_weight, reverse_weight, fused,
                                            graph, hotword_rescore_weight))
    return hyps
