"""Formant scaling of synthesized speech: a longer or shorter vocal tract by resampling.

eSpeak's variants differ mostly in pitch, Pico and the neural voices are one speaker each; reading
their output back at another rate moves formants and pitch together and gives new speakers.
"""

from __future__ import annotations

import numpy as np

from asr.data.audio import resample_int16
from asr.data.features import SAMPLE_RATE

# Formant scaling (asr.synth.corpus profiles) resamples to rates on this grid, so every (16 kHz,
# rate) pair shares a large divisor (small sinc kernels) and there are few pairs (each cached).
RESAMPLE_STEP_HZ = 400


def draw_scale_rate(rng, scale_range: tuple[float, float]) -> int:
    """A formant scale drawn uniformly from ``scale_range``, as the rate (Hz, on the 400 Hz grid)
    that :func:`scale_frequencies` resamples to: 16000 / scale, rounded. One draw from ``rng``."""
    scale = rng.uniform(*scale_range)
    return round(SAMPLE_RATE / scale / RESAMPLE_STEP_HZ) * RESAMPLE_STEP_HZ


def scale_frequencies(samples: np.ndarray, resample_hz: int) -> np.ndarray:
    """(n,) int16 at 16 kHz -> (n * resample_hz / 16000,) int16 at 16 kHz, every frequency times
    16000 / resample_hz.

    Resampled to ``resample_hz`` and read back at 16 kHz: formants and pitch move together and the
    duration stretches by the inverse, a longer or shorter vocal tract (0.8: about a man's from a
    woman's). Callers that want the pitch or rate kept set them before, at synthesis.
    """
    if resample_hz == SAMPLE_RATE:
        return samples.copy()
    return resample_int16(samples, SAMPLE_RATE, resample_hz)
