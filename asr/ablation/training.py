"""Run one scheme's training as a subprocess of the package's entry point, ``python -m asr.train``.

A subprocess isolates a crashing or diverging scheme from the others and gives a
clean peak-memory number: the :mod:`asr.ablation.peak_rss` launcher reports the
resource usage of exactly that run (including its reaped DataLoader workers),
where ``RUSAGE_CHILDREN`` here would keep the maximum over every scheme so far.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from asr.ablation.results import last_line
from asr.train.outcome import max_time_string

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_MODULE = "asr.train"
TRAIN_LOG = "train.log"
PEAK_RSS_NAME = "peak_rss.json"
STEP_TIMER_TARGET = "asr.ablation.step_timer.StepTimer"


@dataclass
class TrainJob:
    """What to train: one scheme, its run folder, data, seed and budget.

    ``budget_steps`` and ``budget_minutes`` may both be set: training stops at
    whichever comes first. ``resume_from`` is a ``last.ckpt`` to continue from.
    """

    scheme: str
    run_dir: Path
    data_dir: str
    seed: int = 0
    budget_steps: int | None = None
    budget_minutes: float | None = None
    val_every_steps: int | None = None
    extra_overrides: Sequence[str] = field(default_factory=tuple)
    resume_from: Path | None = None
    timeout_s: float | None = None
    # A frozen copy of the code to train with (asr.ablation.snapshot); None: this checkout's.
    code_root: Path | None = None
    # CPU threads of the training process (OMP_NUM_THREADS) when several runs share the machine;
    # None: the process's default (every core, or the caller's OMP_NUM_THREADS).
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.budget_steps is None and self.budget_minutes is None:
            raise ValueError(f"scheme {self.scheme!r}: give budget_steps or budget_minutes (both are None)")
        if self.budget_steps is not None and self.budget_steps < 1:
            raise ValueError(f"budget_steps must be >= 1, got {self.budget_steps}")
        if self.budget_minutes is not None and self.budget_minutes <= 0:
            raise ValueError(f"budget_minutes must be > 0, got {self.budget_minutes}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")


@dataclass
class TrainOutcome:
    """How the training subprocess ended."""

    returncode: int
    wall_s: float
    peak_rss_mb: float
    log_path: Path
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def error_line(self) -> str:
        """The last meaningful line of the log (the exception), for the report."""
        if self.timed_out:
            return f"training exceeded its timeout and was killed after {self.wall_s:.0f} s"
        tail = _error_tail(self.log_path)
        return last_line(tail) if tail.strip() else f"exit status {self.returncode}"


def train_overrides(job: TrainJob) -> list[str]:
    """Hydra overrides for ``python -m asr.train``; user extras come last so they win."""
    overrides = [
        f"pos_enc={job.scheme}",
        f"hydra.run.dir={job.run_dir}",
        f"seed={job.seed}",
        f"data.data_dir={job.data_dir}",
        # Records every step's duration for the report's step-time column.
        f"+callbacks.step_timer._target_={STEP_TIMER_TARGET}",
    ]
    if job.budget_steps is not None:
        overrides += [f"trainer.max_steps={job.budget_steps}", "trainer.max_epochs=-1"]
    if job.budget_minutes is not None:
        overrides.append(f"trainer.max_time={max_time_string(job.budget_minutes)}")
    else:
        # A step budget runs to its steps: a recipe's wall-clock guard (the quickstart's) would end a run
        # short on a busy machine, and the schemes would no longer share a budget.
        overrides.append("trainer.max_time=null")
        if job.budget_steps is None:
            # A time-only budget has no last step for a cosine decay to end at.
            overrides += ["trainer.max_steps=-1", "trainer.max_epochs=-1", "optim.scheduler.kind=noam"]
    if job.val_every_steps is not None:
        overrides += [f"trainer.val_check_interval={job.val_every_steps}", "trainer.check_val_every_n_epoch=null"]
    if job.resume_from is not None:
        overrides.append(f"ckpt_path={job.resume_from}")
    overrides += list(job.extra_overrides)
    return overrides


def train_command(job: TrainJob) -> list[str]:
    """The training command; with ``job.code_root`` it imports that frozen package (see :func:`run_training`),
    which composes the configs frozen beside it."""
    return [sys.executable, "-m", TRAIN_MODULE, *train_overrides(job)]


def run_training(job: TrainJob, command: Sequence[str] | None = None) -> TrainOutcome:
    """Run the training subprocess to completion; its output goes to ``run_dir/train.log``.

    ``command`` replaces the default ``python -m asr.train`` command (tests use it).
    It runs under :mod:`asr.ablation.peak_rss` for an honest peak-memory number.
    Ctrl-C stops the child's whole process group and re-raises, leaving the
    run's ``last.ckpt`` for a later resume.
    """
    job.run_dir.mkdir(parents=True, exist_ok=True)
    log_path = job.run_dir / TRAIN_LOG
    rss_path = job.run_dir / PEAK_RSS_NAME
    rss_path.unlink(missing_ok=True)
    cmd = list(command) if command is not None else train_command(job)
    launcher = [sys.executable, "-m", "asr.ablation.peak_rss", str(rss_path), "--", *cmd]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "1"}
    if job.threads is not None:
        env["OMP_NUM_THREADS"] = str(job.threads)
    if job.code_root is not None:
        # The frozen package before any installed one, and not the checkout the process starts in:
        # `-m` and `-c` would put the working directory (this checkout) first on sys.path.
        env["PYTHONPATH"] = os.pathsep.join([str(job.code_root), *filter(None, [os.environ.get("PYTHONPATH")])])
        env["PYTHONSAFEPATH"] = "1"
    start = time.monotonic()
    with log_path.open("a") as log:
        frozen = "" if job.code_root is None else f"PYTHONPATH={job.code_root} "
        log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} $ {frozen}{' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(
            launcher, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env, start_new_session=True
        )
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            returncode, timed_out = _wait(proc, job.timeout_s)
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
                stopped = proc in _STOPPED
                _STOPPED.discard(proc)
    if stopped:
        raise TrainingStopped(f"{job.scheme}: training stopped with the runner ({job.run_dir})")
    return TrainOutcome(
        returncode=returncode,
        wall_s=time.monotonic() - start,
        peak_rss_mb=_read_peak_rss(rss_path),
        log_path=log_path,
        timed_out=timed_out,
    )


class TrainingStopped(RuntimeError):
    """A training process ended by :func:`stop_all_trainings`: an interruption, not a failed run."""


# Training processes now running (several when runs train at once from threads), and those stopped.
_LIVE: set[subprocess.Popen] = set()
_STOPPED: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def stop_all_trainings() -> None:
    """Stop every training process group this process waits on. Only the main thread sees Ctrl-C or
    SIGTERM; threads that wait on trainings then raise :class:`TrainingStopped` (no failure is recorded,
    and a rerun resumes each run from its last checkpoint)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
        _STOPPED.update(procs)
    for proc in procs:
        _kill_group(proc)


def exit_on_sigterm(signum, frame) -> None:
    """SIGTERM handler of a process that runs trainings: SystemExit unwinds through :func:`run_training`,
    which then stops the training process group (it runs in its own session and would otherwise
    outlive the runner, e.g. under ``timeout``)."""
    print(f"[ablate] stopped by signal {signum}; re-run the same command to resume", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


def _read_peak_rss(path: Path) -> float:
    try:
        return float(json.loads(path.read_text())["peak_rss_mb"])
    except (OSError, ValueError, KeyError):
        return float("nan")  # killed before it could write (timeout): the report shows n/a


def _wait(proc: subprocess.Popen, timeout_s: float | None) -> tuple[int, bool]:
    """``(returncode, timed_out)``; past ``timeout_s`` the process group is killed."""
    try:
        return proc.wait(timeout=timeout_s), False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return proc.wait(), True


def _kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, the child's process group (it leads its own session, so
    this reaches the training process and its DataLoader workers); SIGTERM first
    lets Lightning stop cleanly."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    except ProcessLookupError:
        pass


def _error_tail(log_path: Path, max_bytes: int = 20000) -> str:
    """The end of the log, cut at the last traceback if there is one."""
    if not log_path.is_file():
        return ""
    with log_path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        handle.seek(max(0, handle.tell() - max_bytes))
        text = handle.read().decode("utf-8", errors="replace")
    # Progress bars end lines with '\r'; keep what was printed last on each line.
    lines = [line.split("\r")[-1] for line in text.splitlines()]
    if any(line.startswith("Traceback") for line in lines):
        start = max(i for i, line in enumerate(lines) if line.startswith("Traceback"))
        lines = lines[start:]
        # The exception line is the last one not indented under the traceback.
        for line in reversed(lines):
            if line.strip() and not line.startswith((" ", "\t")):
                return line
    return "\n".join(lines)


def find_checkpoint(run_dir: Path, name: str = "last.ckpt") -> Path | None:
    """The newest checkpoint called ``name`` anywhere under ``run_dir``."""
    found = sorted(Path(run_dir).rglob(name), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None
