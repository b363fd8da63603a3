"""The adaptive budget in the runner: rungs, stops with reasons, exact replay after an interruption."""

import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from asr.ablation.adaptive import AdaptiveBudget, plan_rungs, read_trained
from asr.ablation.runner import AblationRunner, AblationSettings
from asr.ablation.training import TrainJob, TrainOutcome

VAL_EVERY = 100
DEV_UTTS = 300


def curve(scheme: str, step: int) -> float:
    """Dev WER (fraction) of each fake scheme after ``step`` steps."""
    if scheme == "rel_xl":  # falls to a floor by 400 steps: converged once the plateau is flat
        return 0.20 + 0.30 * max(0.0, 1.0 - step / 400)
    if scheme == "shaw":  # close behind and still falling through 800 steps
        return 0.22 + 0.30 * max(0.0, 1.0 - step / 800)
    return 0.60 - 0.00002 * step  # "none": far behind, barely moving


class CurveTrainer:
    """Writes what a real run would up to the job's steps: last.ckpt and the validation curve."""

    def __init__(self, fail_at: tuple[str, int] | None = None) -> None:
        self.jobs: list[TrainJob] = []
        self.fail_at = fail_at
        self.stop_short: dict[str, int] = {}  # scheme -> the step its next run ends at (a time cap)

    def __call__(self, job: TrainJob) -> TrainOutcome:
        self.jobs.append(job)
        job.run_dir.mkdir(parents=True, exist_ok=True)
        log = job.run_dir / "train.log"
        log.write_text("ok\n")
        if self.fail_at == (job.scheme, job.budget_steps):
            self.fail_at = None  # dies once, as a killed process would
            return TrainOutcome(returncode=-9, wall_s=1.0, peak_rss_mb=10.0, log_path=log)
        ckpt = job.run_dir / "checkpoints" / "last.ckpt"
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_text(f"step {job.budget_steps}")
        stopped = self.stop_short.pop(job.scheme, None)
        (job.run_dir / "train_summary.json").write_text(json.dumps({"global_step": stopped or job.budget_steps}))
        rows = [f"{s},{curve(job.scheme, s) + 0.002 * (-1) ** (s // VAL_EVERY):.6f}"
                for s in range(VAL_EVERY, job.budget_steps + 1, VAL_EVERY)]
        csv = job.run_dir / "csv" / "version_0" / "metrics.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        csv.write_text("step,val_wer\n" + "\n".join(rows) + "\n")
        return TrainOutcome(returncode=0, wall_s=2.0, peak_rss_mb=100.0, log_path=log)


def dev_records(run_dir: Path, ckpt: Path) -> list[dict]:
    steps = int(ckpt.read_text().split()[1])
    scheme = run_dir.name.split("-seed")[0]
    rng = np.random.default_rng([steps, len(run_dir.name), sum(map(ord, run_dir.name))])
    words = np.full(DEV_UTTS, 10)
    errors = rng.binomial(words, curve(scheme, steps))
    return [{"key": f"u{i}", "word_errors": int(e), "ref_words": int(w)} for i, (e, w) in enumerate(zip(errors, words))]


def evaluate(run_dir: Path, ckpt: Path):
    eval_data = {"test": {"cuts": "cuts_test.jsonl.gz", "max_utts": None, "utterances": 3, "skipped": {}}}
    return {"params_m": 1.0, "wer_test_greedy": 30.0}, {}, eval_data


def runner(out: Path, trainer: CurveTrainer, lines: list[str]) -> AblationRunner:
    settings = AblationSettings(out_dir=out, data_dir="data/synth", schemes=("rel_xl", "shaw", "none"),
                                val_every_steps=VAL_EVERY, scheme_seeds={"rel_xl": 2})
    return AblationRunner(settings, evaluate, lambda _: (0.1, None), train_fn=trainer, log=lines.append)


BUDGET = AdaptiveBudget(first_steps=400, max_steps=1600, total_steps=8000)


def test_rungs_stop_the_clear_loser_finish_the_converged_and_extend_the_rest(tmp_path: Path) -> None:
    trainer, lines = CurveTrainer(), []
    r = runner(tmp_path, trainer, lines)
    r.progress_file = io.StringIO()
    results = r.run_adaptive(BUDGET, dev_records)
    assert all(res.ok for res in results) and len(results) == 4  # rel_xl has two seeds
    bars = r.progress_file.getvalue()  # one bar a rung: its runs and the steps they had to train
    assert "rung to 400 steps, 4 runs" in bars and "rung to 800 steps, 4 runs" in bars
    assert "rung to 1600 steps, 1 run:" in bars
    steps = {run: read_trained(tmp_path / run)["steps"] for run in ("rel_xl", "rel_xl-seed1", "shaw", "none")}
    # after the first rung (four validations) no slope is known well enough to stop anyone
    assert all("rung 1," not in line or "**continue**" in line for line in r.budget_lines)
    assert steps["none"] == 800  # stopped after the second
    assert steps["rel_xl"] == steps["rel_xl-seed1"] == 800 < steps["shaw"] == 1600  # converged; shaw still fell
    # every rung after the first resumes the run's own last checkpoint, with a larger step budget
    shaw_jobs = [j for j in trainer.jobs if j.scheme == "shaw"]
    assert [j.budget_steps for j in shaw_jobs] == sorted({j.budget_steps for j in shaw_jobs})
    assert shaw_jobs[0].resume_from is None and all(j.resume_from is not None for j in shaw_jobs[1:])
    stop = next(line for line in r.budget_lines if "`none`" in line and "rung 2," in line)
    assert "**stopped**" in stop and "points above `" in stop and "gain at most" in stop
    assert any("`rel_xl`" in line and "**finished**" in line and "converged" in line for line in r.budget_lines)
    report = (tmp_path / "report.md").read_text()
    assert "## Budget" in report and stop in report
    # the stop, for the report to rank `none` below the best it trailed (test_report.py), kept for a rebuild
    assert json.loads((tmp_path / "budget.json").read_text())["stopped"] == {"none": {"behind": "rel_xl", "steps": 800}}
    rebuilt = runner(tmp_path, CurveTrainer(), [])
    rebuilt.report_only()
    assert rebuilt.stopped == r.stopped == {"none": {"behind": "rel_xl", "steps": 800}}
    assert "- budget: `adaptive: first rung 400 steps, at most 1600 a run, 8000 over all runs`" in report
    # a run's time is every rung's training (2 s a rung here) plus its dev decodes and its test evaluation
    by_run = {Path(res.run_dir).name: res for res in results}
    shaw_rungs = len(shaw_jobs)
    assert read_trained(tmp_path / "shaw")["wall_s"] > 2.0 * shaw_rungs
    assert by_run["shaw"].wall_s > read_trained(tmp_path / "shaw")["wall_s"]


def test_a_rerun_after_a_killed_rung_replays_the_same_decisions(tmp_path: Path) -> None:
    whole_lines: list[str] = []
    whole = runner(tmp_path / "whole", CurveTrainer(), whole_lines)
    whole.run_adaptive(BUDGET, dev_records)
    lines: list[str] = []
    killed = runner(tmp_path / "cut", CurveTrainer(fail_at=("shaw", 800)), lines)
    first = killed.run_adaptive(BUDGET, dev_records)
    assert not next(r for r in first if r.scheme == "shaw").ok
    trainer = CurveTrainer()
    again = runner(tmp_path / "cut", trainer, lines)
    again.run_adaptive(BUDGET, dev_records)
    assert again.budget_lines == whole.budget_lines
    assert {j.scheme for j in trainer.jobs} == {"shaw"}  # only the killed run trains again
    assert trainer.jobs[0].budget_steps == 800 and trainer.jobs[0].resume_from is not None


def test_budgets_that_cannot_hold_a_rung_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="first_steps"):
        AdaptiveBudget(first_steps=500, max_steps=400, total_steps=9000)
    r = runner(tmp_path, CurveTrainer(), [])
    with pytest.raises(ValueError, match="does not cover a first rung"):
        r.run_adaptive(AdaptiveBudget(first_steps=400, max_steps=1600, total_steps=1000), dev_records)
    with pytest.raises(ValueError, match="multiples of the validation interval"):
        r.run_adaptive(AdaptiveBudget(first_steps=450, max_steps=1600, total_steps=9000), dev_records)


def test_a_run_that_ends_short_of_its_rung_fails_instead_of_counting_as_the_rung(tmp_path: Path) -> None:
    trainer, lines = CurveTrainer(), []
    trainer.stop_short["shaw"] = 250  # e.g. a recipe's wall-clock cap
    results = runner(tmp_path, trainer, lines).run_adaptive(BUDGET, dev_records)
    shaw = next(r for r in results if r.scheme == "shaw")
    assert not shaw.ok and "ended at step 250 of the rung's 400" in shaw.error
    assert read_trained(tmp_path / "shaw")["steps"] == 0
    assert all(r.ok for r in results if r.scheme != "shaw")  # the others go on


def test_a_larger_budget_extends_a_finished_ablation_and_evaluates_the_extended_runs_again(tmp_path: Path) -> None:
    lines: list[str] = []
    small = AdaptiveBudget(first_steps=400, max_steps=800, total_steps=8000)
    runner(tmp_path, CurveTrainer(), lines).run_adaptive(small, dev_records)
    runs = ("rel_xl", "rel_xl-seed1", "shaw", "none")
    before = {run: read_trained(tmp_path / run)["steps"] for run in runs}
    assert before["shaw"] == 800  # ended at the small budget's largest rung
    evaluated: list[str] = []

    def counting_evaluate(run_dir: Path, ckpt: Path):
        evaluated.append(run_dir.name)
        return evaluate(run_dir, ckpt)

    trainer = CurveTrainer()
    settings = runner(tmp_path, trainer, lines).settings
    larger = AblationRunner(settings, counting_evaluate, lambda _: (0.1, None), train_fn=trainer, log=lines.append)
    results = larger.run_adaptive(BUDGET, dev_records)
    after = {run: read_trained(tmp_path / run)["steps"] for run in runs}
    grown = sorted(run for run in runs if after[run] > before[run])
    assert "shaw" in grown and after["shaw"] == 1600
    assert after["rel_xl"] == before["rel_xl"] == 800  # converged: not trained again
    assert sorted({j.run_dir.name for j in trainer.jobs}) == grown
    assert all(j.resume_from is not None for j in trainer.jobs)  # each resumed from its own last checkpoint
    assert sorted(evaluated) == grown  # only the runs trained further are evaluated again
    by_run = {Path(r.run_dir).name: r for r in results}
    assert all(by_run[run].ok and by_run[run].settings["budget_steps"] == after[run] for run in runs)
    assert any(f"shaw: evaluated at {before['shaw']} steps, trained to 1600 since" in line for line in lines)


class ConcurrentTrainer(CurveTrainer):
    """A CurveTrainer that counts how many jobs run at once; its first ``meet`` jobs wait for each other
    (bounded), so that runs the runner lets train together are seen together on a loaded host too."""

    def __init__(self, meet: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.meet = meet
        self.met = threading.Condition()
        self.running = self.most = self.calls = 0

    def __call__(self, job: TrainJob) -> TrainOutcome:
        with self.met:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
            self.met.notify_all()
            if self.calls <= self.meet:
                self.met.wait_for(lambda: self.most >= self.meet, timeout=120)
        try:
            return super().__call__(job)
        finally:
            with self.met:
                self.running -= 1


def test_several_jobs_train_a_rung_at_once_and_decide_as_one_job_does(tmp_path: Path, monkeypatch) -> None:
    fail_at = ("shaw", 800)  # a run that dies in the second rung: its scheme fails alike in both
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    outcomes = {}
    for jobs in (1, 3):
        trainer, lines = ConcurrentTrainer(jobs, fail_at=fail_at), []
        r = runner(tmp_path / f"jobs{jobs}", trainer, lines)
        r.settings.jobs = jobs
        results = r.run_adaptive(BUDGET, dev_records)
        outcomes[jobs] = (r.budget_lines, {Path(res.run_dir).name: (res.ok, read_trained(Path(res.run_dir))["steps"])
                                           for res in results})
        assert trainer.most == jobs  # the first rung has four runs: three train at once
        assert {j.threads for j in trainer.jobs} == ({None} if jobs == 1 else {1})  # 4 cores / 3 jobs
    assert outcomes[1] == outcomes[3]
    assert outcomes[3][1]["shaw"][0] is False and outcomes[3][1]["rel_xl"][0] is True
    assert outcomes[3][1]["none"] == (True, 800) and outcomes[3][1]["rel_xl-seed1"] == (True, 800)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in the main thread during the test, however pytest was launched: a
    background shell (``nohup ... &``, a scheduler) starts Python with SIGINT ignored, and Python then
    installs no handler of its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_interrupted_rung_stops_the_runs_still_training_and_starts_no_other(ctrl_c_raises) -> None:
    released = threading.Event()
    started: list[str] = []
    interrupted: list[float] = []

    def train_to(scheme: str, run: Path, steps: int) -> bool:
        started.append(scheme)
        released.wait(timeout=600)  # a long training, until the runner stops it
        return False  # as a stopped training ends

    def interrupt() -> None:
        interrupted.append(time.monotonic())
        released.set()
        time.sleep(0.5)  # stopping a process group waits for it to end

    def press_ctrl_c() -> None:  # once both jobs train, as a user would
        deadline = time.monotonic() + 300  # a bound, not a timing: a loaded host starts threads late
        while len(started) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        plan_rungs(("rel_xl", "shaw", "rope", "none"), lambda s: [Path(s)], BUDGET, train_to, lambda *a: [],
                   jobs=2, interrupt=interrupt)
    assert interrupted and time.monotonic() - began < 500  # not the trainings' own 600 s
    assert started == ["rel_xl", "shaw"]  # the workers the stopped trainings freed took no further run
    with pytest.raises(ValueError, match="jobs"):
        plan_rungs(("rel_xl",), lambda s: [Path(s)], BUDGET, train_to, lambda *a: [], jobs=0)
