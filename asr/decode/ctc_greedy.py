"""Greedy (best path) CTC decoding.

Axis legend: B batch, T' encoder frames, V vocab.
"""

from __future__ import annotations

import torch


def ctc_greedy(log_probs: torch.Tensor, lens: torch.Tensor, blank_id: int = 0) -> list[list[int]]:
    """Arg-max per frame, merge repeats, drop blanks.

    Args:
        log_probs: (B, T', V) (any monotone scores work: only the arg-max is used).
        lens: (B,) valid frames.
    Returns:
        B token lists.
    """
    best = log_probs.argmax(dim=-1).cpu()  # (B, T')
    hyps = []
    for b, length in enumerate(lens.tolist()):
        path = best[b, :length]
        if length > 0:
            # Keep a frame when it differs from the previous one, then drop blanks.
            keep = torch.ones(length, dtype=torch.bool)
            keep[1:] = path[1:] != path[:-1]
            path = path[keep]
        hyps.append([t for t in path.tolist() if t != blank_id])
    return hyps
