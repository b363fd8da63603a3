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

import hashlib
from collections.abc import Iterator

from lhotse import CutSet
from lhotse.lazy import LazyFilter


def check_curriculum(cuts_file: str | None, epochs: int, shar: bool, mix: bool = False,
                     mix_train_share: float = 1.0) -> None:
    """The curriculum options, or a ValueError naming them."""
    if not 0.0 < mix_train_share <= 1.0:
        raise ValueError(f"curriculum_mix_train_share must be in (0, 1], got {mix_train_share}")
    if mix_train_share < 1.0 and not mix:
        raise ValueError("curriculum_mix_train_share < 1 thins the mixed epochs' train_cuts: it needs curriculum_mix")
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


class EpochShare:
    """A cut filter that keeps about ``share`` of the cuts, a different subset each epoch.

    Whether a cut is kept is a pure function of (seed, epoch, cut id) (a hash, no RNG state), so a resumed
    run and every rank keep the same cuts, and the subsets of two epochs are independent draws.
    ``set_epoch`` selects the epoch; it is an epoch listener of the train sampler, called before each pass.
    """

    def __init__(self, share: float, seed: int) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share, self.seed, self.epoch = share, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, cut) -> bool:
        if self.share >= 1.0:
            return True
        digest = hashlib.blake2b(f"{self.seed}/{self.epoch}/{cut.id}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") < self.share * 2.0**64

    def thin(self, cuts: CutSet) -> CutSet:
        """``cuts`` filtered lazily: the filter runs at each pass, with the epoch set then."""
        return cuts if self.share >= 1.0 else CutSet(LazyFilter(cuts, self))


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
