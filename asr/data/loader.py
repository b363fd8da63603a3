"""The loader the trainer iterates: skip counting, a read summary, exact mid-epoch resume.

Resume. A Lhotse sampler's batches are a pure function of (cuts, seed, epoch), so the
place where training stopped is two numbers: the epoch and how many *sampler* batches
of it were consumed. `SkipCountingLoader` keeps, for every batch it yielded, the
sampler position after it (a batch of only unreadable cuts is consumed but not
yielded in a single process, so the two counts can differ). The data module stores
``position_after(batches the trainer finished)`` in the checkpoint; on resume the
`ResumableSampler` replays the epoch's batches up to there as metadata only (no
audio is read) and the loader continues with the next one. Counting what the trainer
finished, not what the loader produced, matters: Lightning and the DataLoader's
workers fetch batches ahead, and those were never trained on.

Ranks with uneven data (Shar shards split by rank) stop an epoch together: before
each batch every rank all-reduces "I still have one" (min), so no rank waits forever
in a gradient all-reduce that the others never join.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass

import torch

from asr.data.batch import Batch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainPosition:
    """Where an epoch stopped: ``sampler_batches`` sampler batches of ``epoch`` consumed,
    ``yielded`` of them handed to the trainer."""

    epoch: int
    sampler_batches: int
    yielded: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainPosition:
        return cls(int(data["epoch"]), int(data["sampler_batches"]), int(data["yielded"]))


class ResumableSampler:
    """A Lhotse sampler (batches of cuts) whose next pass can start after its first n batches.

    ``set_epoch`` reaches the sampler and every extra listener (a Shar source reshuffles
    its shards per epoch). Skipped batches are drawn and dropped, so the rest of the
    epoch is exactly the batches an uninterrupted pass would have produced.
    """

    def __init__(self, sampler, epoch_listeners: Iterable[Callable[[int], None]] = ()) -> None:
        self.sampler = sampler
        self.epoch_listeners = list(epoch_listeners)
        self.epoch = 0
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)
        for listener in self.epoch_listeners:
            listener(epoch)

    def skip_next(self, batches: int) -> None:
        """The next pass drops its first ``batches`` batches."""
        if batches < 0:
            raise ValueError(f"cannot skip a negative number of batches ({batches})")
        self._skip = batches

    def __iter__(self) -> Iterator:
        skip, self._skip = self._skip, 0
        drawn = 0
        for drawn, cuts in enumerate(self.sampler, start=1):
            if drawn > skip:
                yield cuts
        if drawn < skip:
            raise ValueError(
                f"resume point is past the end of epoch {self.epoch}: {skip} batches to skip, the epoch has "
                f"{drawn}; the data, seed, max_duration or world size differ from the checkpointed run"
            )


def _all_ranks_have_batch(have: bool) -> bool:
    """True when every rank of the default process group still has a batch (one all-reduce)."""
    dist = torch.distributed
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    flag = torch.tensor([1 if have else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


class SkipCountingLoader:
    """Wraps a DataLoader of (Batch, skipped, seconds): yields Batches, records skips by
    reason, counts the cuts and seconds of audio it delivered, and can resume mid-epoch.

    Exposes `.sampler` so Lightning calls `set_epoch` on it. A batch in which every
    item was bad is dropped in a single process; under DDP it is yielded with B = 0,
    since dropping it on one rank only would desynchronize the ranks.
    ``stop_with_first_rank``: end the epoch on every rank as soon as one rank runs out
    (for per-rank data streams of unequal length); needs an initialized process group.
    """

    def __init__(
        self,
        loader: torch.utils.data.DataLoader,
        skipped: dict[str, set[str]],
        world_size: int = 1,
        stop_with_first_rank: bool = False,
    ) -> None:
        self.loader = loader
        self.dataset = loader.dataset
        self.sampler = loader.sampler
        self.batch_sampler = None  # Lightning reads it when checking val/test loaders for shuffling
        self.skipped = skipped
        self.world_size = world_size
        self.stop_with_first_rank = stop_with_first_rank and world_size > 1
        self.cuts_read = 0
        self.seconds_read = 0.0
        self._resume: TrainPosition | None = None
        self._epoch = 0
        self._start = TrainPosition(0, 0, 0)
        self._positions: list[int] = []  # sampler batches consumed after each yielded batch, this epoch

    def resume_at(self, position: TrainPosition) -> None:
        """The pass over ``position.epoch`` starts after its first ``sampler_batches`` batches."""
        if not isinstance(self.sampler, ResumableSampler):
            raise TypeError(f"resuming needs a ResumableSampler, this loader has {type(self.sampler).__name__}")
        self._resume = position

    def position_after(self, yielded: int) -> TrainPosition:
        """The position once the first ``yielded`` batches of the current epoch were trained on."""
        local = yielded - self._start.yielded
        if local < 0 or local > len(self._positions):
            raise ValueError(
                f"position after {yielded} batches is unknown: this pass of epoch {self._epoch} started at "
                f"{self._start.yielded} and has yielded {len(self._positions)} since"
            )
        consumed = self._start.sampler_batches if local == 0 else self._positions[local - 1]
        return TrainPosition(self._epoch, consumed, yielded)

    def _begin_epoch(self) -> None:
        self._epoch = getattr(self.sampler, "epoch", 0)
        self._start = TrainPosition(self._epoch, 0, 0)
        if self._resume is not None and self._resume.epoch == self._epoch:
            self._start = self._resume
            self.sampler.skip_next(self._resume.sampler_batches)
            log.info("resuming epoch %d after %d sampler batches (%d trained)", self._epoch,
                     self._resume.sampler_batches, self._resume.yielded)
        if self._resume is not None and self._resume.epoch <= self._epoch:
            self._resume = None  # used, or the run had finished that epoch
        self._positions = []

    def __iter__(self) -> Iterator[Batch]:
        self._begin_epoch()
        before = sum(len(ids) for ids in self.skipped.values())
        consumed = self._start.sampler_batches
        finished = True
        for batch, skipped, seconds in self.loader:
            consumed += 1
            for reason, cut_id in skipped:
                self.skipped[reason].add(cut_id)
            if batch.feats.shape[0] == 0 and self.world_size == 1:
                continue
            if self.stop_with_first_rank and not _all_ranks_have_batch(True):
                log.info("epoch %d: another rank ran out of data; this rank stops with data left", self._epoch)
                finished = False
                break
            self.cuts_read += batch.feats.shape[0]
            self.seconds_read += seconds
            self._positions.append(consumed)
            yield batch
        if self.stop_with_first_rank and finished:
            _all_ranks_have_batch(False)  # the others' pending all-reduce for this step
        after = sum(len(ids) for ids in self.skipped.values())
        if after > before:
            report = {reason: len(ids) for reason, ids in sorted(self.skipped.items()) if ids}
            log.warning("data: %d more cuts skipped this pass; skipped so far by reason: %s", after - before, report)
