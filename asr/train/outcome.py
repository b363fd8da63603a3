"""What a finished training run did, said in words: the steps it ran of those it planned, whether
its wall-clock cap (``trainer.max_time``) ended it, and its dev WER curve from the CSV log.

A driver that caps training by time (the quickstart's ``--train-minutes``) prints these lines in
its end-of-run summary: a run cut short by the cap has not reached the end of its learning-rate
schedule, and its best dev WER alone does not show that. The facts come from the run's
``train_summary.json`` (:func:`asr.train.run.train` records the step limit and the cap) and from
``metrics.csv`` of its CSV logger; a summary written before those keys existed falls back to the
run's ``.hydra/config.yaml`` for the step limit and leaves the cause unsaid.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

DEV_WER_METRIC = "val_wer"
CSV_METRICS_FILE = "metrics.csv"


@dataclass(frozen=True)
class TrainingOutcome:
    """steps: optimizer steps done. planned_steps: ``trainer.max_steps`` (None: no step limit or
    unknown). time_cap_s: ``trainer.max_time`` in seconds (None: no cap or unknown).
    stopped_by_time_cap: the cap ended training (None: not recorded). dev_curve: (step, WER in
    [0, 1]) per validation, step order. curve_file: the CSV the curve was read from (None: no CSV
    log with that metric). fitted_steps: the step the cosine was moved to end at so that the run fits its
    time cap (``asr.train.time_fit``; None: not moved)."""

    steps: int
    planned_steps: int | None
    time_cap_s: float | None
    stopped_by_time_cap: bool | None
    dev_curve: tuple[tuple[int, float], ...] = ()
    curve_file: Path | None = None
    fitted_steps: int | None = None

    @property
    def stopped_early(self) -> bool:
        """Training ended before its planned steps."""
        return self.planned_steps is not None and self.steps < self.planned_steps


def dev_wer_curve(log_dirs: list[str] | tuple[str, ...]) -> tuple[tuple[tuple[int, float], ...], Path | None]:
    """((step, dev WER), ...) from the first ``metrics.csv`` among ``log_dirs`` that logs
    :data:`DEV_WER_METRIC`, and that file. A resumed run appends to the file, so a step logged twice
    keeps its last value. ((), None) when no log has it."""
    for log_dir in log_dirs:
        path = Path(log_dir) / CSV_METRICS_FILE
        if not path.is_file():
            continue
        by_step: dict[int, float] = {}
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                value, step = row.get(DEV_WER_METRIC), row.get("step")
                if value and step:
                    wer = float(value)
                    if math.isfinite(wer):
                        by_step[int(float(step))] = wer
        if by_step:
            return tuple(sorted(by_step.items())), path
    return (), None


def _planned_from_hydra(out_dir: str | None) -> tuple[int | None, float | None]:
    """(max_steps, max_time in s) from a run folder's ``.hydra/config.yaml``; Nones when unreadable."""
    if not out_dir:
        return None, None
    path = Path(out_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None, None
    import yaml

    trainer = (yaml.safe_load(path.read_text()) or {}).get("trainer") or {}
    return _step_limit(trainer.get("max_steps")), parse_max_time(trainer.get("max_time"))


def _step_limit(max_steps) -> int | None:
    """Lightning's ``max_steps`` as a limit: -1 (or None) means none."""
    return None if max_steps is None or int(max_steps) < 0 else int(max_steps)


def parse_max_time(max_time) -> float | None:
    """Seconds of a Lightning ``max_time`` ("DD:HH:MM:SS", quotes allowed; None: no cap)."""
    if max_time is None:
        return None
    parts = str(max_time).strip().strip("'\"").split(":")
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        raise ValueError(f"max_time {max_time!r} is not DD:HH:MM:SS")
    days, hours, minutes, seconds = map(int, parts)
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def max_time_string(minutes: float) -> str:
    """Lightning's ``max_time`` format ``DD:HH:MM:SS`` for a number of minutes."""
    total = max(1, int(round(minutes * 60)))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    return f"{days:02d}:{hours:02d}:{mins:02d}:{secs:02d}"


def read_outcome(summary: dict) -> TrainingOutcome:
    """The outcome of the run a ``train_summary.json`` (as a dict) describes."""
    if "max_steps" in summary:
        planned, cap = _step_limit(summary["max_steps"]), summary.get("time_cap_s")
        stopped = summary.get("stopped_by_time_cap")
    else:
        planned, cap = _planned_from_hydra(summary.get("out_dir"))
        stopped = None
    curve, curve_file = dev_wer_curve(summary.get("log_dirs") or [])
    fitted = (summary.get("fitted_to_time_cap") or {}).get("steps")
    return TrainingOutcome(steps=int(summary["global_step"]), planned_steps=planned, time_cap_s=cap,
                           stopped_by_time_cap=stopped, dev_curve=curve, curve_file=curve_file,
                           fitted_steps=fitted)


def run_conditions(summary: dict) -> str:
    """What a run trained at, as a suffix for a time line: `` at bf16-mixed, allocator libtcmalloc_minimal.so.4``;
    empty for a summary written before those keys existed."""
    return ((f" at {precision}" if (precision := summary.get("precision")) else "")
            + (f", allocator {allocator}" if (allocator := summary.get("allocator")) else ""))


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes:.0f}" if minutes == round(minutes) else f"{minutes:.1f}"


def outcome_lines(outcome: TrainingOutcome, max_points: int = 6, cap_hint: str | None = None) -> list[str]:
    """Summary lines: how training ended and, when it ended early, the dev WER curve (the last
    ``max_points`` validations) and where the whole curve is; ``cap_hint`` (how to give the run more
    time) follows when the time cap ended it. Empty when the run did its planned steps."""
    if not outcome.stopped_early:
        return []
    of = f"{outcome.steps} of {outcome.planned_steps} steps"
    cap = "its" if outcome.time_cap_s is None else f"the {_minutes(outcome.time_cap_s)}-min"
    if outcome.fitted_steps is not None and not outcome.stopped_by_time_cap:
        lines = [f"training ran {of}: {cap} time cap left no time for more, so the learning rate's decay was "
                 f"moved to end at step {outcome.fitted_steps} (a finished schedule on fewer steps than the "
                 "recipe's)"]
    elif outcome.stopped_by_time_cap and outcome.time_cap_s is not None:
        lines = [f"training stopped by {cap} time cap at {of}: a model less trained than the recipe's"]
    elif outcome.stopped_by_time_cap is None:
        lines = [f"training ended at {of} (what ended it is not recorded in this run's summary)"]
    else:
        lines = [f"training ended at {of}, before its time cap"]
    if outcome.dev_curve:
        shown = outcome.dev_curve[-max_points:]
        points = ", ".join(f"{100 * wer:.1f}% at {step}" for step, wer in shown)
        lines.append(f"dev WER by step: {'..., ' if len(shown) < len(outcome.dev_curve) else ''}{points} "
                     f"(whole curve: {outcome.curve_file}, column {DEV_WER_METRIC})")
    else:
        lines.append("dev WER curve: no CSV log with it in this run (see its TensorBoard log)")
    if (outcome.stopped_by_time_cap or outcome.fitted_steps is not None) and cap_hint:
        lines.append(cap_hint)
    return lines
