import torch

from asr.data.augment import SpecAugment, mix_noise, speed_perturb


def test_speed_perturb_lengths():
    wav = torch.randn(16000)
    assert speed_perturb(wav, 1.0) is wav
    assert abs(speed_perturb(wav, 1.1).numel() - 16000 / 1.1) <= 1
    assert abs(speed_perturb(wav, 0.9).numel() - 16000 / 0.9) <= 1


def test_mix_noise_hits_snr():
    torch.manual_seed(0)
    speech, noise = torch.randn(16000), torch.randn(5000) * 3.0
    mixed = mix_noise(speech, noise, snr_db=10.0)
    added = mixed - speech
    snr = 10 * torch.log10(speech.pow(2).mean() / added.pow(2).mean())
    assert abs(float(snr) - 10.0) < 0.05


def test_spec_augment_masks_with_the_mean():
    torch.manual_seed(0)
    feats = torch.randn(200, 80) + 7.0
    out = SpecAugment(num_freq_masks=2, freq_mask_width=10, num_time_masks=2, time_mask_width=30)(feats)
    assert out.shape == feats.shape
    changed = out != feats
    assert changed.any()
    assert torch.allclose(out[changed], torch.full_like(out[changed], float(feats.mean())))
    # short utterances: the time mask never covers more than max_time_ratio of the frames
    short = torch.randn(10, 80)
    out = SpecAugment(num_freq_masks=0, num_time_masks=1, time_mask_width=50, max_time_ratio=0.2)(short)
    assert int((out != short).any(1).sum()) <= 2
