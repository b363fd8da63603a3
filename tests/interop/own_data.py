"""A Wenet user's things, tiny: a released U2++ model folder (tests/interop/wenet_layout.py) and their own
data as Wenet data.list files and a folder of audio, for the "bring your own model and audio" tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.interop import wenet_layout as wl

# Sentences in the tiny model's units (a-e and the word marker).
SENTENCES = ["ab cd", "bad cab", "dead bead", "a cab", "bed", "ace bad", "dab", "cede ace"]


def wenet_model_folder(root: Path) -> Path:
    """A released U2++ folder: final.pt, train.yaml (reverse_weight 0.3, Wenet's fbank), units.txt, global_cmvn."""
    cfg = wl.config()
    return wl.write_folder(root / "wenet_model", cfg, wl.state_dict(cfg))


def own_data(root: Path) -> Path:
    """root/my_data/{train,dev,test}/data.list (relative wav paths) and root/my_audio/ (the test audio, nested)."""
    rng = np.random.default_rng(7)
    data = root / "my_data"
    for split, count in (("train", 8), ("dev", 2), ("test", 3)):
        rows = []
        for i in range(count):
            key = f"{split}{i}"
            wav = data / split / "wav" / f"{key}.wav"
            wav.parent.mkdir(parents=True, exist_ok=True)
            samples = 0.2 * rng.standard_normal(int(16000 * rng.uniform(0.8, 1.4)))
            sf.write(wav, samples.astype(np.float32), 16000)
            rows.append(json.dumps({"key": key, "wav": f"wav/{key}.wav", "txt": SENTENCES[i % len(SENTENCES)]}))
            if split == "test":
                folder = root / "my_audio" / ("calls" if i % 2 else "")
                folder.mkdir(parents=True, exist_ok=True)
                sf.write(folder / f"{key}.flac", samples.astype(np.float32), 16000)
        (data / split / "data.list").write_text("\n".join(rows) + "\n")
    return data
