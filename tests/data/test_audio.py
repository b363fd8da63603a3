import numpy as np
import pytest
import soundfile as sf
import torch

from asr.data.audio import AudioError, load_audio
from tones import write_tone


@pytest.mark.parametrize("sr", [8000, 16000, 44100])
def test_resampled_to_16k(tmp_path, sr):
    write_tone(tmp_path / "a.wav", 0.5, sr=sr, freq=300)
    wav = load_audio(tmp_path / "a.wav")
    assert wav.dtype == torch.float32 and wav.dim() == 1
    assert abs(wav.numel() - 8000) <= 1
    # a 300 Hz tone keeps its frequency: the spectrum peaks at bin 300 * n / 16000
    spectrum = torch.fft.rfft(wav).abs()
    assert abs(int(spectrum.argmax()) - round(300 * wav.numel() / 16000)) <= 1


def test_stereo_is_averaged(tmp_path):
    data = write_tone(tmp_path / "s.flac", 0.2, channels=2)
    wav = load_audio(tmp_path / "s.flac")
    expected = np.round(data * 32767) / 32768  # what PCM_16 stores
    assert torch.allclose(wav, torch.from_numpy(expected.mean(1)).float(), atol=2e-4)


def test_bytes_and_segment(tmp_path):
    data = write_tone(tmp_path / "x.wav", 1.0)
    raw = (tmp_path / "x.wav").read_bytes()
    assert load_audio(raw).numel() == 16000
    seg = load_audio(tmp_path / "x.wav", offset=0.25, duration=0.5)
    assert seg.numel() == 8000
    assert torch.allclose(seg[:10], torch.from_numpy(data[4000:4010, 0]).float(), atol=1e-4)


def test_bad_files_raise_audio_error(tmp_path):
    with pytest.raises(AudioError, match="not found") as err:
        load_audio(tmp_path / "missing.wav")
    assert err.value.reason == "audio_missing" and isinstance(err.value, ValueError)
    (tmp_path / "junk.wav").write_bytes(b"RIFF not really a wav file")
    with pytest.raises(AudioError) as err:
        load_audio(tmp_path / "junk.wav")
    assert err.value.reason == "audio_corrupt" and "\n" not in str(err.value)
    sf.write(str(tmp_path / "empty.wav"), np.zeros(0, dtype=np.int16), 16000)
    with pytest.raises(AudioError) as err:
        load_audio(tmp_path / "empty.wav")
    assert err.value.reason == "audio_empty"


def test_a_truncated_flac_is_corrupt_audio(tmp_path):
    write_tone(tmp_path / "whole.flac", 1.0)
    raw = (tmp_path / "whole.flac").read_bytes()
    (tmp_path / "cut.flac").write_bytes(raw[: len(raw) // 3])  # header intact, frames missing
    (tmp_path / "header.flac").write_bytes(raw[:20])
    for name in ("cut.flac", "header.flac"):
        with pytest.raises(AudioError) as err:
            load_audio(tmp_path / name)
        assert err.value.reason == "audio_corrupt"


@pytest.mark.parametrize("bug", [TypeError("read() got an unexpected keyword"), ValueError("bad dtype"), KeyError("x")])
def test_a_code_bug_is_not_reported_as_corrupt_audio(tmp_path, monkeypatch, bug):
    write_tone(tmp_path / "fine.wav", 0.1)

    def broken_read(self, *args, **kwargs):
        raise bug

    monkeypatch.setattr(sf.SoundFile, "read", broken_read)
    with pytest.raises(type(bug)) as err:
        load_audio(tmp_path / "fine.wav")
    assert err.value is bug and not isinstance(err.value, AudioError)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_are_their_own_skip_reason(tmp_path, bad):
    samples = (0.1 * np.random.default_rng(0).standard_normal((8000, 2))).astype(np.float32)
    samples[1234, 1] = bad  # one sample of one channel: the downmix would carry it to every frame after
    sf.write(tmp_path / "bad.wav", samples, 16000, subtype="FLOAT")
    with pytest.raises(AudioError) as err:
        load_audio(tmp_path / "bad.wav")
    assert err.value.reason == "audio_nonfinite" and "\n" not in str(err.value)
    assert "1 non-finite samples (NaN or inf) of 16000" in str(err.value) and "bad.wav" in str(err.value)
    # the same samples, finite and as large as float32 goes, still load: the check does not overflow
    samples[1234, 1] = np.finfo(np.float32).max
    sf.write(tmp_path / "loud.wav", samples, 16000, subtype="FLOAT")
    assert load_audio(tmp_path / "loud.wav").numel() == 8000
