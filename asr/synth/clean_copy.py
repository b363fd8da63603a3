"""Clean copies of a surroundings profile's train utterances: one synthesis, written twice.

Why: trained from scratch on speech in rooms (reverberation, noise, music, babble, silence at the
edges), CTC stays on its all-blank plateau; a model that already aligns on clean speech learns from
the same rooms (data/results/live_training.md). A curriculum (``data.curriculum_cuts``,
`asr.data.curriculum`) trains on clean copies first and on the rooms after. Synthesis is what a corpus
build costs, so a profile with ``clean_copy`` writes both copies from one text-to-speech pass:

- the room copy: exactly what the profile without ``clean_copy`` writes, in ``cuts_train.jsonl.gz``;
- the clean copy: the same speech through what the profile does besides its surroundings (the capture
  path it draws), with no edge silence, acoustic conditions or live surroundings, in
  :data:`CLEAN_MANIFEST` under the id ``<id>-clean`` (:func:`clean_copy_id`), audio under
  ``audio/train_clean/``.

Draws: the clean copy draws from a copy of the utterance's RNG (:func:`fork_rng`) taken where the
surroundings start drawing, so every draw of the room copy stays as it was, and the clean copy is
exactly the train utterance the profile without surroundings makes from the same seed and index.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path

CLEAN_SPLIT = "train_clean"  # the audio folder under the corpus, and the manifest's name
CLEAN_MANIFEST = f"cuts_{CLEAN_SPLIT}.jsonl.gz"
CLEAN_SUFFIX = "-clean"


def clean_copy_id(cut_id: str) -> str:
    """The clean copy's cut id: its own, so a store or a skip registry never mixes the two copies."""
    return f"{cut_id}{CLEAN_SUFFIX}"


def clean_copy_audio_path(cut_id: str) -> str:
    """Where the clean copy of the train utterance ``cut_id`` is written, relative to the corpus folder."""
    return f"audio/{CLEAN_SPLIT}/{clean_copy_id(cut_id)}.flac"


def fork_rng(rng: random.Random) -> random.Random:
    """An independent copy of ``rng`` in its current state: drawing from it leaves ``rng`` where it was."""
    return copy.copy(rng)


def start_clean_copies(out_dir: str | Path, enabled: bool) -> None:
    """Before a train split is built: clear the clean copies an earlier build left, and make their folder
    when this build writes them. A train split rebuilt without them must not leave a curriculum reading
    another build's clean copies."""
    out = Path(out_dir)
    audio_dir = out / "audio" / CLEAN_SPLIT
    (out / CLEAN_MANIFEST).unlink(missing_ok=True)
    if audio_dir.is_dir():
        for stale in audio_dir.glob("*.flac"):
            stale.unlink()
        if not enabled:
            audio_dir.rmdir()
    if enabled:
        audio_dir.mkdir(parents=True, exist_ok=True)
