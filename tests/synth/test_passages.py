"""Train passages (asr.synth.passages): bounds, one voice, pauses, and the rest of the corpus unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from asr.data.features import SAMPLE_RATE
from asr.synth import corpus, profiles
from asr.synth.passages import PassageRanges, is_passage, read_passage
from asr.synth.sentences import sentence_rng

CLEAN_PASSAGES = dataclasses.replace(profiles.CLEAN_PROFILE, passages=PassageRanges(share=0.5))


def test_passage_decisions_follow_their_own_stream():
    picks = [is_passage(0, i, 0.3) for i in range(2000)]
    assert 0.25 < sum(picks) / len(picks) < 0.35
    assert picks == [is_passage(0, i, 0.3) for i in range(2000)]  # a pure function of (seed, index)
    assert not any(is_passage(0, i, 0.0) for i in range(200))


def test_a_passage_is_sentences_of_one_voice_with_pauses_within_its_bounds():
    corpus._init_worker()
    ranges = CLEAN_PASSAGES.passages
    made = 0
    for index in range(12):
        result = corpus._passage_utterance(sentence_rng(0, "train", index, 0), "train", CLEAN_PASSAGES)
        if result is None:
            continue
        made += 1
        text, voice, audio = result[:3]
        seconds = len(audio) / SAMPLE_RATE
        assert ranges.seconds[0] <= seconds <= ranges.seconds[1], seconds
        assert audio.dtype == np.int16
        # Pauses: a run of 0.25 s or more near the noise floor inside the passage.
        quiet = np.abs(audio.astype(np.float64)) < 0.01 * np.abs(audio).max()
        window = int(0.25 * SAMPLE_RATE)
        runs = np.convolve(quiet, np.ones(window), mode="valid") >= window
        assert runs.any(), index
        # The same draws give the same passage (one voice reads it all).
        again = corpus._passage_utterance(sentence_rng(0, "train", index, 0), "train", CLEAN_PASSAGES)
        assert again[0] == text and again[1] == voice and np.array_equal(again[2], audio)
    assert made >= 8


def test_read_passage_refuses_what_cannot_reach_its_shortest():
    short = PassageRanges(share=1.0, sentences=(2, 2), seconds=(60.0, 70.0))
    rng = sentence_rng(0, "train", 0)
    beep = lambda text: np.full(SAMPLE_RATE, 1000, dtype=np.int16)  # noqa: E731  one second a sentence
    assert read_passage(rng, beep, lambda r: "a b", short) is None
    text, audio = read_passage(rng, beep, lambda r: "a b", PassageRanges(share=1.0, sentences=(3, 3)))
    assert text == "a b a b a b" and 3.5 <= len(audio) / SAMPLE_RATE <= 30.0


def test_single_sentences_of_a_passage_corpus_are_those_of_the_corpus_without(tmp_path):
    plain = corpus.SynthConfig(str(tmp_path / "plain"), 0, 0.01, 0, 0, 0, 1, "clean")
    profiles.PROFILES["_test_passages"] = CLEAN_PASSAGES
    try:
        mixed = dataclasses.replace(plain, out_dir=str(tmp_path / "mixed"), profile="_test_passages")
        corpus.build_split(plain, "train")
        cuts, _ = corpus.build_split(mixed, "train")
    finally:
        del profiles.PROFILES["_test_passages"]
    passages = [c for c in cuts if c.custom.get("passage")]
    singles = [c for c in cuts if not c.custom.get("passage")]
    assert passages and singles
    assert max(c.duration for c in singles) <= corpus.DURATION_BOUNDS["train"][1]
    for cut in singles:  # index for index the very utterance the plain corpus made
        ours = (tmp_path / "mixed" / cut.recording.sources[0].source).read_bytes()
        theirs = tmp_path / "plain" / cut.recording.sources[0].source
        if theirs.is_file():
            assert ours == theirs.read_bytes(), cut.id


@pytest.mark.parametrize("fields, message", [
    ({"share": 1.5}, "share"), ({"sentences": (1, 3)}, "sentences"), ({"seconds": (9.0, 5.0)}, "seconds"),
    ({"edge_s": (0.0, 20.0)}, "edges"),
])
def test_impossible_passage_ranges_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        PassageRanges(**{"share": 0.1, **fields})
