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
    # a step budget alone lifts the recipe's wall-clock guard: every scheme runs its steps
    steps_only = train_overrides(TrainJob(scheme="shaw", run_dir=tmp_path, data_dir="d", budget_steps=50))
    assert "trainer.max_time=null" in steps_only and "trainer.max_steps=50" in steps_only


def test_peak_rss_is_the_childs_own(tmp_path: Path) -> None:
    job = TrainJob(scheme="rel_xl", run_dir=tmp_path / "a", data_dir="d", budget_steps=1)
    big = run_training(job, [sys.executable, "-c", "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"])
    # A large parent must not leak into the child's number (Linux keeps the RSS
    # high-water mark across exec; the launcher is what keeps it out).
    ballast = bytearray(400 * 2**20)
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    small = run_training(job, [sys.executable, "-c", "pass"])
    del ballast
    assert big.ok and small.ok
    assert big.peak_rss_mb > 300
    # Each run's own peak, not the maximum over earlier children.
    assert small.peak_rss_mb < 150


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


def test_sigterm_to_the_runner_stops_the_training_group(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    script = f"""
import signal, sys
from pathlib import Path
from asr.ablation.training import TrainJob, exit_on_sigterm, run_training
signal.signal(signal.SIGTERM, exit_on_sigterm)
job = TrainJob(scheme="rel_xl", run_dir=Path({str(tmp_path)!r}), data_dir="d", budget_steps=1)
code = "import os, time; open({str(tmp_path / 'pid')!r}, 'w').write(str(os.getpid())); time.sleep(120)"
run_training(job, [sys.executable, "-c", code])
"""
    runner = subprocess.Popen([sys.executable, "-c", script])
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline, "training child never started"
        time.sleep(0.2)
    child = int(pid_file.read_text())
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 128 + signal.SIGTERM

    def running(pid: int) -> bool:
        # A killed child whose parent is gone stays a zombie until init reaps it,
        # which can take a moment on a loaded machine: a zombie counts as stopped.
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        return state != "Z"

    deadline = time.monotonic() + 10
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(child), "the training process outlived the ablation runner"


def test_threads_reach_the_child_and_a_stopped_training_raises_instead_of_failing(tmp_path: Path) -> None:
    import threading
    import time

    import pytest

    from asr.ablation.training import TrainingStopped, stop_all_trainings

    job = TrainJob(scheme="rel_xl", run_dir=tmp_path, data_dir="d", budget_steps=1, threads=1)
    code = ("import os, time; open({!r}, 'w').write(os.environ['OMP_NUM_THREADS']); "
            "time.sleep(120)").format(str(tmp_path / "threads"))
    raised: list[BaseException] = []

    def train() -> None:
        try:
            run_training(job, [sys.executable, "-c", code])
        except BaseException as err:  # noqa: BLE001  (the test reads what the thread raised)
            raised.append(err)

    worker = threading.Thread(target=train)
    began = time.monotonic()
    worker.start()
    while not (tmp_path / "threads").is_file() or not (tmp_path / "threads").read_text():
        assert time.monotonic() - began < 300, "training child never started"
        time.sleep(0.1)
    assert (tmp_path / "threads").read_text() == "1"
    stop_all_trainings()
    worker.join(timeout=120)  # a bound: the child takes SIGTERM at once
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], TrainingStopped)
    with pytest.raises(ValueError, match="threads"):
        TrainJob(scheme="rel_xl", run_dir=tmp_path, data_dir="d", budget_steps=1, threads=0)
