"""Global CMVN statistics over training feature frames.

Written once into the data folder as {"mean": [F], "istd": [F], "frames": N};
the model applies them (so exported models carry them), the data module does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from lhotse import CutSet
from tqdm import tqdm

from asr.data.audio import AudioError, cut_waveform
from asr.data.features import FbankExtractor


class _FeatureDataset(torch.utils.data.Dataset):
    def __init__(self, cuts: list, extractor: FbankExtractor) -> None:
        self.cuts, self.extractor = cuts, extractor

    def __len__(self) -> int:
        return len(self.cuts)

    def __getitem__(self, i: int) -> torch.Tensor | None:
        try:
            return self.extractor(cut_waveform(self.cuts[i]))  # (T, F)
        except AudioError:
            return None


def compute_cmvn(
    cuts: CutSet, extractor: FbankExtractor | None = None, max_cuts: int | None = None, num_workers: int = 2
) -> dict:
    """Mean and inverse std of every feature frame of `cuts` (float64 accumulation).

    ``max_cuts`` keeps that many cuts spread evenly over the manifest (every k-th),
    not the first ones: imported corpora are ordered by speaker, so a prefix would be
    a few speakers' statistics. Unreadable cuts are skipped and counted in the
    returned "skipped" entry.
    """
    extractor = extractor or FbankExtractor()
    cut_list = list(cuts)
    if max_cuts and len(cut_list) > max_cuts:
        stride = len(cut_list) / max_cuts
        cut_list = [cut_list[int(i * stride)] for i in range(max_cuts)]
    loader = torch.utils.data.DataLoader(
        _FeatureDataset(cut_list, extractor), batch_size=None, num_workers=num_workers,
        collate_fn=lambda x: x,
    )
    total = torch.zeros(extractor.num_mel_bins, dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    frames, skipped = 0, 0
    for feats in tqdm(loader, total=len(cut_list), desc="cmvn", unit="utt"):
        if feats is None or feats.shape[0] == 0:
            skipped += 1
            continue
        f64 = feats.to(torch.float64)
        total += f64.sum(0)
        total_sq += (f64 * f64).sum(0)
        frames += f64.shape[0]
    if frames == 0:
        raise ValueError(f"no feature frames in {len(cut_list)} cuts ({skipped} unreadable)")
    mean = total / frames
    var = (total_sq / frames - mean * mean).clamp_min(1e-10)
    return {"mean": mean.tolist(), "istd": var.rsqrt().tolist(), "frames": frames, "skipped": skipped}


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
