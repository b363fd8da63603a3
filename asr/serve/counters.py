"""Counters a long-running server keeps for benchmarks, bounded however long it runs."""

from __future__ import annotations

from collections import Counter


class BatchSizeHistogram:
    """How many batched steps ran with each number of streams: one entry per batch size seen (at most
    ``max_batch``), not one per step."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()  # batch size -> steps

    def add(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a batched step holds at least one stream, got {size}.")
        self.counts[size] += 1

    @property
    def steps(self) -> int:
        return sum(self.counts.values())

    @property
    def largest(self) -> int:
        """The largest batch so far (0 before the first step)."""
        return max(self.counts, default=0)

    @property
    def mean(self) -> float:
        """Streams per step (0.0 before the first step)."""
        steps = self.steps
        return sum(size * n for size, n in self.counts.items()) / steps if steps else 0.0

    def __len__(self) -> int:
        """Distinct batch sizes seen (the memory it holds)."""
        return len(self.counts)
