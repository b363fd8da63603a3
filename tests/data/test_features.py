from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from asr.data.features import (
    LEGACY, PRESETS, SHERPA, FbankExtractor, FbankStream, FeatureConfig, load_feature_config, samples_for_frames,
)

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

CONFIGS = [LEGACY, SHERPA, FeatureConfig(num_mel_bins=40, frame_length_ms=20.0, window_type="hamming",
                                         preemphasis=0.0, remove_dc_offset=False, low_freq=60.0, high_freq=7000.0)]
IDS = ["legacy", "sherpa", "other"]


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
@pytest.mark.parametrize("backend", ["knf", "torchaudio"])
@pytest.mark.parametrize("n", [0, 399, 400, 559, 560, 16000, 16123])
def test_num_frames_matches_output(config, backend, n):
    fb = FbankExtractor(config, backend)
    feats = fb(torch.randn(n) * 0.1)
    assert feats.shape == (fb.num_frames(n), config.num_mel_bins) and feats.dtype == torch.float32


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_min_samples_is_the_first_frame(config):
    fb = FbankExtractor(config)
    assert fb.num_frames(fb.min_samples) >= 1 and fb.num_frames(fb.min_samples - 1) == 0


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_kaldi_native_fbank_equals_the_float64_reference(config):
    """The fast path (kaldi-native-fbank, float32) against torchaudio's Kaldi fbank in float64."""
    wave = 0.1 * torch.randn(20000, generator=torch.Generator().manual_seed(0))
    fast = FbankExtractor(config)(wave)
    reference = FbankExtractor(config, "torchaudio")(wave.double())
    assert reference.dtype == torch.float64 and fast.shape == reference.shape
    assert (fast.double() - reference).abs().max() < 2e-3
    # and the training frontend (torchaudio, float32) is as close
    assert (FbankExtractor(config, "torchaudio")(wave).double() - reference).abs().max() < 2e-3


def test_the_options_change_the_frames():
    wave = 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(1))
    legacy, sherpa = FbankExtractor(LEGACY)(wave), FbankExtractor(SHERPA)(wave)
    assert legacy.shape == (48, 80) and sherpa.shape == (50, 80)
    # sample_scale 1 vs 32768: log-mel moves by 2 log(32768) where the energy floor is not hit
    int16 = FbankExtractor(FeatureConfig(snip_edges=False, high_freq=-400.0))(wave)
    assert torch.allclose(int16 - sherpa, torch.full_like(sherpa, 2 * torch.log(torch.tensor(32768.0)).item()),
                          atol=1e-3)


@pytest.mark.parametrize("config", [LEGACY, SHERPA], ids=["legacy", "sherpa"])
def test_stream_in_pieces_is_the_whole_utterance(config):
    wave = 0.1 * torch.randn(9000, generator=torch.Generator().manual_seed(2))
    stream = FbankStream(config)
    parts = [stream.accept(wave[i : i + 700]) for i in range(0, 9000, 700)] + [stream.finish()]
    assert torch.equal(torch.cat(parts), FbankExtractor(config)(wave))
    assert stream.samples_seen == 9000


@pytest.mark.parametrize("config", [LEGACY, SHERPA], ids=["legacy", "sherpa"])
@pytest.mark.parametrize("frames", [1, 2, 3, 17])
def test_samples_for_frames_is_when_a_stream_has_them(config, frames):
    n = samples_for_frames(config, frames)
    assert FbankStream(config).accept(torch.zeros(n)).size(0) == frames
    assert FbankStream(config).accept(torch.zeros(n - 1)).size(0) == frames - 1


def test_config_round_trips_and_names_differences():
    assert FeatureConfig.from_dict(SHERPA.to_dict()) == SHERPA
    assert FeatureConfig.from_dict(None) == LEGACY
    assert LEGACY.differences(SHERPA) == {"snip_edges": (True, False), "high_freq": (0.0, -400.0),
                                          "sample_scale": (32768.0, 1.0)}
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
