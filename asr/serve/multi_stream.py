"""The multi-stream recognizer: many audio streams over one model; whole chunks of all streams run batched.

Axis legend: B streams in one batched step, T feature frames, F feature bins,
C chunk (encoder frames), D model dim, V vocab.

Flow (sherpa-onnx style): each :class:`~asr.serve.stream.Stream` takes audio with
``accept_waveform`` (cheap: the samples are queued); :meth:`MultiStreamRecognizer.decode`
turns queued audio into fbank frames, then runs every stream that holds a whole
chunk (``window + rate * (C - 1)`` feature frames) through ONE batched
``encoder.stream_step`` (states stacked by :mod:`asr.serve.batching`; or, with an
``OnnxChunkEncoder``, an exported step stream by stream, see :mod:`asr.serve.encoders`)
and one CTC projection, and advances each stream's CTC prefix beam search and endpoint
detector. A stream whose endpoint fires stops consuming audio until ``reset()``:
its final result (attention-rescored n-best, word timestamps from the CTC
alignment) is ready in ``result()``. ``reset()`` starts the next utterance with
a fresh decoder; the encoder state and the online CMN go on (continuous decoding;
the memory stays bounded by ``left_chunks``) or restart, as ``EndpointConfig.reset``
says. The endpoint is found at frame resolution: when the next sentence begins in
the endpoint's own chunk, those frames start the next utterance instead of ending
in this one's final. ``finish()`` marks the end of the audio; the next ``decode()``
flushes the last partial chunk and makes the final result.

With a VAD (``vad=``), each stream's audio goes through a
:class:`~asr.streaming.vad.SpeechSegmenter` first: non-speech never reaches the
fbank or the encoder, and the end of a speech segment is an endpoint. Word times
stay in stream time throughout: each utterance counts the audio before it, dropped
or encoded by an earlier encoder state.

A stream whose step raises (e.g. ``TooLongForTable`` once an ``abs_learned``
stream's absolute time passes its table) fails alone: a batched step that raises
is rerun stream by stream, the stream that still raises gets ``error`` set and
decodes nothing more, and the other streams' chunks go on as if it were absent.

A stream (:mod:`asr.serve.stream`) keeps its own lifecycle; the recognizer drives it through its public
methods, never its fields.

Threads: ``accept_waveform`` and ``finish`` may be called from any thread;
``decode``, ``result``, ``reset`` and ``is_endpoint`` (and the round's methods) from one thread at a time.
"""

from __future__ import annotations

import logging
import threading

import torch

from asr.decode.hotwords import Biasing, HotwordCompiler, as_entries
from asr.decode.options import DecodeOptions
from asr.lm.fusion import Fusion
from asr.lm.words import WORD_MARKER
from asr.serve.counters import BatchSizeHistogram
from asr.serve.encoders import EagerChunkEncoder
from asr.decode.endpoint import EndpointConfig
from asr.serve.stream import Stream
from asr.data.features import FRAME_SHIFT_S, SAMPLE_RATE
from asr.streaming.vad import SileroVad, VadConfig

log = logging.getLogger(__name__)


class MultiStreamRecognizer:
    """Many streams over one ``AsrModel`` with a causal encoder.

    Args:
        model: ``AsrModel`` (put in eval mode here).
        tokenizer: ``decode(ids) -> str`` and ``id_to_piece(id) -> str`` ("▁" starts a word).
        options: chunking (C = chunk_size > 0 encoder frames per chunk; left_chunks -1 means unbounded memory
            on long streams), beam, rescoring weights and hotword settings (``asr.decode.options.DecodeOptions``;
            compiled lists are cached by content).
        endpoint: endpoint rules (on by default) and what restarts at an endpoint (``EndpointConfig.reset``).
        features: the model's fbank options (``asr.data.features.FeatureConfig``, from its checkpoint;
            None: ``asr.data.features.LEGACY``).
        max_batch: most streams in one batched step.
        chunk_encoder: runs whole chunks and the last partial one (``asr.serve.encoders``); default
            the model's eager ``stream_step``, batched. An ``OnnxChunkEncoder`` runs an exported step.
        fusion: language models (``asr.lm.fusion.Fusion``) for every stream's CTC beam and final rescoring.
        hotwords: phrases every stream is biased towards (strings, ``"phrase:score"``, (phrase, score) pairs);
            a stream's own list (``create_stream(hotwords=...)``) is merged with it.
        vad: voice activity detection in front of every stream (``asr.streaming.vad.VadConfig``; None: off,
            all audio reaches the encoder). Each speech segment is decoded like a stream of its own (fresh
            fbank and encoder; the online CMN restarts as ``endpoint.reset`` says); its end is an endpoint.
    """

    def __init__(
        self,
        model,
        tokenizer,
        options: DecodeOptions = DecodeOptions(),
        *,
        endpoint: EndpointConfig | None = None,
        features=None,
        max_batch: int = 64,
        chunk_encoder=None,
        fusion: Fusion | None = None,
        hotwords=(),
        vad: VadConfig | None = None,
    ) -> None:
        options.check_streaming(model)
        if max_batch < 1:
            raise ValueError(f"max_batch ({max_batch}) must be >= 1.")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.options = options
        self.fusion = fusion
        self.endpoint = endpoint if endpoint is not None else EndpointConfig()
        self.features = features
        self.sample_rate = SAMPLE_RATE  # of the audio streams accept
        self.max_batch = max_batch
        chunk_size, left_chunks = options.chunk_size, options.left_chunks
        encoder = model.encoder
        encoder.init_state(1, chunk_size, left_chunks)  # validates the chunk arguments and causality now
        self.chunk_encoder = chunk_encoder or EagerChunkEncoder(encoder, chunk_size, left_chunks)
        self.num_bins = encoder.input_dim
        sub = encoder.subsampling
        # Feature frames behind one chunk of C encoder frames (and its lookahead), and the frames a chunk
        # moves on by.
        self.chunk_span = encoder.chunk_window(chunk_size)
        self.chunk_step = sub.rate * chunk_size
        self.subsampling_rate = sub.rate
        self.frame_s = sub.rate * FRAME_SHIFT_S  # seconds per encoder frame
        self.vad = vad
        self.vad_model = SileroVad() if vad is not None else None  # one session; each stream has its own state
        self.streams: list[Stream] = []
        self._streams_lock = threading.Lock()  # streams come and go from other threads (server connections)
        self.batch_sizes = BatchSizeHistogram()  # steps per batch size, for benchmarks (bounded by max_batch)
        self.hotwords = as_entries(hotwords)
        self._compiler: HotwordCompiler | None = None  # made with the first list (it reads the tokenizer's pieces)
        self._own_biasing: Biasing | None = None
        if self.hotwords:  # a bad server-wide list fails now, not at the first connection
            self._own_biasing = self.compile_hotwords([])

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def compile_hotwords(self, hotwords) -> Biasing | None:
        """The recognizer's list merged with ``hotwords``, compiled (cached by content); None when both are empty.

        The recognizer's list alone is compiled once, with the recognizer, and kept outside the cache, so a
        stream without a list of its own never compiles (however many other lists went through the cache).
        Raises ``asr.decode.hotwords.HotwordError`` for an entry that cannot be used.
        """
        own = as_entries(hotwords or ())
        if not own and self._own_biasing is not None:
            return self._own_biasing
        entries = self.hotwords + own
        if not entries:
            return None
        if self._compiler is None:
            self._compiler = HotwordCompiler(self.tokenizer, self.options.hotword_score,
                                             unbiased_keep=self.options.hotword_unbiased_keep)
        return self._compiler.compile(entries)

    def cached_hotword_lists(self) -> tuple[int, int]:
        """(lists, graph states) the hotword cache holds now (bounded by its size and states)."""
        return self._compiler.cached if self._compiler is not None else (0, 0)

    def create_stream(self, hotwords=None) -> Stream:
        """A new stream, biased towards the recognizer's hotwords and its own ``hotwords`` (any thread).

        Raises ``asr.decode.hotwords.HotwordError`` (and creates nothing) for a bad entry.
        """
        stream = Stream(self, self.compile_hotwords(hotwords))
        with self._streams_lock:
            self.streams.append(stream)
        return stream

    def remove_stream(self, stream: Stream) -> None:
        """Forget a stream (a closed connection); its memory is freed with it."""
        with self._streams_lock:
            if stream in self.streams:
                self.streams.remove(stream)

    def has_work(self) -> bool:
        """Some stream has a whole chunk, a finished input to flush or frames and VAD output that wait for
        the next round (after its queued audio is pulled)."""
        return any(s.has_chunk() or s.needs_flush() or s.has_pending() for s in self._snapshot())

    def _snapshot(self) -> list[Stream]:
        with self._streams_lock:
            return list(self.streams)

    @torch.no_grad()
    def decode(self) -> list[Stream]:
        """Decode everything the streams can decode now; returns the streams whose result changed."""
        streams = self._snapshot()
        changed: list[Stream] = []
        for stream in streams:
            stream.new_frames = 0
            stream.pull_audio()
            if stream.take_carry():
                changed.append(stream)
        while True:
            ready = [s for s in streams if s.has_chunk()]
            if not ready:
                break
            for start in range(0, len(ready), self.max_batch):
                self._step_isolated(ready[start : start + self.max_batch])
            changed += [s for s in ready if s not in changed]
        for stream in streams:
            if stream.needs_flush():
                stream.flush()
                if stream not in changed:
                    changed.append(stream)
        return changed

    def _step_isolated(self, streams: list[Stream]) -> None:
        """:meth:`_step`; if the batch raises, each stream alone, and the ones that still raise fail."""
        try:
            self._step(streams)
            return
        except Exception as err:  # noqa: BLE001
            if len(streams) == 1:
                streams[0].fail(err)
                return
        # The failed batch changed no stream (states and chunks are only committed after the step).
        for stream in streams:
            self._step_isolated([stream])

    def _step(self, streams: list[Stream]) -> None:
        """One chunk of every stream in ``streams`` through the chunk encoder (eager: one batched stream_step).

        Nothing of a stream changes before the batched step has succeeded, so a
        batch that raises can be rerun stream by stream.
        """
        feats = torch.stack([s.next_chunk() for s in streams]).to(self.device)  # (B, span, F)
        out, states = self.chunk_encoder.step(feats, [s.encoder_state for s in streams])  # (B, C, D)
        log_probs = self.model.ctc_log_probs(out)  # (B, C, V)
        self.batch_sizes.add(len(streams))
        for row, (stream, row_state) in enumerate(zip(streams, states)):
            stream.take_step(row_state, out[row].clone(), log_probs[row].clone())

    def word_piece(self, token: int) -> str:
        """The token's piece for word grouping; "" for specials the tokenizer leaves out of text (<unk>)."""
        piece = self.tokenizer.id_to_piece(token)
        if piece.strip(WORD_MARKER) and not self.tokenizer.decode([token]):
            return ""
        return piece
