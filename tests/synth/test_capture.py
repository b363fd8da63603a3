"""Capture paths (asr/synth/capture.py): each family does what it says, draws stay in range, splits are reproducible."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from asr.data.dataset import cut_text
from asr.data.features import SAMPLE_RATE
from asr.data.manifest import read_cuts
from asr.synth.capture import (
    CAPTURE_FILE, EVAL_RANGES, FAMILIES, TRAIN_RANGES, Capture, CaptureRanges, apply_capture, build_capture_split,
    capture_file, draw_capture,
)


def tone(freq: float, seconds: float = 1.0, level: float = 0.3) -> np.ndarray:
    return (level * np.sin(2 * np.pi * freq * np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE)).astype(np.float32)


def band_power_db(x: np.ndarray, low: float, high: float) -> float:
    spectrum = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(x.size, 1.0 / SAMPLE_RATE)
    return float(10 * np.log10(spectrum[(freqs >= low) & (freqs < high)].sum() + 1e-20))


def frame_energy_db(x: np.ndarray, hop: int = 320) -> np.ndarray:
    frames = x[: x.size // hop * hop].reshape(-1, hop)
    return 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-10)


def speechlike(seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """Harmonics of 120 Hz under a syllable-rate envelope, with pauses: enough structure for every path."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    voiced = sum(np.sin(2 * np.pi * 120 * k * t) / k for k in range(1, 30))
    envelope = np.clip(np.sin(2 * np.pi * 2.5 * t), 0, None) ** 2
    noise = np.random.default_rng(seed).standard_normal(t.size) * 0.02
    x = (voiced * envelope + noise * envelope) * 0.2
    return (x / np.abs(x).max() * 0.5).astype(np.float32)


def only(family: str, ranges: CaptureRanges = EVAL_RANGES) -> CaptureRanges:
    return dataclasses.replace(ranges, families=(family,))


@pytest.mark.parametrize("ranges", [EVAL_RANGES, TRAIN_RANGES], ids=["eval", "train"])
def test_draws_are_reproducible_in_range_and_reach_every_family(ranges):
    draws = [draw_capture(np.random.default_rng(i), ranges) for i in range(400)]
    assert draws == [draw_capture(np.random.default_rng(i), ranges) for i in range(400)]
    assert {d.family for d in draws} == set(ranges.families)
    for d in draws:
        p = dict(d.params)
        checks = {"rate": lambda v: v in ranges.rates, "target": lambda v: ranges.agc_target_dbfs[0] <= v <= ranges.agc_target_dbfs[1],
                  "max_gain": lambda v: ranges.agc_max_gain_db[0] <= v <= ranges.agc_max_gain_db[1],
                  "snr": lambda v: ranges.noise_snr_db[0] <= v <= ranges.noise_snr_db[1],
                  "alpha": lambda v: ranges.oversubtraction[0] <= v <= ranges.oversubtraction[1],
                  "law": lambda v: v in ranges.telephone_laws, "codec": lambda v: v in ranges.codecs,
                  "compression": lambda v: ranges.codec_compression[0] <= v <= ranges.codec_compression[1],
                  "drive": lambda v: ranges.clip_drive_db[0] <= v <= ranges.clip_drive_db[1],
                  "noise": lambda v: v in ranges.noise_colours}
        for name, ok in checks.items():
            if name in p:
                assert ok(p[name]), (d, name)


def test_training_side_parameters_differ_from_the_evaluation_split():
    """The same families, other settings: the evaluation split's rates, codec, law and noises are never trained on."""
    assert set(TRAIN_RANGES.families) == set(EVAL_RANGES.families)
    assert not set(TRAIN_RANGES.rates) & set(EVAL_RANGES.rates)
    assert not set(TRAIN_RANGES.codecs) & set(EVAL_RANGES.codecs)
    assert not set(TRAIN_RANGES.telephone_laws) & set(EVAL_RANGES.telephone_laws)
    assert not set(TRAIN_RANGES.noise_colours) & set(EVAL_RANGES.noise_colours)
    for name in ("agc_target_dbfs", "agc_max_gain_db", "noise_snr_db", "oversubtraction", "spectral_floor",
                 "clip_drive_db"):
        train, evaluation = getattr(TRAIN_RANGES, name), getattr(EVAL_RANGES, name)
        assert train[1] < evaluation[0] or evaluation[1] < train[0], name


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("ranges", [EVAL_RANGES, TRAIN_RANGES], ids=["eval", "train"])
def test_every_path_keeps_the_length_and_the_signal_and_is_deterministic(family, ranges):
    x = speechlike()
    capture = draw_capture(np.random.default_rng(7), only(family, ranges))
    y = apply_capture(x, capture)
    assert y.dtype == np.float32 and y.shape == x.shape and np.all(np.isfinite(y)) and np.abs(y).max() <= 1.0
    np.testing.assert_array_equal(y, apply_capture(x, capture))
    assert not np.array_equal(y, x)
    # still the same utterance underneath: its 20 ms energy contour follows the input's
    assert np.corrcoef(frame_energy_db(x), frame_energy_db(y))[0, 1] > 0.8, capture.describe()


def test_anti_aliasing_keeps_out_what_the_aliased_round_trip_folds_in():
    """A 3 kHz tone through 44.1 kHz: with the low-pass nothing new appears elsewhere; without it images fold in."""
    x = tone(3000.0)
    clean = dict(rate=44100, floor=-120.0)
    proper = apply_capture(x, Capture("resample", tuple(clean.items())))
    aliased = apply_capture(x, Capture("resample_aliased", tuple({**clean, "phase": 0.3}.items())))
    def elsewhere_db(y):  # power away from the tone, relative to the tone's
        y = y[2000:-2000]
        away = 10 ** (band_power_db(y, 0, 2900) / 10) + 10 ** (band_power_db(y, 3100, 8001) / 10)
        return 10 * np.log10(away) - band_power_db(y, 2900, 3100)

    assert elsewhere_db(proper) < -60
    assert elsewhere_db(aliased) > -30


def test_agc_rides_a_quiet_utterance_up_to_its_target_within_its_ceiling():
    x = speechlike() * 10 ** (-30 / 20)  # peak -36 dBFS
    params = dict(target=-18.0, attack=10.0, release=200.0, max_gain=30.0, floor=-120.0)
    y = apply_capture(x, Capture("agc", tuple(params.items())))
    loud = slice(SAMPLE_RATE // 2, SAMPLE_RATE)
    gain_db = 10 * np.log10(np.mean(y[loud] ** 2) / np.mean(x[loud] ** 2))
    assert 12.0 < gain_db <= 30.0 + 1e-6
    capped = apply_capture(x, Capture("agc", tuple({**params, "max_gain": 6.0}.items())))
    assert 10 * np.log10(np.mean(capped[loud] ** 2) / np.mean(x[loud] ** 2)) <= 6.0 + 1e-6


def test_denoise_removes_most_of_the_noise_where_there_is_no_speech():
    x = np.concatenate([tone(500.0, 1.0), np.zeros(SAMPLE_RATE, dtype=np.float32)])
    params = dict(noise="pink", snr=10.0, alpha=2.5, beta=0.01)
    y = apply_capture(x, Capture("denoise", tuple(params.items()), seed=3))
    # the same noise without suppression (no subtraction, floor 1) for comparison
    noisy = apply_capture(x, Capture("denoise", tuple({**params, "alpha": 0.0, "beta": 1.0}.items()), seed=3))
    quiet = slice(int(1.2 * SAMPLE_RATE), int(1.8 * SAMPLE_RATE))
    assert np.mean(y[quiet] ** 2) < np.mean(noisy[quiet] ** 2) / 10
    assert np.corrcoef(y[: SAMPLE_RATE], x[: SAMPLE_RATE])[0, 1] > 0.8


@pytest.mark.parametrize("law", ["mu", "a"])
def test_telephone_keeps_only_its_band(law):
    x = tone(1000.0) + tone(6000.0) + tone(100.0)
    y = apply_capture(x, Capture("telephone", (("law", law), ("low", 300.0), ("high", 3400.0))))
    inner = y[2000:-2000]
    assert band_power_db(inner, 900, 1100) > band_power_db(inner, 5800, 6200) + 40
    assert band_power_db(inner, 900, 1100) > band_power_db(inner, 80, 120) + 15


@pytest.mark.parametrize("codec", ["mp3", "vorbis", "opus"])
def test_codecs_round_trip_through_libsndfile(codec):
    x = speechlike()
    y = apply_capture(x, Capture("codec", (("codec", codec), ("compression", 0.8))))
    error_db = 10 * np.log10(np.sum((y - x) ** 2) / np.sum(x**2))
    assert -40.0 < error_db < -3.0, error_db  # lossy, yet the same signal (no delay left in)


def test_clipping_hard_and_soft():
    x = speechlike()
    hard = apply_capture(x, Capture("clip", (("drive", 12.0), ("soft", 0))))
    soft = apply_capture(x, Capture("clip", (("drive", 12.0), ("soft", 1))))
    assert np.abs(hard).max() == 1.0 and np.mean(np.abs(hard) == 1.0) > 0.01
    assert np.abs(soft).max() < 1.0 and np.mean(np.abs(soft) == 1.0) == 0.0


def test_ranges_refuse_bad_settings():
    with pytest.raises(ValueError, match="families"):
        CaptureRanges(families=("reverb",))
    with pytest.raises(ValueError, match="rates"):
        CaptureRanges(rates=(8000,))
    with pytest.raises(ValueError, match="codec_compression"):
        CaptureRanges(codec_compression=(0.5, 1.0))
    with pytest.raises(ValueError, match="empty"):
        CaptureRanges(noise_snr_db=(20.0, 10.0))
    with pytest.raises(ValueError, match="unknown capture family"):
        apply_capture(speechlike(), Capture("reverb"))


def _copy_corpus(tiny_corpus, tmp_path):
    out = tmp_path / "corpus"
    out.mkdir()
    for name in ("cuts_test.jsonl.gz", "cuts_dev.jsonl.gz"):
        shutil.copy(tiny_corpus / name, out / name)
    shutil.copytree(tiny_corpus / "audio", out / "audio")
    return out


def test_capture_split_keeps_every_transcript_and_is_a_function_of_the_seed(tiny_corpus, tmp_path):
    out = _copy_corpus(tiny_corpus, tmp_path)
    source = list(read_cuts(out / "cuts_test.jsonl.gz", out))
    first = build_capture_split(out, "test", seed=0)
    written = list(read_cuts(out / CAPTURE_FILE, out))
    assert [c.id for c in written] == [f"capture-{c.id}" for c in source]
    assert [cut_text(c) for c in written] == [cut_text(c) for c in source]
    assert all(c.custom["source_cut"] == s.id and c.custom["capture"].startswith(c.custom["family"])
               for c, s in zip(written, source))
    assert sum(first.families.values()) == len(source) and not first.skipped
    audio = [c.load_audio()[0] for c in written]
    assert all(a.shape == s.load_audio()[0].shape for a, s in zip(audio, source))
    build_capture_split(out, "test", seed=0)
    assert all(np.array_equal(a, c.load_audio()[0]) for a, c in zip(audio, read_cuts(out / CAPTURE_FILE, out)))
    other = build_capture_split(out, "test", seed=1)
    assert [c.custom["capture"] for c in other.cuts] != [c.custom["capture"] for c in written]
    dev = build_capture_split(out, "dev", seed=0)
    assert (out / capture_file("dev")).is_file() and capture_file("dev") == "cuts_capture_dev.jsonl.gz"
    assert len(dev.cuts) == len(list(read_cuts(out / "cuts_dev.jsonl.gz", out)))


# ---- the training side: capture paths baked into a profile's train split ---------------------


def test_a_capture_profile_changes_only_the_audio_of_its_share(monkeypatch):
    """Same sentence, voice and pre-capture audio as the profile without capture (its draws come last);
    about capture_share of the utterances changed, each described with parameters from TRAIN_RANGES;
    the same seed gives the same bytes."""
    from asr.synth import corpus, profiles
    from asr.synth.sentences import sentence_rng

    corpus._init_worker()
    plain = profiles.PROFILES["padded"]
    captured = dataclasses.replace(plain, capture=TRAIN_RANGES, capture_share=0.5)
    changed = 0
    for index in range(16):
        base = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", plain)
        with_capture = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", captured)
        again = corpus._short_utterance(sentence_rng(0, "train", index, 0), "train", captured)
        if base is None:
            assert with_capture is None
            continue
        assert with_capture[0] == base[0] and with_capture[1] == base[1]  # transcript and voice untouched
        assert with_capture[2].shape == base[2].shape and np.array_equal(with_capture[2], again[2])
        if with_capture[3] is None:
            assert np.array_equal(with_capture[2], base[2])
            continue
        changed += 1
        family = with_capture[3].split("(")[0]
        assert family in TRAIN_RANGES.families and not np.array_equal(with_capture[2], base[2])
    assert 3 <= changed <= 13


def test_capture_share_needs_capture_ranges():
    from asr.synth.corpus import SynthProfile

    with pytest.raises(ValueError, match="capture_share"):
        SynthProfile(varied_voices=False, conditions=None, capture_share=0.3)
    with pytest.raises(ValueError, match="capture_share"):
        SynthProfile(varied_voices=False, conditions=None, capture=TRAIN_RANGES, capture_share=1.5)
    assert not SynthProfile(varied_voices=False, conditions=None, capture=TRAIN_RANGES, capture_share=0.3).is_clean
