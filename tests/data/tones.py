"""A test tone on disk, for the tests of this folder (a module of its own: every folder's conftest is
named ``conftest``, so importing from one depends on which was loaded last)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf


def write_tone(path: Path, seconds: float, sr: int = 16000, channels: int = 1, freq: float = 440.0) -> np.ndarray:
    """Write a sine tone (int16) and return the float samples written, shape (n, channels)."""
    t = np.arange(int(seconds * sr)) / sr
    data = np.stack([0.3 * np.sin(2 * np.pi * freq * (c + 1) * t) for c in range(channels)], axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), data, sr, subtype="PCM_16")
    return data
