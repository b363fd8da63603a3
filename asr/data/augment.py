"""Training augmentation: speed perturbation, noise mixing, SpecAugment.

Runs inside DataLoader workers. Randomness comes from the global torch/python
generators, which PyTorch seeds per worker from the loader's base seed.
"""

from __future__ import annotations

import random

import torch
import torchaudio.functional as AF

from asr.data.features import SAMPLE_RATE

SPEED_FACTORS = (0.9, 1.0, 1.1)


def speed_perturb(waveform: torch.Tensor, factor: float, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """(n,) -> (~n / factor,): play `factor` times faster (pitch moves too, as in Kaldi's sox speed)."""
    if factor == 1.0:
        return waveform
    # reading the samples as if recorded at sample_rate * factor and resampling back shortens them by factor
    return AF.resample(waveform, int(round(sample_rate * factor)), sample_rate)


def mix_noise(waveform: torch.Tensor, noise: torch.Tensor, snr_db: float) -> torch.Tensor:
    """(n,) speech + noise (tiled or cropped to n) scaled to `snr_db`."""
    n = waveform.shape[0]
    if noise.numel() == 0:
        return waveform
    reps = -(-n // noise.shape[0])
    noise = noise.repeat(reps)[:n]
    speech_power = waveform.pow(2).mean().clamp_min(1e-10)
    noise_power = noise.pow(2).mean().clamp_min(1e-10)
    scale = torch.sqrt(speech_power / (noise_power * 10.0 ** (snr_db / 10.0)))
    return waveform + scale * noise


class SpecAugment:
    """Frequency and time masking (torchaudio) on one utterance's valid frames.

    Masks fill with the utterance mean: features reach the model before CMVN,
    where 0 would be an extreme log-mel value rather than a neutral one.
    """

    def __init__(
        self, num_freq_masks: int = 2, freq_mask_width: int = 10, num_time_masks: int = 2,
        time_mask_width: int = 50, max_time_ratio: float = 0.2,
    ) -> None:
        if not 0.0 <= max_time_ratio <= 1.0:
            raise ValueError(f"max_time_ratio must be in [0, 1], got {max_time_ratio}")
        self.num_freq_masks, self.freq_mask_width = num_freq_masks, freq_mask_width
        self.num_time_masks, self.time_mask_width = num_time_masks, time_mask_width
        self.max_time_ratio = max_time_ratio

    def __call__(self, feats: torch.Tensor) -> torch.Tensor:
        """(T, F) -> (T, F) masked copy."""
        if feats.shape[0] == 0:
            return feats
        spec = feats.t().unsqueeze(0).clone()  # (1, F, T): torchaudio masks along the last two axes
        fill = float(feats.mean())
        for _ in range(self.num_freq_masks):
            spec = AF.mask_along_axis(spec, self.freq_mask_width, fill, axis=1)
        width = min(self.time_mask_width, int(self.max_time_ratio * feats.shape[0]))
        if width > 0:
            for _ in range(self.num_time_masks):
                spec = AF.mask_along_axis(spec, width, fill, axis=2)
        return spec.squeeze(0).t()  # (T, F)


def random_speed(rng: random.Random | None = None) -> float:
    return (rng or random).choice(SPEED_FACTORS)
