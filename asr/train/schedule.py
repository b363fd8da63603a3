"""Learning-rate schedules stepped once per optimizer step.

Each schedule is a picklable callable ``step -> factor`` used with
``torch.optim.lr_scheduler.LambdaLR``: the optimizer's configured ``lr`` is the peak,
reached at the end of the linear warmup. A callable object (not a closure) keeps
``LambdaLR.state_dict()`` complete, so resumed runs continue the same curve.
"""

from __future__ import annotations

import math

import torch

SCHEDULE_KINDS = ("noam", "cosine", "constant")


class WarmupSchedule:
    """Linear warmup from 0 to 1, then one of:

    - ``noam``: inverse square root, ``sqrt(warmup / step)`` (Wenet's WarmupLR shape);
    - ``cosine``: half cosine from 1 down to ``min_lr_ratio``, reached just after the
      last of ``total_steps`` updates (so the last update still moves the weights), flat after;
    - ``constant``: 1.
    """

    def __init__(
        self,
        kind: str = "noam",
        warmup_steps: int = 25000,
        total_steps: int | None = None,
        min_lr_ratio: float = 0.0,
    ) -> None:
        if kind not in SCHEDULE_KINDS:
            raise ValueError(f"scheduler kind {kind!r} is not one of {SCHEDULE_KINDS}.")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps ({warmup_steps}) must be >= 0.")
        if kind == "cosine" and (total_steps is None or total_steps <= warmup_steps):
            raise ValueError(
                f"cosine schedule needs total_steps ({total_steps}) > warmup_steps ({warmup_steps})."
            )
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio ({min_lr_ratio}) must be in [0, 1].")
        self.kind = kind
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_lr_ratio = min_lr_ratio
        # After :meth:`move_end`: the 1-based update the cosine was last re-aimed at and its progress there.
        # Plain attributes, so LambdaLR's state_dict carries them and a resumed run keeps the shorter curve.
        self.anchor_step: int | None = None
        self.anchor_progress = 0.0

    def __call__(self, step: int) -> float:
        # LambdaLR calls with the number of steps already taken; +1 so the very first
        # update uses a non-zero learning rate.
        step = step + 1
        if self.warmup_steps > 0 and step <= self.warmup_steps:
            return step / self.warmup_steps
        if self.kind == "constant":
            return 1.0
        if self.kind == "noam":
            return math.sqrt(max(self.warmup_steps, 1) / step)
        cosine = 0.5 * (1.0 + math.cos(math.pi * self._progress(step)))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine

    def _progress(self, step: int) -> float:
        """How far 1-based update ``step`` (after the warmup) is along the cosine, 0 to 1."""
        # Update n (= step - 1) = warmup - 1 has progress 0, update total_steps - 1 has
        # (total - warmup) / (total - warmup + 1) < 1, update total_steps would have 1.
        start, done = (self.warmup_steps, 0.0) if self.anchor_step is None else (self.anchor_step, self.anchor_progress)
        return min(1.0, done + (1.0 - done) * (step - start) / (self.total_steps - start + 1))

    def move_end(self, taken: int, total_steps: int) -> None:
        """End the cosine after ``total_steps`` updates instead, ``taken`` of them done: the rest of the curve
        is stretched or squeezed into the updates left, so the next update's rate is the one it would have had
        and the decay to ``min_lr_ratio`` still ends at the new last update. Only a cosine past its warmup
        moves its end."""
        if self.kind != "cosine":
            raise ValueError(f"only a cosine schedule can move its end, not {self.kind!r}")
        if taken < self.warmup_steps or total_steps <= taken:
            raise ValueError(f"cannot end the cosine after {total_steps} updates with {taken} taken (warmup "
                             f"{self.warmup_steps}): need warmup <= taken < new total")
        self.anchor_progress = self._progress(taken + 1)
        self.anchor_step = taken + 1
        self.total_steps = total_steps


def check_schedule(config, max_steps: int | None) -> None:
    """Refuse, before anything is built, a warmup the run never finishes.

    ``config``: the ``optim.scheduler`` group (``asr.train.config.SchedulerConfig``); the run's
    optimizer steps are its ``total_steps``, else ``max_steps`` (``trainer.max_steps``; None or
    < 0: unknown until the data is counted, checked then). A learning rate still warming up when
    the run ends never reaches the configured peak, and a cosine needs steps after the warmup.
    """
    total, key = ((config.total_steps, "optim.scheduler.total_steps") if config.total_steps is not None
                  else (max_steps, "trainer.max_steps"))
    if total is None or total < 0:
        return
    cosine = config.kind == "cosine"
    if config.warmup_steps >= total if cosine else config.warmup_steps > total:
        why = "leave no steps for the cosine decay" if cosine else "never reach its peak"
        raise ValueError(
            f"optim.scheduler.warmup_steps ({config.warmup_steps}) does not fit the run's {total} optimizer steps "
            f"({key}): the learning rate would {why}; set optim.scheduler.warmup_steps={total // 10} (a tenth "
            "of the steps) or run more steps.")


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    kind: str,
    warmup_steps: int,
    total_steps: int | None,
    min_lr_ratio: float,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR over ``WarmupSchedule``; call ``.step()`` after every optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, WarmupSchedule(kind, warmup_steps, total_steps, min_lr_ratio)
    )
