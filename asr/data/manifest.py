"""Reading and writing Lhotse CutSet manifests.

Manifests store audio paths relative to the data folder, so a corpus can be
moved or copied and two builds in different folders are byte-identical.
`write_cuts` pins the gzip header (mtime 0, no file name) for the same reason:
`CutSet.to_file` stamps the current time into it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path

from lhotse import CutSet
from lhotse.cut import Cut


def write_cuts(cuts: Iterable[Cut], path: str | Path) -> Path:
    """Write cuts as gzipped JSON lines with a reproducible byte stream."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        for cut in cuts:
            gz.write((json.dumps(cut.to_dict(), ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
    # rename last so an interrupted build never leaves a truncated manifest that looks finished
    tmp.replace(path)
    return path


def _absolute(path: str, root: Path) -> str:
    return path if Path(path).is_absolute() else str(root / path)


def read_cuts(path: str | Path, data_dir: str | Path | None = None) -> CutSet:
    """Load a CutSet eagerly; relative audio paths are resolved against `data_dir`
    (default: the manifest's folder)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"manifest not found: {path}")
    root = Path(data_dir) if data_dir is not None else path.parent
    cuts = CutSet.from_file(path).to_eager()

    def resolve(cut: Cut) -> Cut:
        rec = getattr(cut, "recording", None)
        if rec is None:
            return cut
        for source in rec.sources:
            if source.type == "file":
                source.source = _absolute(source.source, root)
        return cut

    return CutSet.from_cuts(resolve(c) for c in cuts)
