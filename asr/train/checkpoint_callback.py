"""The checkpoint callback: top-k by validation WER, and a ``last.ckpt`` that follows every validation.

Lightning's ``ModelCheckpoint(save_last=True)`` rewrites ``last.ckpt`` only when the same
validation also wrote a top-k file. Once the WER plateaus (no validation enters the top k),
``last.ckpt`` stays at the last improvement: a run killed later resumes from there and
trains those steps again, and whatever reads ``last.ckpt`` as "the current weights" (the
ablation's evaluation after a time-budget stop) gets older ones. This subclass writes
``last.ckpt`` after every validation, whether or not it entered the top k.

A stop in the middle of a validation interval (``trainer.max_time``, a signal) makes Lightning validate
once more before it ends, and that checkpoint may enter the top k: the stopped run then averages its
latest weights. A run resumed from there goes on to the validations an uninterrupted run makes, so the
callback forgets, on resume, the top-k entries such stops added: the resumed run keeps and averages the
checkpoints the uninterrupted run would (the files stay on disk).
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

log = logging.getLogger(__name__)
STOP_PATHS_KEY = "stop_validation_paths"  # the callback state's record of the top-k files a stop's validation wrote


def validation_is_scheduled(trainer: pl.Trainer) -> bool | None:
    """Whether the validation starting now is one the run's schedule makes, stop or no stop (None: cannot tell).

    ``val_check_interval`` in batches (an int ``val_check_batch``): every that many batches across epochs when
    ``check_val_every_n_epoch`` is None, else within the epochs it names, and at each such epoch's last batch.
    A schedule in seconds or an iterable of unknown length is not told apart (None).
    """
    every = trainer.val_check_batch
    if getattr(trainer, "_val_check_time_interval", None) is not None or not isinstance(every, int) or every < 1:
        return None
    loop = trainer.fit_loop.epoch_loop
    if trainer.check_val_every_n_epoch is None:
        return (loop.total_batch_idx + 1) % every == 0
    if (trainer.current_epoch + 1) % trainer.check_val_every_n_epoch != 0:
        return False
    return (loop.batch_idx + 1) % every == 0 or bool(loop.batch_progress.is_last_batch)


class TopKAndLastCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` (``save_last=True``) is refreshed at every validation.

    The top-k rule is Lightning's own. The refresh is skipped when this validation already
    saved (the parent then wrote ``last.ckpt`` itself), during the sanity check, in ``validate()``,
    under ``fast_dev_run``, and in runs that checkpoint at train-epoch end (the parent handles those).
    Top-k files written by a validation that only a stop made (see the module's docstring) are recorded
    in the callback's state, and a resume drops them from the top k.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stop_validation_paths: set[str] = set()
        self._validating_for_a_stop = False

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

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_start(trainer, pl_module)
        # A stop raised by a training batch (a time cap, a signal) is already set when its validation starts;
        # early stopping sets it only at a validation's end.
        self._validating_for_a_stop = (trainer.state.fn == "fit" and not trainer.sanity_checking
                                       and trainer.should_stop and validation_is_scheduled(trainer) is False)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        # Recorded before the save, so that the file's own callback state (and last.ckpt's) holds it.
        if self._validating_for_a_stop and filepath in self.best_k_models:
            self.stop_validation_paths.add(filepath)
        self.stop_validation_paths &= set(self.best_k_models)
        super()._save_checkpoint(trainer, filepath)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), STOP_PATHS_KEY: sorted(self.stop_validation_paths)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        dropped = [path for path in state_dict.get(STOP_PATHS_KEY, []) if path in self.best_k_models]
        if not dropped:
            return
        for path in dropped:
            del self.best_k_models[path]
        self.stop_validation_paths = set()
        self._recompute_best()
        log.info("resuming: %s left the top-%d record (written by a stop's extra validation, which an "
                 "uninterrupted run does not make; the files stay)", ", ".join(dropped), self.save_top_k)

    def _recompute_best(self) -> None:
        """The best and k-th entries of ``best_k_models`` again, by Lightning's rule, after entries left it."""
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        worst, best = (max, min) if self.mode == "min" else (min, max)
        if self.best_k_models:
            self.best_model_path = best(self.best_k_models, key=self.best_k_models.get)
            self.best_model_score = self.best_k_models[self.best_model_path]
        else:
            self.best_model_path, self.best_model_score = "", None
        if len(self.best_k_models) == k:
            self.kth_best_model_path = worst(self.best_k_models, key=self.best_k_models.get)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        else:
            # Lightning's values before the record fills: the next validation enters it whatever its score.
            self.kth_best_model_path = ""
            self.kth_value = torch.tensor(torch.inf if self.mode == "min" else -torch.inf)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if (self.save_last and not self._should_skip_saving_checkpoint(trainer)
                and not self._should_save_on_train_epoch_end(trainer)):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
