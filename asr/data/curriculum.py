"""A curriculum by epoch: the first epochs read one manifest, the later ones another.

Why: trained from scratch on speech in rooms, CTC stays on its all-blank plateau, while a model that
already aligns on clean speech learns from the same rooms (data/results/live_training.md). A corpus built
with a clean-copy profile (`asr.synth.clean_copy`) holds both copies of every train utterance from one
synthesis; ``data.curriculum_cuts`` names the clean manifest and ``data.curriculum_epochs`` how many
epochs read it before the main train manifest takes over.

Mixed later stage (``data.curriculum_mix``): the later epochs read both manifests, each clean copy beside
its room copy. Trained on the rooms alone after the clean stage, the model forgets part of the clean
speech it learnt (data/results/robust.md); reading both keeps it hearing clean voices. The two manifests
are interleaved at random with a fixed seed (:func:`mixed_cuts`), not chained: the sampler shuffles a
stream through a bounded buffer, and a chain longer than the buffer would give the room copies first and
the clean copies last in every epoch.

Resume and DDP: each manifest has its own Lhotse sampler (sharded by rank as the train sampler is), and
the epoch alone says which one draws, so a sampler's batches stay a pure function of (cuts, seed, epoch)
and the loader's resume position (`asr.data.loader.TrainPosition`: epoch, sampler batches) means the
same in either stage.
"""

from __future__ import annotations

from collections.abc import Iterator

from lhotse import CutSet


def check_curriculum(cuts_file: str | None, epochs: int, shar: bool, mix: bool = False) -> None:
    """The curriculum options, or a ValueError naming them."""
    if epochs < 0 or (cuts_file is None) != (epochs == 0):
        raise ValueError(f"curriculum_cuts ({cuts_file!r}) and curriculum_epochs ({epochs}) go together: a "
                         f"manifest and >= 1 epochs, or null and 0 (no curriculum)")
    if cuts_file is not None and shar:
        raise ValueError("curriculum_cuts reads manifests; a Shar train source (shar_dir) has no curriculum")
    if mix and cuts_file is None:
        raise ValueError("curriculum_mix reads curriculum_cuts in the later epochs too: it needs a curriculum "
                         "(curriculum_cuts and curriculum_epochs)")


def mixed_cuts(main: CutSet, first: CutSet, sizes: tuple[int, int], seed: int) -> CutSet:
    """Every cut of ``main`` and of ``first`` once, interleaved at random by ``seed`` (lazily: neither is
    read into memory). ``sizes``: the two manifests' cut counts (`asr.data.manifest.manifest_stats`). Each
    next cut comes from either manifest with a probability proportional to its size, so both run out near
    the end of the epoch and any stretch of it holds both in their shares."""
    return CutSet.mux(main, first, weights=list(sizes), seed=seed)


class CurriculumSampler:
    """Batches of ``first``'s sampler in epochs below ``first_epochs``, of ``then``'s in every later one.

    Both are Lhotse samplers; the active one gets the global epoch in ``set_epoch``, so each stage
    shuffles as a run that reaches that epoch without interruption does.
    """

    def __init__(self, first, then, first_epochs: int) -> None:
        if first_epochs < 1:
            raise ValueError(f"first_epochs must be >= 1, got {first_epochs}")
        self.first, self.then, self.first_epochs = first, then, first_epochs
        self.epoch = 0

    @property
    def active(self):
        """The sampler of the current epoch."""
        return self.first if self.epoch < self.first_epochs else self.then

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.active.set_epoch(epoch)

    def __iter__(self) -> Iterator:
        return iter(self.active)
