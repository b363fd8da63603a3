"""The cosine fitted to a time cap (asr.train.time_fit), on a tiny Lightning run with a step clock."""

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Timer

from asr.train.outcome import TrainingOutcome, outcome_lines, read_outcome
from asr.train.schedule import build_scheduler
from asr.train.time_fit import FitScheduleToTimeCap, fitted_schedule, reachable_step

WARMUP, PLANNED, INTERVAL = 10, 100, 10


def test_the_reachable_step_is_where_the_time_left_runs_out():
    assert reachable_step(20, 1.0, 45.0) == 65
    assert reachable_step(20, 2.0, 45.0) == 42
    assert reachable_step(25, 1.0, 0.5) == 26  # at least the next step
    assert reachable_step(25, 1.0, -5.0) == 26
    with pytest.raises(ValueError):
        reachable_step(20, 0.0, 45.0)


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
        self.validated_at: list[int] = []

    def training_step(self, batch, batch_idx):
        self.rates[int(self.global_step)] = self.trainer.optimizers[0].param_groups[0]["lr"]
        return self.layer(batch).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.layer(batch).pow(2).mean())

    def on_validation_end(self) -> None:
        self.validated_at.append(int(self.global_step))

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
    return FitScheduleToTimeCap(check_every=5, window_steps=20, min_measured=10, margin=0.05)


def test_without_the_callback_the_cap_stops_the_run_in_the_middle_of_its_decay(tmp_path):
    trainer, module = fit(tmp_path, StepClock(duration_s=58, seconds_per_step=1.0), None)
    assert trainer.global_step == 58
    assert module.rates[57] > 0.3  # far from the floor


def test_the_cosine_ends_at_the_last_step_the_cap_leaves_time_for_and_validates_there(tmp_path):
    trainer, module = fit(tmp_path, StepClock(duration_s=58, seconds_per_step=1.0), small_fit())
    # at 1 s a step, 58 s less a 5% margin (2.9 s) from step 20 on: step 55
    assert trainer.global_step == 55
    assert 0 < module.rates[54] < 0.01  # the last update is at the end of the decay
    rates = [module.rates[i] for i in range(WARMUP, 55)]
    assert all(a > b for a, b in zip(rates, rates[1:]))  # still one decreasing curve, no jump up
    assert module.validated_at[-1] == 55  # the stop validates, so the last checkpoint is the decayed model
    assert fitted_schedule(trainer.callbacks) == {"planned_steps": PLANNED, "steps": 55}


def test_a_run_whose_steps_all_fit_is_untouched(tmp_path):
    fit_cb = small_fit()
    trainer, module = fit(tmp_path, StepClock(duration_s=500, seconds_per_step=1.0), fit_cb)
    assert trainer.global_step == PLANNED and fitted_schedule(trainer.callbacks) is None
    reference_rates = fit(tmp_path / "ref", StepClock(duration_s=500, seconds_per_step=1.0), None)[1].rates
    assert module.rates == pytest.approx(reference_rates)


class PaceFrom(StepClock):
    """A clock at ``seconds_per_step`` before step ``switch_at`` and ``later`` s a step from it on."""

    def __init__(self, duration_s: float, seconds_per_step: float, switch_at: int, later: float) -> None:
        super().__init__(duration_s, seconds_per_step)
        self.switch_at, self.later = switch_at, later

    def on_train_batch_start(self, trainer, *args, **kwargs) -> None:
        self.clock += self.seconds_per_step if trainer.global_step < self.switch_at else self.later


def test_a_slower_pace_later_moves_the_end_earlier_again(tmp_path):
    trainer, module = fit(tmp_path, PaceFrom(80, 1.0, switch_at=25, later=1.5), small_fit())
    # the end follows the pace: 76 at step 20, 68 at 30, 60 at 40 (then within 5 steps of it); the cap's
    # 80 s would have stopped the run at step 62
    assert trainer.global_step == 60 and fitted_schedule(trainer.callbacks)["steps"] == 60
    assert 0 < module.rates[59] < 0.01


def test_a_pace_that_picks_up_gives_the_steps_back(tmp_path):
    trainer, module = fit(tmp_path, PaceFrom(100, 2.0, switch_at=30, later=0.5), small_fit())
    # 47 at step 20; from step 31 at 0.5 s a step the end moves out again, back to the recipe's 100
    assert trainer.global_step == PLANNED and fitted_schedule(trainer.callbacks) is None
    assert 0 < module.rates[PLANNED - 1] < 0.01
    rates = [module.rates[i] for i in range(WARMUP, PLANNED)]
    assert all(a > b for a, b in zip(rates, rates[1:]))


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
    assert trainer.global_step == 55
    assert [module.rates[i] for i in range(30, 55)] == pytest.approx([uninterrupted[i] for i in range(30, 55)])
    assert fitted_schedule(trainer.callbacks) == {"planned_steps": PLANNED, "steps": 55}


def test_the_summary_says_the_schedule_was_fitted(tmp_path):
    summary = {"global_step": 3040, "max_steps": 4560, "time_cap_s": 33 * 60, "stopped_by_time_cap": False,
               "fitted_to_time_cap": {"planned_steps": 4560, "steps": 3040}, "log_dirs": []}
    outcome = read_outcome(summary)
    assert outcome == TrainingOutcome(steps=3040, planned_steps=4560, time_cap_s=33 * 60, stopped_by_time_cap=False,
                                      fitted_steps=3040)
    lines = outcome_lines(outcome, cap_hint="give it more minutes")
    assert "3040 of 4560 steps" in lines[0] and "33-min time cap" in lines[0] and "end at step 3040" in lines[0]
    assert lines[-1] == "give it more minutes"
