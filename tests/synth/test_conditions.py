"""Acoustic conditions of the varied synth profile: reproducible, within their ranges, words untouched."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from asr.synth import corpus, profiles
from asr.synth.conditions import (
    NOISE_COLOURS, ConditionRanges, Conditions, apply_conditions, coloured_noise, draw_conditions,
    impulse_response,
)
from asr.data.features import SAMPLE_RATE
from asr.synth.sentences import sentence_rng
from asr.synth.corpus import SynthConfig, build_synth_corpus
from asr.synth.voices import (
    HELD_OUT_VARIANTS, VARIED_EXTRA_VARIANTS, VARIED_PITCH_RANGE, VARIED_PITCH_SPAN_RANGE, VARIED_RATE_RANGE,
    VARIED_WORD_GAP_RANGE, draw_voice, split_voices,
)

RANGES = ConditionRanges()


def _tone(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    """A voiced-like test signal: a 150 Hz pulse train's harmonics with some jitter, peak 0.5."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    wave = sum(np.sin(2 * np.pi * 150 * k * t + rng.uniform(0, 6.28)) / k for k in range(1, 20))
    return (0.5 * wave / np.max(np.abs(wave))).astype(np.float32)


def _band_energy(audio: np.ndarray, low: float, high: float) -> float:
    spectrum = np.abs(np.fft.rfft(audio)) ** 2
    freqs = np.fft.rfftfreq(audio.size, 1.0 / SAMPLE_RATE)
    return float(spectrum[(freqs >= low) & (freqs < high)].sum() / spectrum.sum())


def test_draw_is_a_function_of_the_seed():
    a = [draw_conditions(np.random.default_rng(7), RANGES) for _ in range(2)]
    b = draw_conditions(np.random.default_rng(8), RANGES)
    assert a[0] == a[1]
    assert a[0] != b


def test_drawn_parameters_stay_in_their_ranges_and_every_kind_occurs():
    draws = [draw_conditions(np.random.default_rng(seed), RANGES) for seed in range(600)]
    kinds = set()
    for c in draws:
        assert RANGES.peak_dbfs[0] <= c.peak_dbfs <= RANGES.peak_dbfs[1]
        if c.rt60_s is not None:
            kinds.add("reverb")
            assert RANGES.rt60_s[0] <= c.rt60_s <= RANGES.rt60_s[1]
        if c.noise is not None:
            kinds.add(c.noise)
            assert RANGES.snr_db[0] <= c.snr_db <= RANGES.snr_db[1]
            assert c.noise == "babble" or c.noise in NOISE_COLOURS
            assert (c.noise == "babble") == (c.babble_talkers > 0)
            if c.noise == "babble":
                assert RANGES.babble_talkers[0] <= c.babble_talkers <= RANGES.babble_talkers[1]
        if c.telephone:
            kinds.add("telephone")
            assert c.lowpass_hz is None and c.highpass_hz is None
        if c.lowpass_hz is not None:
            kinds.add("band")
            assert RANGES.lowpass_hz[0] <= c.lowpass_hz <= RANGES.lowpass_hz[1]
            assert RANGES.highpass_hz[0] <= c.highpass_hz <= RANGES.highpass_hz[1]
        assert len(c.eq) <= RANGES.eq_bands[1]
        for center, gain, q in c.eq:
            kinds.add("eq")
            assert RANGES.eq_center_hz[0] <= center <= RANGES.eq_center_hz[1]
            assert RANGES.eq_gain_db[0] <= gain <= RANGES.eq_gain_db[1]
            assert RANGES.eq_q[0] <= q <= RANGES.eq_q[1]
    assert kinds == {"reverb", "babble", *NOISE_COLOURS, "telephone", "band", "eq"}
    # the probabilities hold roughly (600 draws: +-0.06 is about 3 standard deviations)
    assert abs(np.mean([c.rt60_s is not None for c in draws]) - RANGES.reverb_prob) < 0.06
    assert abs(np.mean([c.noise is not None for c in draws]) - RANGES.noise_prob) < 0.06
    clean = [c for c in draws if c.rt60_s is None and c.noise is None and not c.telephone and c.lowpass_hz is None]
    assert clean, "some utterances must stay free of room, noise and band limits"


def test_invalid_ranges_are_rejected():
    with pytest.raises(ValueError, match="reverb_prob"):
        ConditionRanges(reverb_prob=1.5)
    with pytest.raises(ValueError, match="snr_db range is empty"):
        ConditionRanges(snr_db=(30.0, 5.0))
    with pytest.raises(ValueError, match="0 dBFS"):
        ConditionRanges(peak_dbfs=(-10.0, 3.0))


def test_apply_is_deterministic_and_keeps_the_length():
    audio = _tone()
    cond = draw_conditions(np.random.default_rng(3), RANGES)
    out1, out2 = apply_conditions(audio, cond, [_tone(0.7, 1)] * 6), apply_conditions(audio, cond, [_tone(0.7, 1)] * 6)
    assert out1.shape == audio.shape and out1.dtype == np.float32
    np.testing.assert_array_equal(out1, out2)


def test_level_only_rescales_to_the_peak():
    audio = _tone()
    out = apply_conditions(audio, Conditions(peak_dbfs=-20.0))
    assert np.max(np.abs(out)) == pytest.approx(10 ** (-20 / 20), rel=1e-4)
    np.testing.assert_allclose(out / np.max(np.abs(out)), audio / np.max(np.abs(audio)), atol=1e-5)


@pytest.mark.parametrize("cond", [
    Conditions(rt60_s=0.6, drr_db=0.0, seed=1),
    Conditions(noise="pink", snr_db=10.0, seed=1),
    Conditions(noise="white", snr_db=10.0, seed=1),
    Conditions(telephone=True),
    Conditions(lowpass_hz=3000.0, highpass_hz=200.0),
    Conditions(eq=((1000.0, 10.0, 1.0),)),
], ids=["reverb", "pink", "white", "telephone", "band", "eq"])
def test_each_condition_changes_the_signal(cond):
    audio = _tone()
    out = apply_conditions(audio, dataclasses.replace(cond, peak_dbfs=-6.0))
    reference = apply_conditions(audio, Conditions(peak_dbfs=-6.0))
    assert out.shape == audio.shape
    assert np.sqrt(np.mean((out - reference) ** 2)) > 0.01


def test_noise_is_mixed_at_the_asked_snr():
    audio = _tone(2.0)
    cond = Conditions(noise="white", snr_db=10.0, seed=5, peak_dbfs=-1.0)
    out = apply_conditions(audio, cond)
    # the level step scales speech and noise alike; the speech part is found by projection on the input
    gain = float(np.dot(out, audio) / np.dot(audio, audio))
    residual = out - gain * audio
    snr = 10 * np.log10(np.mean((gain * audio) ** 2) / np.mean(residual**2))
    assert snr == pytest.approx(10.0, abs=0.5)


def test_band_limits_remove_the_band():
    audio = _tone() + 0.1 * coloured_noise(SAMPLE_RATE, "white", np.random.default_rng(0))
    before = _band_energy(audio, 5000, 8000)
    after = _band_energy(apply_conditions(audio, Conditions(lowpass_hz=3000.0, highpass_hz=100.0)), 5000, 8000)
    phone = _band_energy(apply_conditions(audio, Conditions(telephone=True)), 4000, 8000)
    assert before > 0.05
    assert after < before / 100
    assert phone < 1e-3


def test_noise_colours_have_their_slopes():
    rng = np.random.default_rng(0)
    low_share = {c: _band_energy(coloured_noise(4 * SAMPLE_RATE, c, rng), 20, 500) for c in NOISE_COLOURS}
    assert low_share["white"] < 0.1 < low_share["pink"] < low_share["brown"]
    with pytest.raises(ValueError, match="unknown noise colour"):
        coloured_noise(100, "purple", rng)


def test_impulse_response_decays_to_its_rt60():
    h = impulse_response(0.5, drr_db=0.0, rng=np.random.default_rng(0))
    assert h[0] == 1.0
    tail_energy = float(np.sum(h[1:] ** 2))
    assert tail_energy == pytest.approx(1.0, rel=1e-3)  # drr 0 dB: as much energy as the direct path
    window = int(0.05 * SAMPLE_RATE)
    early = np.mean(h[window:2 * window] ** 2)
    at_rt60 = np.mean(h[int(0.5 * SAMPLE_RATE):int(0.5 * SAMPLE_RATE) + window] ** 2)
    # 60 dB per rt60: between 0.05 s and 0.5 s the energy falls by about 54 dB
    assert 10 * np.log10(early / at_rt60) == pytest.approx(54.0, abs=6.0)


def test_babble_needs_its_talkers():
    with pytest.raises(ValueError, match="babble"):
        apply_conditions(_tone(), Conditions(noise="babble", babble_talkers=3, snr_db=10.0))


def test_varied_voices_are_train_only_and_in_range():
    import random

    assert not set(VARIED_EXTRA_VARIANTS) & set(HELD_OUT_VARIANTS)
    assert not {v for v in VARIED_EXTRA_VARIANTS if v.startswith("iven")}
    assert split_voices("test", varied=True) == split_voices("test")
    assert split_voices("dev", varied=True) == split_voices("dev")
    assert len(split_voices("train", varied=True)) > len(split_voices("train"))
    rng = random.Random(0)
    for _ in range(300):
        v = draw_voice(rng, "train", varied=True)
        assert VARIED_RATE_RANGE[0] <= v.rate <= VARIED_RATE_RANGE[1]
        assert VARIED_PITCH_RANGE[0] <= v.pitch <= VARIED_PITCH_RANGE[1]
        assert VARIED_PITCH_SPAN_RANGE[0] <= v.pitch_span <= VARIED_PITCH_SPAN_RANGE[1]
        assert VARIED_WORD_GAP_RANGE[0] <= v.word_gap <= VARIED_WORD_GAP_RANGE[1]
    assert draw_voice(random.Random(1), "test", varied=True) == draw_voice(random.Random(1), "test")


def test_espeak_pitch_span_and_word_gap_change_the_audio():
    from asr.synth.espeak import EspeakSynthesizer

    synthesizer = EspeakSynthesizer()
    text, voice = "the cat sat on the mat today", "en-us+m3"
    plain = synthesizer.synthesize(text, voice, 175, 50, seed=3)
    again = synthesizer.synthesize(text, voice, 175, 50, seed=3, pitch_span=50, word_gap=0)
    flat = synthesizer.synthesize(text, voice, 175, 50, seed=3, pitch_span=0)
    gaps = synthesizer.synthesize(text, voice, 175, 50, seed=3, word_gap=4)
    np.testing.assert_array_equal(plain, again)
    assert flat.shape != plain.shape or not np.array_equal(flat, plain)
    # six gaps of 40 ms between seven words
    assert gaps.size - plain.size > 0.15 * synthesizer.sample_rate


def test_varied_utterance_keeps_the_words_and_changes_the_sound(tmp_path):
    """Same utterance seed: the varied profile says the same sentence (the text is drawn first), differently."""
    corpus._init_worker()
    same_text = 0
    for index in range(6):
        clean = corpus._short_utterance(sentence_rng(5, "train", index), "train", profiles.PROFILES["clean"])
        varied = corpus._short_utterance(sentence_rng(5, "train", index), "train", profiles.PROFILES["varied"])
        if clean is None or varied is None:
            continue  # a draw outside the duration bounds is retried with the next attempt's seed
        assert varied[0] == clean[0]
        assert clean[3] is None and isinstance(varied[3], str) and "peak=" in varied[3]
        assert varied[2].dtype == np.int16
        same_text += 1
    assert same_text >= 3
    # every profile leaves the evaluation splits clean; only train takes it
    for name, profile in profiles.PROFILES.items():
        assert profile.for_split("train") is profile
        assert all(profile.for_split(split).is_clean for split in ("dev", "test", "long"))
        assert profile.is_clean == (name == "clean")
    written = {}
    for name in ("clean", "varied"):
        (tmp_path / name / "audio" / "dev").mkdir(parents=True)
        meta = corpus._make_copies((5, "dev", 0, str(tmp_path / name), name))[0]
        assert meta.conditions is None and meta.pitch_span == 50 and meta.word_gap == 0
        written[name] = (tmp_path / name / meta.audio_path).read_bytes()
    assert written["varied"] == written["clean"]
    (tmp_path / "varied" / "audio" / "train").mkdir()
    train = corpus._make_copies((5, "train", 0, str(tmp_path / "varied"), "varied"))[0]
    assert train.conditions is not None and "peak=" in train.conditions


def test_varied_corpus_is_reproducible_and_records_its_conditions(tmp_path):
    small = dict(train_hours=0.003, dev_hours=0.0, test_hours=0.0, long_hours=0.0)
    quiet = dict(log=lambda *_: None)
    a, b = tmp_path / "a", tmp_path / "b"
    build_synth_corpus(SynthConfig(str(a), seed=4, workers=1, profile="varied", **small), **quiet)
    build_synth_corpus(SynthConfig(str(b), seed=4, workers=2, profile="varied", **small), **quiet)
    files_a = sorted(p.relative_to(a) for p in a.rglob("*.flac"))
    assert files_a and files_a == sorted(p.relative_to(b) for p in b.rglob("*.flac"))
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes()
    from asr.data.manifest import read_cuts

    cuts = list(read_cuts(a / "cuts_train.jsonl.gz"))
    assert all("conditions" in c.custom and "word_gap" in c.custom for c in cuts)
    assert corpus.corpus_profile(a) == "varied"
    # the voices profile: the same sentences by the widened voices, with no acoustic conditions
    voices = tmp_path / "voices"
    build_synth_corpus(SynthConfig(str(voices), seed=4, workers=1, profile="voices", **small), **quiet)
    voice_cuts = list(read_cuts(voices / "cuts_train.jsonl.gz"))
    assert voice_cuts and all(c.custom["conditions"] == "none" for c in voice_cuts)
    assert [c.supervisions[0].text for c in voice_cuts][:3] == [c.supervisions[0].text for c in cuts][:3]
    # asking for the other profile rebuilds the train split
    logs = []
    build_synth_corpus(SynthConfig(str(a), seed=4, workers=1, profile="clean", **small), log=logs.append)
    assert any("rebuilding" in line for line in logs)
    assert corpus.corpus_profile(a) == "clean"
    assert not any("conditions" in c.custom for c in read_cuts(a / "cuts_train.jsonl.gz"))


def test_unknown_profile_is_rejected():
    with pytest.raises(ValueError, match="unknown synth profile"):
        SynthConfig("unused", profile="noisy")


def test_edge_silence_pads_both_ends_within_the_split_bounds():
    corpus._init_worker()
    padded_profile = profiles.SynthProfile(varied_voices=False, conditions=None, edge_silence_s=(0.3, 0.3))
    checked = 0
    for index in range(6):
        plain = corpus._short_utterance(sentence_rng(9, "train", index), "train", profiles.PROFILES["clean"])
        padded = corpus._short_utterance(sentence_rng(9, "train", index), "train", padded_profile)
        if plain is None:
            continue
        pad = int(0.3 * SAMPLE_RATE)
        assert padded[0] == plain[0]
        assert padded[2].size == plain[2].size + 2 * pad
        peak = np.max(np.abs(plain[2].astype(np.float64)))
        edges = np.concatenate([padded[2][:pad], padded[2][-pad:]]).astype(np.float64)
        # the edges hold only the floor: at least 45 dB below the speech peak (rms), and not digital zeros
        # unless the floor is below one int16 step
        assert 20 * np.log10(max(np.sqrt(np.mean(edges**2)), 1e-9) / peak) <= -44.0
        middle = padded[2][pad:-pad].astype(np.float64)
        assert np.sqrt(np.mean((middle - plain[2]) ** 2)) <= peak * 10 ** (-44.0 / 20) + 1.0
        checked += 1
    assert checked >= 3
    # a floor well above one int16 step is really there (not zeros)
    loud_floor = profiles.SynthProfile(varied_voices=False, conditions=None, edge_silence_s=(0.3, 0.3),
                                    noise_floor_db=(-40.0, -40.0))
    result = next(r for r in (corpus._short_utterance(sentence_rng(9, "train", i), "train", loud_floor)
                              for i in range(6)) if r is not None)
    edge = result[2][: int(0.3 * SAMPLE_RATE)].astype(np.float64)
    assert np.count_nonzero(edge) > 0.9 * edge.size
    # never past the split's longest duration: a 9.8 s utterance gets at most 0.1 s each side
    huge = profiles.SynthProfile(varied_voices=False, conditions=None, edge_silence_s=(5.0, 5.0))
    for index in range(4):
        result = corpus._short_utterance(sentence_rng(9, "train", index), "train", huge)
        if result is not None:
            assert result[2].size / SAMPLE_RATE <= corpus.DURATION_BOUNDS["train"][1] + 1e-3
