"""Check the GPU path on a CUDA machine in one command, and write one report.

Usage (from the repository root):
    python scripts/gpu_check.py                       # every step (needs a CUDA device)
    python scripts/gpu_check.py --dry-run             # print the plan: steps and commands (runs anywhere)
    python scripts/gpu_check.py --skip quickstart     # leave steps out (comma-separated names)
    python scripts/gpu_check.py --only suite,attention --out exp/gpu_check_quick
    python scripts/gpu_check.py --lease               # the short plan for a lent device: one command, ~9 min
    python scripts/gpu_check.py --fetch-wheels .whl   # here, before a lease: the wheels the device image lacks
    python scripts/gpu_check.py --help

Steps, in order (each one's command, exit code, time and output tail go into the report):
  env         torch and CUDA versions, the GPU, bf16 support;
  suite       the test suite with CUDA present: the `device` fixture (tests/conftest.py) adds
              cuda to the model, streaming and training tests, and the slow compiled-model tests
              run too (every scheme compiled by inductor equals eager);
  attention   scripts/bench_attention.py --device cuda, fp32 and bf16, L = 512, 1024, 2048:
              every scheme's fwd+bwd time and memory as ratios to flash SDPA;
  quickstart  the quickstart recipe in bf16-mixed on the GPU (scripts/quickstart.py trainer=gpu,
              its own run folder; the corpus is built first when missing);
  throughput  the LibriSpeech-sized recipe's model (experiment=librispeech_u2pp) on synthetic
              duration-bucketed batches, eager against compiled (blocks and whole model),
              bf16 autocast, interleaved (scripts/bench_train_step.py --synthetic).

The report is <out>/report.md, with every step's full output beside it (<out>/<step>.log).
A failing step is recorded and the next one still runs; the exit code is 1 if any failed.

A lent device (the device tool here) gives a session about 15 minutes in all and one command at
most 10, so the whole plan (hours) cannot run there. ``--lease`` is the plan sized for one such
command, under a 9-minute budget (``--budget-minutes``): env; the tests whose ``device`` fixture
is cuda in tests/model, tests/streaming and tests/train (``-k cuda``); the attention benchmark;
a short eager throughput run (10 batches). A step that the
budget no longer fits is recorded as not run. The device's image has torch, torchaudio,
lightning and sentencepiece but not hydra, lhotse and a few more that this code imports:
``--fetch-wheels DIR`` downloads them here (the versions installed here, for the device's
Python, 3.12), building here any that PyPI ships only as source (antlr4-python3-runtime 4.9.3, which
hydra 1.3 pins, is pure Python). Then, on the device:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \
        PYTHONPATH=/tmp/site:. python3 scripts/gpu_check.py --lease --out $OUT/gpu_check
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from asr.cli import CHECKOUT

# The checkout whose tests and scripts the steps run (this tool checks a repository, not an install).
ROOT = CHECKOUT
PY = sys.executable
LEASE_BUDGET_MINUTES = 9.0
# What this code imports that the device image (torch, torchaudio, lightning, sentencepiece, numpy,
# scipy, matplotlib, rich, ...) lacks; --fetch-wheels takes the versions installed here.
DEVICE_WHEELS = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "lhotse", "intervaltree", "cytoolz",
                 "editdistance", "soundfile", "cffi", "pycparser")


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    commands: tuple[tuple[str, ...], ...]
    timeout_s: int


def print_env() -> None:
    import torch

    print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print("device", props.name, f"{props.total_memory / 2**30:.1f} GiB", "bf16", torch.cuda.is_bf16_supported())
    else:
        print("device: no CUDA device")


def _attention_commands(out: Path) -> tuple[tuple[str, ...], ...]:
    """bench_attention.py on the GPU in fp32 and bf16, L = 512, 1024, 2048, each writing its JSON into ``out``."""
    return tuple(
        (PY, "scripts/bench_attention.py", "--device", "cuda", "--dtype", dtype, "--lengths", "512", "1024", "2048",
         "--json", str(out / f"attention_{dtype}.json"))
        for dtype in ("float32", "bfloat16")
    )


def _throughput_command(variants: str, steps: int, warmup: int) -> tuple[str, ...]:
    """bench_train_step.py on the GPU: the LibriSpeech-sized model, bf16, synthetic batches, ``variants`` interleaved."""
    return (PY, "scripts/bench_train_step.py", "--compare", variants, "--synthetic", "5000", "--device", "cuda",
            "--precision", "bf16", "--steps", str(steps), "--warmup", str(warmup),
            "experiment=librispeech_u2pp", "trainer=gpu")


def plan(out: Path, data_dir: str, throughput_steps: int) -> list[Step]:
    attention = _attention_commands(out)
    return [
        Step("env", "versions and the GPU", ((PY, "scripts/gpu_check.py", "--env"), ("nvidia-smi",)), 60),
        Step("suite", "test suite with cuda in the device fixture, then the slow tests (compiled models of every scheme)",
             ((PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
              (PY, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider")), 5400),
        Step("attention", "attention cores on the GPU, fp32 and bf16, ratios to flash SDPA", attention, 1800),
        Step("quickstart", "the quickstart recipe in bf16-mixed on the GPU",
             ((PY, "scripts/quickstart.py", "--data-dir", data_dir, "--run-dir", str(out / "quickstart"), "trainer=gpu"),),
             7200),
        Step("throughput", "LibriSpeech-sized model, eager vs compiled, bf16, synthetic batches",
             (_throughput_command("eager,blocks,model", throughput_steps, 20),), 3600),
    ]


def lease_plan(out: Path) -> list[Step]:
    """The plan for one command on a lent device (module docstring): minutes, not hours."""
    attention = _attention_commands(out)
    return [
        Step("env", "versions and the GPU", ((PY, "scripts/gpu_check.py", "--env"), ("nvidia-smi",)), 30),
        Step("cuda_tests", "the model, streaming and training tests whose device fixture is cuda",
             ((PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", "--timeout", "120",
               "tests/model", "tests/streaming", "tests/train"),), 210),
        Step("attention", "attention cores on the GPU, fp32 and bf16, ratios to flash SDPA", attention, 90),
        # Eager only: compiling the blocks for every duration-bucketed shape takes minutes, more than
        # this step's share of a lease, so the compiled comparison belongs to the full plan.
        Step("throughput", "LibriSpeech-sized model, eager, bf16, 10 synthetic batches",
             (_throughput_command("eager", 10, 3),), 90),
    ]


def fetch_wheels(folder: Path, python_version: str = "3.12") -> list[tuple[str, ...]]:
    """The commands that put DEVICE_WHEELS, at the versions installed here, into ``folder`` as wheels for
    ``python_version`` on x86-64 Linux; a package PyPI has only as source is built here (pure Python)."""
    from importlib import metadata

    platforms = [a for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
                 for a in ("--platform", tag)]
    commands = []
    for name in DEVICE_WHEELS:
        pin = f"{name}=={metadata.version(name)}"
        commands.append((PY, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
                         python_version, "--implementation", "cp", *platforms, "-d", str(folder), pin))
    return commands


def _fetch_one(download: tuple[str, ...], folder: Path) -> int:
    """Run one download; when no wheel exists (a source-only package), build one here instead."""
    if subprocess.run(download, cwd=ROOT).returncode == 0:
        return 0
    pin = download[-1]
    print(f"[gpu_check] no wheel of {pin} for the device; building one from its source", flush=True)
    before = set(folder.glob("*.whl"))
    if subprocess.run((PY, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), pin), cwd=ROOT).returncode:
        return 1
    for wheel in set(folder.glob("*.whl")) - before:
        if not wheel.name.endswith("-none-any.whl"):  # built for this machine's Python, not the device's
            print(f"[gpu_check] {wheel.name} is not pure Python: it would not install on the device; removed",
                  flush=True)
            wheel.unlink()
            return 1
    return 0


def run_step(step: Step, log: Path, budget_s: float | None = None) -> tuple[int, float, str]:
    """Run every command of the step within its timeout (and ``budget_s`` when given: what is left of
    the whole run); (the first non-zero exit code or 0, seconds, output tail)."""
    start, code = time.monotonic(), 0
    limit = step.timeout_s if budget_s is None else min(step.timeout_s, budget_s)
    with open(log, "w") as fh:
        for cmd in step.commands:
            fh.write(f"$ {shlex.join(cmd)}\n")
            fh.flush()
            left = limit - (time.monotonic() - start)
            try:
                if left <= 0:
                    raise subprocess.TimeoutExpired(cmd, 0)
                result = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=left).returncode
            except subprocess.TimeoutExpired:
                fh.write(f"\n[gpu_check] timed out: the step had {limit:.0f} s\n")
                result = 124
            except FileNotFoundError as err:
                fh.write(f"\n[gpu_check] {err}\n")
                result = 127
            code = code or result
    tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-40:])
    return code, time.monotonic() - start, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="exp/gpu_check", help="report folder (default exp/gpu_check)")
    parser.add_argument("--data-dir", default="data/synth", help="the quickstart's corpus (built when missing)")
    parser.add_argument("--throughput-steps", type=int, default=80, help="batches per variant in the throughput step")
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out")
    parser.add_argument("--only", default="", help="comma-separated steps to run (default: all)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    parser.add_argument("--env", action="store_true", help="print versions and the GPU, and exit")
    parser.add_argument("--lease", action="store_true",
                        help=f"the short plan for one command on a lent device "
                             f"({LEASE_BUDGET_MINUTES:g}-minute budget)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="stop starting steps when this much time is spent; a running step is cut at it "
                             f"(default: none; {LEASE_BUDGET_MINUTES:g} with --lease)")
    parser.add_argument("--fetch-wheels", metavar="DIR", default=None,
                        help="download (here) the wheels the device image lacks into DIR, and exit")
    parser.add_argument("--python-version", default="3.12", help="with --fetch-wheels: the device's Python")
    args = parser.parse_args(argv)
    if args.env:
        print_env()
        return 0
    if args.budget_minutes is not None and not args.budget_minutes > 0:
        parser.error(f"--budget-minutes ({args.budget_minutes}) must be > 0")
    if args.fetch_wheels:
        folder = Path(args.fetch_wheels)
        downloads = fetch_wheels(folder, args.python_version)
        if args.dry_run:
            print("\n".join(f"$ {shlex.join(cmd)}" for cmd in downloads))
            return 0
        folder.mkdir(parents=True, exist_ok=True)
        failed = [cmd[-1] for cmd in downloads if _fetch_one(cmd, folder) != 0]
        wheels = len(list(folder.glob("*.whl")))
        print(f"[gpu_check] wheels in {folder}: {wheels}; failed: {', '.join(failed) or 'none'}")
        return 1 if failed else 0
    out = Path(args.out)
    budget_min = args.budget_minutes if args.budget_minutes is not None else (
        LEASE_BUDGET_MINUTES if args.lease else None)
    steps = lease_plan(out) if args.lease else plan(out, args.data_dir, args.throughput_steps)
    names = [s.name for s in steps]
    chosen = set(args.only.split(",")) if args.only else set(names)
    chosen -= set(args.skip.split(",")) if args.skip else set()
    unknown = chosen - set(names)
    if unknown:
        other = [s.name for s in (plan(out, args.data_dir, args.throughput_steps) if args.lease else lease_plan(out))]
        hint = f" (without --lease: {', '.join(other)})" if args.lease else f" (with --lease: {', '.join(other)})"
        parser.error(f"unknown step(s) {sorted(unknown)}; steps: {', '.join(names)}{hint}")
    steps = [s for s in steps if s.name in chosen]
    if args.dry_run:
        budget = f", budget {budget_min:g} min" if budget_min is not None else ""
        print(f"gpu_check plan: {len(steps)} step(s), report {out / 'report.md'}{budget}")
        for i, step in enumerate(steps, 1):
            limit = f"{step.timeout_s // 60} min" if step.timeout_s >= 120 else f"{step.timeout_s} s"
            print(f"\n{i}. {step.name}: {step.what} (timeout {limit})")
            for cmd in step.commands:
                print(f"   $ {shlex.join(cmd)}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); --dry-run shows the plan",
              file=sys.stderr)
        return 2
    failed = run_plan(steps, out, budget_min)
    print(f"[gpu_check] report: {out / 'report.md'}; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


def run_plan(steps: list[Step], out: Path, budget_min: float | None = None, min_step_s: float = 20.0) -> list[str]:
    """Run ``steps`` in order into ``out`` (report.md rewritten after each step, a log per step) within
    ``budget_min`` minutes when given (a step is not started with less than ``min_step_s`` left); the
    names of the steps that failed or were not run."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# GPU check, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", "",
             f"host {os.uname().nodename}, commit {_commit()}", ""]
    failed = []
    deadline = None if budget_min is None else time.monotonic() + 60 * budget_min
    for step in steps:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < min_step_s:
            print(f"[gpu_check] {step.name}: not run ({max(left, 0):.0f} s of the budget left)", flush=True)
            failed.append(step.name)
            lines += [f"## {step.name}: NOT RUN, the budget was spent", "", step.what, ""]
            (out / "report.md").write_text("\n".join(lines) + "\n")
            continue
        print(f"[gpu_check] {step.name}: {step.what}", flush=True)
        code, seconds, tail = run_step(step, out / f"{step.name}.log", left)
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"[gpu_check] {step.name}: {status} in {seconds / 60:.1f} min", flush=True)
        if code != 0:
            failed.append(step.name)
        lines += [f"## {step.name}: {status}, {seconds / 60:.1f} min", "", step.what, "",
                  *[f"    $ {shlex.join(cmd)}" for cmd in step.commands], "", "```", tail.rstrip(), "```", ""]
        (out / "report.md").write_text("\n".join(lines) + "\n")  # rewritten after every step
    return failed


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
