"""A tiny ablation corpus (noise audio, word transcripts, a probe split) and a tiny model's overrides."""

import json
import random
from pathlib import Path

import numpy as np
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

from asr.data.features import SAMPLE_RATE
from asr.data.tokenizer import write_char_units
from asr.synth.probes import PROBE_FILE, PROBE_LENGTHS, probe_id

WORDS = ["red", "green", "blue", "stone", "river", "light"]
# (split, utterances, min seconds, max seconds): "probe" outlasts every training utterance;
# it has one cut per probe length (ids say the target; the audio stays short to keep this fast).
SPLITS = (("train", 16, 0.5, 1.2), ("dev", 3, 0.5, 1.2), ("test", 3, 0.5, 1.2), ("probe", len(PROBE_LENGTHS), 2.5, 3.0))


def make_corpus(root: Path, seed: int = 0) -> Path:
    """Noise audio with word transcripts, a char tokenizer and CMVN stats, in the data-folder layout."""
    rng = random.Random(seed)
    (root / "audio").mkdir(parents=True)
    texts = []
    for split, count, low, high in SPLITS:
        recordings, supervisions = [], []
        for i in range(count):
            key = probe_id(PROBE_LENGTHS[i], 0) if split == "probe" else f"{split}-{i:03d}"
            seconds = rng.uniform(low, high)
            samples = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 0.1, int(seconds * SAMPLE_RATE))
            sf.write(root / "audio" / f"{key}.wav", samples.astype(np.float32), SAMPLE_RATE)
            rec = Recording.from_file(root / "audio" / f"{key}.wav", recording_id=key)
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
            texts.append(text)
            recordings.append(rec)
            supervisions.append(SupervisionSegment(key, key, 0.0, rec.duration, text=text))
        cuts = CutSet.from_manifests(RecordingSet.from_recordings(recordings), SupervisionSet.from_segments(supervisions))
        if split == "probe":  # the probe ids are the cut ids, as asr.synth.probes writes them
            cuts = cuts.modify_ids(lambda cut_id: cut_id.rsplit("-", 1)[0])
        cuts.to_file(root / (PROBE_FILE if split == "probe" else f"cuts_{split}.jsonl.gz"))
    write_char_units(texts, root / "tokenizer")
    (root / "cmvn.json").write_text(json.dumps({"mean": [0.0] * 80, "istd": [0.3] * 80, "frames": 1}))
    return root


TINY_MODEL = [
    "data.max_duration=5.0", "data.max_duration_per_utt=2.0", "data.num_workers=0", "data.num_buckets=2",
    "data.speed_perturb=false", "model.encoder.d_model=16", "model.encoder.num_heads=2",
    "model.encoder.num_layers=1", "model.encoder.ffn_dim=32", "model.encoder.conv_kernel=3",
    "model.decoder_layers=1", "model.decoder_ffn_dim=32", "streaming.max_chunk=4", "streaming.val_chunk_size=2",
    "optim.scheduler.warmup_steps=1", "trainer.log_every_n_steps=1", "logger=csv",
    "features=legacy", "data.cmvn_file=cmvn.json",  # the stats make_corpus writes (the recipe's preset has its own)
]
