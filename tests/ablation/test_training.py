"""Training subprocess wrapper: overrides, peak memory of the child, error line, timeout."""

import sys
from pathlib import Path

from asr.ablation.training import TrainJob, max_time_string, run_training, train_overrides


def test_overrides_carry_scheme_budget_and_resume(tmp_path: Path) -> None:
    job = TrainJob(
        scheme="shaw", run_dir=tmp_path, data_dir="data/x", seed=3, budget_steps=50, budget_minutes=7.5,
        resume_from=tmp_path / "last.ckpt", extra_overrides=("model.d_model=96",),
    )
    ov = train_overrides(job)
    assert ov[:4] == ["pos_enc=shaw", f"hydra.run.dir={tmp_path}", "seed=3", "data.data_dir=data/x"]
    assert "trainer.max_steps=50" in ov and "trainer.max_time=00:00:07:30" in ov
    assert f"ckpt_path={tmp_path / 'last.ckpt'}" in ov
    assert ov[-1] == "model.d_model=96"  # user extras win
    assert max_time_string(90) == "00:01:30:00"


def test_peak_rss_is_the_childs_own(tmp_path: Path) -> None:
    job = TrainJob(scheme="rel_xl", run_dir=tmp_path / "a", data_dir="d", budget_steps=1)
    big = run_training(job, [sys.executable, "-c", "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"])
    small = run_training(job, [sys.executable, "-c", "pass"])
    assert big.ok and small.ok
    assert big.peak_rss_mb > 300
    # wait4 gives each child's own peak, not the maximum over earlier children.
    assert small.peak_rss_mb < 200


def test_failure_reports_the_exception_line(tmp_path: Path) -> None:
    job = TrainJob(scheme="rel_xl", run_dir=tmp_path, data_dir="d", budget_steps=1)
    code = "print('epoch 0'); raise RuntimeError('non-finite loss at step 3')"
    outcome = run_training(job, [sys.executable, "-c", code])
    assert not outcome.ok and outcome.returncode == 1
    assert outcome.error_line() == "RuntimeError: non-finite loss at step 3"


def test_timeout_kills_the_child(tmp_path: Path) -> None:
    job = TrainJob(scheme="rel_xl", run_dir=tmp_path, data_dir="d", budget_steps=1, timeout_s=1.0)
    outcome = run_training(job, [sys.executable, "-c", "import time; time.sleep(60)"])
    assert outcome.timed_out and not outcome.ok and outcome.wall_s < 30
    assert "timeout" in outcome.error_line()
