"""Chunks of background before an utterance's first word restart the stream's encoder: the speaker's next sentence
is encoded as by a stream that starts just before it, the talk before it out of the attention's reach; an utterance
with words keeps its encoder, and the finals' words and times do not move."""

import math

import pytest
import torch

from asr.data.features import SAMPLE_RATE, FbankExtractor
from asr.decode.endpoint import FORGET_AFTER_S, EndpointConfig
from tests.serve.test_background_words import FLOOR, _audio, _word
from tests.serve.test_endpoint_level import _stream
from tests.serve.test_endpoint_reset import encoded, run

# Per 40 ms frame: the speaker 24 dB over the talk for 1.2 s, the talk on its floor for 2.4 s (the recognizer reads
# two words in it), the speaker again for 1.2 s, then 1.2 s of the talk, so an endpoint ends each sentence.
LEVELS = [-16.0] * 30 + [FLOOR] * 60 + [-16.0] * 30 + [FLOOR] * 30
SPEECH = [(2, 28), (40, 46), (60, 66), (92, 118)]  # what the scripted CTC head emits on (stream frames)


def _run(model, tokenizer, forget):
    # The 1 s rule ends the first sentence at frame 56 (the absence rule, sooner: its own test)
    rec, stream = _stream(model, tokenizer, SPEECH, EndpointConfig(reset="both", forget_background=forget,
                                                                   absence_s=None))
    seen = []  # per endpoint: (restarts so far, the utterance's first frame, its encoder frames (T', D))

    def look(s):
        if s.is_endpoint():
            seen.append((s.background_restarts, s._utt.start_frame, torch.cat(s._utt.enc_out)))

    wave = _audio(LEVELS)
    finals = [f for f in run(rec, stream, wave, on_endpoint=look) if f.text]
    return rec, stream, wave, finals, seen


def test_the_talk_before_the_next_sentence_restarts_the_encoder_and_the_sentence_reads_as_from_a_fresh_stream(
        model, tokenizer):
    rec, stream, wave, finals, seen = _run(model, tokenizer, forget=True)
    assert [[w.word for w in f.words] for f in finals] == [[_word(2, 28)], [_word(92, 118)]]
    assert seen[0][:2] == (0, 0)  # the first sentence's utterance: no restart, from the stream's first frame
    restarts, start, frames = next(x for x in seen if x[2].size(0) and x[1] > 30)
    # After the first endpoint (frame 56) each FORGET_AFTER_S of talk, in whole chunks of 4 frames, restarted it
    # (frames 72 and 88); the last restart lies before the speaker's onset (a chunk that hears it is not background)
    # and at most that much and a chunk earlier.
    after = math.ceil(FORGET_AFTER_S / rec.frame_s - 1e-9)
    assert restarts == 2 and 92 - after - 4 <= start <= 92 and stream.background_restarts == restarts
    assert finals[1].span[0] == pytest.approx(start * rec.frame_s)
    # The sentence's encoder frames are those of an encoder that starts at the restart: the talk is out of reach.
    want = encoded(rec.model, FbankExtractor()(wave)[start * 4 :])
    assert torch.allclose(frames, want[: frames.size(0)], atol=1e-4)


def test_without_it_the_words_and_their_times_are_the_same_and_the_encoder_runs_on(model, tokenizer):
    rec, on_stream, wave, on, on_seen = _run(model, tokenizer, forget=True)
    _, off_stream, _, off, seen = _run(model, tokenizer, forget=False)
    assert off_stream.background_restarts == 0
    assert [f.text for f in on] == [f.text for f in off]
    times = [[t for w in f.words for t in (w.start, w.end)] for f in on]
    assert times == [pytest.approx([t for w in f.words for t in (w.start, w.end)]) for f in off]
    _, start, frames = next(x for x in seen if x[2].size(0) and x[1] > 30)
    assert start < 92 - 2 * 4  # the utterance starts at the first endpoint's split point, in the talk
    _, restart, _ = next(x for x in on_seen if x[2].size(0) and x[1] > 30)
    fresh = encoded(rec.model, FbankExtractor()(wave)[restart * 4 :])  # an encoder that starts at the restart
    heard = frames[restart - start :]
    assert not torch.allclose(heard, fresh[: heard.size(0)], atol=1e-3)  # this one heard the talk


@pytest.mark.parametrize("config", [EndpointConfig(suppress_background=False), EndpointConfig(speaker_margin_db=None),
                                    EndpointConfig(forget_background=False)])
def test_it_needs_suppression_and_a_speakers_level(config):
    assert not config.forgets_background
    assert EndpointConfig().forgets_background


def test_a_talker_louder_by_the_margin_restarts_the_encoder_at_its_chunk(model, tokenizer):
    """The stream starts on talk whose word (frames 12-18) sets the speaker's level; 24 dB over it the speaker
    starts at frame 30. Everything before that chunk is background by the new level: the chunk is encoded again from
    a fresh state, and the talk's word leaves the final with the frames before."""
    levels = [FLOOR] * 12 + [FLOOR + 4.0] * 6 + [FLOOR] * 12 + [-16.0] * 30 + [FLOOR] * 30
    wave = _audio(levels)
    for forget in (True, False):
        rec, stream = _stream(model, tokenizer, [(12, 18), (32, 58)],
                              EndpointConfig(reset="both", forget_background=forget, drop_background_words=False,
                                             absence_s=None))
        seen = []
        finals = [f for f in run(rec, stream, wave, on_endpoint=lambda s: s.is_endpoint() and seen.append(
            (s._utt.start_frame, torch.cat(s._utt.enc_out)))) if f.text]
        if not forget:  # the word rule is off: the talk's word stays, and the encoder ran on from the stream's start
            assert [w.word for w in finals[0].words] == [_word(12, 18), _word(32, 58)] and seen[0][0] == 0
            continue
        assert [w.word for w in finals[0].words] == [_word(32, 58)] and stream.background_restarts == 1
        start, frames = seen[0]
        assert start == 28 and finals[0].span[0] == pytest.approx(28 * rec.frame_s)  # the chunk of frames 28-31
        want = encoded(rec.model, FbankExtractor()(wave)[start * 4 :])
        assert torch.allclose(frames, want[: frames.size(0)], atol=1e-4)


def test_a_quieter_sentence_of_the_speaker_before_a_louder_one_is_not_forgotten(model, tokenizer):
    """The same levels in a quiet room: the first sentence lies 20 dB under the second but far over the room's floor,
    so it is the speaker's: both stay, encoded by one encoder."""
    room = -70.0
    levels = [room] * 12 + [-36.0] * 6 + [room] * 12 + [-16.0] * 30 + [room] * 30
    # One utterance holds both (the absence rule would end it in the pause: its own test)
    rec, stream = _stream(model, tokenizer, [(12, 18), (32, 58)], EndpointConfig(reset="both", absence_s=None))
    finals = [f for f in run(rec, stream, _audio(levels)) if f.text]
    assert [w.word for w in finals[0].words] == [_word(12, 18), _word(32, 58)] and stream.background_restarts == 0


def _first_final(model, tokenizer, levels, speech, config):
    rec, stream = _stream(model, tokenizer, speech, config)
    seen = []
    wave = _audio(levels)
    finals = [f for f in run(rec, stream, wave, on_endpoint=lambda s: s.is_endpoint() and seen.append(
        (s._utt.start_frame, torch.cat(s._utt.enc_out)))) if f.text]
    return rec, stream, wave, finals, seen


def test_talk_the_recognizer_reads_no_word_in_leaves_when_the_speaker_starts(model, tokenizer):
    """The stream starts on 1.2 s of talk on its floor that the recognizer reads nothing in (no speaker's level yet);
    the speaker starts 24 dB over it at frame 30. Every frame before the speaker's chunk lies the margin under it: that
    chunk is encoded again from a fresh state, the talk out of the attention's reach; the words do not move."""
    levels = [FLOOR] * 30 + [-16.0] * 30 + [FLOOR] * 30
    config = EndpointConfig(reset="both", absence_s=None)
    rec, stream, wave, finals, seen = _first_final(model, tokenizer, levels, [(32, 58)], config)
    assert [w.word for w in finals[0].words] == [_word(32, 58)] and stream.background_restarts == 1
    start, frames = seen[0]
    assert start == 28 and finals[0].span[0] == pytest.approx(28 * rec.frame_s)  # the chunk of frames 28-31
    want = encoded(rec.model, FbankExtractor()(wave)[start * 4 :])
    assert torch.allclose(frames, want[: frames.size(0)], atol=1e-4)
    off_config = EndpointConfig(reset="both", absence_s=None, forget_background=False)
    _, off, _, off_finals, off_seen = _first_final(model, tokenizer, levels, [(32, 58)], off_config)
    assert off.background_restarts == 0 and off_seen[0][0] == 0  # without it the encoder ran on from the talk
    assert [f.text for f in off_finals] == [f.text for f in finals]


def test_less_talk_than_a_vad_pad_before_the_speaker_keeps_the_stream_whole(model, tokenizer):
    """Under FORGET_AFTER_S of talk before the speaker is not a stream that started on talk: a VAD segment's own
    pre-roll (0.3 s) is that long."""
    lead = 8
    assert lead * 0.04 < FORGET_AFTER_S
    levels = [FLOOR] * lead + [-16.0] * 30 + [FLOOR] * 30
    _, stream, _, finals, seen = _first_final(model, tokenizer, levels, [(lead + 2, lead + 28)],
                                              EndpointConfig(reset="both", absence_s=None))
    assert stream.background_restarts == 0 and seen[0][0] == 0 and len(finals) == 1


def test_a_sound_far_over_a_quiet_rooms_floor_before_the_speaker_keeps_the_stream_whole(model, tokenizer):
    """A sound the recognizer reads nothing in, 20 dB under the speaker but far over a quiet room's floor, is not a
    background: the speaker's stream stays whole."""
    room = -70.0
    levels = [room] * 12 + [-36.0] * 6 + [room] * 12 + [-16.0] * 30 + [room] * 30
    _, stream, _, finals, seen = _first_final(model, tokenizer, levels, [(32, 58)],
                                              EndpointConfig(reset="both", absence_s=None))
    assert stream.background_restarts == 0 and seen[0][0] == 0 and len(finals) == 1


def test_a_speaker_whose_quiet_onset_ends_the_chunk_before_restarts_at_that_chunk(model, tokenizer):
    """As the louder talker's test, but the speaker's first two frames (30, 31) are a quiet onset 12 dB over the talk,
    at the end of the chunk of frames 28-31: that chunk is not the margin over the talk's word, and the next one is
    not the margin over every frame before it (the onset is among them). Over both chunks it is: the two are
    encoded again from a fresh state, and the talk's word leaves the final."""
    levels = [FLOOR] * 12 + [FLOOR + 4.0] * 6 + [FLOOR] * 12 + [FLOOR + 12.0] * 2 + [-16.0] * 28 + [FLOOR] * 30
    config = EndpointConfig(reset="both", drop_background_words=False, absence_s=None)
    rec, stream, wave, finals, seen = _first_final(model, tokenizer, levels, [(12, 18), (32, 58)], config)
    assert [w.word for w in finals[0].words] == [_word(32, 58)] and stream.background_restarts == 1
    start, frames = seen[0]
    assert start == 28 and finals[0].span[0] == pytest.approx(28 * rec.frame_s)
    want = encoded(rec.model, FbankExtractor()(wave)[start * 4 :])
    assert torch.allclose(frames, want[: frames.size(0)], atol=1e-4)


def test_talk_standing_over_its_floor_as_babble_does_leaves_when_a_louder_talker_starts(model, tokenizer):
    """The stream starts on a talker's word 12 dB over the room's floor (babble's syllables stand that far over its
    troughs; the frame rules' floor margin is 10), then the speaker 28 dB over the word. The louder talker's test takes
    the word as background up to ``louder_talker_floor_margin_db`` (15) over the floor: the speaker's chunk is encoded
    again from a fresh state; held to the frame rules' 10 dB, the stream keeps the word and its encoder."""
    room = -56.0
    levels = [room] * 12 + [room + 12.0] * 6 + [room] * 12 + [-16.0] * 30 + [room] * 30
    for margin, restarts in ((15.0, 1), (10.0, 0)):
        config = EndpointConfig(reset="both", absence_s=None, drop_background_words=False,
                                louder_talker_floor_margin_db=margin)
        _, stream, _, finals, seen = _first_final(model, tokenizer, levels, [(12, 18), (32, 58)], config)
        assert stream.background_restarts == restarts, margin
        words = [w.word for w in finals[0].words]
        assert words == ([_word(32, 58)] if restarts else [_word(12, 18), _word(32, 58)])
        assert seen[0][0] == (28 if restarts else 0)
    with pytest.raises(ValueError, match="louder_talker_floor_margin_db"):
        EndpointConfig(louder_talker_floor_margin_db=-1.0)
    assert EndpointConfig(floor_margin_db=None).louder_talker_floor_margin is None


def test_the_speaker_returning_after_talk_the_recognizer_read_restarts_the_encoder_at_their_chunk(model, tokenizer):
    """After the speaker's first sentence the next utterance starts on talk whose word (frames 64-70, 12 dB over the
    room's floor: babble's syllables) the search hears and the recognizer reads, so no chunk of it is background
    alone. The speaker returns at their own level at frame 90: every frame of the utterance before that chunk lies the
    margin under it and within the louder talker's margin of the floor, so the chunk is encoded again from a fresh
    state and the talk's word leaves the speaker's sentence; without forgetting, the word and the encoder stay."""
    room = -56.0
    levels = [-16.0] * 30 + [room] * 34 + [room + 12.0] * 6 + [room] * 20 + [-16.0] * 30 + [room] * 30
    speech = [(2, 28), (64, 70), (92, 118)]
    for forget in (True, False):
        config = EndpointConfig(reset="both", absence_s=None, drop_background_words=False, forget_background=forget)
        rec, stream, wave, finals, seen = _first_final(model, tokenizer, levels, speech, config)
        start, frames = next(x for x in seen if x[0] > 30)
        words = [w.word for w in finals[1].words]
        if not forget:
            assert words == [_word(64, 70), _word(92, 118)] and stream.background_restarts == 0 and start < 64
            continue
        assert words == [_word(92, 118)] and stream.background_restarts == 1
        assert start == 88 and finals[1].span[0] == pytest.approx(88 * rec.frame_s)  # the chunk of frames 88-91
        want = encoded(rec.model, FbankExtractor()(wave)[start * 4 :])
        assert torch.allclose(frames, want[: frames.size(0)], atol=1e-4)


def test_a_quieter_talker_after_the_speakers_sentence_does_not_restart_the_encoder(model, tokenizer):
    """The same talk in a quieter room, then a talker 20 dB under the speaker, the margin over the talk (under the
    speaker's margin, so not the speaker returning): the utterance keeps the talk's word and its encoder."""
    room = -70.0
    levels = [-16.0] * 30 + [room] * 34 + [room + 12.0] * 6 + [room] * 20 + [-36.0] * 30 + [room] * 30
    config = EndpointConfig(reset="both", absence_s=None, drop_background_words=False)
    _, stream, _, finals, _ = _first_final(model, tokenizer, levels, [(2, 28), (64, 70), (92, 118)], config)
    assert stream.background_restarts == 0
    assert _word(64, 70) in [w.word for f in finals for w in f.words]
