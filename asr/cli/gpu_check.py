"""Check the GPU path on a CUDA machine in one command, and write one report.

Usage (from the repository root):
    python scripts/gpu_check.py                       # every step (needs a CUDA device)
    python scripts/gpu_check.py --dry-run             # print the plan: steps and commands (runs anywhere)
    python scripts/gpu_check.py --skip quickstart     # leave steps out (comma-separated names)
    python scripts/gpu_check.py --only suite,attention --out exp/gpu_check_quick
    python scripts/gpu_check.py --lease               # the short plan for a lent device: one command, ~9 min
    python scripts/gpu_check.py --lease --tiny --out /tmp/lease   # the same plan on the CPU, tiny sizes
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

``--lease`` is the plan for one command on a lent device (about 15 minutes in all, one command
at most 10): about 9 minutes of steps with a cap each, one log (few files come back from a lease),
and a report that is a Markdown section for data/results/gpu.md; ``asr.cli.gpu_lease`` says what
it runs. ``--lease --tiny`` runs the same plan on the CPU with tiny sizes, in seconds: it checks
that every command still runs and measures nothing.

The device's image has torch, torchaudio, lightning and sentencepiece but not hydra, lhotse and a
few more that this code imports, nor the peers: ``--fetch-wheels DIR`` downloads them here (the
versions installed here, for the device's Python, 3.12; a source-only package, antlr4 4.9.3, is
built here, pure Python), ESPnet's wheel without its dependencies (its conformer encoder needs
typeguard alone), and exports Wenet's source from its mirror into DIR/wenet_src (never committed:
DIR is git-ignored). Then, on the device, with DIR carried:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \
        PYTHONPATH=/tmp/site:. python3 scripts/gpu_check.py --lease --out $OUT/gpu_check
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from asr.cli.gpu_lease import LEASE_BUDGET_MINUTES, WENET_SRC, attention_commands, lease_plan, throughput_command
from asr.cli.gpu_steps import ROOT, Step, run_plan, run_step  # noqa: F401  (run_step: the runner's API)

PY = sys.executable
# What this code imports that the device image (torch, torchaudio, lightning, sentencepiece, numpy,
# scipy, matplotlib, rich, ...) lacks; --fetch-wheels takes the versions installed here. websockets: the server's
# modules, which the training tests' collection imports.
DEVICE_WHEELS = ("hydra-core", "omegaconf", "antlr4-python3-runtime", "lhotse", "intervaltree", "cytoolz",
                 "editdistance", "soundfile", "cffi", "pycparser", "websockets")
# The peers' wheels, not installed here: ESPnet without its dependency list, and the one its encoder imports.
PEER_WHEELS = ("espnet<=202511", "typeguard>=4")
WENET_MIRROR = Path("/work/.mirror/wenet-e2e+wenet/repo")


def print_env() -> None:
    import torch

    print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print("device", props.name, f"{props.total_memory / 2**30:.1f} GiB", "bf16", torch.cuda.is_bf16_supported())
    else:
        print("device: no CUDA device")


def plan(out: Path, data_dir: str, throughput_steps: int) -> list[Step]:
    return [
        Step("env", "versions and the GPU", ((PY, "scripts/gpu_check.py", "--env"), ("nvidia-smi",)), 60),
        Step("suite", "test suite with cuda in the device fixture, then the slow tests (compiled models of every scheme)",
             ((PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
              (PY, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider")), 5400),
        Step("attention", "attention cores on the GPU, fp32 and bf16, ratios to flash SDPA", attention_commands(out),
             1800),
        Step("quickstart", "the quickstart recipe in bf16-mixed on the GPU",
             ((PY, "scripts/quickstart.py", "--data-dir", data_dir, "--run-dir", str(out / "quickstart"), "trainer=gpu"),),
             7200),
        Step("throughput", "LibriSpeech-sized model, eager vs compiled, bf16, synthetic batches",
             (throughput_command("eager,blocks,model", throughput_steps, 20),), 3600),
    ]


def fetch_wheels(folder: Path, python_version: str = "3.12") -> list[tuple[str, ...]]:
    """The commands that put DEVICE_WHEELS, at the versions installed here, and PEER_WHEELS into ``folder`` as
    wheels for ``python_version`` on x86-64 Linux; a package PyPI has only as source is built here (pure Python)."""
    from importlib import metadata

    platforms = [a for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
                 for a in ("--platform", tag)]
    pins = [f"{name}=={metadata.version(name)}" for name in DEVICE_WHEELS] + list(PEER_WHEELS)
    return [(PY, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
             "--implementation", "cp", *platforms, "-d", str(folder), pin) for pin in pins]


def export_wenet(folder: Path, mirror: Path = WENET_MIRROR) -> int:
    """Wenet's ``wenet/`` package from its bare mirror into ``folder/wenet_src`` (for the peers step); 1 when
    the mirror is missing or the export fails (the peers step then skips Wenet and says why)."""
    target = folder / "wenet_src"
    if not mirror.is_dir():
        print(f"[gpu_check] no Wenet mirror at {mirror}: the peers step will skip Wenet", flush=True)
        return 1
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", f"--git-dir={mirror}", "archive", "HEAD", "wenet"], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout)
    archive.stdout.close()
    ok = archive.wait() == 0 and untar.returncode == 0
    print(f"[gpu_check] Wenet's source {'exported to' if ok else 'NOT exported to'} {target}", flush=True)
    return 0 if ok else 1


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


def _parser() -> argparse.ArgumentParser:
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
    parser.add_argument("--tiny", action="store_true",
                        help="with --lease: the same plan on the CPU with tiny sizes "
                             "(checks that it runs; measures nothing)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="stop starting steps when this much time is spent; a running step is cut at it "
                             f"(default: none; {LEASE_BUDGET_MINUTES:g} with --lease)")
    parser.add_argument("--fetch-wheels", metavar="DIR", default=None,
                        help=f"download (here) the wheels the device image lacks into DIR, export Wenet's source "
                             f"into DIR/wenet_src (the lease reads {WENET_SRC}), and exit")
    parser.add_argument("--python-version", default="3.12", help="with --fetch-wheels: the device's Python")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.env:
        print_env()
        return 0
    if args.budget_minutes is not None and not args.budget_minutes > 0:
        parser.error(f"--budget-minutes ({args.budget_minutes}) must be > 0")
    if args.tiny and not args.lease:
        parser.error("--tiny goes with --lease")
    if args.fetch_wheels:
        folder = Path(args.fetch_wheels)
        downloads = fetch_wheels(folder, args.python_version)
        if args.dry_run:
            print("\n".join(f"$ {shlex.join(cmd)}" for cmd in downloads))
            print(f"$ git --git-dir={WENET_MIRROR} archive HEAD wenet | tar -x -C {folder / 'wenet_src'}")
            return 0
        folder.mkdir(parents=True, exist_ok=True)
        failed = [cmd[-1] for cmd in downloads if _fetch_one(cmd, folder) != 0]
        if export_wenet(folder):
            failed.append("wenet source")
        wheels = len(list(folder.glob("*.whl")))
        print(f"[gpu_check] wheels in {folder}: {wheels}; failed: {', '.join(failed) or 'none'}")
        return 1 if failed else 0
    out = Path(args.out)
    budget_min = args.budget_minutes if args.budget_minutes is not None else (
        LEASE_BUDGET_MINUTES if args.lease else None)
    steps = lease_plan(out, args.tiny) if args.lease else plan(out, args.data_dir, args.throughput_steps)
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
            needs = f"; only where {step.requires} exists" if step.requires else ""
            print(f"\n{i}. {step.name}: {step.what} (timeout {limit}{needs})")
            for cmd in step.commands:
                print(f"   $ {shlex.join(cmd)}")
        return 0
    import torch

    if not torch.cuda.is_available() and not args.tiny:
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); --dry-run shows the plan, "
              "--lease --tiny runs the lease plan small on the CPU", file=sys.stderr)
        return 2
    command = shlex.join(["python3", "scripts/gpu_check.py", *(sys.argv[1:] if argv is None else argv)])
    failed = run_plan(steps, out, budget_min, command=command, one_log=args.lease)
    print(f"[gpu_check] report: {out / 'report.md'}; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
