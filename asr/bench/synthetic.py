"""Random batches shaped like duration-bucketed ones, for benchmarks of a recipe whose corpus is not here.

Audio seconds are feature frames / 100 (10 ms fbank hop).
"""

from __future__ import annotations

import torch

from asr.data.batch import Batch
from asr.data.features import FRAMES_PER_SECOND


def synthetic_batches(n: int, max_duration: float, vocab_size: int, feat_dim: int, seed: int = 0,
                      seconds: tuple[float, float] = (2.0, 16.0)) -> list[Batch]:
    """``n`` batches shaped like duration-bucketed ones: per batch one length (T frames,
    uniform in ``seconds``), as many utterances as fit ``max_duration``, rows 80-100% of T long,
    ~3 tokens a second."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        t_sec = seconds[0] + (seconds[1] - seconds[0]) * torch.rand((), generator=g).item()
        b = max(1, int(max_duration // t_sec))
        frames = int(t_sec * FRAMES_PER_SECOND)
        feat_lens = (frames * (0.8 + 0.2 * torch.rand(b, generator=g))).long().clamp(min=16)
        feat_lens[0] = frames
        feats = torch.randn(b, frames, feat_dim, generator=g)
        u = max(1, int(3 * t_sec))
        token_lens = torch.randint(max(1, u // 2), u + 1, (b,), generator=g)
        tokens = torch.randint(1, vocab_size - 1, (b, u), generator=g)
        tokens = tokens.masked_fill(torch.arange(u)[None] >= token_lens[:, None], -1)
        out.append(Batch(feats, feat_lens, tokens, token_lens, [f"synthetic-{i}-{j}" for j in range(b)], [""] * b))
    return out


def audio_seconds(batch: Batch) -> float:
    """Seconds of audio in ``batch``: its rows' valid frames, not the padding."""
    return float(batch.feat_lens.sum()) / FRAMES_PER_SECOND
