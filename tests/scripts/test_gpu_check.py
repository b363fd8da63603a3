"""The GPU check (asr.cli.gpu_check, scripts/gpu_check.py) without a GPU: its help, its plan (--dry-run), its refusal, one step's run."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asr.cli import gpu_check

ROOT = Path(__file__).resolve().parents[2]

STEPS = ["env", "suite", "attention", "quickstart", "throughput"]


def test_help_and_dry_run_plan(capsys):
    out = subprocess.run([sys.executable, "scripts/gpu_check.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "--dry-run" in out.stdout
    assert gpu_check.main(["--dry-run", "--out", "/tmp/gc"]) == 0
    plan = capsys.readouterr().out
    assert "5 step(s)" in plan and "/tmp/gc/report.md" in plan and "budget" not in plan
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


def test_lease_plan_fits_one_device_command(capsys):
    assert gpu_check.main(["--lease", "--dry-run", "--out", "/tmp/gc"]) == 0
    plan = capsys.readouterr().out
    names = ("env", "cuda_tests", "attention", "throughput", "peers", "lookahead", "sync", "quickstart")
    assert f"{len(names)} step(s)" in plan and "budget 9 min" in plan
    for name in names:
        assert f". {name}:" in plan
    assert "-k cuda" in plan and "bench_attention.py --device cuda --dtype bfloat16 --lengths 512 1024 2048" in plan
    assert "--compare eager,blocks --synthetic 5000" in plan and "--pad-buckets 4" in plan
    assert "bench_peers.py --device cuda --wenet-src .whl/wenet_src --size librispeech" in plan
    assert "model.encoder.chunk_lookahead=4" in plan and "model.encoder.chunk_lookahead=0" in plan
    assert "tests/train/test_step_sync.py" in plan and "only where data/synth exists" in plan
    # The device tool runs one command for at most 10 minutes: the measuring steps' caps fit inside the
    # budget; the quickstart gets what they leave.
    steps = gpu_check.lease_plan(Path("/tmp/gc"))
    assert sum(step.timeout_s for step in steps if step.name != "quickstart") <= 9 * 60
    assert gpu_check.main(["--dry-run", "--budget-minutes", "2.5"]) == 0
    assert "budget 2.5 min" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        gpu_check.main(["--dry-run", "--budget-minutes", "0"])
    with pytest.raises(SystemExit):
        gpu_check.main(["--dry-run", "--tiny"])  # --tiny belongs to --lease
    # A lease step named without --lease: the error says which flag has it.
    with pytest.raises(SystemExit):
        gpu_check.main(["--dry-run", "--only", "cuda_tests"])
    assert "with --lease: env, cuda_tests" in capsys.readouterr().err


def test_a_step_is_cut_at_what_is_left_of_the_budget(tmp_path):
    step = gpu_check.Step("slow", "sleeps", ((sys.executable, "-c", "import time; time.sleep(30)"),
                                              (sys.executable, "-c", "print('not reached in time')")), 600)
    code, seconds, tail = gpu_check.run_step(step, tmp_path / "slow.log", budget_s=1.0)
    assert code == 124 and seconds < 20 and "timed out: the step had 1 s" in tail


def test_fetch_wheels_pins_the_versions_installed_here_for_the_devices_python(capsys, tmp_path):
    from importlib import metadata

    assert gpu_check.main(["--fetch-wheels", str(tmp_path / "whl"), "--dry-run", "--python-version", "3.12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    downloads, export = lines[:-1], lines[-1]
    assert len(downloads) == len(gpu_check.DEVICE_WHEELS) + len(gpu_check.PEER_WHEELS)
    assert all("--python-version 3.12" in line and "--only-binary=:all:" in line for line in downloads)
    assert f"hydra-core=={metadata.version('hydra-core')}" in downloads[0]
    assert "'espnet<=202511'" in downloads[-2] and "--no-deps" in downloads[-2]
    assert "archive HEAD wenet" in export and str(tmp_path / "whl" / "wenet_src") in export
    assert not (tmp_path / "whl").exists()  # a dry run writes nothing


def test_wenet_export_says_when_the_mirror_is_missing(tmp_path, capsys):
    assert gpu_check.export_wenet(tmp_path, mirror=tmp_path / "no_mirror") == 1
    assert "will skip Wenet" in capsys.readouterr().out


def test_steps_the_budget_no_longer_fits_are_reported_as_not_run(tmp_path):
    quick = gpu_check.Step("quick", "prints", ((sys.executable, "-c", "print('ran')"),), 60)
    slow = gpu_check.Step("slow", "sleeps", ((sys.executable, "-c", "import time; time.sleep(60)"),), 600)
    after = gpu_check.Step("after", "never reached", ((sys.executable, "-c", "print('after')"),), 60)
    failed = gpu_check.run_plan([quick, slow, after], tmp_path, budget_min=0.05, min_step_s=1.0)  # 3 s
    report = (tmp_path / "report.md").read_text()
    assert failed == ["slow", "after"]
    assert "### quick: ok" in report and "### slow: FAILED (exit 124)" in report
    assert "### after: NOT RUN, the budget was spent" in report and not (tmp_path / "after.log").exists()
    assert "- **Commit:**" in report and "- **Card:**" in report and "- **Command:**" in report


def test_a_step_whose_input_is_missing_is_skipped_and_said_so(tmp_path):
    needs = gpu_check.Step("needs", "needs a corpus", ((sys.executable, "-c", "print('ran')"),), 60,
                           requires="data/not_here_at_all")
    assert gpu_check.run_plan([needs], tmp_path, one_log=True) == []
    assert "### needs: skipped, data/not_here_at_all is not here" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "steps.log").exists()


def test_the_reports_commit_says_when_the_tree_differs_from_head(tmp_path, monkeypatch):
    from asr.cli import gpu_steps

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-q", "-m", "one")
    monkeypatch.setattr(gpu_steps, "ROOT", tmp_path)
    head = gpu_steps.commit()
    assert len(head) >= 7 and " " not in head
    (tmp_path / "code.py").write_text("x = 2\n")  # a copied tree newer than the repository it carries
    assert gpu_steps.commit() == f"{head} (the tree differs from it)"
    monkeypatch.setattr(gpu_steps, "ROOT", tmp_path / "absent")
    assert gpu_steps.commit() == "unknown"
