"""The end-of-run lines a time-capped driver prints, from a fake train_summary.json and CSV log."""

import json

import pytest
from lightning.pytorch.callbacks import Timer

from asr.train.outcome import (TrainingOutcome, dev_wer_curve, outcome_lines, parse_max_time, read_outcome,
                               run_conditions)
from asr.train.run import time_cap

CSV_HEADER = "epoch,lr-AdamW,step,train_loss,val_loss,val_wer\n"


def write_csv_log(log_dir, rows):
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "metrics.csv").write_text(CSV_HEADER + "".join(rows))
    return log_dir


def fake_summary(run_dir, **keys):
    log = write_csv_log(run_dir / "csv", [
        "0,0.001,19,80.1,,\n",
        "0,,379,,60.0,0.859\n",
        "0,0.002,399,55.0,,\n",
        "0,,1139,,40.0,0.528\n",
        "1,,3353,,30.0,0.2597\n",
    ])
    return {"out_dir": str(run_dir), "global_step": 3354, "log_dirs": [str(log)], **keys}


def test_a_time_capped_run_says_so_with_steps_and_curve(tmp_path):
    summary = fake_summary(tmp_path, max_steps=4560, time_cap_s=33 * 60.0, stopped_by_time_cap=True)
    outcome = read_outcome(json.loads(json.dumps(summary)))
    assert outcome.stopped_early and outcome.planned_steps == 4560
    lines = outcome_lines(outcome, cap_hint="more --train-minutes")
    assert lines[0].startswith("training stopped by the 33-min time cap at 3354 of 4560 steps")
    assert lines[1] == (f"dev WER by step: 85.9% at 379, 52.8% at 1139, 26.0% at 3353 "
                        f"(whole curve: {tmp_path / 'csv' / 'metrics.csv'}, column val_wer)")
    assert lines[2] == "more --train-minutes"


def test_a_run_that_did_its_steps_prints_nothing(tmp_path):
    summary = fake_summary(tmp_path, max_steps=3354, time_cap_s=33 * 60.0, stopped_by_time_cap=False)
    assert outcome_lines(read_outcome(summary), cap_hint="hint") == []
    # no step limit at all (epochs decide): nothing to report either
    assert outcome_lines(read_outcome(fake_summary(tmp_path, max_steps=-1, time_cap_s=None,
                                                   stopped_by_time_cap=False))) == []


def test_an_early_end_without_the_cap_does_not_blame_it(tmp_path):
    summary = fake_summary(tmp_path, max_steps=4560, time_cap_s=None, stopped_by_time_cap=False)
    lines = outcome_lines(read_outcome(summary), cap_hint="hint")
    assert lines[0] == "training ended at 3354 of 4560 steps, before its time cap" and "hint" not in lines


def test_an_older_summary_reads_the_plan_from_the_hydra_config(tmp_path):
    summary = fake_summary(tmp_path)  # no max_steps / cap keys: written before they were recorded
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("trainer:\n  max_steps: 4560\n  max_time: 00:00:33:00\n")
    outcome = read_outcome(summary)
    assert (outcome.planned_steps, outcome.time_cap_s, outcome.stopped_by_time_cap) == (4560, 1980.0, None)
    assert outcome_lines(outcome)[0] == ("training ended at 3354 of 4560 steps (what ended it is not recorded "
                                         "in this run's summary)")


def test_the_curve_keeps_a_resumed_step_once_and_skips_missing_logs(tmp_path):
    log = write_csv_log(tmp_path / "csv", ["0,,379,,1.0,0.9\n", "0,,759,,1.0,0.5\n", "0,,759,,1.0,0.4\n"])
    curve, path = dev_wer_curve([str(tmp_path / "tensorboard"), str(log)])
    assert curve == ((379, 0.9), (759, 0.4)) and path == log / "metrics.csv"
    assert dev_wer_curve([str(tmp_path / "nothing")]) == ((), None)
    lines = outcome_lines(TrainingOutcome(steps=10, planned_steps=20, time_cap_s=60.0, stopped_by_time_cap=True))
    assert lines[1].startswith("dev WER curve: no CSV log")


def test_only_the_last_points_of_a_long_curve_are_printed(tmp_path):
    curve = tuple((100 * i, 1.0 / i) for i in range(1, 13))
    outcome = TrainingOutcome(steps=1200, planned_steps=4560, time_cap_s=90.0, stopped_by_time_cap=True,
                              dev_curve=curve, curve_file=tmp_path / "metrics.csv")
    line = outcome_lines(outcome, max_points=2)[1]
    assert line.startswith("dev WER by step: ..., 9.1% at 1100, 8.3% at 1200 ") and "1.5-min" in outcome_lines(outcome)[0]


def test_max_time_strings():
    assert parse_max_time("00:00:35:00") == 2100.0 and parse_max_time("'01:02:00:05'") == 93605.0
    assert parse_max_time(None) is None
    with pytest.raises(ValueError, match="'35 minutes' is not DD:HH:MM:SS"):
        parse_max_time("35 minutes")


def test_time_cap_from_the_trainer_callbacks():
    assert time_cap([]) == (None, False)
    timer = Timer(duration="00:00:00:30")
    timer.load_state_dict({"time_elapsed": {"train": 12.0}})
    assert time_cap([timer]) == (30.0, False)
    timer.load_state_dict({"time_elapsed": {"train": 31.0}})
    assert time_cap([object(), timer]) == (30.0, True)


def test_run_conditions_name_the_precision_and_the_allocator_a_summary_recorded():
    summary = {"precision": "bf16-mixed", "allocator": "libtcmalloc_minimal.so.4"}
    assert run_conditions(summary) == " at bf16-mixed, allocator libtcmalloc_minimal.so.4"
    assert run_conditions({"precision": "32-true"}) == " at 32-true"
    assert run_conditions({}) == ""  # a summary from before either key
