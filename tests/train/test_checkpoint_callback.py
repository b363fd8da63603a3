"""last.ckpt follows every validation, also when no validation enters the top k."""

from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from asr.train.checkpoint_callback import TopKAndLastCheckpoint


class PlateauModule(pl.LightningModule):
    """Trains a linear layer; its validation WER never improves after the first."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.layer(x).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_wer", 0.5)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def train(callback_cls, out, max_steps=8):
    data = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)
    callback = callback_cls(dirpath=out, filename="step{step}", monitor="val_wer", mode="min", save_top_k=1,
                            save_last=True)
    trainer = pl.Trainer(max_steps=max_steps, val_check_interval=2, limit_val_batches=1, callbacks=[callback],
                         logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(PlateauModule(), data, data)
    return torch.load(out / "last.ckpt", weights_only=False)


def test_last_checkpoint_is_the_last_validation_not_the_last_improvement(tmp_path):
    assert train(TopKAndLastCheckpoint, tmp_path / "ours")["global_step"] == 8
    # Lightning's own callback leaves last.ckpt at the first (and only top-1) validation.
    assert train(ModelCheckpoint, tmp_path / "lightning")["global_step"] == 2


def test_keeps_lightnings_state_key_so_old_checkpoints_resume_with_their_records(tmp_path):
    kwargs = dict(dirpath=tmp_path, monitor="val_wer", mode="min", save_top_k=5, save_last=True)
    assert TopKAndLastCheckpoint(**kwargs).state_key == ModelCheckpoint(**kwargs).state_key
    saved = train(TopKAndLastCheckpoint, tmp_path / "run")
    assert any(name.startswith("ModelCheckpoint{") for name in saved["callbacks"])


def _callback(out):
    return TopKAndLastCheckpoint(dirpath=out, filename="step{step}", monitor="val_wer", mode="min", save_top_k=1,
                                 save_last=True)


def _quiet_trainer(out, **kwargs):
    return pl.Trainer(callbacks=[_callback(out)], logger=False, enable_progress_bar=False,
                      enable_model_summary=False, limit_val_batches=1, **kwargs)


def _data():
    return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)


def test_the_sanity_check_writes_no_last_checkpoint(tmp_path):
    seen = []

    class AfterSanity(pl.Callback):
        def on_sanity_check_end(self, trainer, pl_module):
            seen.append((tmp_path / "last.ckpt").exists())

    trainer = _quiet_trainer(tmp_path, max_steps=2, val_check_interval=2, num_sanity_val_steps=1)
    trainer.callbacks.append(AfterSanity())
    trainer.fit(PlateauModule(), _data(), _data())
    assert seen == [False]
    assert torch.load(tmp_path / "last.ckpt", weights_only=False)["global_step"] == 2


def test_validate_leaves_the_run_checkpoints_alone(tmp_path):
    module = PlateauModule()
    _quiet_trainer(tmp_path, max_steps=2, val_check_interval=2, num_sanity_val_steps=0).fit(module, _data(), _data())
    written = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    with torch.no_grad():
        module.layer.weight.add_(1.0)  # weights that are not the run's: a rewrite would show them
    # val_check_interval in steps, as the configs set it: validation is not tied to the epoch's end
    _quiet_trainer(tmp_path, val_check_interval=2).validate(module, _data(), verbose=False)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == written  # no last-v1.ckpt either


def test_fast_dev_run_writes_no_checkpoint(tmp_path):
    # Lightning's own callback writes last.ckpt when such a fit ends (it saved none on the way).
    _quiet_trainer(tmp_path, fast_dev_run=2, val_check_interval=2).fit(PlateauModule(), _data(), _data())
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


# Validation WER by step: the stop's extra validation (step 6) scores best, so it would stay in a top 2.
WER_AT_STEP = {4: 0.5, 6: 0.1, 8: 0.4, 12: 0.3}


class StepWerModule(PlateauModule):
    def validation_step(self, batch, batch_idx):
        self.log("val_wer", WER_AT_STEP[self.global_step])


class StopAtStep(pl.Callback):
    """Sets ``trainer.should_stop`` after a training step, as Lightning's Timer does when max_time runs out."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            trainer.should_stop = True


def _fit_to_twelve(out, stop_at=None, resume=False):
    callbacks = [TopKAndLastCheckpoint(dirpath=out, filename="{step}", monitor="val_wer", mode="min",
                                       save_top_k=2, save_last=True)]
    if stop_at is not None:
        callbacks.append(StopAtStep(stop_at))
    trainer = pl.Trainer(max_steps=12, val_check_interval=4, check_val_every_n_epoch=None, limit_val_batches=1,
                         callbacks=callbacks, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0)
    trainer.fit(StepWerModule(), _data(), _data(), ckpt_path=out / "last.ckpt" if resume else None)
    return torch.load(out / "last.ckpt", weights_only=False)


def _top_k(checkpoint):
    (state,) = [s for name, s in checkpoint["callbacks"].items() if name.startswith("ModelCheckpoint")]
    return {Path(path).name: round(float(score), 4) for path, score in state["best_k_models"].items()}, Path(state["best_model_path"]).name


def test_a_run_resumed_after_a_stop_keeps_the_uninterrupted_runs_top_k(tmp_path):
    whole, _ = _top_k(_fit_to_twelve(tmp_path / "whole"))
    assert whole == {"step=8.ckpt": 0.4, "step=12.ckpt": 0.3}
    stopped = _fit_to_twelve(tmp_path / "cut", stop_at=6)
    assert stopped["global_step"] == 6
    # The stopped run itself averages its latest weights: the stop's validation entered its top 2.
    assert _top_k(stopped) == ({"step=4.ckpt": 0.5, "step=6.ckpt": 0.1}, "step=6.ckpt")
    resumed = _fit_to_twelve(tmp_path / "cut", resume=True)
    assert resumed["global_step"] == 12
    assert _top_k(resumed) == (whole, "step=12.ckpt")
    assert (tmp_path / "cut" / "step=6.ckpt").exists()  # left out of the record, not deleted


def test_a_stop_on_a_scheduled_validation_keeps_its_checkpoint_on_resume(tmp_path):
    _fit_to_twelve(tmp_path / "cut", stop_at=8)
    resumed = _fit_to_twelve(tmp_path / "cut", resume=True)
    assert _top_k(resumed) == (_top_k(_fit_to_twelve(tmp_path / "whole"))[0], "step=12.ckpt")
    assert _top_k(resumed)[0] == {"step=8.ckpt": 0.4, "step=12.ckpt": 0.3}
