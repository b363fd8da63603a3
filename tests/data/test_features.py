import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from asr.data import features
from asr.data.fbank_reference import reference_fbank
from asr.data.features import (
    LEGACY, PRESETS, SHERPA, FbankExtractor, FbankStream, FeatureConfig, load_feature_config, noise_floor_log_mel,
    samples_for_frames, training_backend,
)

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

CONFIGS = [LEGACY, SHERPA, FeatureConfig(num_mel_bins=40, frame_length_ms=20.0, window_type="hamming",
                                         preemphasis=0.0, remove_dc_offset=False, low_freq=60.0, high_freq=7000.0),
           FeatureConfig(snip_edges=False, high_freq=-400.0, window_type="blackman", mel_banks="librosa")]
IDS = ["legacy", "sherpa", "other", "librosa"]


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
@pytest.mark.parametrize("backend", ["knf", "torchaudio"])
@pytest.mark.parametrize("n", [0, 399, 400, 559, 560, 16000, 16123])
def test_num_frames_matches_output(config, backend, n):
    if backend == "torchaudio" and not config.torchaudio_can:
        pytest.skip("torchaudio's Kaldi fbank has no librosa mel banks or periodic Hann window")
    fb = FbankExtractor(config, backend)
    feats = fb(torch.randn(n) * 0.1)
    assert feats.shape == (fb.num_frames(n), config.num_mel_bins) and feats.dtype == torch.float32


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_min_samples_is_the_first_frame(config):
    fb = FbankExtractor(config)
    assert fb.num_frames(fb.min_samples) >= 1 and fb.num_frames(fb.min_samples - 1) == 0


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_every_backend_equals_the_float64_reference(config):
    """kaldi-native-fbank (float32) and the training frontend against the float64 reference."""
    wave = 0.1 * torch.randn(20000, generator=torch.Generator().manual_seed(0))
    wave[:3000] = 0.0  # digital silence: the log floor
    reference = reference_fbank(wave, config)
    fast = FbankExtractor(config)(wave)
    assert fast.shape == reference.shape
    assert (fast.double() - reference).abs().max() < 1e-3
    training = FbankExtractor(config, training_backend(config))(wave)
    assert (training.double() - reference).abs().max() < 1e-3
    if config.torchaudio_can:  # torchaudio in float64 is the reference too
        assert (FbankExtractor(config, "torchaudio")(wave.double()) - reference).abs().max() < 1e-6


def test_the_options_change_the_frames():
    wave = 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(1))
    legacy, sherpa = FbankExtractor(LEGACY)(wave), FbankExtractor(SHERPA)(wave)
    assert legacy.shape == (48, 80) and sherpa.shape == (50, 80)
    # sample_scale 1 vs 32768: log-mel moves by 2 log(32768) where the energy floor is not hit
    int16 = FbankExtractor(FeatureConfig(**{**SHERPA.to_dict(), "sample_scale": 32768.0}))(wave)
    assert torch.allclose(int16 - sherpa, torch.full_like(sherpa, 2 * torch.log(torch.tensor(32768.0)).item()),
                          atol=1e-3)
    with pytest.raises(ValueError, match="librosa"):
        FbankExtractor(SHERPA, "torchaudio")


@pytest.mark.parametrize("config", [LEGACY, SHERPA], ids=["legacy", "sherpa"])
def test_stream_in_pieces_is_the_whole_utterance(config):
    wave = 0.1 * torch.randn(9000, generator=torch.Generator().manual_seed(2))
    stream = FbankStream(config)
    parts = [stream.accept(wave[i : i + 700]) for i in range(0, 9000, 700)] + [stream.finish()]
    assert torch.equal(torch.cat(parts), FbankExtractor(config)(wave))
    assert stream.samples_seen == 9000


@pytest.mark.parametrize("config", [LEGACY, SHERPA], ids=["legacy", "sherpa"])
def test_a_long_waveform_is_extracted_in_pieces_as_in_one(config, monkeypatch):
    wave = 0.1 * torch.randn(9000, generator=torch.Generator().manual_seed(4))
    stream = FbankStream(config)
    whole = torch.cat([stream.accept(wave), stream.finish()])
    monkeypatch.setattr(features, "EXTRACT_PIECE", 1000)  # nine pieces, the last frames at the end
    assert torch.equal(FbankExtractor(config)(wave), whole)


@pytest.mark.parametrize("backend", ["knf", "torchaudio"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_samples_are_refused_in_one_line_and_a_stream_goes_on(backend, bad):
    wave = 0.1 * torch.randn(4000, generator=torch.Generator().manual_seed(3))
    broken = wave.clone()
    broken[3000] = bad
    with pytest.raises(ValueError, match=r"1 non-finite samples \(NaN or inf\) of 4000"):
        FbankExtractor(LEGACY, backend)(broken)
    stream = FbankStream(LEGACY)
    head = stream.accept(wave[:2000])
    with pytest.raises(ValueError, match="non-finite"):
        stream.accept(broken[2000:])  # refused before kaldi-native-fbank sees it: the stream is intact
    rest = [stream.accept(wave[2000:]), stream.finish()]
    assert torch.equal(torch.cat([head, *rest]), FbankExtractor(LEGACY)(wave))


@pytest.mark.parametrize("config", [LEGACY, SHERPA], ids=["legacy", "sherpa"])
@pytest.mark.parametrize("frames", [1, 2, 3, 17])
def test_samples_for_frames_is_when_a_stream_has_them(config, frames):
    n = samples_for_frames(config, frames)
    assert FbankStream(config).accept(torch.zeros(n)).size(0) == frames
    assert FbankStream(config).accept(torch.zeros(n - 1)).size(0) == frames - 1


def test_config_round_trips_and_names_differences():
    assert FeatureConfig.from_dict(SHERPA.to_dict()) == SHERPA
    assert FeatureConfig.from_dict(None) == LEGACY
    assert LEGACY.differences(SHERPA) == {
        "snip_edges": (True, False), "low_freq": (20.0, 0.0), "window_type": ("povey", "hann"),
        "remove_dc_offset": (True, False), "sample_scale": (32768.0, 1.0), "mel_banks": ("kaldi", "librosa")}
    with pytest.raises(ValueError, match=r"unknown keys \['snip'\]; valid keys are \['num_mel_bins'"):
        FeatureConfig.from_dict({"snip": False})


@pytest.mark.parametrize("bad,match", [
    ({"num_mel_bins": 0}, "num_mel_bins"),
    ({"frame_length_ms": 5.0}, "frame_length_ms"),
    ({"low_freq": 9000.0}, "low_freq"),
    ({"high_freq": -8000.0}, "high_freq"),
    ({"window_type": "kaiser"}, "kaiser"),
    ({"preemphasis": 1.5}, "preemphasis"),
    ({"dither": -1.0}, "dither"),
    ({"sample_scale": 0.0}, "sample_scale"),
    ({"mel_banks": "htk"}, "mel_banks"),
    ({"noise_floor_dbfs": 0.0}, "noise_floor_dbfs"),
    ({"noise_floor_dbfs": -200.0}, "noise_floor_dbfs"),
])
def test_bad_options_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        FeatureConfig(**bad)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"\(2, 100\)"):
        FbankExtractor()(torch.zeros(2, 100))
    with pytest.raises(ValueError, match="backend"):
        FbankExtractor(backend="librosa")
    with pytest.raises(ValueError, match="neither a preset"):
        load_feature_config("nope")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_the_config_group(name, tmp_path):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"features={name}"])
    assert FeatureConfig.from_dict(cfg.features) == PRESETS[name] == load_feature_config(name)
    path = tmp_path / "f.yaml"
    path.write_text("snip_edges: false\nnum_mel_bins: 40\n")
    assert load_feature_config(str(path)) == FeatureConfig(snip_edges=False, num_mel_bins=40)


# ---- the noise floor (digital silence, issue 38) ------------------------------------------------

# sherpa's samples stay in [-1, 1], so its log(eps) clamp already acts like a floor near -70 dBFS: -60 dBFS is
# the level where most of its bins are measurably above the clamp (58 of 80; none at -80 dBFS)
FLOORED = [dataclasses.replace(LEGACY, noise_floor_dbfs=-90.0), dataclasses.replace(SHERPA, noise_floor_dbfs=-60.0)]


@pytest.mark.parametrize("config", FLOORED, ids=["legacy", "sherpa"])
def test_digital_silence_gives_the_floor_and_the_floor_is_white_noise_at_that_level(config):
    floor = noise_floor_log_mel(config)
    assert floor.shape == (config.num_mel_bins,) and floor.dtype == torch.float64
    # exact zeros: log(eps) from the fbank's own clamp, plus the floor (the floor wins unless it is below eps,
    # as in sherpa's low bins where samples stay in [-1, 1])
    expected = torch.logaddexp(torch.tensor(float(np.log(np.finfo(np.float32).eps)), dtype=torch.float64), floor)
    for backend in ("knf", "torchaudio") if config.torchaudio_can else ("knf",):
        silent = FbankExtractor(config, backend=backend)(torch.zeros(8000, dtype=torch.float64))
        torch.testing.assert_close(silent, expected.to(silent.dtype).expand_as(silent), atol=1e-4, rtol=0)
    # the mean log-mel of another draw of white noise at the level (without the floor) is within 0.15 nats
    noise = torch.from_numpy(np.random.default_rng(9).standard_normal(160000) * 10 ** (config.noise_floor_dbfs / 20))
    plain = dataclasses.replace(config, noise_floor_dbfs=None)
    measured = FbankExtractor(plain, backend=training_backend(plain))(noise).mean(0)
    above_eps = floor > float(np.log(np.finfo(np.float32).eps)) + 1.0  # measurable: the fbank clamps below eps
    assert above_eps.sum() >= 20 and (measured - floor)[above_eps].abs().max() < 0.15
    # 20 dB more noise: 20 dB more floor, in every bin
    louder = noise_floor_log_mel(dataclasses.replace(config, noise_floor_dbfs=config.noise_floor_dbfs + 20))
    torch.testing.assert_close(louder - floor, torch.full_like(floor, 2 * np.log(10.0)))


@pytest.mark.parametrize("config", FLOORED, ids=["legacy", "sherpa"])
def test_the_floor_leaves_speech_alone_and_streams_as_it_computes_whole(config):
    g = torch.Generator().manual_seed(0)
    loud = 0.1 * torch.randn(16000, generator=g)
    wave = torch.cat([torch.zeros(4000), loud, torch.zeros(3000)])
    plain = dataclasses.replace(config, noise_floor_dbfs=None)
    floored, raw = FbankExtractor(config)(wave), FbankExtractor(plain)(wave)
    speech = slice(30, 120)
    # -20 dBFS white speech: a floor 70 dB below adds < 1e-3 nats; 40 dB below (sherpa's -60) adds ~1e-4 on
    # average, more in the low mel bins, which sum few FFT bins of the noise (their power swings frame to frame)
    tolerance = 1e-3 if config.noise_floor_dbfs <= -90 else 0.05
    assert (floored[speech] - raw[speech]).abs().max() < tolerance
    assert raw[:5].max() < -15 and floored[:5].min() > noise_floor_log_mel(config).min() - 1e-3
    stream = FbankStream(config)
    pieces = [stream.accept(wave[i : i + 731]) for i in range(0, wave.numel(), 731)] + [stream.finish()]
    torch.testing.assert_close(torch.cat(pieces), floored, atol=0, rtol=0)
    if config.torchaudio_can:
        torch.testing.assert_close(FbankExtractor(config, backend="torchaudio")(wave.double()).float(), floored,
                                   atol=5e-4, rtol=0)


def test_the_floor_is_off_by_default_and_in_the_config_group():
    assert LEGACY.noise_floor_dbfs is None and noise_floor_log_mel(LEGACY) is None
    assert FeatureConfig.from_dict({"noise_floor_dbfs": -90}).noise_floor_dbfs == -90
