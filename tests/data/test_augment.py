import pytest
import torch

from asr.data.augment import SpecAugment, mix_noise, speed_perturb


def test_speed_perturb_lengths():
    wav = torch.randn(16000)
    assert speed_perturb(wav, 1.0) is wav
    assert abs(speed_perturb(wav, 1.1).numel() - 16000 / 1.1) <= 1
    assert abs(speed_perturb(wav, 0.9).numel() - 16000 / 0.9) <= 1


@pytest.mark.parametrize("snr_db", [-5.0, 0.0, 10.0, 30.0])
@pytest.mark.parametrize("noise_len", [5000, 48000], ids=["tiled", "cropped"])
def test_mix_noise_hits_snr(snr_db, noise_len):
    torch.manual_seed(0)
    speech, noise = torch.randn(16000) * 0.2, torch.randn(noise_len) * 3.0
    # the part of a long noise that is mixed in is 40 dB quieter than the rest: scaling by the
    # power of the whole file instead of the part used misses the SNR by about 30 dB
    noise[:16000] *= 0.01
    mixed = mix_noise(speech, noise, snr_db=snr_db)
    added = mixed - speech  # (16000,) the noise as it was mixed in
    assert mixed.shape == speech.shape
    snr = 10 * torch.log10(speech.pow(2).mean() / added.pow(2).mean())
    assert abs(float(snr) - snr_db) < 0.1


def test_spec_augment_masks_with_the_mean():
    torch.manual_seed(0)
    feats = torch.randn(200, 80) + 7.0
    out = SpecAugment(num_freq_masks=2, freq_mask_width=10, num_time_masks=2, time_mask_width=30)(
        feats, torch.Generator().manual_seed(0))
    assert out.shape == feats.shape
    changed = out != feats
    assert changed.any()
    assert torch.allclose(out[changed], torch.full_like(out[changed], float(feats.mean())))
    # short utterances: the time mask never covers more than max_time_ratio of the frames
    short = torch.randn(10, 80)
    out = SpecAugment(num_freq_masks=0, num_time_masks=1, time_mask_width=50, max_time_ratio=0.2)(
        short, torch.Generator().manual_seed(1))
    assert int((out != short).any(1).sum()) <= 2


@pytest.mark.parametrize("axis", [1, 2])
def test_masks_drawn_from_a_generator_are_torchaudios_masks(axis):
    import torchaudio.functional as AF

    from asr.data.augment import mask_along_axis

    spec = torch.randn(1, 80, 120, generator=torch.Generator().manual_seed(5))  # (1, F, T)
    for seed in range(20):
        torch.manual_seed(seed)  # torchaudio draws from the global generator
        expected = AF.mask_along_axis(spec, 30, -1.0, axis=axis)
        assert torch.equal(mask_along_axis(spec, 30, -1.0, axis, torch.Generator().manual_seed(seed)), expected)
