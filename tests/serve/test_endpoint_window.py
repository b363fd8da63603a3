"""Background frames are judged by the audio around them: a word's quiet sounds stay the speaker's, talk in a
pause does not."""

import math

import numpy as np
import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.endpoint import EndpointConfig, EndpointDetector
from asr.decode.levels import loudest_ahead, surrounding_levels
from tests.serve.test_endpoint_level import _stream
from tests.serve.test_endpoint_reset import run
from tests.serve.test_endpoint_timestamps import BLANK, frames

SPEAKER, CONSONANT, BACKGROUND, SILENCE = -20.0, -45.0, -42.0, -90.0


def _reference(levels: list[float], earlier: list[float], each_side: int) -> list[float]:
    """surrounding_levels one frame at a time, in float64 Python."""
    known = [math.nan] * max(0, each_side - len(earlier)) + list(earlier)[len(earlier) - each_side:] + list(levels)
    if each_side == 0:
        known = list(levels)
    out = []
    for k, own in enumerate(levels):
        centre = k + (len(known) - len(levels))
        window = [x for x in known[max(0, centre - each_side) : centre + each_side + 1] if not math.isnan(x)]
        out.append(math.nan if math.isnan(own) else max(window))
    return out


@pytest.mark.parametrize("each_side,earlier", [(0, 0), (1, 0), (3, 2), (3, 3), (3, 7), (5, 1)])
def test_surrounding_levels_matches_a_frame_by_frame_reference(each_side, earlier):
    rng = np.random.default_rng(each_side * 10 + earlier)
    values = rng.uniform(-80.0, -10.0, size=16 + earlier)
    values[rng.random(values.size) < 0.2] = np.nan  # unknown levels
    values[3] = -np.inf  # digital silence
    before, levels = values[:earlier], values[earlier:]
    got = surrounding_levels(levels, before, each_side)
    np.testing.assert_array_equal(got, np.array(_reference(levels.tolist(), before.tolist(), each_side)))
    assert surrounding_levels(np.zeros(0), before, each_side).shape == (0,)
    with pytest.raises(ValueError, match="each_side"):
        surrounding_levels(levels, before, -1)


def _judged(levels: list[float], tokens: str, chunk: int = 16, **config) -> list[bool]:
    """Per frame: made a certain blank for the search (levels fed chunk by chunk, with their context)."""
    d = EndpointDetector(EndpointConfig(suppress_background=True, **config), BLANK, frame_s=0.04)
    log_probs, levels_db = frames(tokens), torch.tensor(levels, dtype=torch.float64)
    out = []
    for k in range(0, len(levels), chunk):
        lp = log_probs[k : k + chunk]
        d.advance(lp, levels_db[k : k + chunk], earlier_db=levels_db[max(0, k - d.context_frames) : k])
        out += (d.suppressed(lp)[:, BLANK] == 0.0).tolist()
    return out


def test_a_quiet_consonant_between_loud_frames_is_not_suppressed():
    """Two frames 25 dB under the vowels either side: the speaker's, though each alone is under the margin."""
    levels = [SPEAKER] * 8 + [CONSONANT] * 2 + [SPEAKER] * 6
    assert not any(_judged(levels, "1" * 16))
    # Each frame by itself, at its chunk's end (nothing louder ahead in the chunk): lost.
    assert _judged(levels, "1" * 16, chunk=10, speaker_window_s=0.0)[8:10] == [True, True]


def test_a_quiet_onset_after_a_pause_is_kept_when_its_vowel_is_in_the_chunk():
    """A pause, a consonant 25 dB under its vowel, the vowel: the onset hears the vowel after it."""
    levels = [SPEAKER] * 4 + [SILENCE] * 6 + [CONSONANT] * 2 + [SPEAKER] * 4
    tokens = "1111" + "_" * 6 + "11" + "1111"
    judged = _judged(levels, tokens)
    assert judged[10:12] == [False, False]
    # At a chunk's end the window sees no later frame: the onset is judged by the pause before it.
    assert _judged(levels, tokens, chunk=12)[10:12] == [True, True]


def test_background_talk_in_a_pause_is_suppressed_and_the_speech_around_it_is_not():
    """The speaker, 1.2 s of talk 22 dB under in a pause (the recognizer emits its words), the speaker again."""
    levels = [SPEAKER] * 20 + [BACKGROUND] * 30 + [SPEAKER] * 14
    judged = _judged(levels, "1" * 64)
    # The 3 frames after the speech are kept; before it, those in its chunk (48-49): frames 45-47 end the
    # chunk before and see no later frame.
    assert judged == [False] * 23 + [True] * 25 + [False] * 16
    assert not any(_judged(levels, "1" * 64, speaker_margin_db=25.0))  # within a wider margin: the speaker's


def test_nothing_is_background_before_the_speaker_is_heard():
    """The television before the speaker speaks sets no level to fall under: it is read, not suppressed."""
    levels = [BACKGROUND] * 10 + [SPEAKER] * 6
    assert not any(_judged(levels, "1" * 16))


def test_the_window_and_its_defaults_are_checked():
    config = EndpointConfig()
    assert config.speaker_window_s == 0.28 and config.speaker_margin_db == 15.0
    assert EndpointDetector(config, BLANK, frame_s=0.04).context_frames == 3  # 7 frames: 280 ms
    assert EndpointDetector(EndpointConfig(speaker_window_s=0.0), BLANK, frame_s=0.04).context_frames == 0
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="speaker_window_s"):
            EndpointConfig(speaker_window_s=bad)
    d = EndpointDetector(config, BLANK, frame_s=0.04)
    with pytest.raises(ValueError, match="earlier_db"):
        d.advance(frames("11"), torch.zeros(2), earlier_db=torch.zeros(1, 3))


def test_the_server_options_and_their_checks(capsys):
    from asr.cli.serve import parse_args

    base = ["--checkpoint", "model.ckpt"]
    args = parse_args(base)
    default = EndpointConfig()
    assert args.endpoint_speaker_window == default.speaker_window_s
    assert args.endpoint_search_ahead == default.search_ahead_s
    assert parse_args(base + ["--endpoint-search-ahead", "0.64"]).endpoint_search_ahead == 0.64
    assert (args.endpoint_search_speaker == "window") is default.search_speaker_window is True
    assert parse_args(base + ["--endpoint-search-speaker", "frame"]).endpoint_search_speaker == "frame"
    assert args.endpoint_suppress_background is default.suppress_background
    assert parse_args(base + ["--endpoint-suppress-background"]).endpoint_suppress_background is True
    assert parse_args(base + ["--no-endpoint-suppress-background"]).endpoint_suppress_background is False
    assert parse_args(base + ["--endpoint-speaker-margin", "0"]).endpoint_suppress_background is False
    assert args.endpoint_forget_background is default.forget_background is True
    assert parse_args(base + ["--no-endpoint-forget-background"]).endpoint_forget_background is False
    assert args.endpoint_absence == default.absence_s and parse_args(base + ["--endpoint-absence", "0"]).endpoint_absence == 0
    for bad, says in ((["--endpoint-speaker-window", "-0.1"], "--endpoint-speaker-window"),
                      (["--endpoint-speaker-margin", "-3"], "--endpoint-speaker-margin"),
                      (["--endpoint-absence", "-1"], "--endpoint-absence"),
                      (["--endpoint-search-ahead", "-0.1"], "--endpoint-search-ahead"),
                      (["--endpoint-search-speaker", "loud"], "--endpoint-search-speaker"),
                      (["--endpoint-speaker-margin", "0", "--endpoint-suppress-background"], "needs")):
        with pytest.raises(SystemExit):
            parse_args(base + bad)
        assert says in capsys.readouterr().err


def test_a_stream_judges_the_same_frames_whatever_the_pieces(model, tokenizer):
    """The speaker with quiet stretches, background talk in a pause, the speaker again; the scripted CTC head
    emits words everywhere. Client pieces of any size give the same suppressed frames and the same finals."""
    g = torch.Generator().manual_seed(3)
    speaker = 0.1 * torch.randn(int(1.6 * SAMPLE_RATE), generator=g)
    speaker[int(0.5 * SAMPLE_RATE) : int(0.58 * SAMPLE_RATE)] *= 0.05  # a consonant 26 dB under
    wave = torch.cat([speaker, 0.008 * torch.randn(2 * SAMPLE_RATE, generator=g), speaker])
    seen = {}
    for piece in (640, 1000, 3200, 7777, wave.numel()):
        rec, stream = _stream(model, tokenizer, [(1, 400)], EndpointConfig(reset="none", suppress_background=True))
        judged, suppressed = [], stream._endpoint.suppressed

        def record(log_probs, suppressed=suppressed, judged=judged):
            out = suppressed(log_probs)
            judged.extend((out[:, BLANK] == 0.0).tolist())
            return out

        stream._endpoint.suppressed = record
        finals = run(rec, stream, wave, piece=piece)
        seen[piece] = (judged, [(f.text, f.span) for f in finals])
    first = seen[640]
    assert all(got == first for got in seen.values())
    judged = first[0]
    assert 20 <= sum(judged) <= 50  # most of the 2 s pause (50 frames), none of the speech
    assert not any(judged[:40])  # the speaker's first 1.6 s, its quiet consonant included


def test_loudest_ahead_matches_a_frame_by_frame_reference():
    rng = np.random.default_rng(7)
    levels = rng.uniform(-80.0, -10.0, size=16)
    levels[rng.random(16) < 0.2] = np.nan
    levels[-1] = np.nan  # a last frame whose audio is not complete
    expected = [math.nan if math.isnan(own) else max([x for x in levels[k:] if not math.isnan(x)])
                for k, own in enumerate(levels)]
    np.testing.assert_array_equal(loudest_ahead(levels), np.array(expected))
    assert loudest_ahead(np.zeros(0)).shape == (0,)
    for frames in (0, 1, 3, 15, 40):  # at most ``frames`` ahead; 15 and more: the chunk's rest
        near = [math.nan if math.isnan(own) else max([x for x in levels[k : k + frames + 1] if not math.isnan(x)])
                for k, own in enumerate(levels)]
        np.testing.assert_array_equal(loudest_ahead(levels, frames), np.array(near))
    with pytest.raises(ValueError, match="frames"):
        loudest_ahead(levels, -1)


def test_the_search_looks_no_further_ahead_than_search_ahead_s():
    """A chunk of talk on its floor whose last two frames are a loud syllable of it: with the speaker's level
    known, the frames more than ``search_ahead_s`` before the syllable are background for the search, the rest not;
    looking to the chunk's end (None), none of them is."""
    frame_s = 0.04
    for ahead_s, judged in ((0.32, [True] * 6 + [False] * 10), (None, [False] * 16)):
        detector = EndpointDetector(EndpointConfig(search_ahead_s=ahead_s, floor_margin_db=None), 0, frame_s)
        detector.speaker.level_db = detector.search_speaker.level_db = -10.0
        quiet = torch.full((16,), -45.0, dtype=torch.float64)
        quiet[14:] = -20.0  # 10 dB under the speaker: not background by itself
        blank = torch.full((16, 3), -10.0)
        blank[:, 0] = 0.0
        detector.advance(blank, quiet, earlier_db=torch.full((3,), -45.0, dtype=torch.float64))
        assert detector.search_background == judged, ahead_s
    with pytest.raises(ValueError, match="search_ahead_s"):
        EndpointConfig(search_ahead_s=-0.1)


def test_a_first_word_emitted_on_the_silence_before_its_audio_is_kept():
    """The speaker, a pause, then a chunk that starts with 7 frames of silence (a VAD segment's pre-roll) and
    ends in the next sentence: the recognizer emits its first word on the chunk's first frames, before the
    word's audio. The search keeps that word; the endpoint rule still hears silence there."""
    levels = [SPEAKER] * 16 + [SILENCE] * 16 + [SILENCE] * 7 + [SPEAKER] * 9
    tokens = "1" * 16 + "_" * 16 + "22" + "_" * 5 + "1" * 9
    judged = _judged(levels, tokens)
    assert judged[32:34] == [False, False]  # the word on the pre-roll: not made a blank
    assert all(judged[19:32])  # the pause's own chunk: background
    d = EndpointDetector(EndpointConfig(suppress_background=True), BLANK, frame_s=0.04)
    levels_db = torch.tensor(levels, dtype=torch.float64)
    d.advance(frames(tokens[:32]), levels_db[:32])
    d.advance(frames(tokens[32:]), levels_db[32:], earlier_db=levels_db[32 - d.context_frames : 32])
    assert d.background[:4] == [True] * 4 and not any(d.search_background)  # the rule: silence; the search: kept
    # A chunk of silence alone (no speaker ahead in it) is still background for the search.
    assert _judged(levels, tokens, chunk=39)[32:34] == [True, True]


def test_the_search_weighs_heard_talk_against_the_speakers_level_over_the_same_window():
    """The speaker at -14 dBFS whose words the recognizer emits on quieter frames (-22), then talk 19 dB under the
    speaker's vowels that the recognizer reads as words. Heard over a window, the talk is background against the
    speaker's level over a window (-14) and made a blank; against the emitted frames' own level (-22) it is not.
    The endpoint rule judges by the frames' own level either way."""
    speaker = [-14.0] * 16
    speaker[3] = speaker[9] = -22.0
    levels = torch.tensor(speaker + [-33.0] * 16, dtype=torch.float64)
    tokens = "___1_____1______" + "2" * 16
    judged, ends = {}, {}
    for window in (True, False):
        d = EndpointDetector(EndpointConfig(search_speaker_window=window), BLANK, frame_s=0.04)
        d.advance(frames(tokens[:16]), levels[:16])
        d.advance(frames(tokens[16:]), levels[16:], earlier_db=levels[16 - d.context_frames : 16])
        judged[window], ends[window] = d.search_background, d.background
        assert d.speaker.level_db == pytest.approx(-22.0 - 22 * 0.5 * 0.04)  # the emitted frames' own level
    assert judged[True] == [False] * d.context_frames + [True] * (16 - d.context_frames)
    assert not any(judged[False])
    assert ends[True] == ends[False] and not any(ends[False])
