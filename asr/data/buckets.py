"""Batches padded to a few fixed lengths, so that a compiled step meets a few shapes.

A duration-bucketed sampler gives nearly every batch its own frame count T and token count U.
``torch.compile`` guards its graphs on shapes, so each new (T, U) can cost a recompile (or, with
dynamic shapes, a guard on how the new sizes relate). Padding T up to the next of a few bucket
lengths, and U up to a multiple, leaves a few shapes per batch size. Every frame and token is
kept: the padding is zeros after each row's frames and -1 after its tokens, and the lengths are
unchanged, so the model computes the same loss (its masks already ignore padding).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch.utils.data import Dataset

from asr.data.batch import Batch


def check_buckets(frame_buckets: Sequence[int], token_multiple: int = 1) -> tuple[int, ...]:
    """The bucket lengths sorted, after checking they are positive and distinct, and the multiple >= 1."""
    buckets = tuple(sorted(int(b) for b in frame_buckets))
    if not buckets or buckets[0] < 1 or len(set(buckets)) != len(buckets):
        raise ValueError(f"frame buckets ({list(frame_buckets)}) must be distinct lengths >= 1, at least one.")
    if token_multiple < 1:
        raise ValueError(f"token_multiple ({token_multiple}) must be >= 1.")
    return buckets


def bucket_length(frames: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= ``frames``; beyond the largest, the next multiple of the largest
    (a batch longer than every bucket is padded, never cut)."""
    for b in buckets:
        if frames <= b:
            return b
    last = buckets[-1]
    return -(-frames // last) * last


def pad_to_buckets(batch: Batch, frame_buckets: Sequence[int], token_multiple: int = 1) -> Batch:
    """``batch`` with feats (B, T, F) padded with zeros to (B, T_bucket, F) and tokens (B, U) padded with -1
    to (B, U rounded up to ``token_multiple``); lengths, keys and texts unchanged."""
    buckets = check_buckets(frame_buckets, token_multiple)
    frames, tokens = batch.feats.size(1), batch.tokens.size(1)
    extra_t = bucket_length(frames, buckets) - frames
    extra_u = -(-tokens // token_multiple) * token_multiple - tokens
    return batch._replace(
        feats=F.pad(batch.feats, (0, 0, 0, extra_t)) if extra_t else batch.feats,  # (B, T_bucket, F)
        tokens=F.pad(batch.tokens, (0, extra_u), value=-1) if extra_u else batch.tokens,  # (B, U')
    )


def geometric_buckets(min_frames: int, max_frames: int, count: int) -> tuple[int, ...]:
    """``count`` bucket lengths from ``min_frames`` to ``max_frames`` in equal ratios, each a multiple of 8
    (the largest covers ``max_frames``): padding is then at most that ratio minus one of a batch's frames."""
    if count < 1 or not 1 <= min_frames <= max_frames:
        raise ValueError(f"need count ({count}) >= 1 and 1 <= min_frames ({min_frames}) <= max_frames ({max_frames}).")
    if count == 1:
        return (-(-max_frames // 8) * 8,)
    ratio = (max_frames / min_frames) ** (1 / (count - 1))
    lengths = {-(-round(min_frames * ratio**i) // 8) * 8 for i in range(count - 1)} | {-(-max_frames // 8) * 8}
    return tuple(sorted(lengths))


class BucketPadded(Dataset):
    """``dataset``'s items, (Batch, ...) tuples, with each Batch padded by :func:`pad_to_buckets`."""

    def __init__(self, dataset: Dataset, frame_buckets: Sequence[int], token_multiple: int = 1) -> None:
        self.dataset = dataset
        self.frame_buckets = check_buckets(frame_buckets, token_multiple)
        self.token_multiple = token_multiple

    def __getitem__(self, key):
        batch, *rest = self.dataset[key]
        return (pad_to_buckets(batch, self.frame_buckets, self.token_multiple), *rest)
