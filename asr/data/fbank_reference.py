"""A float64 reference of the Kaldi fbank for every ``FeatureConfig``: the tests' oracle.

Axis legend: n samples, T frames, N window samples, K FFT bins, F mel bins.

Written from the definitions, one vectorized step each, so it can be read against them:
frames (snipped, or centred and mirrored at the edges), DC removal, pre-emphasis (the
first sample against itself, as Kaldi does), window, power spectrum of the window zero-padded
to a power of two, mel banks (Kaldi's, or librosa's: Slaney scale and area norm), and the
log floored at float32's epsilon. ``FbankExtractor`` (kaldi-native-fbank, float32) and the
training path (torchaudio, float32) must stay within ~1e-3 of it.
"""

from __future__ import annotations

import math

import torch

from asr.data.features import FRAME_SHIFT_SAMPLES, SAMPLE_RATE, FeatureConfig, num_frames


def _window(kind: str, size: int) -> torch.Tensor:
    i = torch.arange(size, dtype=torch.float64)
    symmetric = 0.5 - 0.5 * torch.cos(2 * math.pi * i / (size - 1))
    windows = {
        "povey": symmetric ** 0.85,
        "hanning": symmetric,
        "hann": 0.5 - 0.5 * torch.cos(2 * math.pi * i / size),  # periodic, librosa's
        "hamming": 0.54 - 0.46 * torch.cos(2 * math.pi * i / (size - 1)),
        "rectangular": torch.ones(size, dtype=torch.float64),
        "blackman": 0.42 - 0.5 * torch.cos(2 * math.pi * i / (size - 1)) + 0.08 * torch.cos(4 * math.pi * i / (size - 1)),
    }
    return windows[kind]


def _mel_banks(config: FeatureConfig, fft_size: int) -> torch.Tensor:
    """(K, F) float64 filters over the K = fft_size / 2 + 1 bins."""
    import torchaudio

    nyquist = SAMPLE_RATE / 2
    high = config.high_freq if config.high_freq > 0 else nyquist + config.high_freq
    if config.mel_banks == "librosa":
        return torchaudio.functional.melscale_fbanks(
            fft_size // 2 + 1, config.low_freq, high, config.num_mel_bins, SAMPLE_RATE, norm="slaney",
            mel_scale="slaney").double()
    banks, _ = torchaudio.compliance.kaldi.get_mel_banks(
        config.num_mel_bins, fft_size, float(SAMPLE_RATE), config.low_freq, config.high_freq, 100.0, -500.0, 1.0)
    return torch.nn.functional.pad(banks.double(), (0, 1)).T  # no weight on the Nyquist bin


def reference_fbank(waveform: torch.Tensor, config: FeatureConfig) -> torch.Tensor:
    """(n,) samples in [-1, 1] -> (T, F) float64 log-mel, T = ``num_frames(config, n)`` (dither not applied)."""
    x = waveform.to(torch.float64) * config.sample_scale
    size, shift, n = config.window_samples, FRAME_SHIFT_SAMPLES, waveform.numel()
    frames = num_frames(config, n)
    offset = 0 if config.snip_edges else shift // 2 - size // 2
    index = offset + torch.arange(frames)[:, None] * shift + torch.arange(size)[None]  # (T, N)
    index = torch.where(index < 0, -index - 1, index)  # mirrored at the start ...
    index = torch.where(index >= n, 2 * n - 1 - index, index)  # ... and at the end
    windows = x[index]  # (T, N)
    if config.remove_dc_offset:
        windows = windows - windows.mean(1, keepdim=True)
    if config.preemphasis > 0:
        first = windows[:, :1] * (1 - config.preemphasis)
        windows = torch.cat([first, windows[:, 1:] - config.preemphasis * windows[:, :-1]], dim=1)
    windows = windows * _window(config.window_type, size)
    fft_size = 1 << (size - 1).bit_length()
    power = torch.fft.rfft(windows, fft_size).abs() ** 2  # (T, K)
    mel = power @ _mel_banks(config, fft_size)  # (T, F)
    return mel.clamp_min(torch.finfo(torch.float32).eps).log()
