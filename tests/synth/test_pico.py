"""SVOX Pico as the second training engine: drawn speakers in range, deterministic audio, formant scaling."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from asr.synth import corpus, pico, profiles
from asr.synth.formants import RESAMPLE_STEP_HZ, draw_scale_rate, scale_frequencies
from asr.data.features import SAMPLE_RATE
from asr.synth.pico import (
    FORMANT_SCALE_RANGE, PICO_LANGUAGES, PITCH_PERCENT_RANGE, RATE_PERCENT_RANGE, PicoVoice,
    draw_pico_voice,
)
from asr.synth.sentences import sentence_rng

pytest.importorskip("ttspico", reason="SVOX Pico (pip install ttspico) is what these tests exercise")

TEXT = "we moved to cairo in twenty twelve"


@pytest.fixture(scope="module")
def engine() -> pico.PicoSynthesizer:
    return pico.PicoSynthesizer()


def _spectral_centroid(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(audio.size, 1.0 / SAMPLE_RATE)
    return float((spectrum * freqs).sum() / spectrum.sum())


def test_drawn_voices_are_a_function_of_the_seed_and_in_range():
    assert [draw_pico_voice(random.Random(7)) for _ in range(3)] == [draw_pico_voice(random.Random(7))] * 3
    voices = [draw_pico_voice(random.Random(seed)) for seed in range(400)]
    # the scale is drawn in FORMANT_SCALE_RANGE and rounded onto the RESAMPLE_STEP_HZ grid of rates
    lowest = SAMPLE_RATE / (round(SAMPLE_RATE / FORMANT_SCALE_RANGE[0] / RESAMPLE_STEP_HZ) * RESAMPLE_STEP_HZ)
    highest = SAMPLE_RATE / (round(SAMPLE_RATE / FORMANT_SCALE_RANGE[1] / RESAMPLE_STEP_HZ) * RESAMPLE_STEP_HZ)
    for v in voices:
        assert v.language in PICO_LANGUAGES
        assert PITCH_PERCENT_RANGE[0] <= v.pitch <= PITCH_PERCENT_RANGE[1]
        assert RATE_PERCENT_RANGE[0] <= v.rate <= RATE_PERCENT_RANGE[1]
        assert v.resample_hz % RESAMPLE_STEP_HZ == 0
        assert lowest <= v.formant_scale <= highest
        assert v.name == f"pico-{v.language}@{v.formant_scale:.2f}"
    assert {v.language for v in voices} == set(PICO_LANGUAGES)
    scales = [v.formant_scale for v in voices]
    assert min(scales) < 0.82 and max(scales) > 1.0  # the whole range is used, men's tracts and shorter ones


def test_same_text_and_voice_give_the_same_samples(engine):
    voice = PicoVoice("en-GB", pitch=80, rate=110, resample_hz=19200)
    first = engine.synthesize(TEXT, voice)
    engine.synthesize("something else in between", PicoVoice("en-US", 130, 80, 15600))
    again = engine.synthesize(TEXT, voice)
    assert first.dtype == np.int16 and first.size > SAMPLE_RATE
    np.testing.assert_array_equal(first, again)


def test_formant_scale_stretches_time_and_lowers_every_frequency(engine):
    plain = engine.synthesize(TEXT, PicoVoice("en-US", 100, 100, SAMPLE_RATE))
    lowered = engine.synthesize(TEXT, PicoVoice("en-US", 100, 100, 20000))  # scale 0.8
    assert lowered.size == pytest.approx(plain.size / 0.8, rel=0.01)
    assert _spectral_centroid(lowered) / _spectral_centroid(plain) == pytest.approx(0.8, rel=0.05)
    assert np.abs(lowered).max() < 32767  # the volume setting leaves headroom


def test_unknown_language_is_rejected(engine):
    with pytest.raises(ValueError, match="no Pico voice 'de-DE'"):
        engine.synthesize(TEXT, PicoVoice("de-DE", 100, 100, SAMPLE_RATE))


def test_rate_setting_changes_the_duration(engine):
    slow = engine.synthesize(TEXT, PicoVoice("en-GB", 100, RATE_PERCENT_RANGE[0], SAMPLE_RATE))
    fast = engine.synthesize(TEXT, PicoVoice("en-GB", 100, RATE_PERCENT_RANGE[1], SAMPLE_RATE))
    assert fast.size < 0.8 * slow.size


def test_pico_profile_mixes_both_engines_in_train_only(train_speakers):
    speakers = train_speakers("pico", 120)
    share = sum(s.startswith("pico-") for s in speakers) / len(speakers)
    assert 0.25 < share < 0.55, share  # 0.4 asked; 120 draws
    # the same index gives the same utterance: text, speaker and samples
    profile = profiles.PROFILES["pico"]
    a = corpus._short_utterance(sentence_rng(0, "train", 3, 0), "train", profile)
    b = corpus._short_utterance(sentence_rng(0, "train", 3, 0), "train", profile)
    assert a[0] == b[0] and a[1] == b[1]
    np.testing.assert_array_equal(a[2], b[2])


def test_clean_profile_draws_are_untouched_by_the_pico_option():
    """Profiles without a Pico share draw nothing for it: their corpora stay as they were."""
    corpus._init_worker()
    clean = corpus._short_utterance(sentence_rng(0, "train", 5, 0), "train", profiles.CLEAN_PROFILE)
    rng = sentence_rng(0, "train", 5, 0)
    text = corpus._GEN(rng)
    voice = corpus.draw_voice(rng, "train", False)
    assert (clean[0], clean[1]) == (text, voice)


def test_scale_frequencies_moves_a_tone_and_stretches_time():
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    tone = (8000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
    for resample_hz, scale in ((20000, 0.8), (SAMPLE_RATE, 1.0), (14000, 16000 / 14000)):
        out = scale_frequencies(tone, resample_hz)
        assert out.dtype == np.int16 and out.size == pytest.approx(tone.size / scale, abs=2)
        peak_hz = np.fft.rfftfreq(out.size, 1.0 / SAMPLE_RATE)[np.argmax(np.abs(np.fft.rfft(out)))]
        assert peak_hz == pytest.approx(1000 * scale, abs=2)


def test_draw_scale_rate_is_on_the_grid_and_covers_the_range():
    rng = random.Random(3)
    rates = [draw_scale_rate(rng, (0.85, 1.15)) for _ in range(300)]
    assert all(r % RESAMPLE_STEP_HZ == 0 for r in rates)
    scales = [SAMPLE_RATE / r for r in rates]
    assert min(scales) < 0.87 and max(scales) > 1.12
    assert all(0.84 < s < 1.17 for s in scales)  # the range, give or take the 400 Hz grid


def test_espeak_formant_scale_changes_the_sound_not_the_words():
    corpus._init_worker()
    scaled = profiles.PROFILES["pico_scaled"]
    plain = dataclasses.replace(scaled, espeak_formant_scale=None)
    assert plain == profiles.PROFILES["pico"] and not scaled.is_clean and scaled.for_split("dev").is_clean
    checked = 0
    for index in range(12):
        a = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", scaled)
        b = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", plain)
        if a is None or b is None or a[1].voice.startswith("pico-"):
            continue
        assert a[0] == b[0]  # same sentence
        base, _, scale = a[1].voice.partition("@")
        assert base == b[1].voice and 0.84 < float(scale) < 1.17
        assert a[2].size == pytest.approx(b[2].size / float(scale), rel=0.01)
        checked += 1
    assert checked >= 4
