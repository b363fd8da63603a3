"""Validation WER that adds up correctly across DDP ranks.

Per-rank WERs cannot be averaged (ranks see different numbers of words), so each
rank keeps its raw counts in an ``asr.decode.ErrorCounter`` and the module sums
``[word_errors, ref_words]`` over ranks before dividing.
"""

from __future__ import annotations

import torch

from asr.decode import ErrorCounter


class WerSums:
    """Word-error counts of one validation setting on one rank."""

    def __init__(self) -> None:
        self.counter = ErrorCounter()

    def reset(self) -> None:
        self.counter = ErrorCounter()

    def add(self, ref: str, hyp: str) -> None:
        self.counter.add(ref, hyp)

    def as_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """(2,) float64 ``[word_errors, ref_words]``, ready for an all-reduce sum."""
        c = self.counter
        return torch.tensor([c.word_errors, c.ref_words], dtype=torch.float64, device=device)

    @staticmethod
    def rate(totals: torch.Tensor) -> float:
        """WER from summed ``[word_errors, ref_words]``; 1.0 when nothing was scored."""
        errors, words = float(totals[0]), float(totals[1])
        return errors / words if words > 0 else 1.0
