"""Endpoints at frame resolution on hand-made log-probs: where an utterance ends and the next one starts."""

import pytest

from asr.decode.endpoint import EndpointConfig, EndpointDetector, EndpointRule, default_rules
from tests.serve.test_endpoint_timestamps import BLANK, frames


def detector(**config):
    return EndpointDetector(EndpointConfig(**config), BLANK, frame_s=0.04)


def test_speech_resuming_in_the_endpoints_chunk_starts_the_next_utterance():
    d = detector()
    d.advance(frames("1" + "_" * 22))  # 22 silent frames so far: 0.88 s
    # The third silent frame of this chunk makes 1 s; speech resumes two frames later.
    assert d.advance_to_endpoint(frames("___" + "_2" + "3")) == 3
    assert d.trailing_silence_frames == 25 and d.frames == 26


def test_the_chunks_silent_tail_stays_with_the_utterance_that_ended():
    d = detector()
    d.advance(frames("1" + "_" * 22))
    assert d.advance_to_endpoint(frames("______")) == 6  # no split: the whole chunk
    assert d.frames == 29


def test_the_old_chunk_end_check_missed_this_endpoint():
    """Checked once per chunk, the resumed speech had reset the silence: no endpoint, two sentences fused."""
    d = detector()
    d.advance(frames("1" + "_" * 22 + "____2"))
    assert not d.is_endpoint()


def test_no_endpoint_consumes_every_frame():
    d = detector()
    assert d.advance_to_endpoint(frames("1_1_")) is None
    assert d.frames == 4 and d.trailing_silence_frames == 1


def test_the_utterance_length_rule_splits_at_the_first_pause_after_it():
    rule = EndpointRule(must_contain_speech=True, min_trailing_silence_s=0.0, min_utterance_s=0.2)
    d = detector(rules=(rule,))
    # Fires at frame 4 (0.2 s) inside a word; the word ends at frame 5, the next one starts at 7.
    assert d.advance_to_endpoint(frames("1111" + "11" + "_" + "22")) == 7
    d.reset()
    # Speech to the chunk's end: no onset inside it, the chunk stays whole.
    assert d.advance_to_endpoint(frames("1111" + "1122")) == 8


def test_no_speech_rule_hands_the_first_onset_to_the_next_utterance():
    d = detector()
    d.advance(frames("_" * 124))
    assert d.advance_to_endpoint(frames("_" + "__1")) == 1


def test_default_rules_take_the_trailing_silence_and_resets_are_validated():
    d = EndpointDetector(EndpointConfig(rules=default_rules(0.4)), BLANK, frame_s=0.04)
    assert d.advance_to_endpoint(frames("1" + "_" * 10 + "1")) == 11
    assert EndpointConfig(reset="both").resets_cache and EndpointConfig(reset="both").resets_cmn
    assert not EndpointConfig().resets_cache and not EndpointConfig().resets_cmn
    with pytest.raises(ValueError, match="none, cache, cmn, both"):
        EndpointConfig(reset="encoder")
