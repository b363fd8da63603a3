"""Drive an ablation: train and evaluate each scheme, skip finished ones, write the report.

Per scheme the phases are ``train`` (or ``resume`` from ``last.ckpt``) in a
subprocess, then ``evaluate`` in this process; any failure becomes a ``failed``
row and the next scheme still runs. After every scheme the report, plots and
``results.json`` are rewritten, so an interrupted ablation still leaves a report.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from asr.ablation.adaptive import (AdaptiveBudget, DevRecordsFn, add_dev_seconds, dev_records_path, mark_trained,
                                   plan_rungs, read_trained, steps_reached, stops_of)
from asr.ablation.analysis import analyze
from asr.ablation.curves import VAL_LOSS, archive_metrics, read_learning_curve
from asr.ablation.evaluate import ALL_WER_METRICS
from asr.ablation.plots import write_plots
from asr.ablation.progress import RungProgress
from asr.ablation.report import write_report
from asr.ablation.results import (
    STATUS_FAILED,
    SchemeResult,
    failed_result,
    read_jsonl,
    read_marker,
    write_jsonl,
    write_marker,
)
from asr.ablation.training import TrainJob, TrainOutcome, find_checkpoint, run_training, stop_all_trainings
from asr.model.positions import POSITION_SCHEMES

# The adaptive budget's decisions, one line each (the report's Budget section; --report-only reads them).
BUDGET_FILE = "budget.json"
# The encoder's position schemes, in report order (the model validates names in one place).
ALL_SCHEMES: tuple[str, ...] = POSITION_SCHEMES

# evaluate(run_dir, checkpoint) -> (metrics, metric_errors, eval_data); see asr.ablation.evaluate.
EvaluateFn = Callable[[Path, Path], tuple[dict[str, float | None], dict[str, str], dict[str, dict]]]
TrainFn = Callable[[TrainJob], TrainOutcome]


@dataclass
class AblationSettings:
    """One ablation: the schemes and everything they share (data, seed, budget, overrides)."""

    out_dir: Path
    data_dir: str
    schemes: Sequence[str] = ALL_SCHEMES
    seed: int = 0
    # Seeds per scheme: seed, seed + 1, ... (the report pools them and shows their spread).
    seeds: int = 1
    # More seeds for some schemes (scheme -> seeds, at least ``seeds``): the comparison the
    # report leans on most (rel_xl against wenet_rel) gets its seed spread.
    scheme_seeds: Mapping[str, int] = field(default_factory=dict)
    budget_steps: int | None = None
    budget_minutes: float | None = None
    val_every_steps: int | None = None
    extra_overrides: Sequence[str] = field(default_factory=tuple)
    train_timeout_minutes: float | None = None
    # The training code's frozen copy (asr.ablation.snapshot.freeze_code); None: this checkout's.
    code_root: Path | None = None
    # Runs that train at once (the adaptive budget's rungs), each with its share of the CPU cores:
    # a small model uses a few cores poorly, so several runs at once finish a rung sooner.
    jobs: int = 1

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        bad = [s for s in self.schemes if s not in ALL_SCHEMES]
        if bad:
            raise ValueError(f"unknown scheme(s) {bad}; valid schemes: {', '.join(ALL_SCHEMES)}")
        if len(set(self.schemes)) != len(self.schemes):
            raise ValueError(f"schemes repeat: {list(self.schemes)}")
        if not self.schemes:
            raise ValueError("no schemes to run (schemes is empty)")
        if self.seeds < 1:
            raise ValueError(f"seeds ({self.seeds}) must be >= 1")
        if self.jobs < 1:
            raise ValueError(f"jobs ({self.jobs}) must be >= 1")
        bad = {s: n for s, n in self.scheme_seeds.items() if s not in ALL_SCHEMES or n < 1}
        if bad:
            raise ValueError(f"per-scheme seeds {bad}: each must name a scheme ({', '.join(ALL_SCHEMES)}) and be >= 1")

    def seeds_for(self, scheme: str) -> int:
        """Training runs of ``scheme``: ``seeds``, or more where ``scheme_seeds`` asks for them."""
        return max(self.seeds, self.scheme_seeds.get(scheme, 1))

    def runs(self) -> list[tuple[str, int, Path]]:
        """(scheme, seed, run_dir) of every training run, seeds inner: a scheme's first
        seed keeps the folder ``<out>/<scheme>`` (so one-seed ablations look as before),
        further seeds go to ``<out>/<scheme>-seed<k>``."""
        return [
            (scheme, self.seed + k, self.out_dir / (scheme if k == 0 else f"{scheme}-seed{self.seed + k}"))
            for scheme in self.schemes
            for k in range(self.seeds_for(scheme))
        ]

    def job(self, scheme: str, resume_from: Path | None, seed: int | None = None,
            run_dir: Path | None = None, steps: int | None = None) -> TrainJob:
        """One training run's job; ``steps`` replaces the step budget (a rung of the adaptive budget)."""
        timeout = None if self.train_timeout_minutes is None else 60.0 * self.train_timeout_minutes
        return TrainJob(
            scheme=scheme,
            run_dir=run_dir if run_dir is not None else self.out_dir / scheme,
            data_dir=self.data_dir,
            seed=self.seed if seed is None else seed,
            budget_steps=self.budget_steps if steps is None else steps,
            budget_minutes=self.budget_minutes,
            val_every_steps=self.val_every_steps,
            extra_overrides=tuple(self.extra_overrides),
            resume_from=resume_from,
            timeout_s=timeout,
            code_root=self.code_root,
            threads=self.threads_per_run(),
        )

    def threads_per_run(self) -> int | None:
        """CPU threads of each training process when ``jobs`` share the machine (None: one run at a time,
        or the caller fixed OMP_NUM_THREADS)."""
        if self.jobs == 1 or "OMP_NUM_THREADS" in os.environ:
            return None
        return max(1, (os.cpu_count() or 1) // self.jobs)

    def training_settings(self, seed: int | None = None) -> dict[str, Any]:
        """What a run's result depends on (not the scheme list or output folder)."""
        return {
            "data_dir": self.data_dir,
            "seed": self.seed if seed is None else seed,
            "budget_steps": self.budget_steps,
            "budget_minutes": self.budget_minutes,
            "extra_overrides": list(self.extra_overrides),
        }

    def describe(self) -> dict[str, Any]:
        data = asdict(self)
        data["out_dir"] = str(self.out_dir)
        data["schemes"] = ",".join(self.schemes)
        data["scheme_seeds"] = ",".join(f"{s}={self.seeds_for(s)}" for s in self.schemes if self.seeds_for(s) > 1) \
            or "(none)"
        data["extra_overrides"] = " ".join(self.extra_overrides) or "(none)"
        return data


def _fmt_duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class AblationRunner:
    """Run :class:`AblationSettings` scheme by scheme.

    ``train_fn`` and ``evaluate_fn`` are seams for tests (a fake trainer, a fake
    evaluator); ``step_stats_fn(run_dir) -> (mean_step_s, steps)`` reads the
    training logs. ``log`` receives one line per phase per scheme.
    """

    def __init__(
        self,
        settings: AblationSettings,
        evaluate_fn: EvaluateFn,
        step_stats_fn: Callable[[Path], tuple[float | None, int | None]],
        train_fn: TrainFn = run_training,
        log: Callable[[str], None] = print,
    ) -> None:
        self.settings = settings
        self.evaluate_fn = evaluate_fn
        self.step_stats_fn = step_stats_fn
        self.train_fn = train_fn
        self.log = log
        # The adaptive budget's rungs, one line per decision, for the report (empty: a fixed budget).
        self.budget_lines: list[str] = []
        self.budget_setting: str | None = None  # the adaptive budget, for the report's settings
        # The adaptive budget's stops: scheme -> {"behind": the best it trailed, "steps": where it stopped}.
        self.stopped: dict[str, dict] = {}
        # Where the adaptive budget draws its rungs' progress bars (None: stderr).
        self.progress_file: TextIO | None = None

    def run(self) -> list[SchemeResult]:
        """Every scheme in order; returns their results (the report is on disk)."""
        if self.settings.jobs != 1:
            raise ValueError("a fixed budget trains one run at a time: several jobs need the adaptive budget")
        start = time.monotonic()
        results: list[SchemeResult] = []
        for scheme, seed, run_dir in self.settings.runs():
            results.append(self.run_scheme(scheme, seed, run_dir))
            self.write_outputs(results, time.monotonic() - start)
        report, plots = self.write_outputs(results, time.monotonic() - start)
        n_ok = sum(r.ok for r in results)
        self.log(
            f"[ablate] finished {n_ok}/{len(results)} schemes in {_fmt_duration(time.monotonic() - start)}; "
            f"report: {report}; plots: {', '.join(str(p) for p in plots) or '(none)'}"
        )
        return results

    def report_only(self) -> list[SchemeResult]:
        """Rewrite the report from the finished schemes' markers (curves re-read); trains nothing."""
        budget = self.settings.out_dir / BUDGET_FILE
        if budget.is_file():
            record = json.loads(budget.read_text())
            self.budget_lines = list(record["rungs"])
            self.stopped = dict(record.get("stopped", {}))
        results = []
        for scheme, seed, run_dir in self.settings.runs():
            result = read_marker(run_dir)
            if result is None:
                self.log(f"[ablate] {run_dir.name}: no result yet (not in the report)")
                continue
            if result.seed is None:  # a marker written before results carried their seed
                result.seed = seed
            result.run_dir = str(run_dir)  # the folder may have moved since the marker was written
            if result.ok:
                refresh_curves(result, run_dir)
            results.append(result)
        report, plots = self.write_outputs(results, 0.0)
        self.log(f"[ablate] report: {report}; plots: {', '.join(str(p) for p in plots) or '(none)'}")
        return results

    def run_scheme(self, scheme: str, seed: int | None = None, run_dir: Path | None = None) -> SchemeResult:
        """Train (or resume) and evaluate one run of a scheme; a finished run is read back instead."""
        seed = self.settings.seed if seed is None else seed
        run_dir = self.settings.out_dir / scheme if run_dir is None else run_dir
        previous = read_marker(run_dir)
        if previous is not None and previous.ok:
            self.log(f"[ablate] {run_dir.name}: skip (finished earlier, {run_dir / 'ablation_result.json'})")
            if previous.seed is None:
                previous.seed = seed
            changed = {
                k: (previous.settings.get(k), v)
                for k, v in self.settings.training_settings(seed).items()
                if previous.settings and previous.settings.get(k) != v
            }
            if changed:
                self.log(
                    f"[ablate] {scheme}: WARNING: that result was trained with other settings "
                    f"(earlier, now): {changed}; use another --out to train again"
                )
            return previous
        start = time.monotonic()
        trained = self._train(scheme, run_dir, seed)
        result = trained if isinstance(trained, SchemeResult) else self._evaluate(scheme, run_dir, trained)
        result.wall_s = time.monotonic() - start
        result.run_dir = str(run_dir)
        result.seed = seed
        result.settings = self.settings.training_settings(seed)
        write_marker(run_dir, result)
        state = "done" if result.ok else f"FAILED in {result.failed_phase}: {result.error}"
        self.log(f"[ablate] {run_dir.name}: {state} ({_fmt_duration(result.wall_s)})")
        return result

    def run_adaptive(self, budget: AdaptiveBudget, dev_records: DevRecordsFn) -> list[SchemeResult]:
        """Every scheme in rungs (``asr.ablation.adaptive``), then each run's test evaluation; returns
        the results (the report, with every rung's decisions, is on disk)."""
        start = time.monotonic()
        runs = self.settings.runs()
        budget.check_runs(len(runs), self.settings.val_every_steps)
        self.budget_setting = (f"adaptive: first rung {budget.first_steps} steps, at most {budget.max_steps} a run, "
                               f"{budget.total_steps} over all runs")
        seed_of = {run_dir: seed for _, seed, run_dir in runs}
        runs_of = {scheme: [r for s, _, r in runs if s == scheme] for scheme in self.settings.schemes}

        def train_to(scheme: str, run_dir: Path, steps: int) -> bool:
            if read_trained(run_dir)["steps"] >= steps:
                return True
            outcome = self._train(scheme, run_dir, seed_of[run_dir], steps)
            if isinstance(outcome, SchemeResult):
                write_marker(run_dir, outcome)
                return False
            reached = steps_reached(run_dir)
            if reached != steps:  # a rung that ended early is not the rung the decisions compare
                write_marker(run_dir, failed_result(scheme, "train", f"the run ended at step {reached} of the "
                                                                     f"rung's {steps}", run_dir))
                return False
            mark_trained(run_dir, steps, outcome.wall_s, outcome.peak_rss_mb)
            return True

        def measure(scheme: str, run_dir: Path, steps: int) -> list[dict] | None:
            path = dev_records_path(run_dir, steps)
            if path.is_file():
                return read_jsonl(path)
            ckpt = find_checkpoint(run_dir)
            self.log(f"[ablate] {run_dir.name}: dev at {steps} steps")
            began = time.monotonic()
            try:
                rows = dev_records(run_dir, ckpt)
            except Exception as err:  # noqa: BLE001  (a failed measurement fails this scheme only)
                self.log(f"[ablate] {run_dir.name}: dev measurement error: {type(err).__name__}: {err}")
                return None
            write_jsonl(path, rows)
            add_dev_seconds(run_dir, time.monotonic() - began)
            return rows

        progress = RungProgress(file=self.progress_file)
        try:
            rungs, failed = plan_rungs(self.settings.schemes, lambda s: runs_of[s], budget, train_to, measure,
                                       self.settings.val_every_steps or 1, self.log, jobs=self.settings.jobs,
                                       interrupt=stop_all_trainings, on_rung=progress.start)
        finally:
            progress.close()
        self.budget_lines = [line for rung in rungs for line in rung.lines()]
        self.stopped = stops_of(rungs)
        (self.settings.out_dir / BUDGET_FILE).write_text(
            json.dumps({"rungs": self.budget_lines, "stopped": self.stopped}, indent=1))
        results: list[SchemeResult] = []
        for scheme, seed, run_dir in runs:
            previous = read_marker(run_dir)
            trained = read_trained(run_dir)
            evaluated_at = (previous.settings or {}).get("budget_steps") if previous is not None else None
            if previous is not None and previous.ok and evaluated_at != trained["steps"]:
                # A larger budget trained this run further since its evaluation: evaluate it again.
                self.log(f"[ablate] {run_dir.name}: evaluated at {evaluated_at} steps, trained to "
                         f"{trained['steps']} since: evaluate again")
                previous = None
            if previous is not None and (previous.ok or scheme in failed):
                results.append(previous)
                continue
            outcome = TrainOutcome(0, trained["wall_s"], trained["peak_rss_mb"], run_dir / "train.log")
            began = time.monotonic()
            result = self._evaluate(scheme, run_dir, outcome)
            result.wall_s = trained["wall_s"] + time.monotonic() - began  # every rung's training and dev, the test
            result.run_dir, result.seed = str(run_dir), seed
            result.settings = {**self.settings.training_settings(seed), "budget_steps": trained["steps"]}
            write_marker(run_dir, result)
            results.append(result)
            self.write_outputs(results, time.monotonic() - start)
        report, plots = self.write_outputs(results, time.monotonic() - start)
        self.log(f"[ablate] finished {sum(r.ok for r in results)}/{len(results)} runs in "
                 f"{_fmt_duration(time.monotonic() - start)}; report: {report}")
        return results

    def _train(self, scheme: str, run_dir: Path, seed: int, steps: int | None = None) -> SchemeResult | TrainOutcome:
        """Run the training phase (to ``steps``, or the settings' budget); returns its outcome, or a failed
        result."""
        resume = find_checkpoint(run_dir)
        if resume is None and run_dir.exists():
            # A run that died before its first checkpoint: its step times and logs would
            # mix into the fresh run's, so they move aside (kept for the post-mortem).
            stale = run_dir.with_name(f"{run_dir.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}")
            run_dir.rename(stale)
            self.log(f"[ablate] {run_dir.name}: no last.ckpt; moved the earlier attempt to {stale}")
        job = self.settings.job(scheme, resume, seed, run_dir, steps)
        phase = "resume" if resume is not None else "train"
        budget = " + ".join(
            b
            for b in (
                f"{job.budget_steps} steps" if job.budget_steps is not None else "",
                f"{job.budget_minutes:g} min" if job.budget_minutes is not None else "",
            )
            if b
        )
        if resume is not None:
            archive_metrics(run_dir)
        where = f" from {resume}" if resume is not None else ""
        self.log(f"[ablate] {scheme}: {phase}{where} (budget {budget}) -> {run_dir}")
        try:
            outcome = self.train_fn(job)
        except (OSError, subprocess.SubprocessError, ValueError) as err:
            return failed_result(scheme, phase, err, run_dir)
        if not outcome.ok:
            return failed_result(scheme, phase, outcome.error_line(), run_dir)
        self.log(
            f"[ablate] {scheme}: {phase} finished in {_fmt_duration(outcome.wall_s)}, "
            f"peak RSS {outcome.peak_rss_mb:.0f} MB"
        )
        return outcome

    def _evaluate(self, scheme: str, run_dir: Path, trained: TrainOutcome) -> SchemeResult:
        ckpt = find_checkpoint(run_dir)
        if ckpt is None:
            return failed_result(scheme, "evaluate", f"no last.ckpt under {run_dir} after training", run_dir)
        self.log(f"[ablate] {scheme}: evaluate {ckpt}")
        try:
            metrics, metric_errors, eval_data = self.evaluate_fn(run_dir, ckpt)
            step_time, steps = self.step_stats_fn(run_dir)
        except Exception as err:  # noqa: BLE001  (any evaluation error fails this scheme only)
            self.log(f"[ablate] {scheme}: evaluation error: {type(err).__name__}: {err}")
            return failed_result(scheme, "evaluate", err, run_dir)
        metrics = dict(metrics)
        metrics["step_time_s"] = step_time
        if metrics.get("train_steps") is None:
            metrics["train_steps"] = None if steps is None else float(steps)
        metrics["peak_rss_mb"] = trained.peak_rss_mb
        errors = dict(metric_errors)
        if step_time is None:
            errors["step_time_s"] = "no step timing found in the training logs"
        result = SchemeResult(scheme=scheme, metrics=metrics, metric_errors=errors, eval_data=eval_data)
        refresh_curves(result, run_dir)
        return result

    def write_outputs(self, results: Sequence[SchemeResult], elapsed_s: float) -> tuple[Path, list[Path]]:
        """Rewrite report.md, results.json and the plots for the results so far."""
        out = self.settings.out_dir
        analysis = analyze(results, list(ALL_WER_METRICS), stopped=self.stopped)  # the bootstrap, once for all
        plots = write_plots(results, out, analysis)
        settings = {
            **self.settings.describe(),
            **({"budget": self.budget_setting} if self.budget_setting else {}),
            "elapsed (this invocation)": _fmt_duration(elapsed_s),
            # Includes schemes finished by earlier invocations (read from their markers).
            "train + evaluate time (all schemes)": _fmt_duration(sum(r.wall_s for r in results)),
            # Timings depend on what else runs on the machine: say how busy it was.
            "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at this write",
        }
        done = {Path(r.run_dir).name for r in results}
        pending = [run_dir.name for _, _, run_dir in self.settings.runs() if run_dir.name not in done]
        if pending:
            settings["pending"] = ",".join(pending)
        report, _ = write_report(out, results, settings, [str(p) for p in plots], analysis, self.budget_lines)
        return report, plots


def refresh_curves(result: SchemeResult, run_dir: Path) -> None:
    """(Re)read the learning curves and the last validation loss from the run's logs."""
    result.curve = read_learning_curve(run_dir)
    result.loss_curve = read_learning_curve(run_dir, VAL_LOSS)
    if result.loss_curve:
        result.metrics["val_loss"] = result.loss_curve[-1][1]
        result.metric_errors.pop("val_loss", None)
    else:
        result.metrics["val_loss"] = None
        result.metric_errors["val_loss"] = f"no {VAL_LOSS} in the training logs"


def failed_schemes(results: Sequence[SchemeResult]) -> list[str]:
    return [r.scheme for r in results if r.status == STATUS_FAILED]


