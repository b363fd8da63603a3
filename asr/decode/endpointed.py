"""Long inputs read as a streaming recognizer reads them: chunk by chunk, an utterance ending at each
endpoint and the next one encoded as a fresh stream.

Axis legend: T feature frames, F feature bins, T' encoder frames, C chunk (encoder frames), D model dim,
V vocab.

Why: a model trained on single sentences loses its way over a long stream; after a pause its left
context holds silence and the sentence before, which it never saw in training. Wenet's and
sherpa-onnx's runtimes, and this project's server (``asr.serve.stream``), end an utterance at an
endpoint (:mod:`asr.decode.endpoint`: the CTC path emitted something, then enough blank frames) and
restart the model's state there. Here the same for an input held in memory:

1. the current utterance streams through the encoder's ``stream_step`` from its first feature frame,
   with a fresh encoder state and a fresh running CMN (:func:`asr.decode.long_audio.stream_chunks`),
   one chunk of C encoder frames at a time;
2. each chunk's CTC posteriors go to an :class:`~asr.decode.endpoint.EndpointDetector` as the server's
   stream feeds them, so an endpoint falls where the server's would (without a VAD);
3. at an endpoint the utterance ends at the detector's split point, its frames go to the searches, and
   the next utterance starts at the split point's feature frame: what the old state encoded past the
   split is encoded again from the fresh state, as the server's cache reset does (``reset="both"``).

Memory: the encoder holds one stream state (``left_chunks * C`` cached frames a layer); the searches
read one utterance's frames at a time, which the rules bound (an utterance of 20 s ends at its next
blank frame), never the whole input's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from asr.data.features import FRAME_SHIFT_S
from asr.decode.endpoint import EndpointConfig, EndpointDetector, default_rules
from asr.decode.long_audio import can_stream, stream_chunks, streams_chunks

# Trailing blank after speech that ends an utterance of a file: half the second a live endpoint waits
# (the server's default, Wenet's rule 2), because the pauses between the sentences of a recording are
# often shorter than a second, and a file's endpoint keeps no user waiting. The long-form benchmark
# compares others (scripts/bench_long_form.py ``chunk16_left4_endpoints0.3``).
FILE_TRAILING_SILENCE_S = 0.5


def file_endpoints(trailing_silence_s: float = FILE_TRAILING_SILENCE_S, blank_threshold: float = 0.8
                   ) -> EndpointConfig:
    """The endpoint settings for a file: Wenet's rules with ``trailing_silence_s``, both resets, and blank
    frames alone deciding silence (a file's features carry no audio levels for the speaker's-level rule)."""
    if not 0.0 < trailing_silence_s < float("inf"):
        raise ValueError(f"trailing_silence_s ({trailing_silence_s}) must be a finite number of seconds > 0.")
    return EndpointConfig(blank_threshold=blank_threshold, rules=default_rules(trailing_silence_s), reset="both",
                          speaker_margin_db=None)


@dataclass(frozen=True)
class StreamUtterance:
    """One utterance of an input: feature frames [start, end) of the input, the ones its encoder frames read
    (the last utterance: to the end of the input), ``enc_out`` (1, T', D) encoded from a fresh state at
    ``start``; ``endpoint``: it ended at an endpoint (else at the end of the input). The next utterance starts
    at ``start + subsampling_rate * T'``: the last frames' windows overlap it by ``window - rate`` feature
    frames."""

    start: int
    end: int
    enc_out: torch.Tensor
    endpoint: bool


def endpoint_utterances(model, feats: torch.Tensor, chunk_size: int, left_chunks: int, endpoint: EndpointConfig,
                        progress: Callable[[int], None] | None = None) -> Iterator[StreamUtterance]:
    """The utterances of one input (T, F), in order, each as soon as it ends (see the module docstring).

    Args:
        model: an ``AsrModel`` with a causal streaming encoder (``stream_step``) and a CTC head.
        endpoint: the rules; its ``reset`` must be ``"both"`` (a file restarts cache and CMN together).
        progress: called with the feature frames each utterance moves the input on by (they add up to T).
    """
    if feats.dim() != 2:
        raise ValueError(f"feats must be one input (T, F), got {tuple(feats.shape)}.")
    if chunk_size <= 0:
        raise ValueError(f"endpoint resets stream chunk by chunk: chunk_size ({chunk_size}) must be > 0.")
    if not endpoint.enabled or endpoint.reset != "both":
        raise ValueError(f"endpoint resets need an enabled endpoint config with reset 'both', got "
                         f"enabled={endpoint.enabled}, reset={endpoint.reset!r}.")
    encoder = model.encoder
    if not can_stream(encoder):
        raise ValueError("endpoint resets need a causal streaming encoder (stream_step); this one cannot stream.")
    rate = encoder.subsampling_rate
    window = encoder.subsampling.window
    detector = EndpointDetector(endpoint, model.blank_id, rate * FRAME_SHIFT_S)
    total, start = feats.size(0), 0
    while start == 0 or int(encoder.output_length(total - start)) > 0:
        detector.reset()
        kept, frames, split = [], 0, None
        # One chunk a step, as the server steps: an endpoint wastes at most the chunk it fell in.
        for out in stream_chunks(encoder, feats[start:], chunk_size, left_chunks, piece=rate * chunk_size):
            for chunk in out.split(chunk_size, dim=1):  # (1, c <= C, D)
                split = detector.advance_to_endpoint(model.ctc_log_probs(chunk)[0])  # (c, V) in
                kept.append(chunk if split is None else chunk[:, :split])
                frames += kept[-1].size(1)
                if split is not None:
                    break
            if split is not None:
                break
        enc_out = torch.cat(kept, dim=1) if kept else feats.new_zeros(1, 0, encoder.output_size)  # (1, T', D)
        end = start + rate * (frames - 1) + window if split is not None else total
        moved = rate * frames if split is not None else total - start
        if progress is not None:
            progress(moved)
        yield StreamUtterance(start, end, enc_out, split is not None)
        start += moved
        if split is None:
            return
    if progress is not None and start < total:  # a tail too short for an encoder frame
        progress(total - start)


def resets_apply(encoder, chunk_size: int, left_chunks: int, frames: int) -> bool:
    """Whether an input of ``frames`` feature frames is decoded with endpoint resets (when they are on): the
    inputs that stream chunk by chunk (:func:`asr.decode.long_audio.streams_chunks`) through a causal
    streaming encoder."""
    return can_stream(encoder) and streams_chunks(chunk_size, left_chunks, int(encoder.output_length(frames)))


Search = Callable[[torch.Tensor, torch.Tensor, str], list[list[int]]]


def search_utterances(model, feats: torch.Tensor, modes: Sequence[str], search: Search, chunk_size: int,
                      left_chunks: int, endpoint: EndpointConfig, clock: Callable[[], float],
                      progress: Callable[[int], None] | None = None,
                      ) -> tuple[dict[str, list[list[int]]], dict[str, float], int]:
    """Every mode's tokens for each utterance of one input (T, F), searched as the utterance ends.

    ``search(enc_out (1, T', D), enc_lens (1,), mode)`` -> [tokens]: one mode's search (e.g.
    ``asr.decode.batch.search_encoded`` with the caller's options). Returns per mode the utterances'
    tokens in order, per mode the seconds spent (the encoder's, which the modes share, plus the mode's
    own search, measured with ``clock``), and the number of utterances.
    """
    tokens: dict[str, list[list[int]]] = {mode: [] for mode in modes}
    seconds = dict.fromkeys(modes, 0.0)
    count, started = 0, clock()
    for utt in endpoint_utterances(model, feats, chunk_size, left_chunks, endpoint, progress):
        encoding = clock() - started
        lens = torch.tensor([utt.enc_out.size(1)])
        for mode in modes:
            began = clock()
            tokens[mode] += search(utt.enc_out, lens, mode) if utt.enc_out.size(1) else [[]]
            seconds[mode] += encoding + clock() - began
        count += 1
        started = clock()
    return tokens, seconds, count
