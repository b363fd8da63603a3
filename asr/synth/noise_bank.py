"""A bank of noise clips for mixing under training utterances (``data.background.noise_cuts``).

White, pink and brown noise and music-like tones from the training generators of
``asr.synth.conditions`` (never the benchmark's, ``asr.bench.backgrounds``: a model judged on the noise
it was trained on tells nothing), each clip its own seeded draw. The training's talkers come from the
batch itself (``asr.data.background``); this bank gives it the rest of a room. A manifest of recorded
noise (MUSAN's noise and music) can take its place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import CutSet, MonoCut, Recording
from lhotse.audio import AudioSource

from asr.data.features import SAMPLE_RATE
from asr.data.manifest import write_cuts
from asr.synth.conditions import NOISE_COLOURS, coloured_noise, music_like

NOISE_BANK_MANIFEST = "cuts_noise_bank.jsonl.gz"
NOISE_BANK_KINDS = (*sorted(NOISE_COLOURS), "music")
NOISE_BANK_RMS_DBFS = -26.0  # any level would do: the mix sets the SNR


def noise_clip(kind: str, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """(n,) float32 clip of ``kind`` (a noise colour or "music") at NOISE_BANK_RMS_DBFS."""
    n = round(seconds * SAMPLE_RATE)
    unit = music_like(n, rng) if kind == "music" else coloured_noise(n, kind, rng)
    clip = unit * 10.0 ** (NOISE_BANK_RMS_DBFS / 20.0)
    return np.clip(clip, -1.0, 1.0).astype(np.float32)


def build_noise_bank(out_dir: str | Path, seed: int, clips_per_kind: int = 8, seconds: float = 10.0) -> Path:
    """Write ``clips_per_kind`` clips of every kind under ``out_dir``/audio/noise_bank and their manifest
    ``out_dir``/NOISE_BANK_MANIFEST (audio paths relative to ``out_dir``); returns the manifest's path."""
    if clips_per_kind < 1 or seconds <= 0:
        raise ValueError(f"need clips_per_kind >= 1 ({clips_per_kind}) and seconds > 0 ({seconds})")
    out = Path(out_dir)
    (out / "audio" / "noise_bank").mkdir(parents=True, exist_ok=True)
    cuts = []
    for k, kind in enumerate(NOISE_BANK_KINDS):
        for i in range(clips_per_kind):
            clip = noise_clip(kind, seconds, np.random.default_rng([seed, k, i]))
            clip_id = f"noise-{kind}-{i:02d}"
            rel_path = f"audio/noise_bank/{clip_id}.flac"
            sf.write(out / rel_path, clip, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            rec = Recording(id=clip_id, sources=[AudioSource(type="file", channels=[0], source=rel_path)],
                            sampling_rate=SAMPLE_RATE, num_samples=clip.size, duration=clip.size / SAMPLE_RATE)
            cuts.append(MonoCut(id=clip_id, start=0.0, duration=rec.duration, channel=0, recording=rec,
                                custom={"noise": kind}))
    return write_cuts(CutSet.from_cuts(cuts), out / NOISE_BANK_MANIFEST)
