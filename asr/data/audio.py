"""Audio loading: soundfile read, stereo downmix, resampling to the model rate.

`torchaudio.load` needs torchcodec in torchaudio 2.11, so everything goes through soundfile.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF
import torchaudio.transforms as T

from asr.data.features import SAMPLE_RATE


@lru_cache(maxsize=32)
def cached_resampler(source_rate: int, target_rate: int) -> T.Resample:
    """A Resample transform kept per rate pair: it caches its sinc kernel, whose construction
    dominates a one-off functional resample of a short utterance."""
    return T.Resample(source_rate, target_rate)


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    """(n,) float in [-1, 1) -> (n,) int16, clipped (full-scale +1.0 becomes 32767)."""
    return (np.clip(samples, -1.0, 32767 / 32768) * 32768.0).round().astype(np.int16)


def resample_int16(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """(n,) int16 at ``source_rate`` -> (n * target_rate / source_rate,) int16, clipped to int16's range."""
    wav = torch.from_numpy(samples.astype(np.float32) / 32768.0)
    wav = cached_resampler(source_rate, target_rate)(wav)
    return (wav.clamp(-1.0, 32767 / 32768) * 32768.0).round().to(torch.int16).numpy()


class AudioError(ValueError):
    """A missing, unreadable, empty or non-finite audio file. `reason` is a short key for skip counters."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def load_audio(
    path_or_bytes: str | Path | bytes,
    target_sr: int = SAMPLE_RATE,
    offset: float = 0.0,
    duration: float | None = None,
) -> torch.Tensor:
    """Read audio as a (n,) float32 mono tensor at `target_sr`.

    `offset`/`duration` (seconds, in the file's own time) read a segment, as Kaldi
    `segments` and NeMo `offset` need. Raises AudioError with a one-line message
    and a `reason` in {"audio_missing", "audio_corrupt", "audio_empty", "audio_nonfinite"}.
    """
    name = "<bytes>" if isinstance(path_or_bytes, bytes) else str(path_or_bytes)
    if isinstance(path_or_bytes, bytes):
        source = io.BytesIO(path_or_bytes)
    else:
        if not Path(path_or_bytes).is_file():
            raise AudioError(f"audio file not found: {name}", "audio_missing")
        source = str(path_or_bytes)
    try:
        with sf.SoundFile(source) as f:
            sr = f.samplerate
            start = int(round(offset * sr))
            frames = -1 if duration is None else int(round(duration * sr))
            if start > 0:
                f.seek(min(start, f.frames))
            data = f.read(frames=frames, dtype="float32", always_2d=True)  # (n, channels)
    # only what soundfile raises for a bad file (LibsndfileError and its kin); a TypeError or
    # ValueError here is a bug in the caller and must surface, not be counted as corrupt audio
    except sf.SoundFileError as err:
        raise AudioError(f"cannot decode audio {name}: {str(err).splitlines()[0]}", "audio_corrupt") from None
    if data.shape[0] == 0:
        raise AudioError(f"audio is empty: {name}", "audio_empty")
    # A float file may hold NaN or inf (a failed upstream step): they have no fbank frames. The float64
    # sum of float32 samples cannot overflow, so it is finite exactly when every sample is.
    if not np.isfinite(data.sum(dtype=np.float64)):
        bad = int(data.size - np.isfinite(data).sum())
        raise AudioError(f"audio holds {bad} non-finite samples (NaN or inf) of {data.size}: {name}", "audio_nonfinite")
    # (n,) the average of the channels; a mono file's one channel as it is (a view: no copy of a long file)
    mono = torch.from_numpy(np.ascontiguousarray(data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)))
    if sr != target_sr:
        mono = AF.resample(mono, sr, target_sr)
    return mono


def cut_waveform(cut, target_sr: int = SAMPLE_RATE) -> torch.Tensor:
    """(n,) float32 at `target_sr` for a Lhotse cut, honoring its offset into the recording.

    Sources: "file" (a path) and "memory" (encoded bytes, as Lhotse Shar shards deliver them)."""
    source = cut.recording.sources[0]
    if source.type not in ("file", "memory"):
        raise AudioError(f"cut {cut.id}: only file and memory audio sources are supported, got {source.type!r}",
                         "audio_unsupported")
    return load_audio(source.source, target_sr, offset=cut.start, duration=cut.duration)
