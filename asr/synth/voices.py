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
# The varied profile's train voices add these to TRAIN_VARIANTS: the rest of the data's speech-like
# variants. Left out: robotic, whispering and novelty ones, and iven2-4 (close kin of the held-out iven).
VARIED_EXTRA_VARIANTS = (
    "Alex", "Alicia", "Andrea", "Andy", "Annie", "Denis", "Diogo", "Gene", "Gene2", "Henrique", "Hugo", "Jacky",
    "Lee", "Marco", "Mario", "Michael", "Mike", "Nguyen", "Reed", "RicishayMax", "Storm", "anika", "announcer",
    "antonio", "aunty", "boris", "caleb", "edward2", "grandma", "grandpa", "gustave", "ian", "john", "klatt5",
    "klatt6", "marcelo", "miguel", "mike2", "norbert", "pablo", "pedro", "sandro", "shelby", "steph2", "steph3",
    "victor", "zac",
)
SPLIT_VARIANTS = {"train": TRAIN_VARIANTS, "dev": TRAIN_VARIANTS, "test": HELD_OUT_VARIANTS, "long": HELD_OUT_VARIANTS}
RATE_RANGE = (135, 205)  # words per minute; eSpeak's default is 175
PITCH_RANGE = (30, 70)  # eSpeak pitch parameter 0..100, default 50
# The varied profile (train split only): wider rate and pitch, and the intonation range
# and gaps between words drawn too (eSpeak defaults: range 50, gap 0).
VARIED_RATE_RANGE = (115, 245)
VARIED_PITCH_RANGE = (15, 85)
VARIED_PITCH_SPAN_RANGE = (10, 95)  # eSpeak's "range": how far the pitch moves, 0 = monotone
VARIED_WORD_GAP_RANGE = (0, 4)  # units of 10 ms at the default rate


@dataclass(frozen=True)
class VoiceSetting:
    voice: str  # "en-gb-x-rp+f2"
    rate: int
    pitch: int
    pitch_span: int = 50  # eSpeak's pitch range parameter; 50 is its default
    word_gap: int = 0


def split_voices(split: str, varied: bool = False) -> list[str]:
    """All `<accent>+<variant>` names a split draws from (varied: train gets VARIED_EXTRA_VARIANTS too)."""
    if split not in SPLIT_VARIANTS:
        raise ValueError(f"unknown split {split!r}; valid: {sorted(SPLIT_VARIANTS)}")
    variants = SPLIT_VARIANTS[split] + (VARIED_EXTRA_VARIANTS if varied and split == "train" else ())
    return [f"{accent}+{variant}" for accent in ACCENTS for variant in variants]


def draw_voice(rng: random.Random, split: str, varied: bool = False) -> VoiceSetting:
    """A voice and its settings; ``varied`` widens them for the train split only (dev and test stay as they are)."""
    if varied and split == "train":
        return VoiceSetting(
            voice=rng.choice(split_voices(split, varied=True)), rate=rng.randint(*VARIED_RATE_RANGE),
            pitch=rng.randint(*VARIED_PITCH_RANGE), pitch_span=rng.randint(*VARIED_PITCH_SPAN_RANGE),
            word_gap=rng.randint(*VARIED_WORD_GAP_RANGE),
        )
    return VoiceSetting(
        voice=rng.choice(split_voices(split)), rate=rng.randint(*RATE_RANGE), pitch=rng.randint(*PITCH_RANGE)
    )


def check_voices_exist(data_path: str | Path) -> None:
    """eSpeak silently falls back to a default for unknown variants, so check the files ourselves."""
    variant_dir = Path(data_path) / "voices" / "!v"
    missing = [v for v in TRAIN_VARIANTS + HELD_OUT_VARIANTS + VARIED_EXTRA_VARIANTS
               if not (variant_dir / v).is_file()]
    if missing:
        raise ValueError(f"eSpeak data at {data_path} lacks voice variants {missing}")
