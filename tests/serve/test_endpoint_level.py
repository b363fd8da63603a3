"""The speaker's-level endpoint rule: talk far under the speaker is not the speaker, a word's own dips are."""

import copy
import math

import numpy as np
import pytest
import torch

from asr.data.features import SAMPLE_RATE
from asr.decode.options import DecodeOptions
from asr.decode.endpoint import EndpointConfig, EndpointDetector
from asr.decode.levels import LevelTrack, SpeakerLevel
from asr.serve.multi_stream import MultiStreamRecognizer
from tests.serve.test_endpoint_reset import C, LEFT, ScriptedCtc, run
from tests.serve.test_endpoint_timestamps import BLANK, frames

FRAME = 640  # samples an encoder frame (40 ms)


def test_level_track_measures_each_frame_whatever_the_pieces():
    rng = np.random.default_rng(0)
    audio = torch.from_numpy(np.concatenate([0.1 * rng.standard_normal(10 * FRAME),
                                             0.01 * rng.standard_normal(10 * FRAME)]))
    whole, pieces = LevelTrack(FRAME), LevelTrack(FRAME)
    whole.accept(audio)
    for start in range(0, audio.numel(), 333):
        pieces.accept(audio[start : start + 333])
    assert torch.equal(whole.levels(0, 20), pieces.levels(0, 20))
    levels = whole.levels(0, 22)
    assert torch.all((levels[:10] > -21) & (levels[:10] < -19)) and torch.all((levels[10:20] > -41) & (levels[10:20] < -39))
    assert torch.isnan(levels[20:]).all()  # not yet heard
    whole.reset()
    assert torch.isnan(whole.levels(0, 1)).all()


def test_level_track_forgets_the_frames_before_the_one_it_reads_next():
    track = LevelTrack(FRAME)
    track.accept(0.1 * torch.ones(10 * FRAME, dtype=torch.float64))
    before = track.levels(0, 10)
    track.forget_before(6)
    assert track.kept_frames == 4
    assert torch.equal(track.levels(6, 4), before[6:])  # what is kept reads as before
    assert torch.isnan(track.levels(4, 2)).all()  # what is forgotten reads as unknown
    assert torch.equal(track.levels(4, 6)[2:], before[6:])
    track.forget_before(3)  # an earlier frame: nothing to drop
    assert track.kept_frames == 4
    track.forget_before(50)  # past what was heard: everything heard goes, frames keep their numbers
    assert track.kept_frames == 0
    track.accept(0.1 * torch.ones(5 * FRAME, dtype=torch.float64))  # frames 10-14
    assert track.kept_frames == 5 and torch.equal(track.levels(10, 5), before[:5])
    assert torch.isnan(track.levels(15, 1)).all()


def test_a_long_stream_without_a_vad_keeps_a_bounded_number_of_levels(model, tokenizer):
    """One segment for the whole stream: the levels already read are dropped as decoding goes on."""
    g = torch.Generator().manual_seed(2)
    rec, stream = _stream(model, tokenizer, [(1, 2000)], EndpointConfig(enabled=False))
    for _ in range(30):  # 30 s of audio, a second at a time
        stream.accept_waveform(SAMPLE_RATE, 0.05 * torch.randn(SAMPLE_RATE, generator=g))
        rec.decode()
    heard = 30 * SAMPLE_RATE // stream._levels.frame_samples
    assert stream._levels.kept_frames < heard // 10  # a few chunks, not the 30 s heard


def test_speaker_level_follows_the_loudest_emitted_frame_and_falls_slowly():
    speaker = SpeakerLevel(margin_db=15.0, decay_db_s=0.5, frame_s=0.04)
    assert not speaker.is_background(-60.0)  # no speaker yet
    speaker.update(-40.0, emitted=True)  # the television before the speaker speaks
    speaker.update(-20.0, emitted=True)
    assert speaker.level_db == -20.0 and speaker.is_background(-36.0) and not speaker.is_background(-34.0)
    speaker.update(-10.0, emitted=False)  # a loud frame the recognizer did not emit on: a door, not the speaker
    assert speaker.level_db == pytest.approx(-20.02)
    for _ in range(25):
        speaker.update(-40.0, emitted=True)  # background words do not lower it, time does
    assert speaker.level_db == pytest.approx(-20.02 - 25 * 0.02)
    assert not speaker.is_background(float("nan"))


def _speech_then_background(speech_frames, background_frames, background_db, speech_db=-20.0, dips=None):
    """Every frame emits a token; levels: the speaker's (with optional dips), then the background's."""
    levels = [speech_db] * speech_frames + [background_db] * background_frames
    for at in dips or ():
        levels[at] = speech_db - 12.0
    return frames("1" * (speech_frames + background_frames)), torch.tensor(levels, dtype=torch.float64)


def _chunked(d, log_probs, levels, chunk=4):
    """Feed chunk by chunk; the frame count where the endpoint's chunk ends, or None."""
    for k in range(0, log_probs.size(0), chunk):
        start = d.advance_to_endpoint(log_probs[k : k + chunk], None if levels is None else levels[k : k + chunk])
        if start is not None:
            return k + start
    return None


@pytest.mark.parametrize("under_db,ends", [(20.0, True), (16.0, True), (10.0, False)])
def test_talk_under_the_speaker_ends_the_utterance_at_a_stated_level(under_db, ends):
    log_probs, levels = _speech_then_background(50, 60, -20.0 - under_db)
    d = EndpointDetector(EndpointConfig(absence_s=None), BLANK, frame_s=0.04)  # the 1 s rule alone
    ended = _chunked(d, log_probs, levels)
    absence = _chunked(EndpointDetector(EndpointConfig(), BLANK, frame_s=0.04), log_probs, levels)
    if ends:  # in the chunk where one second (25 frames) of background is full, from the first frame whose
        # window no longer reaches the speaker's last frame
        assert d.context_frames == 3 and ended is not None and 50 + 3 + 25 <= ended <= 50 + 3 + 25 + 3
        # and with the absence rule's 0.3 s (its window: 2 frames either side), sooner
        assert absence is not None and 50 + 2 + 7 <= absence <= 50 + 2 + 8 + 3
    else:  # 10 dB under: it may be the speaker; the recognizer's words keep the utterance open
        assert ended is None and absence is None
    blind = EndpointDetector(EndpointConfig(speaker_margin_db=None), BLANK, frame_s=0.04)
    assert _chunked(blind, log_probs, levels) is None  # the recognizer alone never ends it


def test_a_words_own_dips_never_end_it():
    """Dips 12 dB under the speaker inside the speech, even with a short trailing-silence rule, end nothing."""
    from asr.decode.endpoint import default_rules

    dips = [k for k in range(60) if k % 10 in (3, 4, 5, 6, 7)]  # 0.2 s of every 0.4 s
    log_probs, levels = _speech_then_background(60, 40, -45.0, dips=dips)
    ended = _chunked(EndpointDetector(EndpointConfig(rules=default_rules(0.2)), BLANK, frame_s=0.04), log_probs,
                     levels)
    assert ended is not None and 60 + 5 <= ended <= 60 + 5 + 3  # once 0.2 s of background passed the speech


def test_the_speaker_level_outlives_an_utterance_and_unknown_levels_count_by_blank():
    d = EndpointDetector(EndpointConfig(), BLANK, frame_s=0.04)
    d.advance(*_speech_then_background(10, 0, -40.0))
    d.reset()
    assert d.speaker.level_db == -20.0  # held by every emitted frame at -20 dBFS, kept by reset()
    d.advance(frames("1" * 30), torch.full((30,), float("nan"), dtype=torch.float64))
    assert d.trailing_silence_frames == 0 and d.speech_seen
    with pytest.raises(ValueError, match="levels_db"):
        d.advance(frames("11"), torch.zeros(3))
    with pytest.raises(ValueError, match="speaker_margin_db"):
        EndpointConfig(speaker_margin_db=0.0)


def _stream(model, tokenizer, speech, endpoint):
    clone = copy.deepcopy(model)
    clone.decoder = None
    clone.encoder.online_cmn_frames = 0.0
    head = ScriptedCtc(speech, model.ctc_proj.out_features)
    clone.ctc_log_probs = head
    rec = MultiStreamRecognizer(clone, tokenizer, DecodeOptions(chunk_size=C, left_chunks=LEFT, beam=2),
                                endpoint=endpoint)
    stream = rec.create_stream()
    head.stream = stream
    return rec, stream


@pytest.mark.parametrize("margin,finals", [(15.0, 2), (None, 1)])
def test_a_stream_whose_recognizer_hears_words_in_the_background_still_ends_the_sentence(model, tokenizer, margin,
                                                                                         finals):
    """The scripted CTC head emits words everywhere (the background's too); the audio is the speaker at
    -20 dBFS for 1.2 s, then talk 20 dB under for 3 s."""
    g = torch.Generator().manual_seed(1)
    wave = torch.cat([0.1 * torch.randn(int(1.2 * SAMPLE_RATE), generator=g),
                      0.01 * torch.randn(3 * SAMPLE_RATE, generator=g)])
    for forget in (True, False):
        rec, stream = _stream(model, tokenizer, [(1, 200)],
                              EndpointConfig(reset="both", speaker_margin_db=margin, forget_background=forget,
                                             absence_s=None))  # the 1 s rule (the absence rule: its own test)
        got = run(rec, stream, wave)
        assert len(got) == finals
        if margin is not None:  # ended about 1 s after the speaker stopped: not inside the speech
            assert 1.2 + 0.9 <= got[0].span[1] <= 1.2 + 1.3
            assert got[1].text == ""  # the talk's words are blanks for the search
            if forget:  # chunks of talk after the endpoint restarted the encoder: the empty final starts later
                assert stream.background_restarts > 0 and got[1].span[0] > got[0].span[1]
            else:  # the next utterance starts where the last one ended
                assert stream.background_restarts == 0 and math.isclose(got[1].span[0], got[0].span[1])


@pytest.mark.parametrize("window_s,kept", [(0.0, 10), (0.28, 13)])
def test_suppressing_the_background_blanks_only_the_frames_under_the_speaker(window_s, kept):
    """Each frame by itself (window 0) or with the 3 frames either side: the first 3 background frames still
    hear the speaker's last ones."""
    log_probs, levels = _speech_then_background(10, 6, -40.0)
    off = EndpointDetector(EndpointConfig(suppress_background=False), BLANK, frame_s=0.04)
    off.advance(log_probs, levels)
    assert torch.equal(off.suppressed(log_probs), log_probs)
    on = EndpointDetector(EndpointConfig(suppress_background=True, speaker_window_s=window_s), BLANK, frame_s=0.04)
    on.advance(log_probs, levels)
    out = on.suppressed(log_probs)
    assert torch.equal(out[:kept], log_probs[:kept])
    assert torch.all(out[kept:].argmax(dim=1) == BLANK) and torch.all(out[kept:, BLANK] == 0.0)
    on.advance(log_probs[:3])  # no levels: nothing is background, nothing suppressed
    assert torch.equal(on.suppressed(log_probs[:3]), log_probs[:3])


@pytest.mark.parametrize("pause_s,ends", [(0.5, True), (0.2, False)])
def test_the_speakers_absence_ends_a_pause_the_1_s_rule_cannot(pause_s, ends):
    """The recognizer emits on every frame (talk behind the speaker keeps it and the VAD busy); the speaker pauses at
    the talk's level, 20 dB under. 0.3 s of absence, each frame judged over 0.2 s, ends a 0.5 s pause; a 0.2 s one
    (a word's gap) leaves nothing out of the window's reach."""
    pause = round(pause_s / 0.04)
    levels = torch.tensor([-20.0] * 50 + [-40.0] * pause + [-20.0] * 50, dtype=torch.float64)
    log_probs = frames("1" * levels.numel())
    d = EndpointDetector(EndpointConfig(), BLANK, frame_s=0.04)
    ended = _chunked(d, log_probs, levels)
    if ends:  # inside the pause, once 0.3 s of it lies 2 frames (half the window) past the speech
        assert d.absence_frames == 2 and ended is not None and 50 + 2 + 7 <= ended <= 50 + pause
    else:
        assert ended is None
    off = EndpointDetector(EndpointConfig(absence_s=None), BLANK, frame_s=0.04)
    assert _chunked(off, log_probs, levels) is None  # the 1 s rule alone: the sentences fuse
    with pytest.raises(ValueError, match="absence_s"):
        EndpointConfig(absence_s=0.0)


def test_the_absence_rule_waits_for_the_speaker():
    """After an endpoint, an utterance of talk alone (emitted on, 20 dB under the speaker, on its floor) is not ended
    by the speaker's absence: no empty final for every pause in the talk."""
    d = EndpointDetector(EndpointConfig(), BLANK, frame_s=0.04)
    d.advance(*_speech_then_background(20, 20, -40.0))  # the speaker's level and the talk's floor
    d.reset()
    d.advance(frames("1" * 40), torch.full((40,), -40.0, dtype=torch.float64))
    assert d.trailing_absence_frames == 40 and not d.speaker_heard and not d.is_endpoint()
    d.advance(frames("1" * 10 + "0" * 10), torch.tensor([-20.0] * 10 + [-40.0] * 10, dtype=torch.float64))
    assert d.speaker_heard and d.is_endpoint()  # the speaker spoke, then 0.3 s of absence
