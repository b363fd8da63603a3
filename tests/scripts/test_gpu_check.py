"""scripts/gpu_check.py without a GPU: its help, its plan (--dry-run), its refusal, one step's run."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check  # noqa: E402

STEPS = ["env", "suite", "attention", "quickstart", "throughput"]


def test_help_and_dry_run_plan(capsys):
    out = subprocess.run([sys.executable, "scripts/gpu_check.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "--dry-run" in out.stdout
    assert gpu_check.main(["--dry-run", "--out", "/tmp/gc"]) == 0
    plan = capsys.readouterr().out
    assert "5 step(s)" in plan and "/tmp/gc/report.md" in plan
    for name in STEPS:
        assert f". {name}:" in plan
    assert "bench_attention.py --device cuda --dtype bfloat16 --lengths 512 1024 2048" in plan
    assert "quickstart.py" in plan and "trainer=gpu" in plan
    assert "--compare eager,blocks,model --synthetic" in plan and "experiment=librispeech_u2pp" in plan


def test_only_and_skip_choose_steps(capsys):
    assert gpu_check.main(["--dry-run", "--only", "suite,attention", "--skip", "attention"]) == 0
    plan = capsys.readouterr().out
    assert "1 step(s)" in plan and ". suite:" in plan
    with pytest.raises(SystemExit):
        gpu_check.main(["--dry-run", "--only", "suit"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_refuses_and_points_to_the_dry_run(capsys, tmp_path):
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert "--dry-run" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


def test_a_step_runs_every_command_and_keeps_the_first_failure(tmp_path):
    step = gpu_check.Step("demo", "two commands", ((sys.executable, "-c", "import sys; sys.exit(3)"),
                                                   (sys.executable, "-c", "print('second ran')")), 60)
    code, seconds, tail = gpu_check.run_step(step, tmp_path / "demo.log")
    assert code == 3 and seconds >= 0 and "second ran" in tail
