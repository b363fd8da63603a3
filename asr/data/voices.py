"""eSpeak NG voice pools for the synthetic corpus.

A voice is `<accent>+<variant>`: an English accent (language file) and a voice
variant from the `voices/!v` folder. The test and long splits use variants that
never occur in train or dev, so test WER measures generalization to unseen voices.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

ACCENTS = ("en-us", "en", "en-gb-x-rp", "en-029", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc")
# whispering, robotic and novelty variants are left out on purpose: they are not speech-like
TRAIN_VARIANTS = (
    "m1", "m2", "m3", "m4", "m5", "m7", "f1", "f2", "f4", "klatt", "klatt2", "klatt3", "adam", "benjamin",
    "david", "ed", "edward", "linda", "max", "paul", "robert", "steph", "travis", "belinda", "rob",
)
HELD_OUT_VARIANTS = ("m6", "m8", "f3", "f5", "klatt4", "quincy", "michel", "iven")
SPLIT_VARIANTS = {"train": TRAIN_VARIANTS, "dev": TRAIN_VARIANTS, "test": HELD_OUT_VARIANTS, "long": HELD_OUT_VARIANTS}
RATE_RANGE = (135, 205)  # words per minute; eSpeak's default is 175
PITCH_RANGE = (30, 70)  # eSpeak pitch parameter 0..100, default 50


@dataclass(frozen=True)
class VoiceSetting:
    voice: str  # "en-gb-x-rp+f2"
    rate: int
    pitch: int


def split_voices(split: str) -> list[str]:
    """All `<accent>+<variant>` names a split draws from."""
    if split not in SPLIT_VARIANTS:
        raise ValueError(f"unknown split {split!r}; valid: {sorted(SPLIT_VARIANTS)}")
    return [f"{accent}+{variant}" for accent in ACCENTS for variant in SPLIT_VARIANTS[split]]


def draw_voice(rng: random.Random, split: str) -> VoiceSetting:
    return VoiceSetting(
        voice=rng.choice(split_voices(split)), rate=rng.randint(*RATE_RANGE), pitch=rng.randint(*PITCH_RANGE)
    )


def check_voices_exist(data_path: str | Path) -> None:
    """eSpeak silently falls back to a default for unknown variants, so check the files ourselves."""
    variant_dir = Path(data_path) / "voices" / "!v"
    missing = [v for v in TRAIN_VARIANTS + HELD_OUT_VARIANTS if not (variant_dir / v).is_file()]
    if missing:
        raise ValueError(f"eSpeak data at {data_path} lacks voice variants {missing}")
