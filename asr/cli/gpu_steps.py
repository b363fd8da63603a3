"""Running a GPU check's steps under time caps, and the Markdown report they leave.

A step is a few commands with one time cap; :func:`run_plan` runs the steps in order within an
optional budget for the whole plan (a step is cut at its cap or at what is left of the budget,
whichever comes first; one that no longer fits is recorded as not run), rewriting the report
after every step so that a run cut short still leaves one. The report is a Markdown section for
``data/results/gpu.md``: the command, commit, host, card and date, then each step's commands,
status, time and output tail.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from asr.cli import CHECKOUT

# The checkout whose tests and scripts the steps run (the check runs a repository, not an install).
ROOT = CHECKOUT
TAIL_LINES = 40


@dataclass(frozen=True)
class Step:
    """``commands`` run in order within ``timeout_s`` in all; ``requires``: a path (relative to the checkout)
    without which the step is skipped and said so (a corpus that does not travel, say)."""

    name: str
    what: str
    commands: tuple[tuple[str, ...], ...]
    timeout_s: int
    requires: str | None = None


def run_step(step: Step, log: Path, budget_s: float | None = None, append: bool = False) -> tuple[int, float, str]:
    """Run every command of the step within its timeout (and ``budget_s`` when given: what is left of
    the whole run), its output into ``log`` (after what is there with ``append``); (the first non-zero
    exit code or 0, seconds, this step's output tail)."""
    start, code = time.monotonic(), 0
    limit = step.timeout_s if budget_s is None else min(step.timeout_s, budget_s)
    offset = log.stat().st_size if append and log.exists() else 0
    with open(log, "a" if append else "w") as fh:
        fh.write(f"\n===== {step.name} =====\n" if append else "")
        for cmd in step.commands:
            fh.write(f"$ {shlex.join(cmd)}\n")
            fh.flush()
            left = limit - (time.monotonic() - start)
            try:
                if left <= 0:
                    raise subprocess.TimeoutExpired(cmd, 0)
                result = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=left,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode
            except subprocess.TimeoutExpired:
                fh.write(f"\n[gpu_check] timed out: the step had {limit:.0f} s\n")
                result = 124
            except FileNotFoundError as err:
                fh.write(f"\n[gpu_check] {err}\n")
                result = 127
            code = code or result
    with open(log, "rb") as fh:
        fh.seek(offset)
        text = fh.read().decode(errors="replace")
    tail = "".join(text.splitlines(keepends=True)[-TAIL_LINES:])
    return code, time.monotonic() - start, tail


def card() -> str:
    """The card, torch and CUDA versions, as one line (no CUDA device: says so)."""
    import torch

    versions = f"Python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    if not torch.cuda.is_available():
        return f"no CUDA device ({versions})"
    props = torch.cuda.get_device_properties(0)
    return (f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.1f} GiB, "
            f"bf16 {torch.cuda.is_bf16_supported()}), {os.cpu_count()} CPU cores; {versions}")


def commit() -> str:
    """HEAD's short hash, and whether the tree differs from it: a device's copy of a working tree can carry a
    repository whose HEAD is older than the code it runs, so a bare hash there would name the wrong code."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} (the tree differs from it)" if changed else head


def report_head(command: str) -> list[str]:
    """The section's heading and its facts: date, command, commit, host, card."""
    return [f"## GPU check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
            f"- **Command:** `{command}`", f"- **Commit:** {commit()}", f"- **Host:** {os.uname().nodename}",
            f"- **Card:** {card()}", ""]


def run_plan(steps: list[Step], out: Path, budget_min: float | None = None, min_step_s: float = 20.0,
             command: str | None = None, one_log: bool = False) -> list[str]:
    """Run ``steps`` in order into ``out`` (report.md rewritten after each step; a log per step, or with
    ``one_log`` all of them in ``out/steps.log``: a lent device returns few files) within ``budget_min``
    minutes when given (a step is not started with less than ``min_step_s`` left); the names of the steps
    that failed or were not run (a step skipped for a missing ``requires`` is neither)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = report_head(command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    failed = []
    deadline = None if budget_min is None else time.monotonic() + 60 * budget_min
    for step in steps:
        left = None if deadline is None else deadline - time.monotonic()
        if step.requires is not None and not (ROOT / step.requires).exists():
            print(f"[gpu_check] {step.name}: skipped ({step.requires} is not here)", flush=True)
            lines += [f"### {step.name}: skipped, {step.requires} is not here", "", step.what, ""]
        elif left is not None and left < min_step_s:
            print(f"[gpu_check] {step.name}: not run ({max(left, 0):.0f} s of the budget left)", flush=True)
            failed.append(step.name)
            lines += [f"### {step.name}: NOT RUN, the budget was spent", "", step.what, ""]
        else:
            print(f"[gpu_check] {step.name}: {step.what}", flush=True)
            log = out / ("steps.log" if one_log else f"{step.name}.log")
            code, seconds, tail = run_step(step, log, left, append=one_log)
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            print(f"[gpu_check] {step.name}: {status} in {seconds / 60:.1f} min", flush=True)
            if code != 0:
                failed.append(step.name)
            lines += [f"### {step.name}: {status}, {seconds / 60:.1f} min", "", step.what, "",
                      *[f"    $ {shlex.join(cmd)}" for cmd in step.commands], "", "```", tail.rstrip(), "```", ""]
        (out / "report.md").write_text("\n".join(lines) + "\n")  # rewritten after every step
    return failed
