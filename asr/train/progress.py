"""A progress bar with a total even when the training loader has no length.

Lhotse's samplers draw batches until the data runs out, so Lightning sees an
epoch of unknown length and its bar shows no total. The data module knows the
corpus size (`estimated_batches_per_epoch`: each epoch's duration / max_duration / world
size); with ``trainer.max_steps`` set, the steps left cap it.

Its metrics are refreshed while training only at the logger's cadence (``trainer.log_every_n_steps``):
reading a logged device tensor on the host waits for the step that computed it, so a bar
refreshed every step would set the pace of the GPU. For the same reason the training step logs
its loss with ``prog_bar=False`` (Lightning reads every ``prog_bar`` value after every batch);
this bar shows the metrics named in ``TRAINING_METRICS_SHOWN`` itself, at that cadence.
"""

from __future__ import annotations

import logging
import math

from lightning.pytorch.callbacks import RichProgressBar

log = logging.getLogger(__name__)

TRAINING_METRICS_SHOWN = ("train_loss",)  # logged without prog_bar (module doc)


class EstimatedTotalProgressBar(RichProgressBar):
    """RichProgressBar whose training total is the data module's estimate when Lightning has none."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._estimates: dict[int, int | None] = {}  # epoch -> estimate (a curriculum's epochs differ)
        self._shown_metrics: dict = {}  # none until the logger's first write

    def _epoch_estimate(self) -> int | None:
        epoch = self.trainer.current_epoch
        if epoch not in self._estimates:
            estimate = getattr(self.trainer.datamodule, "estimated_batches_per_epoch", None)
            self._estimates[epoch] = estimate(epoch) if estimate is not None else None
            if self._estimates[epoch] is not None:
                log.info("training: about %d batches in epoch %d (estimated from the corpus duration)",
                         self._estimates[epoch], epoch)
        return self._estimates[epoch]

    @property
    def total_train_batches(self) -> int | float:
        total = super().total_train_batches
        if total != math.inf:
            return total
        trainer = self.trainer
        remaining = trainer.max_steps - trainer.global_step if trainer.max_steps and trainer.max_steps > 0 else math.inf
        estimate = self._epoch_estimate()
        return remaining if estimate is None else min(estimate, remaining)

    def get_metrics(self, trainer, pl_module) -> dict:
        """The metrics shown; while training, read anew only where the logger writes (module doc)."""
        # The logger connector's own test, so the bar reads exactly where the logger does.
        if trainer.training and not trainer._logger_connector.should_update_logs:
            return self._shown_metrics
        logged = trainer.callback_metrics
        shown = {name: float(logged[name]) for name in TRAINING_METRICS_SHOWN if name in logged}
        self._shown_metrics = {**super().get_metrics(trainer, pl_module), **shown}
        return self._shown_metrics
