"""An ablation killed mid-training resumes on the next run to the results of an uninterrupted one.

Real processes throughout: scripts/ablate.py runs as a subprocess, its training run as that
one's child; both are SIGKILLed (no handler runs, as in a power cut) right after the first
checkpoint lands, and the same command is run again.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tiny_ablation import TINY_MODEL, make_corpus

from asr.ablation.results import MARKER_NAME

ROOT = Path(__file__).resolve().parents[2]
# One thread: the kernels' reductions then run in one order in every process.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
BUDGET = 12
# Numbers that depend on the machine's speed or on the process (everything else must match).
TIMINGS = {"step_time_s", "peak_rss_mb", "stream_rtf"}


def ablate_cmd(corpus: Path, out: Path) -> list[str]:
    return [sys.executable, "scripts/ablate.py", "--schemes", "rel_xl", "--budget-steps", str(BUDGET),
            "--val-every", "3", "--out", str(out), "--data-dir", str(corpus), "--rtf-utts", "2", "--beam", "2",
            "--translation-utts", "2", "--seeds-for", "none", *TINY_MODEL]


def run_ablation(corpus: Path, out: Path) -> str:
    proc = subprocess.run(ablate_cmd(corpus, out), cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def training_group(run_dir: Path) -> int | None:
    """The process group of the run's training: the peak-RSS launcher leads it (its own session)."""
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"asr.ablation.peak_rss" in cmdline and str(run_dir / "peak_rss.json").encode() in cmdline:
            return int(entry.name)
    return None


def kill_after_first_checkpoint(corpus: Path, out: Path) -> int:
    """Start the ablation, SIGKILL it and its training when the first last.ckpt appears; the step it holds."""
    run_dir = out / "rel_xl"
    last = run_dir / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen(ablate_cmd(corpus, out), cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    group = None
    try:
        deadline = time.monotonic() + 600  # a bound, not a timing: the start alone is slow on a loaded host
        while not last.is_file() and proc.poll() is None and time.monotonic() < deadline:
            group = group or training_group(run_dir)
            time.sleep(0.05)
        group = group or training_group(run_dir)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        if group is not None:
            os.killpg(group, signal.SIGKILL)
        proc.wait()
    assert group is not None and last.is_file(), "no training run with a checkpoint was seen"
    return int(torch.load(last, weights_only=False)["global_step"])


def comparable(out: Path) -> dict:
    """What the two ablations must agree on: the scheme's results but timings, the Findings, the records."""
    result = json.loads((out / "results.json").read_text())["schemes"][0]
    for key in TIMINGS:
        result["metrics"].pop(key)
    findings = (out / "report.md").read_text().split("## Findings")[1].split("\n## ")[0]
    records = {p.name: p.read_text() for p in sorted((out / "rel_xl" / "eval").glob("decode_*.jsonl"))}
    keep = ("metrics", "metric_errors", "curve", "loss_curve", "status", "seed", "settings")
    return {"result": {k: result[k] for k in keep}, "findings": findings, "records": records}


@pytest.mark.slow
def test_a_killed_ablation_resumes_to_the_uninterrupted_results(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "corpus")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_ablation(corpus, whole)

    step = kill_after_first_checkpoint(corpus, killed)
    assert 0 < step < BUDGET and not (killed / "rel_xl" / MARKER_NAME).exists()
    log = run_ablation(corpus, killed)
    assert "rel_xl: resume from" in log

    expected, got = comparable(whole), comparable(killed)
    assert got["result"]["metrics"]["train_steps"] == BUDGET
    assert len(got["result"]["curve"]) == BUDGET // 3  # a validation every 3 steps, none lost to the kill
    assert got == expected
    # The weights themselves, bit for bit: a tiny model's curves and hypotheses can hide a small drift.
    final = [torch.load(out / "rel_xl" / "checkpoints" / "last.ckpt", weights_only=False) for out in (whole, killed)]
    assert final[0]["global_step"] == final[1]["global_step"] == BUDGET
    weights = [ckpt["state_dict"] for ckpt in final]
    assert weights[0].keys() == weights[1].keys()
    drifted = [name for name in weights[0] if not torch.equal(weights[0][name], weights[1][name])]
    assert not drifted, f"weights differ after the resume: {drifted[:5]}"
