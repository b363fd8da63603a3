"""The pause rule hears the audio causally: a pause well under the speech level ends an utterance inside it,
a shorter quiet stretch or a loud stretch never does, and its decisions on a prefix are those on the whole.

Frames are synthetic log-mel: every bin of a frame holds the same value, so a frame's level (mean log-mel in
dB) is that value in dB; the speaker's frames sit at SPEAKER_DB with a little jitter."""

import math

import pytest
import torch

from asr.decode.pause_endpoint import PauseEndpointer, PauseRule, PauseTracker, frame_levels, reference_level

FEATS = 20
SPEAKER_DB = 0.0
NATS_PER_DB = math.log(10.0) / 10.0


def frames(count: int, level_db: float, seed: int = 0, jitter_db: float = 3.0) -> torch.Tensor:
    """(count, F) frames at ``level_db`` (mean log-mel), each frame up to ``jitter_db`` quieter."""
    dips = torch.rand(count, 1, generator=torch.Generator().manual_seed(seed)) * jitter_db
    return ((level_db - dips) * NATS_PER_DB).expand(count, FEATS).clone()


def utterance_ends(rule: PauseRule, feats: torch.Tensor, piece: int = 64) -> list[tuple[int, int]]:
    """(end, restart) of every utterance a stream of ``feats`` (T, F), heard ``piece`` frames at a time, ends."""
    heard, start, ends = PauseEndpointer(rule, reference_db=SPEAKER_DB), 0, []
    while True:
        heard.start(start)
        found = heard.pause()
        while found is None and heard.heard < feats.size(0):
            heard.listen(feats[heard.heard : heard.heard + piece])
            found = heard.pause()
        if found is None:
            return ends
        ends.append(found)
        start = found[1]


def test_levels_are_the_mean_log_mel_in_db():
    feats = frames(5, -12.0, jitter_db=0.0)
    torch.testing.assert_close(frame_levels(feats), torch.full((5,), -12.0, dtype=torch.float64))
    assert reference_level(feats[0]) == pytest.approx(-12.0)


def test_a_pause_30_db_under_the_speech_ends_an_utterance_inside_it_never_inside_speech():
    rule = PauseRule()
    feats = torch.cat([frames(150, SPEAKER_DB, 1), frames(30, SPEAKER_DB - 30, 2), frames(150, SPEAKER_DB, 3)])
    ((end, restart),) = utterance_ends(rule, feats)
    assert end == 150 + rule.pause_frames and restart == end  # found min_pause_s into the pause, restarted there
    replayed = PauseRule(replay_s=0.1)
    ((end, restart),) = utterance_ends(replayed, feats)
    assert 150 <= restart == end - 10 < end <= 180  # 0.1 s of the pause replayed: still inside it


def test_background_under_the_speaker_by_more_than_the_margin_still_ends_utterances():
    """The speaker at 0 dB, the pauses filled by a background 25 dB under (default margin 20 dB), or 20 dB
    under with a 15 dB margin: the pauses end utterances; the background alone (no speech after a reset)
    ends none, so resets do not cascade through a long pause."""
    for rule, under in ((PauseRule(), 25.0), (PauseRule(margin_db=15.0), 20.0)):
        parts = [frames(120, SPEAKER_DB, 4), frames(30, SPEAKER_DB - under, 5), frames(120, SPEAKER_DB, 6),
                 frames(300, SPEAKER_DB - under, 7), frames(120, SPEAKER_DB, 8)]
        ends = utterance_ends(rule, torch.cat(parts))
        assert [end for end, _ in ends] == [120 + rule.pause_frames, 270 + rule.pause_frames], (under, ends)
    # A background within the margin is not a pause.
    parts = [frames(120, SPEAKER_DB, 4), frames(60, SPEAKER_DB - 12, 5), frames(120, SPEAKER_DB, 6)]
    assert utterance_ends(PauseRule(), torch.cat(parts)) == []


def test_a_quiet_stretch_shorter_than_the_pause_does_not_end_an_utterance():
    rule = PauseRule(min_pause_s=0.2)
    feats = torch.cat([frames(100, SPEAKER_DB, 9), frames(19, SPEAKER_DB - 40, 10), frames(100, SPEAKER_DB, 11)])
    assert utterance_ends(rule, feats) == []
    assert len(utterance_ends(PauseRule(min_pause_s=0.15), feats)) == 1


def test_silence_before_any_speech_ends_nothing_and_a_long_utterance_ends_at_its_next_quiet_frame():
    rule = PauseRule(max_utterance_s=3.0)
    lead = torch.cat([frames(200, SPEAKER_DB - 60, 12), frames(100, SPEAKER_DB, 13)])
    assert utterance_ends(rule, lead) == []
    talk = torch.cat([frames(350, SPEAKER_DB, 14), frames(5, SPEAKER_DB - 30, 15), frames(100, SPEAKER_DB, 16)])
    assert utterance_ends(rule, talk) == [(351, 351)]  # the first quiet frame after 3 s


def test_decisions_are_causal_whatever_the_pieces():
    """The quiet flags and the utterance ends on a prefix are those of the whole input up to it."""
    torch.manual_seed(0)
    levels = torch.tensor([SPEAKER_DB] * 80 + [SPEAKER_DB - 35] * 25 + [SPEAKER_DB - 8] * 60 + [SPEAKER_DB - 50] * 22
                          + [SPEAKER_DB + 6] * 90 + [SPEAKER_DB - 25] * 40 + [SPEAKER_DB] * 50)
    feats = ((levels[:, None] - 4 * torch.rand(levels.numel(), 1)) * NATS_PER_DB).expand(-1, FEATS)
    rule = PauseRule(min_pause_s=0.15)
    whole = PauseTracker(rule, SPEAKER_DB).quiet(feats)
    for cut in (1, 50, 97, 180, 250):
        tracker = PauseTracker(rule, SPEAKER_DB)
        assert torch.equal(tracker.quiet(feats[:cut]), whole[:cut])
        assert torch.equal(tracker.quiet(feats[cut:]), whole[cut:])  # and the rest after it
    ends = utterance_ends(rule, feats)
    assert len(ends) >= 2
    for piece in (1, 7, 64, 1000):
        assert utterance_ends(rule, feats, piece) == ends
    for end, _ in ends:
        assert utterance_ends(rule, feats[:end]) == [e for e in ends if e[0] <= end]


def test_bad_rules_are_refused_with_the_values():
    for bad, match in [(dict(min_pause_s=0.0), "min_pause_s"), (dict(min_pause_s=0.004), "feature frame"),
                       (dict(margin_db=-1.0), "margin_db"), (dict(decay_db_per_s=float("inf")), "decay_db_per_s"),
                       (dict(floor_db=float("nan")), "floor_db"), (dict(replay_s=-0.1), "replay_s"),
                       (dict(min_speech_s=float("nan")), "min_speech_s"), (dict(max_utterance_s=0.0), "max_utterance")]:
        with pytest.raises(ValueError, match=match):
            PauseRule(**bad)
    with pytest.raises(ValueError, match="reference_db"):
        PauseTracker(PauseRule(), float("-inf"))
    with pytest.raises(ValueError, match="one input"):
        frame_levels(torch.zeros(1, 3, FEATS))
    heard = PauseEndpointer(PauseRule(), SPEAKER_DB)
    heard.listen(frames(10, SPEAKER_DB))
    with pytest.raises(ValueError, match="heard"):
        heard.start(11)
