"""One audio stream of the multi-stream recognizer: its audio inbox, VAD segments, frontend, CTC search,
endpoint and lifecycle; the recognizer (:mod:`asr.serve.multi_stream`) batches the streams' chunks.

Axis legend: T feature frames, F feature bins, C chunk (encoder frames), V vocab.

A stream's lifecycle is one :class:`~asr.serve.stream_state.StreamState` (decoding, endpoint, done,
failed) that moves only as its table allows; the recognizer drives a stream through its public
methods (``pull_audio``, ``has_chunk``, ``next_chunk``, ``take_step``, ``flush``, ...), never its fields.
The stream reads what it shares with the other streams (model, options, features, endpoint rules, chunk
geometry) from its owner, a :class:`~asr.serve.utterance.StreamOwner`; what it keeps of the utterance it decodes,
and the results made from that, are an :class:`~asr.serve.utterance.Utterance`.

Threads: ``accept_waveform`` and ``finish`` may be called from any thread; the rest from the thread that
runs the recognizer's rounds.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass

import torch

from asr.decode.ctc_prefix_beam import CtcPrefixBeamSearch
from asr.decode.endpoint import FORGET_AFTER_S, EndpointDetector
from asr.decode.hotwords import Biasing
from asr.decode.levels import LevelTrack, louder_talker_started
from asr.model.positions import TooLongForTable
from asr.serve.frames import FeatureQueue
from asr.serve.stream_state import AudioEnd, Segment, StreamState, move
from asr.serve.result import Hypothesis, Result
from asr.serve.utterance import StreamOwner, Utterance
from asr.data.features import FRAME_SHIFT_S, SAMPLE_RATE
from asr.streaming.frontend import StreamingFrontend
from asr.streaming.vad import Speech, SpeechEnd, SpeechSegmenter

log = logging.getLogger(__name__)


@dataclass
class _Split:
    """The frames of an endpoint's chunk after the split point: the next utterance's first frames.

    start: split point in the chunk; first_frame: the chunk's first frame in segment frames;
    enc_out (c - start, D), log_probs (c - start, V): those frames as encoded.
    """

    start: int
    first_frame: int
    enc_out: torch.Tensor
    log_probs: torch.Tensor


class Stream:
    """One audio stream of a ``MultiStreamRecognizer`` (create it with ``create_stream``)."""

    def __init__(self, recognizer: StreamOwner, biasing: Biasing | None = None) -> None:
        self._rec = recognizer
        self.biasing = biasing  # this stream's hotwords (the recognizer's list merged with its own), or None
        fusion = recognizer.fusion
        self._fusion = fusion.with_words(biasing.words) if fusion is not None and biasing is not None else fusion
        self._lock = threading.Lock()
        self._inbox: list[torch.Tensor] = []
        self._inbox_samples = 0
        self._audio_end = AudioEnd.OPEN  # written under _lock: finish() comes from any thread
        self._frontend = StreamingFrontend(recognizer.features, recognizer.model.encoder.online_cmn())
        # Fbank frames from the next chunk's start (running-mean normalized when the model asks)
        self._queue = FeatureQueue(self._frontend, keep_raw=recognizer.endpoint.resets_cmn)
        self.encoder_state = recognizer.chunk_encoder.init_state()  # opaque: the chunk encoder's per-stream state
        self._encoder_flushed = False  # the last partial chunk went through: the state takes no more
        # Stream time: an audio segment (the whole stream without a VAD) starts at _segment_start_s;
        # the encoder state's frame 0 is the segment's frame _origin_frames (> 0 after a cache reset).
        self._segment_start_s = 0.0
        self._origin_frames = 0
        self._search = CtcPrefixBeamSearch(recognizer.options.beam, recognizer.model.blank_id, self._fusion,
                                           biasing.graph if biasing is not None else None)
        self._endpoint = EndpointDetector(recognizer.endpoint, recognizer.model.blank_id, recognizer.frame_s)
        self._levels = LevelTrack(round(recognizer.frame_s * SAMPLE_RATE))  # per segment frame, for the endpoint
        self._utt = Utterance(start_frame=0)
        self._split: _Split | None = None  # an endpoint's chunk past its split point, until reset()
        self._carry: _Split | None = None  # those frames waiting to start the next utterance (decode() takes them)
        # With a VAD: its speech pieces and segment ends wait here for the frontend; a segment end
        # stops them until the segment's final is out and reset() opens the next segment.
        self._vad = SpeechSegmenter(recognizer.vad_model, recognizer.vad) if recognizer.vad is not None else None
        self._events: deque[Speech | SpeechEnd] = deque()
        self._event_samples = 0  # samples in _events (read by backlog_s from other threads)
        self._audio_segment = Segment.WAITING  # the audio segment the encoder is on
        self._utterance = 0  # utterance index in the stream (Result.segment)
        self._lifecycle = StreamState.DECODING  # asr.serve.stream_state: moved by _move only
        self._final: Result | None = None  # the utterance's final result while the state has one
        self.error: str | None = None  # why decoding this stream failed (state FAILED)
        self.new_frames = 0  # encoder frames decoded by the last decode() (partial result changed)
        self.background_restarts = 0  # chunks of background before a word that restarted the encoder
        # The chunk take_step consumed before the last one, in this utterance with nothing consumed between: its
        # (frames, the speaker's level before it); a talker who started in it is found a chunk later
        self._previous_chunk: tuple[int, float | None] | None = None

    # ---- any thread ----------------------------------------------------------

    def accept_waveform(self, sample_rate: int, samples) -> None:
        """Queue mono samples (n,) float in [-1, 1] at the model's sample rate."""
        if sample_rate != SAMPLE_RATE:
            raise ValueError(
                f"sample_rate {sample_rate} differs from the model's {SAMPLE_RATE}; "
                f"resample the audio first."
            )
        samples = torch.as_tensor(samples, dtype=torch.float32)
        if samples.dim() != 1:
            raise ValueError(f"samples must be 1-D (n,) mono, got shape {tuple(samples.shape)}.")
        with self._lock:
            if self.error is not None:
                raise ValueError(f"this stream failed ({self.error}); create a new stream for new audio.")
            if self._audio_end is not AudioEnd.OPEN:
                raise ValueError("finish() was called on this stream; create a new stream for new audio.")
            self._inbox.append(samples)
            self._inbox_samples += samples.numel()

    def finish(self) -> None:
        """No more audio: the next ``decode()`` flushes the stream and makes its final result."""
        with self._lock:
            if self._audio_end is AudioEnd.OPEN:
                self._audio_end = AudioEnd.FINISH_CALLED

    @property
    def backlog_s(self) -> float:
        """Seconds of audio received but not yet encoded (queued samples, VAD output and fbank frames)."""
        waiting = self._inbox_samples + self._event_samples
        if self._vad is not None:
            waiting += self._vad.pending_samples
        return waiting / SAMPLE_RATE + len(self._queue) * FRAME_SHIFT_S

    # ---- decoding thread ------------------------------------------------------

    @property
    def state(self) -> StreamState:
        """Where the stream is in its lifecycle (:mod:`asr.serve.stream_state`)."""
        return self._lifecycle

    def is_endpoint(self) -> bool:
        """The current utterance ended at an endpoint; ``result()`` is final until ``reset()``."""
        return self._lifecycle is StreamState.ENDPOINT

    def is_done(self) -> bool:
        """The audio was finished and fully decoded; ``result()`` is the last final result."""
        return self._lifecycle is StreamState.DONE

    def result(self, nbest: int = 1) -> Result:
        """The current utterance: the final result if it ended, else the partial CTC n-best (no word times)."""
        if nbest < 1:
            raise ValueError(f"nbest ({nbest}) must be >= 1.")
        if self._lifecycle.has_final:
            return Result(self._final.hyps[:nbest], True, self._final.segment, self._final.span)
        decode = self._rec.tokenizer.decode
        partial = self._search.nbest(complete=False)[:nbest]  # ranked as prefixes: the utterance goes on
        if self._rec.endpoint.drops_background_words:
            partial = [(self._utt.speakers_words(self._rec, tokens)[0], score) for tokens, score in partial]
        hyps = [Hypothesis(decode(tokens), tuple(tokens)) for tokens, _ in partial]
        return Result(hyps or [Hypothesis("", ())], False, self._utterance)

    def reset(self) -> None:
        """Start the next utterance: fresh decoder and endpoint counters.

        The encoder state and the online CMN go on or restart as ``EndpointConfig.reset`` says (a
        segment the VAD closed always restarts the encoder: its last partial chunk was flushed). The
        frames of the endpoint's chunk past its split point start the new utterance: encoded again
        from the fresh state after a cache reset, as they were otherwise.
        """
        if self._lifecycle is not StreamState.ENDPOINT:
            why = {StreamState.DONE: "is finished", StreamState.FAILED: f"failed ({self.error})",
                   StreamState.DECODING: "has no utterance that ended (reset() follows an endpoint)"}
            raise ValueError(f"this stream {why[self._lifecycle]}; create a new stream for new audio.")
        self._search.reset()
        self._endpoint.reset()
        self._final = None
        self._previous_chunk = None
        self._move(StreamState.DECODING)
        self._utterance += 1
        policy = self._rec.endpoint
        split, self._split = self._split, None
        if self._audio_segment is Segment.CLOSED and self._encoder_flushed and split is None:  # the VAD's next segment
            self._frontend.fbank.reset()
            self._levels.reset()
            if policy.resets_cmn:
                self._frontend.reset_normalization()
            self._restart_encoder(0)
            self._audio_segment = Segment.WAITING
            start = 0
        else:
            if split is not None and policy.resets_cache:
                start = split.first_frame + split.start
                self._queue.rewind(split.start * self._rec.subsampling_rate)
            else:
                self._carry = split
                start = split.first_frame + split.start if split is not None else self._encoder_frame()
            if policy.resets_cache:
                self._restart_encoder(start)
            if policy.resets_cmn:
                self._queue.renormalize()
        self._utt = Utterance(start_frame=start)

    # ---- the recognizer's round (decoding thread) ------------------------------

    def pull_audio(self) -> None:
        """Take the audio queued since the last round into the frontend (and the VAD)."""
        with self._lock:
            pieces, self._inbox, self._inbox_samples = self._inbox, [], 0
            end = self._audio_end
        if self._vad is None:
            if pieces:
                audio = torch.cat(pieces)
                self._levels.accept(audio)
                self._queue.add(self._frontend.fbank.accept(audio))
        else:
            events = self._vad.accept(torch.cat(pieces)) if pieces else []
            if end is AudioEnd.FINISH_CALLED:
                end = self._set_audio_end(AudioEnd.VAD_FLUSHED)
                events += self._vad.finish()
            self._events.extend(events)
            self._event_samples += sum(e.samples.numel() for e in events if isinstance(e, Speech))
            self._take_events()
            if self._events:  # the frontend's end waits for them
                return
        if end in (AudioEnd.FINISH_CALLED, AudioEnd.VAD_FLUSHED):  # the last frames may complete whole chunks
            self._set_audio_end(AudioEnd.FRONTEND_FLUSHED)
            if self._audio_segment is not Segment.CLOSED:  # a closed segment's frontend was finished when it closed
                self._queue.add(self._frontend.fbank.finish())

    def has_chunk(self) -> bool:
        """A whole chunk of frames waits for the encoder, and the utterance takes it."""
        return (
            self._lifecycle.takes_frames and self._carry is None
            and len(self._queue) >= self._rec.chunk_span
        )

    def needs_flush(self) -> bool:
        """The audio (or its VAD segment) ended, and its last partial chunk and final result are to be made."""
        return (
            (self._audio_segment is Segment.CLOSED or self._audio_ended()) and self._lifecycle.takes_frames
            and self._carry is None and not self.has_chunk()
        )

    def has_pending(self) -> bool:
        """Frames or VAD output that wait for the next ``decode()`` (after a ``reset()``)."""
        waiting = self._carry is not None and self._lifecycle.takes_frames
        return not self._lifecycle.is_terminal and (waiting or (bool(self._events) and self._audio_segment is not Segment.CLOSED))

    def next_chunk(self) -> torch.Tensor:
        """(span, F) features of the next chunk (held until :meth:`take_step` commits it)."""
        return self._queue.head(self._rec.chunk_span)

    def take_step(self, encoder_state, enc_out: torch.Tensor, log_probs: torch.Tensor) -> None:
        """Commit the chunk of :meth:`next_chunk` as encoded: the encoder's new state and its C frames,
        enc_out (C, D) and log_probs (C, V) (clones: a view would keep the whole batch alive)."""
        first = self._encoder_frame()
        self._queue.drop(self._rec.chunk_step)  # the frames no later chunk needs
        self.encoder_state = encoder_state
        speaker_db = self._endpoint.speaker.level_db if self._endpoint.speaker is not None else None
        previous, self._previous_chunk = self._previous_chunk, None
        try:
            self._consume(enc_out, log_probs, first)
            if self._may_forget():
                frames = log_probs.size(0)
                if self._heard_only_background(frames):
                    self._forget_background(first + frames)
                elif chunks := self._louder_talker_chunks(speaker_db, frames, previous):
                    self._queue.rewind(0, drops=chunks)  # encoded again, from a fresh state
                    self._endpoint.reset()
                    self._forget_background(first - (previous[0] if chunks == 2 else 0))
                else:
                    self._previous_chunk = (frames, speaker_db)
        except Exception as err:  # noqa: BLE001 - e.g. rescoring at an endpoint; this stream only
            self.fail(err)

    def take_carry(self) -> bool:
        """Start the utterance with the frames past the last endpoint's split point; whether there were any."""
        carry = self._carry
        if carry is None or not self._lifecycle.takes_frames:
            return False
        self._carry = None
        self._previous_chunk = None
        try:
            self._consume(carry.enc_out, carry.log_probs, carry.first_frame + carry.start)
        except Exception as err:  # noqa: BLE001 - e.g. rescoring at an endpoint; this stream only
            self.fail(err)
        return True

    def flush(self) -> None:
        """Encode the last partial chunk (end of the audio or of a VAD segment) and make the final result."""
        try:
            self._flush()
        except Exception as err:  # noqa: BLE001 - one stream's failure must not stop the others
            self.fail(err)

    def fail(self, err: Exception) -> None:
        """Stop decoding this stream for good; ``error`` says why (the others go on)."""
        with self._lock:
            self.error = f"{type(err).__name__}: {err}"
            self._inbox, self._inbox_samples = [], 0  # free what it will never decode
        self._move(StreamState.FAILED)
        self._queue.clear()
        self._events.clear()
        self._event_samples = 0
        if not isinstance(err, TooLongForTable):  # an expected limit needs no traceback in the log
            log.error("stream failed", exc_info=err)

    # ---- internals (decoding thread) -----------------------------------------

    def _move(self, target: StreamState) -> None:
        self._lifecycle = move(self._lifecycle, target)

    @property
    def _feats(self) -> torch.Tensor | None:
        """(T, F) the frames waiting for the encoder, from the next chunk's start (None: none)."""
        return self._queue.feats

    def _encoder_frame(self) -> int:
        """Segment frame of the next frame the encoder emits."""
        return self._origin_frames + self._rec.chunk_encoder.time(self.encoder_state)

    def _restart_encoder(self, origin_frames: int) -> None:
        self.encoder_state = self._rec.chunk_encoder.init_state()
        self._origin_frames = origin_frames
        self._encoder_flushed = False

    def _take_events(self) -> None:
        """Feed the VAD's output to the frontend up to the end of the current segment."""
        while self._events and self._audio_segment is not Segment.CLOSED:
            event = self._events.popleft()
            if isinstance(event, SpeechEnd):
                self._queue.add(self._frontend.fbank.finish())
                self._audio_segment = Segment.CLOSED
                continue
            if self._audio_segment is Segment.WAITING:
                self._segment_start_s = event.start / SAMPLE_RATE
                self._audio_segment = Segment.OPEN
            self._levels.accept(event.samples)
            self._queue.add(self._frontend.fbank.accept(event.samples))
            self._event_samples -= event.samples.numel()

    def _set_audio_end(self, step: AudioEnd) -> AudioEnd:
        with self._lock:
            self._audio_end = step
        return step

    def _audio_ended(self) -> bool:
        with self._lock:
            return self._audio_end is AudioEnd.FRONTEND_FLUSHED and not self._inbox

    def _consume(self, enc_out: torch.Tensor, log_probs: torch.Tensor, first_frame: int) -> None:
        """Decode c new frames: enc_out (c, D), log_probs (c, V); the first is segment frame ``first_frame``.

        At an endpoint inside them, the frames past its split point are kept for the next utterance.
        """
        self.new_frames += enc_out.size(0)
        context = self._endpoint.context_frames  # the frames before these that judge them too
        levels = self._levels.levels(first_frame - context, context + log_probs.size(0))
        start = self._endpoint.advance_to_endpoint(log_probs, levels[context:], earlier_db=levels[:context])
        # Frames are read in order (a split's carry starts later); a louder talker's restart reads the chunk before
        # this one again
        self._levels.forget_before(first_frame - context - self._rec.chunk_step // self._rec.subsampling_rate)
        log_probs = self._endpoint.suppressed(log_probs)
        kept = log_probs.size(0) if start is None else start
        self._utt.heard_db += self._endpoint.heard_db[:kept]
        self._utt.floor_db += self._endpoint.floor_db[:kept]
        if start is not None and start < log_probs.size(0):
            self._split = _Split(start, first_frame, enc_out[start:], log_probs[start:])
            enc_out, log_probs = enc_out[:start], log_probs[:start]
        self._utt.enc_out.append(enc_out)
        self._utt.log_probs.append(log_probs)
        self._search.advance(log_probs)
        if start is not None:
            self._final = self._final_result()
            self._move(StreamState.ENDPOINT)

    def _may_forget(self) -> bool:
        """The chunk just consumed ended no utterance, and the stream forgets the background
        (``EndpointConfig.forgets_background``)."""
        return (self._rec.endpoint.forgets_background and self._lifecycle is StreamState.DECODING
                and self._split is None)

    def _heard_only_background(self, frames: int) -> bool:
        """The chunk just consumed (``frames`` frames) was background in every frame the search judged, and the
        utterance has no word yet and is ``FORGET_AFTER_S`` long."""
        if self._utt.frames * self._rec.frame_s < FORGET_AFTER_S - 1e-9:
            return False
        judged = self._endpoint.search_background
        if len(judged) != frames or not all(judged):
            return False
        best = self._search.nbest(complete=False)
        return not best or not best[0][0]

    def _louder_talker_chunks(self, speaker_db: float | None, frames: int,
                              previous: tuple[int, float | None] | None) -> int:
        """How many of the last chunks a louder talker started in (0: none; :func:`louder_talker_started`): the chunk
        just consumed (``frames`` frames, the speaker's level ``speaker_db`` before it), or it and the ``previous``
        one (its frames and the level before it), where a speaker's onset straddles their boundary and the first
        holds only its quiet start."""
        policy, utt = self._rec.endpoint, self._utt

        def started(level_db: float | None, last: int) -> bool:
            return louder_talker_started(utt.heard_db, utt.floor_db, last, level_db, policy.speaker_margin_db,
                                         policy.louder_talker_floor_margin, FORGET_AFTER_S / self._rec.frame_s)

        if started(speaker_db, frames):
            return 1
        return 2 if previous is not None and started(previous[1], frames + previous[0]) else 0

    def _forget_background(self, next_frame: int) -> None:
        """Restart the encoder and the decoder at segment frame ``next_frame``: what they heard was the background's
        (blanks for the search). The online CMN, the levels and the endpoint's counts go on."""
        self._restart_encoder(next_frame)
        self._search.reset()
        self._utt = Utterance(start_frame=next_frame)
        self.background_restarts += 1

    def _flush(self) -> None:
        """Encode the last partial chunk (end of the audio or of a VAD segment) and make the final result."""
        rec = self._rec
        if not self._encoder_flushed:
            feats = self._queue.head(len(self._queue)) if len(self._queue) else torch.zeros(0, rec.num_bins)
            if len(self._queue):
                self._queue.drop(len(self._queue))
            first = self._encoder_frame()
            out = rec.chunk_encoder.flush(feats[None].to(rec.device), self.encoder_state)
            self._encoder_flushed = True
            if out.size(1) > 0:
                self._consume(out[0], rec.model.ctc_log_probs(out)[0], first)
        if self._lifecycle is StreamState.DECODING:  # the flushed frames may themselves have ended at an endpoint
            self._final = self._final_result()
            self._move(StreamState.ENDPOINT)
        # Done at the end of the audio, unless an endpoint left frames for another utterance.
        if self._audio_ended() and self._split is None:
            self._move(StreamState.DONE)

    def _final_result(self) -> Result:
        """The utterance's final result: its n-best rescored, the words timed."""
        return self._utt.final_result(self._rec, self._search.nbest(), self._fusion, self.biasing, self._utterance,
                                      self._segment_start_s)
