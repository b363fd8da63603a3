"""Check the GPU path on a CUDA machine in one command, and write one report.

Usage (from the repository root):
    python scripts/gpu_check.py                       # every step (needs a CUDA device)
    python scripts/gpu_check.py --dry-run             # print the plan: steps and commands (runs anywhere)
    python scripts/gpu_check.py --skip quickstart     # leave steps out (comma-separated names)
    python scripts/gpu_check.py --only suite,attention --out exp/gpu_check_quick
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

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


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


def plan(out: Path, data_dir: str, throughput_steps: int) -> list[Step]:
    attention = tuple(
        (PY, "scripts/bench_attention.py", "--device", "cuda", "--dtype", dtype, "--lengths", "512", "1024", "2048",
         "--json", str(out / f"attention_{dtype}.json"))
        for dtype in ("float32", "bfloat16")
    )
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
             ((PY, "scripts/bench_train_step.py", "--compare", "eager,blocks,model", "--synthetic", "5000",
               "--device", "cuda", "--precision", "bf16", "--steps", str(throughput_steps), "--warmup", "20",
               "experiment=librispeech_u2pp", "trainer=gpu"),), 3600),
    ]


def run_step(step: Step, log: Path) -> tuple[int, float, str]:
    """Run every command of the step; (the first non-zero exit code or 0, seconds, output tail)."""
    start, code = time.monotonic(), 0
    with open(log, "w") as fh:
        for cmd in step.commands:
            fh.write(f"$ {shlex.join(cmd)}\n")
            fh.flush()
            try:
                result = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                        timeout=step.timeout_s).returncode
            except subprocess.TimeoutExpired:
                fh.write(f"\n[gpu_check] timed out after {step.timeout_s} s\n")
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
    args = parser.parse_args(argv)
    if args.env:
        print_env()
        return 0
    out = Path(args.out)
    steps = plan(out, args.data_dir, args.throughput_steps)
    names = [s.name for s in steps]
    chosen = set(args.only.split(",")) if args.only else set(names)
    chosen -= set(args.skip.split(",")) if args.skip else set()
    unknown = chosen - set(names)
    if unknown:
        parser.error(f"unknown step(s) {sorted(unknown)}; steps: {', '.join(names)}")
    steps = [s for s in steps if s.name in chosen]
    if args.dry_run:
        print(f"gpu_check plan: {len(steps)} step(s), report {out / 'report.md'}")
        for i, step in enumerate(steps, 1):
            print(f"\n{i}. {step.name}: {step.what} (timeout {step.timeout_s // 60} min)")
            for cmd in step.commands:
                print(f"   $ {shlex.join(cmd)}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); --dry-run shows the plan",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# GPU check, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", "",
             f"host {os.uname().nodename}, commit {_commit()}", ""]
    failed = []
    for step in steps:
        print(f"[gpu_check] {step.name}: {step.what}", flush=True)
        code, seconds, tail = run_step(step, out / f"{step.name}.log")
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"[gpu_check] {step.name}: {status} in {seconds / 60:.1f} min", flush=True)
        if code != 0:
            failed.append(step.name)
        lines += [f"## {step.name}: {status}, {seconds / 60:.1f} min", "", step.what, "",
                  *[f"    $ {shlex.join(cmd)}" for cmd in step.commands], "", "```", tail.rstrip(), "```", ""]
        (out / "report.md").write_text("\n".join(lines) + "\n")  # rewritten after every step
    print(f"[gpu_check] report: {out / 'report.md'}; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
