"""scripts/train.py end to end in subprocesses: multirun over schemes, SIGKILL + resume, DDP."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "train"))

from tiny_corpus import make_tiny_corpus, tiny_overrides  # noqa: E402

SCHEMES = ["rel_xl", "shaw", "abs_sin", "abs_learned", "rel_bias", "rope", "none"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_tiny_corpus(tmp_path_factory.mktemp("corpus"))


def train_cmd(corpus, *overrides):
    # Hydra's flags (-m) must precede the overrides.
    flags = [o for o in overrides if o.startswith("-")]
    rest = [o for o in overrides if not o.startswith("-")]
    return [sys.executable, "scripts/train.py", *flags, *tiny_overrides(corpus), "+trainer.enable_progress_bar=false",
            *rest]


def run_train(corpus, *overrides, timeout=300):
    proc = subprocess.run(train_cmd(corpus, *overrides), cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def read_trace(folder: Path, rank: int = 0) -> list[dict]:
    return [json.loads(line) for line in open(folder / f"trace_rank{rank}.jsonl")]


def check_multirun(corpus, tmp_path, schemes):
    sweep = tmp_path / "sweep"
    run_train(corpus, "-m", f"pos_enc={','.join(schemes)}", "trainer.max_steps=2", "trainer.limit_val_batches=1",
              f"hydra.sweep.dir={sweep}", timeout=120 * len(schemes))
    for num, scheme in enumerate(schemes):
        summary = json.loads((sweep / f"{num}_{scheme}" / "train_summary.json").read_text())
        assert summary["global_step"] == 2
        ckpt = torch.load(sweep / f"{num}_{scheme}" / "checkpoints" / "last.ckpt", weights_only=False)
        assert ckpt["hyper_parameters"]["model_kwargs"]["encoder_kwargs"]["pos_enc"] == scheme


def test_multirun_two_schemes(corpus, tmp_path):
    check_multirun(corpus, tmp_path, ["rel_xl", "shaw"])


@pytest.mark.slow
def test_multirun_every_scheme(corpus, tmp_path):
    check_multirun(corpus, tmp_path, SCHEMES)


def test_sigkill_then_resume_continues_step_and_epoch(corpus, tmp_path):
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    common = [f"hydra.run.dir={run_dir}", "trainer.val_check_interval=3", "trainer.check_val_every_n_epoch=null",
              "trainer.limit_val_batches=1"]
    # No bound it can reach before the kill (the quickstart config's own max_steps, 3800 at the time, took a
    # fast host under ~2 min with this tiny model).
    proc = subprocess.Popen(train_cmd(corpus, *common, "trainer.max_epochs=100000", "trainer.max_steps=10000000"),
                            cwd=ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 480  # a bound, not a timing: on a loaded machine the start alone took ~200 s
        while not last.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        # Let a second checkpoint land so the killed run is mid-training, past epoch 0.
        first = last.stat().st_mtime_ns if last.is_file() else None
        while first and last.stat().st_mtime_ns == first and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the first run ended before it was killed"
    saved = torch.load(last, weights_only=False)
    step, epoch = saved["global_step"], saved["epoch"]
    assert step >= 6

    trace = tmp_path / "trace"
    run_train(corpus, *common, "resume=true", f"trainer.max_steps={step + 3}", "trainer.max_epochs=1000",
              "+callbacks.trace._target_=asr.train.trace.BatchTrace", f"+callbacks.trace.out_dir={trace}")
    records = read_trace(trace)
    assert records[0]["step"] == step and records[0]["epoch"] >= epoch
    assert [r["step"] for r in records] == list(range(step, step + 3))
    summary = json.loads((run_dir / "train_summary.json").read_text())
    assert summary["resumed_from"] == str(last) and summary["global_step"] == step + 3


def test_ddp_two_ranks_disjoint_batches_and_shared_nan_skip(corpus, tmp_path):
    trace = tmp_path / "trace"
    run_train(corpus, f"hydra.run.dir={tmp_path / 'run'}", "trainer.accelerator=cpu", "trainer.devices=2",
              "trainer.strategy=ddp", "trainer.max_steps=4", "debug.nan_on_rank=1", "debug.nan_at_step=2",
              "+callbacks.trace._target_=asr.train.trace.BatchTrace", f"+callbacks.trace.out_dir={trace}",
              timeout=400)
    ranks = [read_trace(trace, r) for r in (0, 1)]
    for records in ranks:
        assert [r["step"] for r in records] == [0, 1, 2, 3]
        moved = [r["checksum_before"] != r["checksum_after"] for r in records]
        # Step 2 had a NaN on rank 1 only: both ranks skipped it, no parameter moved.
        assert moved == [True, True, False, True]
        assert records[-1]["nonfinite_skips"] == 1
    keys = [{k for r in records for k in r["keys"]} for records in ranks]
    assert keys[0] and keys[1] and not keys[0] & keys[1]
    # DDP keeps replicas identical: same parameters after every step.
    assert [r["checksum_after"] for r in ranks[0]] == pytest.approx([r["checksum_after"] for r in ranks[1]])
