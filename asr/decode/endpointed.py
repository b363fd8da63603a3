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

The blank rule cannot find the short pauses between the sentences of a recording (a blank run starts
inside the last word and ends inside the next), so the audio can end utterances instead, or as well
(:data:`ENDPOINT_RULES`): a :class:`~asr.decode.pause_endpoint.PauseEndpointer` hears each feature frame's
level as the stream meets it; where it finds a pause, the utterance reads every frame up to that point
(its last chunk flushed as a partial one) and the next one starts inside the pause, before its first word.
With both rules an utterance ends at whichever comes first.

Memory: the encoder holds one stream state (``left_chunks * C`` cached frames a layer); the searches
read one utterance's frames at a time, which the rules bound (an utterance of 20 s ends at its next
blank frame, or at its next quiet frame with the pause rule), never the whole input's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from asr.data.features import FRAME_SHIFT_S
from asr.decode.endpoint import EndpointConfig, EndpointDetector, default_rules
from asr.decode.long_audio import can_stream, stream_chunks, streams_chunks
from asr.decode.pause_endpoint import PauseEndpointer, PauseRule, reference_level

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


# What ends an utterance of a long input streamed whole: the CTC path's blank run, the audio's pauses, or
# whichever comes first.
ENDPOINT_RULES = ("blank", "pause", "both")
# decode.py's rule for long chunked inputs (``--endpoint-rule``): the pauses read a streamed file as the
# file cut at its pauses reads, where the blank rule misses most of them (data/results/long_audio.md).
FILE_ENDPOINT_RULE = "pause"


def endpoint_rule_name(endpoint: EndpointConfig | None, pauses: PauseRule | None) -> str:
    """The :data:`ENDPOINT_RULES` name of these rules (at least one given)."""
    if endpoint is None and pauses is None:
        raise ValueError("no endpoint rule: give blank endpoints, pauses or both.")
    return "both" if endpoint is not None and pauses is not None else "blank" if pauses is None else "pause"


@dataclass(frozen=True)
class StreamUtterance:
    """One utterance of an input: feature frames [start, end) of the input, the ones its encoder frames read
    (the last utterance: to the end of the input), ``enc_out`` (1, T', D) encoded from a fresh state at
    ``start``; ``endpoint``: it ended at an endpoint (else at the end of the input). After a blank endpoint the
    next utterance starts at ``start + subsampling_rate * T'`` (the last frames' windows overlap it by
    ``window - rate`` feature frames); after a pause, inside the pause, at or before ``end``."""

    start: int
    end: int
    enc_out: torch.Tensor
    endpoint: bool


def endpoint_utterances(model, feats: torch.Tensor, chunk_size: int, left_chunks: int,
                        endpoint: EndpointConfig | None, progress: Callable[[int], None] | None = None,
                        pauses: PauseRule | None = None) -> Iterator[StreamUtterance]:
    """The utterances of one input (T, F), in order, each as soon as it ends (see the module docstring).

    Args:
        model: an ``AsrModel`` with a causal streaming encoder (``stream_step``) and a CTC head.
        endpoint: the blank rules (None: none); its ``reset`` must be ``"both"`` (a file restarts cache and CMN
            together).
        progress: called with the feature frames each utterance moves the input on by (they add up to T).
        pauses: the audio's pauses end utterances too (:mod:`asr.decode.pause_endpoint`; None: they do not).
            With both, an utterance ends at whichever comes first.
    """
    if feats.dim() != 2:
        raise ValueError(f"feats must be one input (T, F), got {tuple(feats.shape)}.")
    if chunk_size <= 0:
        raise ValueError(f"endpoint resets stream chunk by chunk: chunk_size ({chunk_size}) must be > 0.")
    if endpoint is not None and (not endpoint.enabled or endpoint.reset != "both"):
        raise ValueError(f"endpoint resets need an enabled endpoint config with reset 'both', got "
                         f"enabled={endpoint.enabled}, reset={endpoint.reset!r}.")
    endpoint_rule_name(endpoint, pauses)  # refuses no rule at all
    encoder = model.encoder
    if not can_stream(encoder):
        raise ValueError("endpoint resets need a causal streaming encoder (stream_step); this one cannot stream.")
    rate = encoder.subsampling_rate
    window = encoder.subsampling.window
    detector = None if endpoint is None else EndpointDetector(endpoint, model.blank_id, rate * FRAME_SHIFT_S)
    heard = None if pauses is None else PauseEndpointer(pauses, reference_level(encoder.cmvn_mean))
    total, start = feats.size(0), 0
    while start == 0 or int(encoder.output_length(total - start)) > 0:
        stop, restart = total, None
        if heard is not None:  # the pause that ends this utterance, if any: the encoder reads up to it
            heard.start(start)
            found = heard.pause()
            while found is None and heard.heard < total:
                heard.listen(feats[heard.heard : heard.heard + rate * chunk_size])
                found = heard.pause()
            if found is not None:
                stop, restart = found
        if detector is not None:
            detector.reset()
        kept, frames, split = [], 0, None
        # One chunk a step, as the server steps: an endpoint wastes at most the chunk it fell in.
        for out in stream_chunks(encoder, feats[start:stop], chunk_size, left_chunks, piece=rate * chunk_size):
            for chunk in out.split(chunk_size, dim=1):  # (1, c <= C, D)
                if detector is not None:
                    split = detector.advance_to_endpoint(model.ctc_log_probs(chunk)[0])  # (c, V) in
                kept.append(chunk if split is None else chunk[:, :split])
                frames += kept[-1].size(1)
                if split is not None:
                    break
            if split is not None:
                break
        enc_out = torch.cat(kept, dim=1) if kept else feats.new_zeros(1, 0, encoder.output_size)  # (1, T', D)
        if split is not None:  # the blank rule: the next utterance starts after the frames this one kept
            end, moved = start + rate * (frames - 1) + window, rate * frames
        elif restart is not None:  # a pause: this utterance read every frame up to it, the next starts in it
            end, moved = stop, restart - start
        else:
            end, moved = total, total - start
        if progress is not None:
            progress(moved)
        yield StreamUtterance(start, end, enc_out, split is not None or restart is not None)
        start += moved
        if split is None and restart is None:
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
                      left_chunks: int, endpoint: EndpointConfig | None, clock: Callable[[], float],
                      progress: Callable[[int], None] | None = None, pauses: PauseRule | None = None,
                      ) -> tuple[dict[str, list[list[int]]], dict[str, float], int]:
    """Every mode's tokens for each utterance of one input (T, F), searched as the utterance ends.

    ``search(enc_out (1, T', D), enc_lens (1,), mode)`` -> [tokens]: one mode's search (e.g.
    ``asr.decode.batch.search_encoded`` with the caller's options). Returns per mode the utterances'
    tokens in order, per mode the seconds spent (the encoder's, which the modes share, plus the mode's
    own search, measured with ``clock``), and the number of utterances. ``endpoint``, ``pauses``: the rules that
    end them (:func:`endpoint_utterances`).
    """
    tokens: dict[str, list[list[int]]] = {mode: [] for mode in modes}
    seconds = dict.fromkeys(modes, 0.0)
    count, started = 0, clock()
    for utt in endpoint_utterances(model, feats, chunk_size, left_chunks, endpoint, progress, pauses):
        encoding = clock() - started
        lens = torch.tensor([utt.enc_out.size(1)])
        for mode in modes:
            began = clock()
            tokens[mode] += search(utt.enc_out, lens, mode) if utt.enc_out.size(1) else [[]]
            seconds[mode] += encoding + clock() - began
        count += 1
        started = clock()
    return tokens, seconds, count
