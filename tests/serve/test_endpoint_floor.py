"""The background's floor: a quieter sentence after a loud one stays the speaker's, talk on the floor in the pauses
does not."""

import math

import numpy as np
import pytest
import torch

from asr.decode.endpoint import EndpointConfig, EndpointDetector
from asr.decode.levels import BackgroundFloor
from tests.serve.test_endpoint_timestamps import BLANK, frames

ROOM = -70.0  # a quiet room's floor (the benchmark's clean sessions lie over -70 dBFS)


def _judge(levels: list[float], tokens: str, chunk: int = 16, **config) -> tuple[list[bool], list[bool], list[float]]:
    """Per frame: (under the speaker for the endpoint rule, a certain blank for the search, the floor after it),
    the levels fed chunk by chunk with the frames before each chunk as its context."""
    d = EndpointDetector(EndpointConfig(suppress_background=True, **config), BLANK, frame_s=0.04)
    log_probs, levels_db = frames(tokens), torch.tensor(levels, dtype=torch.float64)
    background, search, floor = [], [], []
    for k in range(0, len(levels), chunk):
        d.advance(log_probs[k : k + chunk], levels_db[k : k + chunk],
                  earlier_db=levels_db[max(0, k - d.context_frames) : k])
        background += d.background
        search += d.search_background
        floor += [d.floor.level_db if d.floor is not None else math.nan] * len(d.background)
    return background, search, floor


def _sentence(peak_db: float, frames_: int, rng: np.random.Generator) -> list[float]:
    """A sentence's frame levels: syllables of 4-6 frames at ``peak_db`` - 0-6 dB, each followed by 2 frames of a
    consonant 25 dB under its vowel."""
    out: list[float] = []
    while len(out) < frames_:
        out += [peak_db - rng.uniform(0.0, 6.0)] * int(rng.integers(4, 7)) + [peak_db - 25.0] * 2
    return out[:frames_]


def test_a_sentence_12_db_quieter_than_the_last_keeps_every_frame():
    """A loud sentence at -8 dBFS, a pause of 1 s at the room's floor, then a sentence 12 dB quieter with its weak
    syllables down to 18 dB under its peak: 0.28 s windows 30 dB under the speaker's level. Without the floor the
    speaker's level alone blanks some of them; over the floor none."""
    rng = np.random.default_rng(0)
    quiet = _sentence(-20.0, 60, rng)
    for at in range(20, 60, 15):  # weak syllables: a whole window 10-18 dB under the sentence's loudest
        quiet[at : at + 8] = [-30.0 - rng.uniform(0.0, 8.0)] * 8
    levels = [ROOM] * 8 + _sentence(-8.0, 72, rng) + [ROOM] * 24 + quiet + [ROOM] * 8
    tokens = "_" * 8 + "1" * 72 + "_" * 24 + "2" * 60 + "_" * 8
    start, end = 8 + 72 + 24, 8 + 72 + 24 + 60
    background, search, floor = _judge(levels, tokens)
    assert not any(background[start:end]) and not any(search[start:end])
    assert max(floor[: end]) < ROOM + 5.0  # the floor stays the room's through both sentences
    old_background, old_search, _ = _judge(levels, tokens, floor_margin_db=None)
    assert sum(old_search[start:end]) >= 8 and sum(old_background[start:end]) >= 8  # the speaker's level alone


def test_talk_20_db_under_the_speaker_in_the_pauses_is_background():
    """Babble from the start, 20 dB under the speaker's loudest and varying by 6 dB frame to frame (its words
    emitted), the speaker for 2 s, babble for 2 s, the speaker again: the pause is background once the window
    no longer reaches the speaker, for the endpoint rule and the search."""
    rng = np.random.default_rng(1)
    babble = lambda n: (-28.0 - rng.uniform(0.0, 6.0, n)).tolist()  # noqa: E731 - the speaker peaks at -8 dBFS
    levels = babble(40) + _sentence(-8.0, 50, rng) + babble(50) + _sentence(-8.0, 36, rng)
    tokens = "1" * len(levels)
    background, search, floor = _judge(levels, tokens)
    pause = range(40 + 50 + 4, 40 + 50 + 50 - 16)  # past the window; before the chunk that holds the next sentence
    assert all(background[k] for k in pause) and all(search[k] for k in pause)
    assert -34.0 - 1e-9 <= floor[40 + 50 + 49] <= -28.0  # the floor is the babble's
    assert not any(search[40 : 40 + 50]) and not any(search[-36:])  # the speaker's sentences are kept
    # The floor's margin says how far over it talk still counts as background: 1 dB keeps the babble's peaks.
    _, narrow, _ = _judge(levels, tokens, floor_margin_db=1.0)
    assert sum(narrow[k] for k in pause) < len(pause)


def test_the_judgement_is_causal():
    """What is judged of the chunks before a frame never depends on the frame's audio (a chunk's own frames see
    the rest of their chunk, as the recognizer that emits on them does)."""
    rng = np.random.default_rng(2)
    head = [ROOM] * 8 + _sentence(-8.0, 40, rng)
    for tail in ([ROOM] * 32, [-2.0] * 32, _sentence(-30.0, 32, rng), [-90.0] * 32):
        levels = head + tail
        got = _judge(levels, "1" * len(levels))
        if tail[0] == ROOM:
            first = got
        assert all(a[:48] == b[:48] for a, b in zip(got, first))


def test_the_floor_falls_at_once_and_rises_slowly():
    floor = BackgroundFloor(rise_db_s=1.0, frame_s=0.04)
    assert floor.level_db is None
    floor.update(math.nan)  # an unknown level tells nothing
    assert floor.level_db is None
    floor.update(-40.0)
    floor.update(-60.0)
    assert floor.level_db == -60.0
    for _ in range(25):  # a second of louder audio
        floor.update(-20.0)
    assert floor.level_db == pytest.approx(-59.0)
    floor.update(-math.inf)  # digital silence: as quiet as a floor gets, so it can rise again
    assert floor.level_db == BackgroundFloor.QUIETEST_DB


def test_a_deep_dip_lowers_the_floor_only_once_it_lasts():
    """Talk at -38 to -32 dBFS whose voices fall silent together for 0.32 s: the floor stays the talk's; a silence of
    0.6 s (longer than ``hold_s``) lowers it to the silence; a dip of 4 dB lowers it at once."""
    rng = np.random.default_rng(3)
    for hold_s, kept in ((0.5, True), (0.0, False)):
        floor = BackgroundFloor(rise_db_s=1.0, frame_s=0.04, hold_s=hold_s)
        for level in (-32.0 - rng.uniform(0.0, 6.0, 50)).tolist() + [-90.0] * 8:
            floor.update(level)
        assert (floor.level_db >= -38.0 - 1e-9) == kept, hold_s
    for _ in range(7):  # the silence goes on: 15 frames, 0.6 s, in all
        floor.update(-90.0)
    assert floor.level_db == -90.0
    floor = BackgroundFloor(rise_db_s=1.0, frame_s=0.04, hold_s=0.5)
    floor.update(-38.0)
    floor.update(-42.0)
    assert floor.level_db == -42.0


def test_talk_after_a_breath_of_silence_stays_on_its_floor():
    """Babble 20-26 dB under the speaker in the pause between two sentences falls silent for 0.32 s (digital
    silence, as three voices pausing together read on a clean recording): the talk after it is still background for
    the search and the endpoint rule; with a floor that falls to the breath at once, it stands 50 dB over the floor
    and its words would be the speaker's."""
    rng = np.random.default_rng(4)
    babble = lambda n: (-28.0 - rng.uniform(0.0, 6.0, n)).tolist()  # noqa: E731 - the speaker peaks at -8 dBFS
    levels = babble(40) + _sentence(-8.0, 50, rng) + babble(30) + [-90.0] * 8 + babble(40) + _sentence(-8.0, 36, rng)
    tokens = "1" * len(levels)
    after = range(40 + 50 + 30 + 8 + 4, 40 + 50 + 30 + 8 + 40 - 16)  # past the window; before the next sentence's chunk
    for hold_s, kept in ((0.5, True), (0.0, False)):
        background, search, _ = _judge(levels, tokens, floor_hold_s=hold_s)
        assert all(search[k] for k in after) == kept and all(background[k] for k in after) == kept, hold_s


def test_the_floor_options_are_checked():
    assert EndpointConfig().floor_margin_db is not None
    for bad in ({"floor_margin_db": -1.0}, {"floor_rise_db_s": 0.0}, {"floor_rise_db_s": math.inf},
                {"floor_hold_s": -0.1}, {"floor_hold_s": math.inf}):
        with pytest.raises(ValueError, match="floor"):
            EndpointConfig(**bad)
    assert EndpointDetector(EndpointConfig(speaker_margin_db=None), BLANK, frame_s=0.04).floor is None


def test_one_judgement_of_a_background_level_for_every_rule():
    from asr.decode.levels import is_background_level

    speaker, floor = -20.0, -60.0  # the speaker's level and the background's floor, dB
    assert is_background_level(-52.0, speaker, 15.0, floor, 10.0)  # 32 dB under, 8 over the floor
    assert not is_background_level(-30.0, speaker, 15.0, floor, 10.0)  # within the speaker's margin
    assert not is_background_level(-45.0, speaker, 15.0, floor, 10.0)  # under the speaker, far over the floor
    assert is_background_level(-45.0, speaker, 15.0, floor, None)  # no floor rule: the level alone
    assert not is_background_level(math.nan, speaker, 15.0, floor, 10.0)  # an unknown level never is
    assert not is_background_level(-52.0, None, 15.0, floor, 10.0)  # nor before the speaker's level is known
    for unknown in (None, math.nan):  # a floor not yet known reads as told
        assert not is_background_level(-52.0, speaker, 15.0, unknown, 10.0)
        assert is_background_level(-52.0, speaker, 15.0, unknown, 10.0, unknown_floor=True)
    assert not is_background_level(-math.inf, speaker, 15.0, -math.inf, 10.0)  # silence is not under a silent floor
