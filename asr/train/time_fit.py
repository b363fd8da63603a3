"""Fit a cosine schedule to the run's wall-clock cap, so a slower machine ends with a decayed model.

A recipe sets a number of steps and a cosine that decays to its floor at the last one; ``trainer.max_time``
guards a slower machine. Without this callback the cap stops such a run in the middle of its decay: the last
checkpoints come from a learning rate still far from its floor. With it, the run watches its own pace and,
when the steps left no longer fit the time left, moves the end of the cosine (and of the run) to the last
step the cap leaves time for; the run stops there with a validation and a checkpoint, as a cap's stop does,
so the last checkpoints and their average see a finished decay.

What it decides depends on the machine's speed, so two machines train different numbers of steps; the run's
summary says how many were planned and how many the cap left (``asr.train.run``), and a run whose steps all
fit is untouched. The end follows the pace in both directions (never past the recipe's last step), and a
resumed run keeps it (the schedule carries it in the scheduler's state, this callback in its own).

Off unless a run asks for it (``+callbacks.fit_schedule_to_time_cap._target_=asr.train.time_fit.FitScheduleToTimeCap``
with a ``trainer.max_time``): on the quickstart's small model, still far from converged at its cap, a decay
squeezed into the time left read worse than the same run stopped by the cap with its rate at a fifth of the peak
(more steps at a higher rate learn more there than the end of the decay gives; data/results/quickstart.md).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback, Timer

from asr.train.schedule import WarmupSchedule

log = logging.getLogger(__name__)


def reachable_step(step: int, seconds_per_step: float, seconds_left: float) -> int:
    """The last step a run at ``step`` reaches within ``seconds_left`` at ``seconds_per_step`` (at least the
    next one)."""
    if seconds_per_step <= 0:
        raise ValueError(f"need seconds_per_step > 0, got {seconds_per_step}")
    return step + max(1, math.floor(max(seconds_left, 0.0) / seconds_per_step))


def cap_timer(callbacks: list) -> Timer | None:
    """The ``Timer`` among a Trainer's ``callbacks`` that holds its ``max_time`` cap (None: no cap)."""
    for cb in callbacks:
        if isinstance(cb, Timer) and cb.time_remaining() is not None:
            return cb
    return None


class FitScheduleToTimeCap(Callback):
    """Move the cosine's end (and the run's) to the last step ``trainer.max_time`` leaves time for.

    check_every: steps between two looks at the pace. window_steps: the pace is measured over this many of the
    latest steps (validations included, as they cost the cap's time too), at least ``min_measured`` of them
    after the warmup. margin: the share of the cap kept free for the last validation and checkpoint. The end
    moves only when the pace puts it more than ``check_every`` steps from where it is.
    """

    def __init__(self, check_every: int = 50, window_steps: int = 400, min_measured: int = 150,
                 margin: float = 0.03) -> None:
        if check_every < 1 or window_steps < check_every or min_measured < check_every or not 0 <= margin < 1:
            raise ValueError(f"need check_every ({check_every}) >= 1, window_steps ({window_steps}) and "
                             f"min_measured ({min_measured}) >= check_every, 0 <= margin ({margin}) < 1")
        self.check_every, self.window_steps, self.min_measured, self.margin = (
            check_every, window_steps, min_measured, margin)
        self.planned_steps: int | None = None  # the recipe's max_steps, once the end was moved
        self.fitted_steps: int | None = None  # where the run now ends (None: where the recipe said)
        self._paces: deque[tuple[int, float]] = deque()  # (step, training seconds elapsed)

    @staticmethod
    def _schedule(trainer: pl.Trainer) -> tuple[Any, WarmupSchedule] | None:
        for config in trainer.lr_scheduler_configs:
            lambdas = getattr(config.scheduler, "lr_lambdas", [])
            if len(lambdas) == 1 and isinstance(lambdas[0], WarmupSchedule) and lambdas[0].kind == "cosine":
                return config.scheduler, lambdas[0]
        return None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.fitted_steps is not None:  # resumed after a move: the run ends where the schedule now does
            trainer.fit_loop.epoch_loop.max_steps = self.fitted_steps

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = int(trainer.global_step)
        if self.fitted_steps is not None and step >= self.fitted_steps:
            # a stop request, not max_steps alone: Lightning validates (and checkpoints) at the step it stops on
            trainer.should_stop = True
            return
        if step % self.check_every:
            return
        timer, found = cap_timer(trainer.callbacks), self._schedule(trainer)
        if timer is None or found is None:
            return
        scheduler, schedule = found
        planned = self.planned_steps if self.planned_steps is not None else trainer.max_steps
        if planned is None or planned <= 0 or step < schedule.warmup_steps:
            return
        taken = int(scheduler.last_epoch)  # the schedule's updates so far (one per optimizer step)
        end = self.fitted_steps if self.fitted_steps is not None else planned
        if self.planned_steps is None and schedule.total_steps - taken != end - step:
            return  # a cosine that does not end with the run (its own total_steps) is left as it is
        self._paces.append((step, timer.time_elapsed()))
        while self._paces and self._paces[0][0] < step - self.window_steps:
            self._paces.popleft()
        first_step, first_elapsed = self._paces[0]
        target, pace, duration = -1, 0.0, 0.0
        if step - first_step >= self.min_measured:
            pace = (self._paces[-1][1] - first_elapsed) / (step - first_step)
            if pace > 0:
                duration = timer.time_remaining() + timer.time_elapsed()
                target = min(planned, reachable_step(step, pace, timer.time_remaining() - self.margin * duration))
        # every rank ends on the same step: rank 0's reading decides
        target = int(trainer.strategy.broadcast(target, src=0))
        if target < 0 or abs(target - end) <= self.check_every:
            return
        schedule.move_end(taken, taken + (target - step))
        self.planned_steps = planned
        self.fitted_steps = None if target == planned else target
        trainer.fit_loop.epoch_loop.max_steps = target
        if trainer.is_global_zero:
            log.info("at %.2f s a step the %.0f-min time cap leaves time for %d of the %d planned steps: the cosine "
                     "now ends at step %d", pace, duration / 60, target, planned, target)

    def state_dict(self) -> dict[str, Any]:
        return {"planned_steps": self.planned_steps, "fitted_steps": self.fitted_steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.planned_steps = state_dict.get("planned_steps")
        self.fitted_steps = state_dict.get("fitted_steps")


def fitted_schedule(callbacks: list) -> dict | None:
    """{"planned_steps", "steps"} when a :class:`FitScheduleToTimeCap` among ``callbacks`` moved the run's end
    before the recipe's, else None."""
    for cb in callbacks:
        if isinstance(cb, FitScheduleToTimeCap) and cb.fitted_steps is not None:
            return {"planned_steps": cb.planned_steps, "steps": cb.fitted_steps}
    return None
