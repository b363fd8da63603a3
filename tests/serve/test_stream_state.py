"""A stream's lifecycle is one state with a table of allowed moves; the recognizer drives streams through
their methods only; its benchmark counter stays bounded however many steps run."""

from __future__ import annotations

import ast
import inspect
import itertools

import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.serve import multi_stream
from asr.decode.endpoint import EndpointConfig, EndpointRule
from asr.serve.multi_stream import MultiStreamRecognizer
from asr.serve.stream_state import ALLOWED_MOVES, StreamState, StreamStateError, move
from tests.serve.helpers import noise

C, LEFT = 4, 2


@pytest.mark.parametrize("current, target", list(itertools.product(StreamState, StreamState)))
def test_every_move_is_allowed_or_refused_as_the_table_says(current, target):
    allowed = {(StreamState.DECODING, StreamState.ENDPOINT), (StreamState.DECODING, StreamState.DONE),
               (StreamState.DECODING, StreamState.FAILED), (StreamState.ENDPOINT, StreamState.DECODING),
               (StreamState.ENDPOINT, StreamState.DONE), (StreamState.ENDPOINT, StreamState.FAILED)}
    assert (target in ALLOWED_MOVES[current]) == ((current, target) in allowed)
    if (current, target) in allowed:
        assert move(current, target) is target
    else:
        with pytest.raises(StreamStateError, match=f"from {current.name} to {target.name}"):
            move(current, target)


def test_the_final_states_never_move_and_only_they_are_final():
    assert {s for s in StreamState if s.is_terminal} == {StreamState.DONE, StreamState.FAILED}
    assert all(not ALLOWED_MOVES[s] for s in StreamState if s.is_terminal)
    assert {s for s in StreamState if s.has_final} == {StreamState.ENDPOINT, StreamState.DONE}


def recognizer(model, tokenizer, endpoint):
    return MultiStreamRecognizer(model, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=3),
                                 endpoint=endpoint)


def test_a_stream_goes_through_endpoints_to_done(model, tokenizer):
    # Every 0.4 s of audio ends an utterance: several endpoints, then the end of the audio.
    rec = recognizer(model, tokenizer, EndpointConfig(rules=(EndpointRule(False, 0.0, 0.4),)))
    stream = rec.create_stream()
    wave = noise(2.0, 5, SAMPLE_RATE)
    seen = [stream.state]
    with pytest.raises(ValueError, match="no utterance that ended"):
        stream.reset()
    for start in range(0, wave.numel(), 1600):
        stream.accept_waveform(SAMPLE_RATE, wave[start:start + 1600])
        rec.decode()
        while stream.state is StreamState.ENDPOINT:
            seen.append(stream.state)
            assert stream.is_endpoint() and stream.result().is_final
            stream.reset()
            seen.append(stream.state)
            rec.decode()
    stream.finish()
    while not stream.state.is_terminal:
        rec.decode()
        if stream.is_endpoint():
            stream.reset()
    assert stream.state is StreamState.DONE and stream.is_done() and stream.result().is_final
    assert seen.count(StreamState.ENDPOINT) >= 2 and seen[-1] is StreamState.DECODING
    with pytest.raises(ValueError, match="is finished"):
        stream.reset()


def test_a_failed_stream_stays_failed(model, tokenizer):
    rec = recognizer(model, tokenizer, EndpointConfig(enabled=False))
    stream = rec.create_stream()
    stream.accept_waveform(SAMPLE_RATE, noise(0.5, 1, SAMPLE_RATE))
    rec.decode()
    stream.fail(RuntimeError("the model broke"))
    assert stream.state is StreamState.FAILED and stream.error == "RuntimeError: the model broke"
    assert not stream.has_chunk() and not stream.needs_flush() and not stream.has_pending()
    with pytest.raises(ValueError, match="failed"):
        stream.reset()
    with pytest.raises(StreamStateError):
        stream.fail(RuntimeError("again"))


def test_the_recognizer_uses_no_private_name_of_a_stream():
    tree = ast.parse(inspect.getsource(multi_stream.MultiStreamRecognizer))
    private = sorted({f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                      and node.value.id != "self" and node.attr.startswith("_")})
    assert private == []


def test_the_batch_size_counter_holds_one_entry_per_size_however_many_steps(model, tokenizer):
    rec = recognizer(model, tokenizer, EndpointConfig(enabled=False))
    streams = [rec.create_stream() for _ in range(3)]
    with torch.no_grad():
        for i, stream in enumerate(streams):
            stream.accept_waveform(SAMPLE_RATE, noise(1.0 + 0.5 * i, i, SAMPLE_RATE))
            stream.finish()
        while not all(s.is_done() for s in streams):
            rec.decode()
    hist = rec.batch_sizes
    assert hist.steps > len(hist) and len(hist) <= 3 and hist.largest == 3
    assert sum(hist.counts.values()) == hist.steps and 1.0 < hist.mean <= 3.0
