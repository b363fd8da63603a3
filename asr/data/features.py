"""80-dim log-mel filterbank features, Kaldi-compatible (torchaudio.compliance.kaldi.fbank).

The same extractor serves training, decoding and streaming. Streaming computes
fbank on a growing audio buffer, so `num_frames` gives the frame count of a
prefix without computing it: with snip_edges, frame t covers samples
[t * shift, t * shift + length).

This module is the one place that states the audio rate and the frame timing:
everything that converts samples, frames and seconds imports these constants.
"""

from __future__ import annotations

import torch
import torchaudio.compliance.kaldi as kaldi

SAMPLE_RATE = 16000  # Hz: every waveform is resampled to this rate before features
FRAME_LENGTH_MS = 25.0
FRAME_SHIFT_MS = 10.0
FRAME_SHIFT_S = FRAME_SHIFT_MS / 1000.0  # seconds of audio per feature frame
FRAME_SHIFT_SAMPLES = round(SAMPLE_RATE * FRAME_SHIFT_S)  # samples between frame starts


class FbankExtractor:
    """waveform (n,) float in [-1, 1] at ``SAMPLE_RATE`` -> (T, num_mel_bins) float32 log-mel."""

    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        num_mel_bins: int = 80,
        frame_length_ms: float = FRAME_LENGTH_MS,
        frame_shift_ms: float = FRAME_SHIFT_MS,
        dither: float = 0.0,
    ) -> None:
        if num_mel_bins <= 0:
            raise ValueError(f"num_mel_bins must be positive, got {num_mel_bins}")
        if not 0 < frame_shift_ms <= frame_length_ms:
            raise ValueError(
                f"need 0 < frame_shift_ms ({frame_shift_ms}) <= frame_length_ms ({frame_length_ms})"
            )
        self.num_mel_bins = num_mel_bins
        self.frame_length_ms = frame_length_ms
        self.frame_shift_ms = frame_shift_ms
        self.dither = dither
        self.window_samples = int(self.sample_rate * frame_length_ms / 1000)
        self.shift_samples = int(self.sample_rate * frame_shift_ms / 1000)

    @property
    def min_samples(self) -> int:
        """Shortest audio (in samples) that yields at least one frame."""
        return self.window_samples

    def num_frames(self, n_samples: int) -> int:
        """Frames produced by `n_samples` samples (0 below `min_samples`)."""
        if n_samples < self.window_samples:
            return 0
        return 1 + (n_samples - self.window_samples) // self.shift_samples

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        """(n,) float waveform -> (T, num_mel_bins) float32, T = num_frames(n)."""
        if waveform.dim() != 1:
            raise ValueError(f"expected a 1-D waveform (n,), got shape {tuple(waveform.shape)}")
        if waveform.numel() < self.window_samples:
            return waveform.new_zeros((0, self.num_mel_bins), dtype=torch.float32)
        # Kaldi conventions (energy floor, log offsets) assume int16-range samples
        feats = kaldi.fbank(
            waveform.to(torch.float32).unsqueeze(0) * 32768.0,  # (1, n)
            num_mel_bins=self.num_mel_bins,
            frame_length=self.frame_length_ms,
            frame_shift=self.frame_shift_ms,
            dither=self.dither,
            energy_floor=0.0,
            sample_frequency=self.sample_rate,
        )
        return feats  # (T, num_mel_bins)
