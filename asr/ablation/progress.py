"""A progress bar over a rung of the adaptive budget: the steps its runs still have to train.

A rung trains several runs in subprocesses, one or more at a time, for minutes to hours; the
runner's own lines say only when a run starts and ends. The bar adds every run's steps since the
rung began (each run's ``step_times.csv``, written by :class:`asr.ablation.step_timer.StepTimer`)
and polls them from a thread, so it shows the rung's steps done, their rate and the time left
whichever runs are training.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from asr.ablation.adaptive import read_trained
from asr.ablation.step_timer import read_step_stats


class RungProgress:
    """``start(steps, runs)`` opens the bar of a rung (closing the previous one), ``close()`` ends it.

    Args:
        poll_s: seconds between two reads of the runs' step files.
        file: where the bar is drawn (tqdm's default, stderr, when None).
    """

    def __init__(self, poll_s: float = 15.0, file: TextIO | None = None) -> None:
        if poll_s <= 0:
            raise ValueError(f"poll_s must be > 0, got {poll_s}")
        self.poll_s = poll_s
        self.file = file
        self._bar: tqdm | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._steps = 0
        self._begin: dict[Path, int] = {}

    def start(self, steps: int, runs: Sequence[Path]) -> None:
        """A rung that trains ``runs`` to ``steps``: each from where its finished rungs left it."""
        self.close()
        self._steps = steps
        self._begin = {Path(run): min(read_trained(Path(run))["steps"], steps) for run in runs}
        total = sum(steps - begin for begin in self._begin.values())
        left = sum(begin < steps for begin in self._begin.values())
        # A rerun replays the finished runs' rungs, which have nothing left to train.
        of = f" ({left} left to train)" if left != len(runs) else ""
        desc = f"[ablate] rung to {steps} steps, {len(runs)} run{'s' * (len(runs) != 1)}{of}"
        self._bar = tqdm(total=total, initial=self.done(), desc=desc, unit="step", file=self.file,
                         mininterval=self.poll_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="rung-progress", daemon=True)
        self._thread.start()

    def done(self) -> int:
        """Steps the rung's runs trained since it began (a run resumed mid-rung counts what it kept)."""
        total = 0
        for run, begin in self._begin.items():
            _, last = read_step_stats(run)
            total += min(self._steps, max(begin, last or 0)) - begin
        return total

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._bar is not None:
            self._update()
            self._bar.close()
            self._bar = None

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._update()

    def _update(self) -> None:
        bar = self._bar
        if bar is not None:
            bar.update(self.done() - bar.n)
