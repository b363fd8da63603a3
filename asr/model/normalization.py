"""Causal per-utterance mean normalization of feature frames (online CMN).

Axis letters: B batch, T frames, F feature bins.
"""

from __future__ import annotations

import torch


class OnlineCmn:
    """Causal per-utterance mean normalization, in front of the model's global CMVN.

    Why: a model that only ever subtracts one global mean learns the long-term spectrum of
    its training engines; a voice with another spectral balance (flite's, a new microphone)
    then starts off-centre in every bin. Frame t here gets the running mean of its own
    utterance's frames 0..t instead, started from the global mean as if that had been seen
    for ``prior_frames`` frames (so the first frames, with little evidence, stay near it):

        m_t = (prior_frames * global_mean + sum_{s<=t} x_s) / (prior_frames + t + 1)
        y_t = x_t - m_t + global_mean

    and the model's global CMVN, (y - global_mean) * istd, finishes the job. Causal, so a
    stream normalizes frame by frame exactly as the whole utterance would be
    (:meth:`stream`), and padding after an utterance never changes its frames.
    Sums run in float64: a streamed and a one-shot pass agree to float32 rounding.

    Args:
        global_mean: (F,) the training set's mean (the model's ``cmvn_mean``).
        prior_frames: weight of the global mean, in frames (> 0).
    """

    def __init__(self, global_mean: torch.Tensor, prior_frames: float) -> None:
        if not prior_frames > 0:
            raise ValueError(f"prior_frames ({prior_frames}) must be > 0")
        global_mean = torch.as_tensor(global_mean, dtype=torch.float64)
        if global_mean.dim() != 1:
            raise ValueError(f"global_mean must be (F,), got shape {tuple(global_mean.shape)}")
        self.global_mean = global_mean
        self.prior_frames = float(prior_frames)

    def apply(self, feats: torch.Tensor, sums: torch.Tensor | None = None,
              count: int = 0) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Normalize (..., T, F) frames that follow ``count`` frames summing to ``sums`` (..., F).

        Returns (normalized frames, sums and count after them) for the next call.
        """
        if feats.size(-1) != self.global_mean.numel():
            raise ValueError(f"feats have {feats.size(-1)} bins, the global mean {self.global_mean.numel()}")
        if feats.size(-2) == 0:
            return feats, sums, count
        mean = self.global_mean.to(feats.device)
        x = feats.to(torch.float64)
        running = x.cumsum(-2)  # (..., T, F)
        if sums is not None:
            running = running + sums.unsqueeze(-2)
        seen = torch.arange(count + 1, count + feats.size(-2) + 1, dtype=torch.float64, device=feats.device)  # (T,)
        frame_mean = (self.prior_frames * mean + running) / (self.prior_frames + seen).unsqueeze(-1)
        out = (x - frame_mean + mean).to(feats.dtype)
        return out, running[..., -1, :], count + feats.size(-2)

    def __call__(self, feats: torch.Tensor) -> torch.Tensor:
        """(T, F) or (B, T, F) whole utterances (each row from its first frame) -> normalized, same shape."""
        return self.apply(feats)[0]

    def stream(self) -> OnlineCmnStream:
        return OnlineCmnStream(self)


class OnlineCmnStream:
    """One utterance fed piece by piece: :meth:`push` gives what :class:`OnlineCmn` gives the whole."""

    def __init__(self, norm: OnlineCmn) -> None:
        self.norm = norm
        self.reset()

    def reset(self) -> None:
        self._sums: torch.Tensor | None = None
        self._count = 0

    def push(self, feats: torch.Tensor) -> torch.Tensor:
        """(..., n, F) next frames -> normalized, same shape (the leading axes fixed for the stream)."""
        out, self._sums, self._count = self.norm.apply(feats, self._sums, self._count)
        return out
