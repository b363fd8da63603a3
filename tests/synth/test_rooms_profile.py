"""The rooms profile: music-like tones join the training noises without moving any other draw, the mixing
equals a float64 reference at the drawn SNR, and the words stay the words."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from asr.data.features import SAMPLE_RATE
from asr.synth import corpus, profiles
from asr.synth.conditions import (ConditionRanges, Conditions, apply_conditions, babble_noise, coloured_noise,
                                  draw_conditions, music_like)
from asr.synth.sentences import sentence_rng


def _voice(seconds: float = 1.5, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    wave = sum(np.sin(2 * np.pi * 130 * k * t + rng.uniform(0, 6.28)) / k for k in range(1, 25))
    return (0.4 * wave / np.max(np.abs(wave)) * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t))).astype(np.float32)


def test_music_is_drawn_last_so_every_other_draw_stays():
    without = ConditionRanges(noise_prob=0.8)
    with_music = dataclasses.replace(without, music_share=0.5)
    kinds = set()
    for seed in range(200):
        a = draw_conditions(np.random.default_rng(seed), without)
        b = draw_conditions(np.random.default_rng(seed), with_music)
        assert dataclasses.replace(b, noise=a.noise) == a
        if b.noise != a.noise:
            assert b.noise == "music" and a.noise not in (None, "babble")
        kinds.add(b.noise)
    assert {"music", "babble", None} <= kinds
    with pytest.raises(ValueError, match="music_share"):
        ConditionRanges(music_share=1.5)


def test_music_like_is_seeded_unit_power_and_tonal():
    x = music_like(4 * SAMPLE_RATE, np.random.default_rng(3))
    assert np.array_equal(x, music_like(4 * SAMPLE_RATE, np.random.default_rng(3)))
    assert np.sqrt(np.mean(x.astype(np.float64) ** 2)) == pytest.approx(1.0, rel=1e-5)
    power = np.abs(np.fft.rfft(x)) ** 2
    assert np.sort(power)[-50:].sum() / power.sum() > 0.2  # held partials, not a noise floor


@pytest.mark.parametrize("kind", ["white", "pink", "music", "babble"])
def test_mixing_equals_a_float64_reference_at_the_drawn_snr(kind):
    speech = _voice()
    talkers = [_voice(0.7, k + 1) for k in range(3)]
    snr, peak = 7.3, -3.0
    cond = Conditions(noise=kind, snr_db=snr, babble_talkers=3 if kind == "babble" else 0, peak_dbfs=peak, seed=11)
    out = apply_conditions(speech, cond, talkers if kind == "babble" else None)
    rng = np.random.default_rng(11)  # the draws apply_conditions makes without a room: the noise first
    if kind == "babble":
        noise = babble_noise(talkers, speech.size, rng).astype(np.float64)
    elif kind == "music":
        noise = music_like(speech.size, rng).astype(np.float64)
    else:
        noise = coloured_noise(speech.size, kind, rng).astype(np.float64)
    clean = speech.astype(np.float64)
    scaled = noise * np.sqrt(np.mean(clean**2) / (np.mean(noise**2) * 10 ** (snr / 10)))
    assert 10 * np.log10(np.mean(clean**2) / np.mean(scaled**2)) == pytest.approx(snr, abs=1e-9)
    mix = clean + scaled
    reference = mix * 10 ** (peak / 20) / np.max(np.abs(mix))
    assert out.dtype == np.float32 and out.shape == speech.shape
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-6)  # float32 rounding of the same mix
    assert np.array_equal(out, apply_conditions(speech, cond, talkers if kind == "babble" else None))


def test_the_rooms_profile_is_the_default_profile_in_rooms_and_keeps_the_words():
    rooms, base = profiles.PROFILES["neural_hibari_capture30_rooms"], profiles.PROFILES["neural_hibari_capture30"]
    assert dataclasses.replace(rooms, conditions=None, edge_silence_s=None) == base
    assert rooms.conditions.music_share > 0 and rooms.conditions.babble_talkers[0] == 1
    assert all(rooms.for_split(split).is_clean for split in ("dev", "test", "long"))
    # the same utterance seeds say the same sentences with and without the rooms (eSpeak here: the
    # conditions and padding are what the profile adds)
    corpus._init_worker()
    clean = profiles.PROFILES["clean"]
    in_rooms = dataclasses.replace(clean, conditions=rooms.conditions, edge_silence_s=rooms.edge_silence_s)
    compared = 0
    for index in range(8):
        a = corpus._short_utterance(sentence_rng(7, "train", index), "train", clean)
        b = corpus._short_utterance(sentence_rng(7, "train", index), "train", in_rooms)
        if a is None or b is None:
            continue
        assert a[0] == b[0] and isinstance(b[3], str) and "peak=" in b[3]
        compared += 1
    assert compared >= 4
