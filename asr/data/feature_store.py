"""Precomputed fbank: computed once by the data module's extractor, stored as Lhotse features.

Why: on a 2-core machine the DataLoader worker that computes fbank on the fly takes CPU
from the model every step, and a multi-epoch run computes the same frames again each
epoch. A store computes them once (through the same :class:`~asr.data.features.FbankExtractor`
call the on-the-fly path makes, so the numbers are identical and any extractor option flows
through), writes one ``.npy`` per cut (Lhotse's ``NumpyFilesWriter``: float32, lossless,
no extra dependency) and a manifest of the same cuts with ``features`` attached, which the
dataset reads instead of audio (with ``features.dither`` > 0 that freezes one dither draw per
cut). Augmentation on stored features (SpecAugment) still runs per batch; what needs the waveform (speed perturbation other than 1.0, noise mixing) takes the
on-the-fly path for that cut.

Layout: ``<store_dir>/<split>/`` holds ``cuts.jsonl.gz`` (audio and feature paths relative
to it), ``fbank/`` and ``store.json``, written last: the source manifest's sha256, the
extractor's options and the counts. A store whose ``store.json`` does not match the
manifest and extractor at hand is rebuilt, never read (another corpus or other fbank
options must not train silently on stale frames). Cuts whose audio cannot be read are
kept without features and counted: the dataset then skips them with its usual reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from itertools import chain, islice
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch
from lhotse import CutSet
from lhotse.features.base import Features
from lhotse.features.io import NumpyFilesWriter
from lhotse.utils import fastcopy
from tqdm import tqdm

from asr.data.audio import AudioError, cut_waveform
from asr.data.features import FRAME_SHIFT_S, FbankExtractor
from asr.data.manifest import read_cuts, write_cuts

log = logging.getLogger(__name__)

STORE_MANIFEST = "cuts.jsonl.gz"
STORE_INFO = "store.json"
FEATURE_FOLDER = "fbank"
_CHUNK = 64  # cuts a worker computes per task


def extractor_options(extractor: FbankExtractor) -> dict:
    """What the frames depend on: the extractor's fbank options (``config``, the ``features``
    group) and its other plain attributes (the backend). Read generically, so an option added
    to either is recorded without a change here."""
    config = getattr(extractor, "config", None)
    options = dict(config.to_dict()) if hasattr(config, "to_dict") else {}
    options.update({name: value for name, value in sorted(vars(extractor).items())
                    if isinstance(value, (bool, int, float, str)) and not name.startswith("_")})
    return {**options, "class": type(extractor).__qualname__, "sample_rate": extractor.sample_rate}


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def store_key(source_manifest: str | Path, extractor: FbankExtractor) -> dict:
    """What a store must have been built from to be read: the manifest's bytes and the options."""
    return {"source_sha256": file_sha256(source_manifest), "extractor": extractor_options(extractor)}


def store_is_current(split_dir: str | Path, key: dict) -> bool:
    info = Path(split_dir) / STORE_INFO
    if not info.is_file() or not (Path(split_dir) / STORE_MANIFEST).is_file():
        return False
    recorded = json.loads(info.read_text())
    return {k: recorded.get(k) for k in key} == key


class _Computer:
    """Computes and writes the features of a chunk of cuts (picklable for worker processes)."""

    def __init__(self, extractor: FbankExtractor, feature_dir: Path) -> None:
        self.extractor = extractor
        self.feature_dir = feature_dir

    def __call__(self, cuts: list) -> list[tuple[object, str | None]]:
        torch.set_num_threads(1)  # one process per core; fbank of one utterance gains nothing from threads
        writer = NumpyFilesWriter(self.feature_dir)
        out = []
        for cut in cuts:
            try:
                wav = cut_waveform(cut)  # (n,)
            except AudioError as err:
                out.append((cut, err.reason))
                continue
            if wav.numel() < self.extractor.min_samples:
                out.append((cut, "audio_too_short"))
                continue
            feats = self.extractor(wav).numpy()  # (T, F) float32
            key = writer.write(cut.id, feats)
            features = Features(
                type="fbank", num_frames=feats.shape[0], num_features=feats.shape[1],
                frame_shift=FRAME_SHIFT_S, sampling_rate=self.extractor.sample_rate,
                start=cut.start, duration=cut.duration, storage_type=writer.name, storage_path=FEATURE_FOLDER,
                storage_key=key, recording_id=cut.recording_id, channels=cut.channel,
            )
            out.append((fastcopy(cut, features=features), None))
        return out


def _chunks(cuts: Iterable, size: int) -> Iterator[list]:
    it = iter(cuts)
    while chunk := list(islice(it, size)):
        yield chunk


def _relative_audio(cut, split_dir: Path):
    """The cut with its (absolute) audio paths made relative to the store folder, so the
    corpus and its store can move together."""
    rec = getattr(cut, "recording", None)
    if rec is None:
        return cut
    for source in rec.sources:
        if source.type == "file" and Path(source.source).is_absolute():
            source.source = os.path.relpath(source.source, split_dir)
    return cut


def build_store(
    source_manifest: str | Path, split_dir: str | Path, extractor: FbankExtractor, workers: int = 1,
    progress: bool = True, chunk_size: int = _CHUNK,
) -> dict:
    """Compute the fbank of every cut of ``source_manifest`` into ``split_dir``; returns the
    ``store.json`` record (also written there, last). Workers take ``chunk_size`` cuts a task."""
    split_dir = Path(split_dir)
    split_dir.mkdir(parents=True, exist_ok=True)
    (split_dir / STORE_INFO).unlink(missing_ok=True)  # a half-rebuilt store must not look current
    key = store_key(source_manifest, extractor)
    cuts = read_cuts(source_manifest, lazy=True)
    computer = _Computer(extractor, split_dir / FEATURE_FOLDER)
    skipped: dict[str, int] = {}
    frames = 0

    def results() -> Iterator:
        chunks = _chunks(cuts, chunk_size)
        first = list(islice(chunks, 2))
        # Spawned workers each import torch (seconds): worth it only with more than one chunk.
        if workers <= 1 or len(first) < 2:
            yield from map(computer, chain(first, chunks))
            return
        with get_context("spawn").Pool(workers) as pool:
            yield from pool.imap(computer, chain(first, chunks))

    def stored_cuts() -> Iterator:
        nonlocal frames
        bar = tqdm(desc=f"fbank -> {split_dir}", unit="cut", disable=not progress)
        for chunk in results():
            for cut, reason in chunk:
                if reason is not None:
                    skipped[reason] = skipped.get(reason, 0) + 1
                    log.warning("feature store: cut %s has no features (%s); training skips it", cut.id, reason)
                else:
                    frames += cut.features.num_frames
                yield _relative_audio(cut, split_dir)
            bar.update(len(chunk))
        bar.close()

    write_cuts(stored_cuts(), split_dir / STORE_MANIFEST)
    info = {**key, "source": str(source_manifest), "frames": frames, "skipped": skipped}
    (split_dir / STORE_INFO).write_text(json.dumps(info, indent=2) + "\n")
    return info


class ResolveFeaturePaths:
    """Cut -> the same cut with its feature folder made absolute against the store folder
    (a class, not a closure, so a lazy CutSet mapping through it pickles into workers)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __call__(self, cut):
        if cut.has_features and not Path(cut.features.storage_path).is_absolute():
            cut.features.storage_path = str(self.root / cut.features.storage_path)
        return cut


def ensure_store(
    source_manifest: str | Path, split_dir: str | Path, extractor: FbankExtractor, workers: int = 1,
) -> Path:
    """The store's manifest for ``source_manifest``, built first unless a current one is there."""
    split_dir = Path(split_dir)
    if not store_is_current(split_dir, store_key(source_manifest, extractor)):
        log.info("building the feature store %s from %s", split_dir, source_manifest)
        build_store(source_manifest, split_dir, extractor, workers)
    return split_dir / STORE_MANIFEST


def read_store(split_dir: str | Path, lazy: bool = False) -> CutSet:
    """The store's cuts, audio and feature paths absolute (audio stays reachable for the
    on-the-fly path: speed perturbation, noise)."""
    split_dir = Path(split_dir)
    return read_cuts(split_dir / STORE_MANIFEST, lazy=lazy).map(ResolveFeaturePaths(split_dir))


def load_stored(cut) -> torch.Tensor:
    """(T, F) float32 features of a cut from a store; AudioError (``features_unreadable``) when
    its file is gone or damaged, so the batch skips and counts the cut like unreadable audio."""
    try:
        feats = cut.features.load()
    except (OSError, ValueError) as err:
        raise AudioError(f"stored features of {cut.id} unreadable: {err}", "features_unreadable") from err
    return torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32))
