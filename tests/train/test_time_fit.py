"""The cosine fitted to a time cap (asr.train.time_fit), on a tiny Lightning run with a step clock."""

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Timer

from asr.train.outcome import TrainingOutcome, outcome_lines, read_outcome
from asr.train.schedule import build_scheduler
from asr.train.time_fit import FitScheduleToTimeCap, fitted_last_step, fitted_schedule

WARMUP, PLANNED, INTERVAL = 10, 100, 10


def test_the_last_step_is_the_last_validation_the_time_left_reaches():
    assert fitted_last_step(20, 1.0, 45.0, 10) == 60  # step 65 is reachable: the last validation before is 60
    assert fitted_last_step(20, 2.0, 45.0, 10) == 40
    assert fitted_last_step(25, 1.0, 2.0, 10) == 30  # no validation within reach: the next one all the same
    assert fitted_last_step(25, 1.0, -5.0, 10) == 30
    with pytest.raises(ValueError):
        fitted_last_step(20, 0.0, 45.0, 10)


class StepClock(Timer):
    """A Timer whose training clock advances ``seconds_per_step`` a batch instead of reading the wall."""

    def __init__(self, duration_s: float, seconds_per_step: float, start_s: float = 0.0) -> None:
        super().__init__(duration={"seconds": duration_s})
        self.seconds_per_step, self.clock = seconds_per_step, start_s

    def time_elapsed(self, stage="train") -> float:
        return self.clock

    def on_train_batch_start(self, *args, **kwargs) -> None:
        self.clock += self.seconds_per_step

    def state_dict(self) -> dict:
        return {"clock": self.clock}

    def load_state_dict(self, state_dict: dict) -> None:
        self.clock = state_dict["clock"]


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.rates: dict[int, float] = {}

    def training_step(self, batch, batch_idx):
        self.rates[int(self.global_step)] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.layer(batch).pow(2).mean())

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(10_000, 4), batch_size=2)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(4, 4), batch_size=2)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
        scheduler = build_scheduler(optimizer, "cosine", WARMUP, PLANNED, 0.0)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def fit(tmp_path, clock: StepClock, fit_cb: FitScheduleToTimeCap | None, max_steps: int = PLANNED,
        ckpt_path=None, callbacks=()) -> tuple[pl.Trainer, Tiny]:
    module = Tiny()
    trainer = pl.Trainer(max_steps=max_steps, val_check_interval=INTERVAL, check_val_every_n_epoch=None,
                         callbacks=[clock, *([fit_cb] if fit_cb else []), *callbacks], logger=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         enable_checkpointing=bool(callbacks))
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, module


def small_fit() -> FitScheduleToTimeCap:
    return FitScheduleToTimeCap(check_every=5, window_steps=20, min_measured=10, margin=0.0)


def test_without_the_callback_the_cap_stops_the_run_in_the_middle_of_its_decay(tmp_path):
    trainer, module = fit(tmp_path, StepClock(duration_s=58, seconds_per_step=1.0), None)
    assert trainer.global_step == 58
    assert module.rates[57] > 0.3  # far from the floor


def test_the_cosine_ends_at_the_last_validation_the_cap_leaves_time_for(tmp_path):
    fit_cb = small_fit()
    trainer, module = fit(tmp_path, StepClock(duration_s=58, seconds_per_step=1.0), fit_cb)
    assert trainer.global_step == 50  # 58 s at 1 s a step: validations at 10, 20, ..., the last within reach 50
    assert module.rates[49] < 0.01 and module.rates[49] > 0  # the last update is at the end of the decay
    rates = [module.rates[i] for i in range(WARMUP, 50)]
    assert all(a > b for a, b in zip(rates, rates[1:]))  # still one decreasing curve, no jump up
    assert fitted_schedule(trainer.callbacks) == {"planned_steps": PLANNED, "steps": 50}


def test_a_run_whose_steps_all_fit_is_untouched(tmp_path):
    fit_cb = small_fit()
    trainer, module = fit(tmp_path, StepClock(duration_s=500, seconds_per_step=1.0), fit_cb)
    assert trainer.global_step == PLANNED and fitted_schedule(trainer.callbacks) is None
    reference_rates = fit(tmp_path / "ref", StepClock(duration_s=500, seconds_per_step=1.0), None)[1].rates
    assert module.rates == pytest.approx(reference_rates)


def test_a_slower_pace_later_shortens_the_run_again(tmp_path):
    class SlowingClock(StepClock):
        def on_train_batch_start(self, trainer, *args, **kwargs) -> None:
            self.clock += 1.0 if trainer.global_step < 30 else 2.0

    fit_cb = small_fit()
    trainer, module = fit(tmp_path, SlowingClock(duration_s=80, seconds_per_step=1.0), fit_cb)
    # at 1 s a step 80 s reach step 80; from step 30 on each step takes 2 s: 30 + 50 / 2 = 55, so 50
    assert trainer.global_step == 50 and fitted_schedule(trainer.callbacks)["steps"] == 50
    assert module.rates[49] < 0.02


def test_a_resumed_run_keeps_the_fitted_end(tmp_path):
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    class StopAt(Callback):  # an interruption after the fit, at a checkpoint
        def on_train_batch_end(self, trainer, *args) -> None:
            trainer.should_stop = trainer.should_stop or trainer.global_step == 30

    uninterrupted = fit(tmp_path / "whole", StepClock(duration_s=58, seconds_per_step=1.0), small_fit())[1].rates
    saver = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=INTERVAL, save_top_k=-1,
                            filename="{step}")
    fit(tmp_path, StepClock(duration_s=58, seconds_per_step=1.0), small_fit(), callbacks=[saver, StopAt()])
    # a new process, fresh callbacks, the recipe's max_steps: the checkpoint brings back the fitted end
    trainer, module = fit(tmp_path, StepClock(duration_s=58, seconds_per_step=1.0), small_fit(),
                          ckpt_path=str(tmp_path / "ck" / "step=30.ckpt"))
    assert trainer.global_step == 50
    assert [module.rates[i] for i in range(30, 50)] == pytest.approx([uninterrupted[i] for i in range(30, 50)])
    assert fitted_schedule(trainer.callbacks) == {"planned_steps": PLANNED, "steps": 50}


def test_the_summary_says_the_schedule_was_fitted(tmp_path):
    summary = {"global_step": 3040, "max_steps": 4560, "time_cap_s": 33 * 60, "stopped_by_time_cap": False,
               "fitted_to_time_cap": {"planned_steps": 4560, "steps": 3040}, "log_dirs": []}
    outcome = read_outcome(summary)
    assert outcome == TrainingOutcome(steps=3040, planned_steps=4560, time_cap_s=33 * 60, stopped_by_time_cap=False,
                                      fitted_steps=3040)
    lines = outcome_lines(outcome, cap_hint="give it more minutes")
    assert "3040 of 4560 steps" in lines[0] and "33-min time cap" in lines[0] and "end at step 3040" in lines[0]
    assert lines[-1] == "give it more minutes"
