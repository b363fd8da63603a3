"""Endpoint rules on known blank patterns; CTC alignment and word times on known alignments."""

import math

import pytest
import torch

from asr.decode.endpoint import EndpointConfig, EndpointDetector, EndpointRule
from asr.serve.timestamps import Word, ctc_align, word_times

BLANK, V = 0, 6


def frames(pattern: str) -> torch.Tensor:
    """(T', V) log-probs: '_' a confident blank frame, a digit a confident token frame."""
    lp = torch.full((len(pattern), V), math.log(0.02))
    for t, ch in enumerate(pattern):
        lp[t, BLANK if ch == "_" else int(ch)] = math.log(0.9)
    return lp


def detector(**config):
    return EndpointDetector(EndpointConfig(**config), BLANK, frame_s=0.04)


def test_no_speech_rule_fires_after_five_seconds():
    d = detector()
    d.advance(frames("_" * 124))  # 4.96 s
    assert not d.is_endpoint()
    d.advance(frames("_"))  # 5.00 s
    assert d.is_endpoint() and not d.speech_seen


def test_trailing_silence_after_speech_fires_at_one_second():
    d = detector()
    d.advance(frames("_" * 10 + "1" + "_" * 24))  # 24 frames = 0.96 s after speech
    assert d.speech_seen and not d.is_endpoint()
    d.advance(frames("_"))
    assert d.is_endpoint()


def test_speech_resets_trailing_silence():
    d = detector()
    d.advance(frames("1" + "_" * 20 + "2" + "_" * 20))
    assert d.trailing_silence_frames == 20 and not d.is_endpoint()


def test_max_utterance_length_fires_during_speech():
    d = detector()
    d.advance(frames("1_" * 249))  # 19.92 s of speech, never 1 s of silence
    assert not d.is_endpoint()
    d.advance(frames("12"))
    assert d.is_endpoint()


def test_disabled_never_fires_and_reset_forgets():
    d = detector(enabled=False)
    d.advance(frames("_" * 200))
    assert not d.is_endpoint()
    d = detector()
    d.advance(frames("1" + "_" * 30))
    d.reset()
    assert d.frames == 0 and not d.speech_seen and not d.is_endpoint()


def test_blank_threshold_decides_what_is_silence():
    lp = torch.full((30, V), math.log(0.1))
    lp[:, BLANK] = math.log(0.5)  # blank at 0.5: silence for threshold 0.4, speech for 0.8
    strict, loose = detector(), detector(blank_threshold=0.4)
    strict.advance(lp)
    loose.advance(lp)
    assert strict.speech_seen and strict.trailing_silence_frames == 0
    assert not loose.speech_seen and loose.trailing_silence_frames == 30


def test_bad_rules_are_rejected():
    with pytest.raises(ValueError, match="fire at once"):
        EndpointRule(must_contain_speech=True, min_trailing_silence_s=0.0)
    with pytest.raises(ValueError, match="blank_threshold"):
        EndpointConfig(blank_threshold=1.5)


@pytest.mark.parametrize(
    "pattern, tokens, spans",
    [
        ("__11_2__33_", [1, 2, 3], [(2, 4), (5, 6), (8, 10)]),
        ("1_1", [1, 1], [(0, 1), (2, 3)]),  # a repeat needs the blank between
        ("12", [1, 2], [(0, 1), (1, 2)]),  # no blank at all
        ("_4444_", [4], [(1, 5)]),
    ],
)
def test_ctc_align_recovers_a_known_alignment(pattern, tokens, spans):
    assert ctc_align(frames(pattern), tokens, BLANK) == spans


def test_ctc_align_forces_the_tokens_it_is_given():
    # The frames say "1 2" but the hypothesis is "1 3". Frame 4 costs 0.02 whatever it emits, so 3
    # goes where it beats a blank: frame 2 (0.95 * 0.9 * 0.02 for 3-blank-blank vs 0.9 * 0.9 * 0.02).
    lp = frames("_1__2_")
    lp[2, 3] = math.log(0.95)
    assert ctc_align(lp, [1, 3], BLANK) == [(1, 2), (2, 3)]
    lp[2, 3] = math.log(0.85)  # now blank-blank-3 wins
    assert ctc_align(lp, [1, 3], BLANK) == [(1, 2), (4, 5)]


def test_ctc_align_rejects_impossible_sequences():
    with pytest.raises(ValueError, match="cannot be aligned"):
        ctc_align(frames("11"), [1, 1], BLANK)
    assert ctc_align(frames("___"), [], BLANK) == []


def test_word_times_groups_sentencepiece_and_char_units():
    spans = [(2, 4), (5, 6), (8, 10), (12, 13)]
    bpe = word_times(["\u2581he", "llo", "\u2581wor", "ld"], spans, frame_s=0.04, offset_s=1.0)
    assert bpe == [Word("hello", 1.08, 1.24), Word("world", 1.32, 1.52)]
    chars = word_times(["a", "b", "\u2581", "c"], spans, frame_s=0.04)
    assert chars == [Word("ab", 0.08, 0.24), Word("c", 0.48, 0.52)]
