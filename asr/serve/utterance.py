"""The utterance a stream is decoding (:mod:`asr.serve.stream`): what it keeps of its frames, and its results made
from them: the final (rescored n-best, word times) and the background's words left out of partials and finals.

Axis legend: T' encoder frames of the utterance, D model dim, V vocab, U tokens of a hypothesis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from asr.decode.background_words import background_words, without_words
from asr.decode.endpoint import EndpointConfig
from asr.decode.hotwords import Biasing
from asr.decode.options import DecodeOptions
from asr.decode.rescoring import rescoring_scores
from asr.lm.fusion import Fusion
from asr.serve.result import Hypothesis, Result
from asr.serve.timestamps import ctc_align, word_times
from asr.streaming.vad import SileroVad, VadConfig


class StreamOwner(Protocol):
    """What a stream reads from the recognizer that owns it (``MultiStreamRecognizer``)."""

    model: Any  # AsrModel: encoder, blank_id, attention rescoring
    tokenizer: Any  # decode(ids) -> str, id_to_piece(id) -> str
    options: DecodeOptions
    fusion: Fusion | None
    endpoint: EndpointConfig
    features: Any  # the model's fbank options (asr.data.features.FeatureConfig) or None
    chunk_encoder: Any  # asr.serve.encoders: init_state, whole and last partial chunks
    chunk_span: int  # feature frames behind one chunk (and its lookahead)
    chunk_step: int  # feature frames a chunk moves on by
    subsampling_rate: int
    frame_s: float  # seconds per encoder frame
    num_bins: int
    vad: VadConfig | None
    vad_model: SileroVad | None

    @property
    def device(self) -> torch.device: ...

    def word_piece(self, token: int) -> str: ...


@dataclass
class Utterance:
    """What the decoder keeps of the current utterance (a stream starts a new one at each reset)."""

    start_frame: int  # encoder frame of its first frame, counted from its audio segment's start
    enc_out: list[torch.Tensor] = field(default_factory=list)  # (c, D) each, for rescoring
    log_probs: list[torch.Tensor] = field(default_factory=list)  # (c, V) each, for alignment
    heard_db: list[float] = field(default_factory=list)  # (T',) the levels the search judged (NaN: unknown)
    floor_db: list[float] = field(default_factory=list)  # (T',) the background's floor then (NaN: none)

    @property
    def frames(self) -> int:
        return sum(x.size(0) for x in self.log_probs)

    def speakers_words(self, owner: StreamOwner, tokens: list[int], spans: list[tuple[int, int]] | None = None
                       ) -> tuple[list[int], list[str], list[tuple[int, int]]]:
        """A hypothesis's U ``tokens`` without the background's words (``EndpointConfig.drops_background_words``),
        with their pieces and frame spans (``spans``: the tokens' CTC alignment, made here when None)."""
        pieces = [owner.word_piece(t) for t in tokens]
        if spans is None:
            spans = ctc_align(torch.cat(self.log_probs), tokens, owner.model.blank_id) if tokens else []
        policy = owner.endpoint
        if not tokens or not policy.drops_background_words:
            return tokens, pieces, spans
        drop = background_words(pieces, spans, self.heard_db, self.floor_db, policy.speaker_margin_db,
                                policy.floor_margin_db)
        return without_words(tokens, pieces, spans, drop) if any(drop) else (tokens, pieces, spans)

    def final_result(self, owner: StreamOwner, nbest: list[tuple[list[int], float]], fusion: Fusion | None,
                     biasing: Biasing | None, index: int, origin_s: float) -> Result:
        """The final result of utterance ``index``: its CTC ``nbest`` rescored, the words timed.

        ``origin_s``: stream time of the audio segment's frame 0 (a VAD drops audio between segments).
        """
        span = (origin_s + self.start_frame * owner.frame_s,
                origin_s + (self.start_frame + self.frames) * owner.frame_s)
        if not nbest or self.frames == 0:
            return Result([Hypothesis("", ())], True, index, span)
        if owner.model.decoder is not None:
            enc_out = torch.cat(self.enc_out)[None]  # (1, T', D)
            opts = owner.options
            scores = rescoring_scores(owner.model, enc_out, enc_out.size(1), nbest, opts.ctc_weight,
                                      opts.reverse_weight, fusion, biasing.graph if biasing else None,
                                      opts.hotword_rescore_weight)
            order = scores.argsort(descending=True).tolist()
            nbest = [nbest[i] for i in order]
        log_probs = torch.cat(self.log_probs)  # (T', V)
        hyps = []
        for tokens, _ in nbest:
            spans = ctc_align(log_probs, tokens, owner.model.blank_id)
            tokens, pieces, spans = self.speakers_words(owner, tokens, spans)
            words = word_times(pieces, spans, owner.frame_s, span[0])
            hyps.append(Hypothesis(owner.tokenizer.decode(tokens), tuple(tokens), tuple(words)))
        return Result(hyps, True, index, span)
