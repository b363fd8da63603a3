"""Live surroundings for train speech: reproducible draws, backgrounds at their level, speech and text untouched."""

import dataclasses

import numpy as np
import pytest

from asr.data.features import SAMPLE_RATE
from asr.synth import corpus, profiles
from asr.synth.live import BACKGROUNDS, LiveRanges, LiveSetting, apply_live, background, draw_live
from asr.synth.sentences import sentence_rng


def rms_dbfs(x: np.ndarray) -> float:
    return 20 * np.log10(float(np.sqrt(np.mean(x.astype(np.float64) ** 2))))


@pytest.mark.parametrize("kind", ["white", "room", "fan"])
@pytest.mark.parametrize("level", [-80.0, -60.0, -45.0])
def test_noise_backgrounds_have_the_asked_rms(kind, level):
    noise = background(kind, 3 * SAMPLE_RATE, level, np.random.default_rng(0))
    assert noise.dtype == np.float32 and noise.shape == (3 * SAMPLE_RATE,)
    assert abs(rms_dbfs(noise) - level) < 0.1


def test_room_tone_is_mostly_hum_and_fan_noise_stays_in_its_band():
    room = background("room", 2 * SAMPLE_RATE, -50.0, np.random.default_rng(1))
    power = np.abs(np.fft.rfft(room)) ** 2
    freqs = np.fft.rfftfreq(room.size, 1 / SAMPLE_RATE)
    mains = [f for f in (50.0, 60.0) if power[np.abs(freqs - f) < 1].sum() > 0.2 * power.sum()]
    assert len(mains) == 1  # one mains frequency carries a large share of the power
    fan = background("fan", 2 * SAMPLE_RATE, -50.0, np.random.default_rng(2))
    fan_power = np.abs(np.fft.rfft(fan)) ** 2
    assert fan_power[(freqs < 80) | (freqs > 1200)].sum() < 1e-3 * fan_power.sum()  # the slow swell leaks a little


def test_zeros_and_dc():
    assert not background("zeros", 1000, -50.0, np.random.default_rng(0)).any()
    dc = background("dc", SAMPLE_RATE, 20 * np.log10(0.01), np.random.default_rng(0))
    assert abs(float(dc.mean()) - 0.01) < 1e-4 and float(dc.std()) < 1e-4
    with pytest.raises(ValueError, match="unknown background"):
        background("hiss", 10, -50.0, np.random.default_rng(0))


def test_apply_live_pads_and_keeps_the_speech_samples():
    speech = (0.3 * np.sin(np.arange(8000) / 7.0)).astype(np.float32)
    for kind in BACKGROUNDS:
        setting = LiveSetting(lead_in_s=0.5, tail_s=0.25, background=kind, level_dbfs=-60.0, seed=3)
        out = apply_live(speech, setting)
        assert out.size == 8000 + 8000 + 4000
        under = background(kind, out.size, -60.0, np.random.default_rng(3))
        assert np.allclose(out[8000:16000] - under[8000:16000], speech, atol=1e-6)
    # a loud room under a quiet speaker is lowered to stay 20 dB under its peak (-30 dBFS here)
    quiet = speech * (10 ** (-30 / 20) / 0.3)
    loud_room = apply_live(quiet, LiveSetting(1.0, 0.0, "room", -40.0, 4))
    assert abs(rms_dbfs(loud_room[:SAMPLE_RATE]) - (-50.0)) < 0.2


def test_draws_are_reproducible_and_respect_the_share():
    ranges = LiveRanges(share=0.5)
    first = [draw_live(np.random.default_rng(i), ranges) for i in range(400)]
    assert first == [draw_live(np.random.default_rng(i), ranges) for i in range(400)]
    made = [s for s in first if s is not None]
    assert 160 < len(made) < 240
    assert {s.background for s in made} == set(BACKGROUNDS)
    assert all(0.0 <= s.lead_in_s <= 2.5 and 0.0 <= s.tail_s <= 1.2 for s in made)
    assert all(draw_live(np.random.default_rng(i), LiveRanges(share=0.0)) is None for i in range(50))


@pytest.mark.parametrize("fields,message", [
    (dict(share=1.5), "share"), (dict(weights=(1.0, 0.0)), "weights"), (dict(lead_in_s=(2.0, 1.0)), "empty"),
    (dict(level_dbfs=(-20.0, 3.0)), "0 dBFS"),
])
def test_impossible_ranges_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        LiveRanges(**fields)


def test_live_profile_changes_only_the_audio_around_the_same_sentences():
    """Same seed: the live profile reads the same texts with the same voices; the audio it makes live is the
    base profile's with silence and a background around it, reproducibly."""
    base = dataclasses.replace(profiles.PROFILES["neural_hibari_capture30"], pico_share=0.0, neural_share=0.0)
    live = dataclasses.replace(base, live=LiveRanges(share=1.0))
    assert not live.is_clean and live.for_split("test").is_clean
    corpus._init_worker()
    lived = 0
    for index in range(6):
        plain = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", base)
        made = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", live)
        again = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", live)
        if plain is None:
            continue
        assert made[0] == plain[0] and made[1] == plain[1]  # text and voice untouched
        assert np.array_equal(made[2], again[2])
        assert made[2].size > plain[2].size and "live=" in made[3]
        lived += 1
    assert lived >= 3
