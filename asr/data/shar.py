"""Lhotse Shar shards: writing a corpus into them, and reading this rank's share per epoch.

A Shar folder holds numbered pairs ``cuts.NNNNNN.jsonl.gz`` + ``recording.NNNNNN.tar``
(each cut's own audio as flac, read front to back: no random access, no small files).
That suits network file systems and object stores, and memory stays flat: a reader
holds one shard's open streams and the sampler's buffer, whatever the corpus size.

Splitting: each epoch the shard list is shuffled with ``Random(seed + epoch)`` (the
same on every rank) and rank r takes shards ``[r::world_size]`` of it, after the
list is cut to a multiple of world_size (the few shards left over are the next
epoch's chance, since the order changes). Ranks therefore read disjoint audio.
Data loader workers never open shards: the sampler runs in the main process and
hands each worker whole batches, so workers see disjoint batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from pathlib import Path

from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.shar.readers.lazy import LazySharIterator

from asr.data.manifest import CorpusStats, stats_path, write_stats

CUTS_FIELD, AUDIO_FIELD = "cuts", "recording"


def write_shar(cuts: Iterable[Cut], out_dir: str | Path, shard_size: int = 1000) -> CorpusStats:
    """Write ``cuts`` (each cut's audio, as flac) into Shar shards of ``shard_size`` cuts.

    Streams: one cut's audio in memory at a time. Also writes ``<out_dir>.stats.json``.
    Returns the number of cuts and seconds written.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size ({shard_size}) must be >= 1")
    out_dir = Path(out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty: Shar readers take every file in it as a shard")
    out_dir.mkdir(parents=True, exist_ok=True)
    counted = _Counting(cuts)
    CutSet(counted).to_shar(out_dir, fields={AUDIO_FIELD: "flac"}, shard_size=shard_size)
    stats = CorpusStats(counted.cuts, counted.seconds)
    write_stats(stats, out_dir)
    return stats


class _Counting:
    """Passes cuts through and counts them (to_shar reports paths, not sizes)."""

    def __init__(self, cuts: Iterable[Cut]) -> None:
        self.source, self.cuts, self.seconds = cuts, 0, 0.0

    def __iter__(self) -> Iterator[Cut]:
        for cut in self.source:
            self.cuts += 1
            self.seconds += cut.duration
            yield cut


def shard_paths(shar_dir: str | Path) -> dict[str, list[Path]]:
    """{"cuts": [...], "recording": [...]} sorted by shard number; checks that they pair up."""
    shar_dir = Path(shar_dir)
    if not shar_dir.is_dir():
        raise FileNotFoundError(f"Shar folder not found: {shar_dir} (write it with scripts/prepare_data.py "
                                "--shar-dir)")
    paths = {
        CUTS_FIELD: sorted(shar_dir.glob(f"{CUTS_FIELD}.*.jsonl*")),
        AUDIO_FIELD: sorted(shar_dir.glob(f"{AUDIO_FIELD}.*.tar*")),
    }
    if not paths[CUTS_FIELD]:
        raise FileNotFoundError(f"no {CUTS_FIELD}.*.jsonl.gz shards in {shar_dir}")
    numbers = {field: [p.name.split(".")[1] for p in ps] for field, ps in paths.items()}
    if numbers[CUTS_FIELD] != numbers[AUDIO_FIELD]:
        raise ValueError(f"{shar_dir}: cut shards {numbers[CUTS_FIELD][:5]}... and audio shards "
                         f"{numbers[AUDIO_FIELD][:5]}... do not pair up")
    return paths


def shar_stats(shar_dir: str | Path) -> CorpusStats | None:
    """Cuts and seconds from ``<shar_dir>.stats.json``; None when it is missing."""
    import json

    path = stats_path(shar_dir)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return CorpusStats(int(data["cuts"]), float(data["seconds"]))


class RankShardedShar:
    """Iterable of cuts (audio in memory) from this rank's shards of a Shar folder for the
    current epoch (``set_epoch``). See the module docstring for the split."""

    def __init__(self, shar_dir: str | Path, seed: int, world_size: int = 1, rank: int = 0) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank ({rank}) must be in [0, world_size={world_size})")
        self.paths = shard_paths(shar_dir)
        self.num_shards = len(self.paths[CUTS_FIELD])
        if self.num_shards < world_size:
            raise ValueError(f"{shar_dir} has {self.num_shards} shards for {world_size} ranks: every rank needs "
                             "at least one (write smaller shards with --shard-size)")
        self.seed, self.world_size, self.rank = seed, world_size, rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def shards_for_epoch(self, epoch: int) -> list[int]:
        """Shard numbers this rank reads in ``epoch``, in reading order."""
        order = list(range(self.num_shards))
        random.Random(self.seed + epoch).shuffle(order)
        usable = self.num_shards - self.num_shards % self.world_size
        return order[:usable][self.rank::self.world_size]

    def _reader(self, fields: tuple[str, ...]) -> LazySharIterator:
        mine = self.shards_for_epoch(self.epoch)
        return LazySharIterator(fields={f: [self.paths[f][i] for i in mine] for f in fields})

    def __iter__(self) -> Iterator[Cut]:
        return iter(self._reader((CUTS_FIELD, AUDIO_FIELD)))

    def cuts_without_audio(self) -> Iterator[Cut]:
        """This epoch's cuts, metadata only (for duration statistics: no tar is opened)."""
        return iter(self._reader((CUTS_FIELD,)))
