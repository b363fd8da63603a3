"""Training augmentation: speed perturbation, noise mixing, SpecAugment.

Runs inside DataLoader workers. Every draw of one cut comes from that cut's own generators
(:func:`cut_draws`), seeded from the run's seed, the epoch and the cut's id: a cut is augmented the
same whichever worker reads it and whenever its loader was created, so a resumed run draws what the
uninterrupted run drew, and no global generator is read.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

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

    def __call__(self, feats: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """(T, F) -> (T, F) masked copy; the masks are drawn from ``generator``."""
        if feats.shape[0] == 0:
            return feats
        spec = feats.t().unsqueeze(0).clone()  # (1, F, T): torchaudio masks along the last two axes
        fill = float(feats.mean())
        for _ in range(self.num_freq_masks):
            spec = mask_along_axis(spec, self.freq_mask_width, fill, axis=1, generator=generator)
        width = min(self.time_mask_width, int(self.max_time_ratio * feats.shape[0]))
        if width > 0:
            for _ in range(self.num_time_masks):
                spec = mask_along_axis(spec, width, fill, axis=2, generator=generator)
        return spec.squeeze(0).t()  # (T, F)


def mask_along_axis(
    spec: torch.Tensor, max_width: int, fill: float, axis: int, generator: torch.Generator,
) -> torch.Tensor:
    """(1, F, T) -> (1, F, T) with one band of ``axis`` filled: width uniform in [0, max_width), start uniform
    in [0, size - width), as ``torchaudio.functional.mask_along_axis`` draws them, from ``generator``."""
    width = float(torch.rand((), generator=generator)) * max_width
    start = float(torch.rand((), generator=generator)) * (spec.shape[axis] - width)
    first, last = int(start), int(start) + int(width)
    out = spec.clone()
    out.narrow(axis, first, last - first).fill_(fill)
    return out


def random_speed(rng: random.Random) -> float:
    return rng.choice(SPEED_FACTORS)


def derived_seed(*parts: object) -> int:
    """A seed in [0, 2**63) that is a fixed function of ``parts`` (Python's ``hash`` of a string changes
    with every process, so it is not used)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass(frozen=True)
class CutDraws:
    """The generators of one cut's augmentation: python draws (speed, noise, lead-in) and torch draws
    (SpecAugment)."""

    py: random.Random
    torch: torch.Generator


def cut_draws(seed: int, epoch: int, cut_id: str) -> CutDraws:
    """The generators of cut ``cut_id`` in ``epoch`` of a run seeded with ``seed``."""
    key = derived_seed(seed, epoch, cut_id)
    return CutDraws(random.Random(key), torch.Generator().manual_seed(key))
