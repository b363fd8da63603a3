"""A progress bar with a total even when the training loader has no length.

Lhotse's samplers draw batches until the data runs out, so Lightning sees an
epoch of unknown length and its bar shows no total. The data module knows the
corpus size (`estimated_batches_per_epoch`: total duration / max_duration / world
size); with ``trainer.max_steps`` set, the steps left cap it.
"""

from __future__ import annotations

import logging
import math

from lightning.pytorch.callbacks import RichProgressBar

log = logging.getLogger(__name__)


class EstimatedTotalProgressBar(RichProgressBar):
    """RichProgressBar whose training total is the data module's estimate when Lightning has none."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._estimate: int | None = None
        self._estimated = False

    def _epoch_estimate(self) -> int | None:
        if not self._estimated:
            self._estimated = True
            estimate = getattr(self.trainer.datamodule, "estimated_batches_per_epoch", None)
            self._estimate = estimate() if estimate is not None else None
            if self._estimate is not None:
                log.info("training: about %d batches per epoch (estimated from the corpus duration)", self._estimate)
        return self._estimate

    @property
    def total_train_batches(self) -> int | float:
        total = super().total_train_batches
        if total != math.inf:
            return total
        trainer = self.trainer
        remaining = trainer.max_steps - trainer.global_step if trainer.max_steps and trainer.max_steps > 0 else math.inf
        estimate = self._epoch_estimate()
        return remaining if estimate is None else min(estimate, remaining)
