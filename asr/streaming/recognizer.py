"""Chunk-by-chunk speech recognition: audio in, growing partial text out, rescored final text.

Axis legend: n audio samples, T feature frames, F feature bins, T' encoder frames,
D model dim, V vocab.

Pipeline per ``accept_waveform`` call: audio -> complete fbank frames
(:class:`~asr.streaming.frontend.StreamingFrontend`, the model's feature options) ->
``encoder.stream_step`` -> CTC log-probs -> :class:`~asr.decode.CtcPrefixBeamSearch`.
``finalize`` takes the frames that waited for the end of the audio, flushes the encoder
(``final=True``) and rescores the CTC n-best with the attention decoder over all
encoder frames of the utterance (U2 two-pass decoding).

With a VAD (``vad=``), the audio goes through a :class:`~asr.streaming.vad.SpeechSegmenter`
first: only its speech segments (with their padding) reach the frontend, joined into the
one utterance; leading, trailing and long inner non-speech never reach the encoder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from asr.decode.ctc_prefix_beam import CtcPrefixBeamSearch
from asr.decode.hotwords import Biasing, HotwordCompiler, resolve
from asr.decode.options import DecodeOptions
from asr.decode.rescoring import attention_rescoring
from asr.lm.fusion import Fusion
from asr.streaming.frontend import StreamingFrontend
from asr.streaming.vad import SileroVad, Speech, SpeechSegmenter, VadConfig


@dataclass
class ChunkTiming:
    """One ``accept_waveform`` / ``finalize`` call.

    samples: audio samples fed; feat_frames / enc_frames: frames produced;
    seconds: wall-clock compute time of the call.
    """

    samples: int
    feat_frames: int
    enc_frames: int
    seconds: float


class StreamingRecognizer:
    """Streaming two-pass recognizer around an ``AsrModel`` with a causal encoder.

    Args:
        model: ``AsrModel`` (put in eval mode; its encoder must support ``stream_step``).
        tokenizer: anything with ``decode(ids) -> str``.
        options: chunking (chunk_size > 0), beam, rescoring weights and hotword settings
            (``asr.decode.options.DecodeOptions``; a compiled ``Biasing`` brings its own score and keep).
        features: the model's fbank options (``asr.data.features.FeatureConfig``, from its
            checkpoint); None: ``asr.data.features.LEGACY``. Audio must be at ``SAMPLE_RATE``.
        fusion: language models (``asr.lm.fusion.Fusion``: token LM, word LM, or both) for the CTC beam
            and the rescoring (None: none).
        hotwords: phrases to bias towards (strings, ``"phrase:score"`` or (phrase, score) pairs, or a compiled
            ``Biasing``); they bias partials and the final result, and join the word LM's lexicon.
        vad: voice activity detection in front of the frontend (``asr.streaming.vad.VadConfig``; None: off).
    """

    def __init__(
        self,
        model,
        tokenizer,
        options: DecodeOptions = DecodeOptions(),
        *,
        features=None,
        fusion: Fusion | None = None,
        hotwords=None,
        vad: VadConfig | None = None,
    ) -> None:
        options.check_streaming(model)
        self.model = model
        self.tokenizer = tokenizer
        self.options = options
        self.frontend = StreamingFrontend(features, model.encoder.online_cmn())
        self.vad = None if vad is None else SpeechSegmenter(SileroVad(), vad)
        self._compiler: HotwordCompiler | None = None  # made with the first list (it reads the tokenizer's pieces)
        self._base_fusion = fusion
        self.set_hotwords(hotwords)

    def set_hotwords(self, hotwords) -> None:
        """Bias towards these phrases from now on (None or [] for none); starts a new utterance.

        Raises ``asr.decode.hotwords.HotwordError`` for an entry that cannot be used.
        """
        if hotwords is not None and not isinstance(hotwords, Biasing) and self._compiler is None:
            self._compiler = HotwordCompiler(self.tokenizer, self.options.hotword_score, cache_size=4,
                                             unbiased_keep=self.options.hotword_unbiased_keep)
        self.biasing: Biasing | None = resolve(self._compiler, hotwords)
        base = self._base_fusion
        self.fusion = base.with_words(self.biasing.words) if base is not None and self.biasing is not None else base
        context = self.biasing.graph if self.biasing is not None else None
        self.search = CtcPrefixBeamSearch(self.options.beam, self.model.blank_id, self.fusion, context)
        self.reset()

    def reset(self) -> None:
        """Start a new utterance."""
        self.state = self.model.encoder.init_state(1, self.options.chunk_size, self.options.left_chunks)
        self.frontend.reset()
        if self.vad is not None:
            self.vad.reset()
        self.search.reset()
        self._enc_chunks: list[torch.Tensor] = []  # (1, c, D) each
        self.timings: list[ChunkTiming] = []
        self.samples_seen = 0
        self.final_tokens: list[int] | None = None

    @property
    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encoder_output(self) -> torch.Tensor:
        """(1, T', D) every encoder frame emitted so far."""
        if not self._enc_chunks:
            return torch.zeros(1, 0, self.model.encoder.output_size, device=self._device)
        return torch.cat(self._enc_chunks, dim=1)

    def partial_tokens(self) -> list[int]:
        """Best CTC prefix so far."""
        return self.search.best()

    @torch.no_grad()
    def _encode(self, feats: torch.Tensor | None, final: bool) -> int:
        """Feed (T, F) feature frames (or None) to the encoder and the CTC search; returns T'."""
        if feats is None:
            n_bins = self.model.encoder.cmvn_mean.numel()
            feats = torch.zeros(0, n_bins)
        out, self.state = self.model.encoder.stream_step(feats[None].to(self._device), self.state, final=final)
        if out.size(1) > 0:  # (1, c, D)
            self._enc_chunks.append(out)
            self.search.advance(self.model.ctc_log_probs(out)[0])  # (c, V)
        return out.size(1)

    def _speech_frames(self, events) -> torch.Tensor | None:
        """(T, F) frames of the VAD's speech pieces (segment ends change nothing: one utterance), or None."""
        frames = [f for e in events if isinstance(e, Speech) and (f := self.frontend.accept(e.samples)) is not None]
        return torch.cat(frames) if frames else None

    def accept_waveform(self, samples) -> str:
        """Feed samples (n,) float32 in [-1, 1] at ``SAMPLE_RATE``; returns the current partial text."""
        if self.final_tokens is not None:
            raise ValueError("finalize() was called; call reset() before feeding a new utterance.")
        samples = torch.as_tensor(samples, dtype=torch.float32)
        if samples.dim() != 1:
            raise ValueError(f"samples must be 1-D (n,) mono, got shape {tuple(samples.shape)}.")
        start = time.perf_counter()
        feats = self.frontend.accept(samples) if self.vad is None else self._speech_frames(self.vad.accept(samples))
        enc_frames = self._encode(feats, final=False)
        self.samples_seen += samples.numel()
        n_feats = 0 if feats is None else feats.size(0)
        self.timings.append(ChunkTiming(samples.numel(), n_feats, enc_frames, time.perf_counter() - start))
        return self.tokenizer.decode(self.partial_tokens())

    @torch.no_grad()
    def finalize(self) -> str:
        """Flush the frontend and the encoder, rescore the CTC n-best with the decoder(s); returns the final text.

        The frames are those of whole-utterance feature extraction: samples that do not
        reach another frame are dropped, as there.
        """
        if self.final_tokens is None:
            start = time.perf_counter()
            enc_frames = 0 if self.vad is None else self._encode(self._speech_frames(self.vad.finish()), final=False)
            enc_frames += self._encode(self.frontend.finish(), final=True)
            nbest = self.search.nbest()
            enc_out = self.encoder_output()  # (1, T', D)
            if self.model.decoder is None or enc_out.size(1) == 0:
                self.final_tokens = nbest[0][0] if nbest else []
            else:
                self.final_tokens = attention_rescoring(
                    self.model, enc_out, enc_out.size(1), nbest, self.options.ctc_weight, self.options.reverse_weight,
                    self.fusion, self.search.context, self.options.hotword_rescore_weight,
                )
            self.timings.append(ChunkTiming(0, 0, enc_frames, time.perf_counter() - start))
        return self.tokenizer.decode(self.final_tokens)
