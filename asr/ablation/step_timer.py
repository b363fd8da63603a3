"""A Lightning callback that records every training step's duration, and its reader.

The ablation adds it to a training run (``+callbacks.step_timer._target_=...``):
it appends ``global_step,seconds`` lines to ``<default_root_dir>/step_times.csv``.
A step is timed from ``on_train_batch_start`` to ``on_train_batch_end`` (forward,
backward and optimizer step; data loading and validation excluded), so the
number compares the schemes' compute and not the shared data pipeline. A resumed
run appends to the same file.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

STEP_TIMES_NAME = "step_times.csv"
# What the timer writes, and nothing shorter: a line cut off mid-write ("6,0.",
# "6,0.12", "6") never matches, where float() would read it as a shorter time.
_LINE = re.compile(r"(\d+),(\d+\.\d{6})")


class StepTimer(pl.Callback):
    """Append each training step's wall time to ``step_times.csv`` (rank 0 only).

    Args:
        flush_every: lines buffered before a write (a crash loses at most these).
    """

    def __init__(self, flush_every: int = 20) -> None:
        if flush_every < 1:
            raise ValueError(f"flush_every must be >= 1, got {flush_every}")
        self.flush_every = flush_every
        self._start: float | None = None
        self._lines: list[str] = []
        self._path: Path | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._path = Path(trainer.default_root_dir) / STEP_TIMES_NAME
        if trainer.is_global_zero and self._path.is_file() and not self._path.read_bytes().endswith(b"\n"):
            # a killed run left a partial last line: end it, or this run's first line would be
            # glued onto it ("6" + "7,0.5..." reads as step 67)
            with self._path.open("a") as handle:
                handle.write("\n")

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._start is None or not trainer.is_global_zero:
            return
        self._lines.append(f"{trainer.global_step},{time.perf_counter() - self._start:.6f}\n")
        self._start = None
        if len(self._lines) >= self.flush_every:
            self._flush()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flush()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._flush()

    def _flush(self) -> None:
        if not self._lines or self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with self._path.open("a") as handle:
            handle.writelines(self._lines)
        self._lines = []


def read_step_stats(run_dir: Path, skip_first: int = 3) -> tuple[float | None, int | None]:
    """``(mean seconds per step, last global step)`` from a run's ``step_times.csv``.

    The first ``skip_first`` steps of the file are left out of the mean (allocator
    and kernel warm-up); all steps are used when there are no more than that.
    Lines not in the timer's exact format (cut off mid-write) are skipped.
    Returns ``(None, None)`` when the file is missing or holds no complete line.
    """
    path = Path(run_dir) / STEP_TIMES_NAME
    if not path.is_file():
        return None, None
    steps, times = [], []
    for line in path.read_text().splitlines():
        if match := _LINE.fullmatch(line):
            steps.append(int(match[1]))
            times.append(float(match[2]))
    if not times:
        return None, None
    kept = times[skip_first:] if len(times) > skip_first else times
    return sum(kept) / len(kept), max(steps)
