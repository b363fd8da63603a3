"""The global torch generator of training, seeded afresh before every training batch.

Dropout (CPU or CUDA) draws from torch's global generator. What else draws from it between two training
batches differs between a run and the same run resumed from a checkpoint: DataLoader iterators take a
base seed from it when they are created (a resumed run creates its iterators at other moments), and a
resumed run validates a sanity batch first. A saved generator state restored when the checkpoint is
loaded would be consumed by those before the first resumed batch. Instead, every training batch starts
from a seed that is a fixed function of (run seed, rank, batches trained so far): a resumed run draws
exactly what the uninterrupted run drew, nothing needs to be stored in the checkpoint, and no draw
outside a training batch can shift the ones inside it. The rank is part of the seed, so DDP ranks do
not share dropout masks.

The other generators of a training step are private and checkpointed (``asr.train.chunks``) or seeded
per cut from (seed, epoch, cut id) (``asr.data.augment.cut_draws``).
"""

from __future__ import annotations

import torch

from asr.data.augment import derived_seed


def training_batch_seed(run_seed: int, rank: int, batches_trained: int) -> int:
    """The global generator's seed for the training batch after ``batches_trained`` batches on ``rank``."""
    return derived_seed("global-rng", run_seed, rank, batches_trained)


def seed_training_batch(run_seed: int, rank: int, batches_trained: int) -> None:
    """Seed torch's global generators (CPU and every CUDA device) for the next training batch."""
    seed = training_batch_seed(run_seed, rank, batches_trained)
    torch.default_generator.manual_seed(seed)
    # torch.manual_seed would queue the CUDA seeding (with a captured stack, every batch) in a process that
    # never initialized CUDA; a process training on CUDA initialized it before its first batch.
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)
