"""A tiny corpus of random-noise audio in the data-folder layout the trainer reads.

Content is meaningless (training tests check mechanics, not accuracy) but every
artifact is real: Lhotse manifests, flac-free 16 kHz wav files, a char tokenizer
(``tokenizer/units.txt``) and ``cmvn.json``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

from asr.data.tokenizer import write_char_units

CONF = Path(__file__).resolve().parents[2] / "conf"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "fox"]


def make_tiny_corpus(root: Path, n_train: int = 24, n_eval: int = 4, seed: int = 0) -> Path:
    """Write the corpus under ``root`` and return it. Durations 0.5-1.2 s."""
    rng = random.Random(seed)
    audio = root / "audio"
    audio.mkdir(parents=True, exist_ok=True)
    texts = []
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        recordings, supervisions = [], []
        for i in range(n):
            key = f"{split}-{i:03d}"
            seconds = rng.uniform(0.5, 1.2)
            wave = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 0.1, int(seconds * 16000))
            path = audio / f"{key}.wav"
            sf.write(path, wave.astype(np.float32), 16000)
            rec = Recording.from_file(path, recording_id=key)
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            texts.append(text)
            recordings.append(rec)
            supervisions.append(SupervisionSegment(key, key, 0.0, rec.duration, text=text))
        cuts = CutSet.from_manifests(recordings=RecordingSet.from_recordings(recordings),
                                     supervisions=SupervisionSet.from_segments(supervisions))
        cuts.to_file(root / f"cuts_{split}.jsonl.gz")
    write_char_units(texts, root / "tokenizer")
    (root / "cmvn.json").write_text(json.dumps({"mean": [0.0] * 80, "istd": [0.25] * 80, "frames": 1}))
    return root


# Overrides that shrink the real configs to a seconds-long CPU run on the tiny corpus.
def tiny_overrides(data_dir: Path, out_dir: Path | None = None) -> list[str]:
    overrides = [
        f"data.data_dir={data_dir}",
        # The quickstart experiment (train.yaml's default) picks its own fbank preset and CMVN file;
        # the tiny corpus holds stats for the legacy options only.
        "features=legacy",
        "data.cmvn_file=cmvn.json",
        "data.max_duration=4.0",
        "data.max_duration_per_utt=2.0",
        "data.num_workers=0",
        "data.num_buckets=2",
        "data.speed_perturb=false",
        "model.encoder.d_model=16",
        "model.encoder.num_heads=2",
        "model.encoder.num_layers=1",
        "model.encoder.ffn_dim=32",
        "model.encoder.conv_kernel=3",
        "model.decoder_layers=1",
        "model.decoder_ffn_dim=32",
        "streaming.max_chunk=4",
        "streaming.val_chunk_size=2",
        "optim.scheduler.warmup_steps=1",
        "trainer.max_epochs=1",
        "trainer.max_time=null",
        "trainer.log_every_n_steps=1",
        "trainer.val_check_interval=1.0",
        "trainer.check_val_every_n_epoch=1",
        "+trainer.enable_model_summary=false",
        "~callbacks.progress_bar",
        "logger=csv",
    ]
    if out_dir is not None:
        overrides.append(f"out_dir={out_dir}")
    return overrides
