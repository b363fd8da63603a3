"""Reading and writing Lhotse CutSet manifests, eagerly or lazily.

Manifests store audio paths relative to the data folder, so a corpus can be
moved or copied and two builds in different folders are byte-identical.
`write_cuts` pins the gzip header (mtime 0, no file name) for the same reason:
`CutSet.to_file` stamps the current time into it.

Lazy reading (`read_cuts(..., lazy=True)`) parses one JSON line at a time when the
CutSet is iterated, so memory does not grow with the manifest: this is how the
training split of a large corpus is read. `write_cuts` streams its input and leaves
a `<manifest>.stats.json` beside it (cuts, seconds) so a lazy reader knows the size
of what it streams (progress totals, CMVN subsets) without a pass over it.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from lhotse import CutSet
from lhotse.cut import Cut

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusStats:
    """Size of a manifest (or Shar folder): number of cuts and total seconds of audio."""

    cuts: int
    seconds: float

    @property
    def hours(self) -> float:
        return self.seconds / 3600


def stats_path(path: str | Path) -> Path:
    """Where the stats of a manifest or Shar folder live: `<path>.stats.json`, beside it
    (not inside a Shar folder: Lhotse reads every file in one as a field)."""
    path = Path(path)
    return path.with_name(path.name + ".stats.json")


def write_stats(stats: CorpusStats, path: str | Path) -> Path:
    out = stats_path(path)
    out.write_text(json.dumps(asdict(stats)) + "\n")
    return out


def write_cuts(cuts: Iterable[Cut], path: str | Path) -> Path:
    """Write cuts as gzipped JSON lines with a reproducible byte stream (one cut in memory
    at a time), plus the `<path>.stats.json` sidecar."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count, seconds = 0, 0.0
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        for cut in cuts:
            gz.write((json.dumps(cut.to_dict(), ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
            count += 1
            seconds += cut.duration
    # rename last so an interrupted build never leaves a truncated manifest that looks finished
    tmp.replace(path)
    write_stats(CorpusStats(count, seconds), path)
    return path


def _absolute(path: str, root: Path) -> str:
    return path if Path(path).is_absolute() else str(root / path)


class ResolveAudioPaths:
    """Cut -> the same cut with relative file paths made absolute against `root`.

    A class rather than a closure so a lazy CutSet that maps through it can be
    pickled into data loader workers."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __call__(self, cut: Cut) -> Cut:
        rec = getattr(cut, "recording", None)
        if rec is None:
            return cut
        for source in rec.sources:
            if source.type == "file":
                source.source = _absolute(source.source, self.root)
        return cut


def read_cuts(path: str | Path, data_dir: str | Path | None = None, lazy: bool = False) -> CutSet:
    """A CutSet whose relative audio paths resolve against `data_dir` (default: the
    manifest's folder).

    lazy=False loads every cut into memory; lazy=True returns a CutSet that reads the
    file line by line each time it is iterated (same cuts, same order).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest not found: {path}")
    resolve = ResolveAudioPaths(data_dir if data_dir is not None else path.parent)
    if lazy:
        return CutSet.from_jsonl_lazy(path).map(resolve)
    return CutSet.from_cuts(resolve(c) for c in CutSet.from_file(path).to_eager())


def manifest_stats(path: str | Path) -> CorpusStats:
    """Cuts and seconds of a manifest: from its stats sidecar when it is at least as new
    as the manifest, else counted by one lazy pass (logged: it costs time on big manifests)."""
    path = Path(path)
    sidecar = stats_path(path)
    if sidecar.is_file() and sidecar.stat().st_mtime >= path.stat().st_mtime:
        data = json.loads(sidecar.read_text())
        return CorpusStats(int(data["cuts"]), float(data["seconds"]))
    log.info("%s has no stats sidecar: counting its cuts in one pass", path)
    count, seconds = 0, 0.0
    for cut in CutSet.from_jsonl_lazy(path):
        count += 1
        seconds += cut.duration
    return CorpusStats(count, seconds)
