"""The checkpoint callback: top-k by validation WER, and a ``last.ckpt`` that follows every validation.

Lightning's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when the same
validation also wrote a top-k file. Once the WER plateaus (no validation enters the top k),
``last.ckpt`` stays at the last improvement: a run killed later resumes from there and
trains those steps again, and whatever reads ``last.ckpt`` as "the current weights" (the
ablation's evaluation after a time-budget stop) gets older ones. This subclass writes
``last.ckpt`` after every validation, whether or not it entered the top k.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint


class TopKAndLastCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` (``save_last=True``) is refreshed at every validation.

    The top-k rule is Lightning's own. The refresh is skipped when this validation already
    saved (the parent then wrote ``last.ckpt`` itself), during the sanity check, in ``validate()``,
    under ``fast_dev_run``, and in runs that checkpoint at train-epoch end (the parent handles those).
    """

    @property
    def state_key(self) -> str:
        # The parent's key ("ModelCheckpoint{...}"): checkpoints written before this class
        # existed resume with their top-k records, and readers that look the records up by
        # that name (asr.train.checkpoint.top_k_checkpoints) find them in new ones.
        own = super().state_key
        return ModelCheckpoint.__qualname__ + own[len(type(self).__qualname__):]

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The parent writes last.ckpt at the end of any fit that saved none, fast_dev_run included, which
        # promises to checkpoint nothing: a smoke run pointed at a real run's folder would replace its last.ckpt.
        if not trainer.fast_dev_run:
            super().on_train_end(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if (self.save_last and not self._should_skip_saving_checkpoint(trainer)
                and not self._should_save_on_train_epoch_end(trainer)):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
