"""Global CMVN statistics over training feature frames.

Written once into the data folder as {"mean": [F], "istd": [F], "frames": N, "features": {...}},
"features" being the fbank options they were computed with (``FeatureConfig.to_dict()``; files
written before it was recorded hold ``LEGACY`` stats). The model applies them (so exported
models carry them), the data module does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from lhotse import CutSet
from tqdm import tqdm

from asr.data.audio import AudioError, cut_waveform
from asr.data.feature_store import load_stored
from asr.data.features import TRAINING_BACKEND, FbankExtractor, FeatureConfig


class FrameSums(NamedTuple):
    """One cut's feature frames, summed (float64): what the statistics accumulate."""

    sum: np.ndarray  # (F,)
    squares: np.ndarray  # (F,) sum of squares
    frames: int


def frame_sums(feats: torch.Tensor) -> FrameSums:
    """(T, F) features -> their float64 sums per bin. numpy's pairwise sums on one thread, so a worker
    process and the main process give the same bits."""
    f64 = feats.numpy().astype(np.float64)
    return FrameSums(f64.sum(axis=0), (f64 * f64).sum(axis=0), f64.shape[0])


class _FeatureStream(torch.utils.data.IterableDataset):
    """The frame sums of every k-th cut of a stream, or None for an unreadable cut.

    Worker w of W extracts items w, w + W, ...; the DataLoader takes them round-robin,
    so the main process sees the cuts in stream order. Each worker reads the (lazy)
    manifest itself: only cut metadata crosses process boundaries, never a cut list, and
    only the sums come back (a feature tensor handed over from a worker costs more than its fbank).
    ``stored``: the cuts carry their features (a feature store's manifest), read instead of computed.
    """

    def __init__(self, cuts: Iterable, total: int, max_cuts: int | None, extractor: FbankExtractor,
                 stored: bool = False) -> None:
        self.cuts, self.total, self.max_cuts, self.extractor, self.stored = cuts, total, max_cuts, extractor, stored

    def _frames(self, cut) -> torch.Tensor:
        if self.stored:
            if not cut.has_features:  # the store's build could not read its audio: skipped, as it is from audio
                raise AudioError(f"cut {cut.id} has no stored features", "no_stored_features")
            return load_stored(cut)
        return self.extractor(cut_waveform(cut))

    def __iter__(self) -> Iterator[FrameSums | None]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for i, cut in enumerate(evenly_spread(self.cuts, self.total, self.max_cuts)):
            if i % workers != worker:
                continue
            try:
                yield frame_sums(self._frames(cut))  # of (T, F)
            except AudioError:
                yield None


def evenly_spread(items: Iterable, total: int, keep: int | None) -> Iterator:
    """Items number int(i * total / keep) for i < keep, streamed (all of them when keep is None or >= total)."""
    if not keep or total <= keep:
        yield from items
        return
    stride = total / keep
    wanted = 0
    for index, item in enumerate(items):
        if index == int(wanted * stride):
            yield item
            wanted += 1
            if wanted == keep:
                return


def compute_cmvn(
    cuts: CutSet | list, extractor: FbankExtractor | None = None, max_cuts: int | None = None, num_workers: int = 2,
    total: int | None = None, stored: bool = False,
) -> dict:
    """Mean and inverse std of every feature frame of `cuts` (float64 accumulation).

    ``max_cuts`` keeps that many cuts spread evenly over the manifest (every k-th),
    not the first ones: imported corpora are ordered by speaker, so a prefix would be
    a few speakers' statistics. ``cuts`` may be lazy: it is streamed (memory does not
    grow with it); ``total``, its number of cuts, spares the counting pass a lazy set
    otherwise needs. Unreadable cuts are skipped and counted in the returned "skipped" entry.
    ``extractor`` defaults to the training frontend with ``LEGACY`` options; its options are
    recorded in the returned "features" entry. ``stored``: ``cuts`` is a feature store's manifest
    built by ``extractor`` (``asr.data.feature_store``), whose frames are read instead of computed
    again (the store keeps them in float32, as computed: the same statistics).
    """
    extractor = extractor or FbankExtractor(backend=TRAINING_BACKEND)
    if total is None:
        total = sum(1 for _ in cuts) if getattr(cuts, "is_lazy", False) else len(cuts)
    selected = min(total, max_cuts) if max_cuts else total
    loader = torch.utils.data.DataLoader(
        _FeatureStream(cuts, total, max_cuts, extractor, stored), batch_size=None, num_workers=num_workers,
        collate_fn=lambda x: x,
    )
    total_sum = np.zeros(extractor.num_mel_bins, dtype=np.float64)
    total_sq = np.zeros_like(total_sum)
    frames, skipped, seen = 0, 0, 0
    for sums in tqdm(loader, total=selected, desc="cmvn", unit="utt"):
        seen += 1
        if sums is None or sums.frames == 0:
            skipped += 1
            continue
        total_sum += sums.sum
        total_sq += sums.squares
        frames += sums.frames
    if frames == 0:
        raise ValueError(f"no feature frames in {seen} cuts ({skipped} unreadable)")
    mean = torch.from_numpy(total_sum / frames)
    var = (torch.from_numpy(total_sq / frames) - mean * mean).clamp_min(1e-10)
    return {"mean": mean.tolist(), "istd": var.rsqrt().tolist(), "frames": frames, "skipped": skipped,
            "features": extractor.config.to_dict()}


def save_cmvn(stats: dict, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(stats) + "\n")
    return path


def load_cmvn(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean (F,), istd (F,)) float32 from a cmvn.json, ready for `encoder.set_cmvn`."""
    stats = json.loads(Path(path).read_text())
    mean = torch.tensor(stats["mean"], dtype=torch.float32)
    istd = torch.tensor(stats["istd"], dtype=torch.float32)
    if mean.shape != istd.shape or mean.dim() != 1:
        raise ValueError(f"{path}: mean {tuple(mean.shape)} and istd {tuple(istd.shape)} must be equal 1-D")
    return mean, istd


def cmvn_features(path: str | Path) -> FeatureConfig:
    """The fbank options a cmvn.json was computed with (``LEGACY`` when it predates the record)."""
    return FeatureConfig.from_dict(json.loads(Path(path).read_text()).get("features"))
