"""A stream's feature frames waiting for the encoder, with what an endpoint reset needs to go back.

Axis legend: T feature frames, F feature bins.

The :class:`~asr.serve.multi_stream.MultiStreamRecognizer` takes overlapping chunks from the front of the
queue (``head``) and drops the frames the next chunk no longer needs (``drop``). At an endpoint
that restarts the encoder inside a chunk, the frames the chunk took from the split point on go
back to the front (``rewind``) to be encoded again from a fresh state (a talker who started in the chunk
before takes the last two chunks back); one that restarts the
online CMN normalizes the waiting frames again from their raw fbank values (``renormalize``), so
the next utterance's frames are the ones a fresh frontend gives. The raw frames are kept only
when a reset can ask for them.
"""

from __future__ import annotations

from collections import deque

import torch

from asr.streaming.frontend import StreamingFrontend


def _cat(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None or a.size(0) == 0:
        return b
    if b is None or b.size(0) == 0:
        return a
    return torch.cat([a, b])


class FeatureQueue:
    """(T, F) frames from the next chunk's start: normalized by ``frontend``, and raw when ``keep_raw``."""

    def __init__(self, frontend: StreamingFrontend, keep_raw: bool) -> None:
        self.frontend = frontend
        self.keep_raw = keep_raw and frontend.normalizes  # without a running normalization raw == normalized
        self.clear()

    def clear(self) -> None:
        self.feats: torch.Tensor | None = None  # (T, F) normalized
        self._raw: torch.Tensor | None = None  # (T, F) the same frames before normalization
        # The frames the last two drops took, (feats, raw) each, oldest first: what a rewind can put back
        self._dropped: deque[tuple[torch.Tensor, torch.Tensor | None]] = deque(maxlen=2)

    def __len__(self) -> int:
        return 0 if self.feats is None else self.feats.size(0)

    def add(self, raw: torch.Tensor | None) -> None:
        """Append (T, F) fbank frames (the frontend's fbank output, in stream order)."""
        if raw is None or raw.size(0) == 0:
            return
        self.feats = _cat(self.feats, self.frontend.normalize(raw))
        if self.keep_raw:
            self._raw = _cat(self._raw, raw)

    def head(self, n: int) -> torch.Tensor:
        """(min(n, T), F) the first frames (still queued)."""
        return self.feats[:n]

    def drop(self, n: int) -> None:
        """Remove the first n frames; the last two drops are remembered for :meth:`rewind`."""
        raw = None if self._raw is None else self._raw[:n]
        self._dropped.append((self.feats[:n], raw))
        self.feats = self.feats[n:] if self.feats.size(0) > n else None
        if self._raw is not None:
            self._raw = self._raw[n:] if self._raw.size(0) > n else None

    def rewind(self, start: int, drops: int = 1) -> None:
        """Put the frames of the last ``drops`` drops (1 or 2, in stream order) from their frame ``start`` on back
        in front; the drops before them are forgotten."""
        if not 1 <= drops <= len(self._dropped):
            raise ValueError(f"cannot rewind {drops} drop(s): {len(self._dropped)} remembered.")
        kept = list(self._dropped)[-drops:]
        feats = torch.cat([f for f, _ in kept])
        if not 0 <= start <= feats.size(0):
            raise ValueError(f"rewind start ({start}) outside the {feats.size(0)} dropped frames.")
        self.feats = _cat(feats[start:], self.feats)
        if self.keep_raw:
            self._raw = _cat(torch.cat([r for _, r in kept])[start:], self._raw)
        self._dropped.clear()

    def renormalize(self) -> None:
        """Restart the frontend's running normalization and normalize the queued frames again from it."""
        self.frontend.reset_normalization()
        if self.feats is None or not self.frontend.normalizes:
            return
        if not self.keep_raw:
            raise ValueError("renormalize needs a queue that keeps its raw frames (keep_raw=True).")
        self.feats = self.frontend.normalize(self._raw)
