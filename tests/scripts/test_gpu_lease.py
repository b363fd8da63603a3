"""The lease plan run for real on the CPU with tiny sizes (``gpu_check.py --lease --tiny``): every
command of it still runs, one log holds their output, and the report is a gpu.md section."""

import pytest

from asr.cli import gpu_check


def _run(tmp_path, *only: str) -> str:
    args = ["--lease", "--tiny", "--out", str(tmp_path)] + (["--only", ",".join(only)] if only else [])
    assert gpu_check.main(args) == 0, (tmp_path / "steps.log").read_text()[-3000:]
    return (tmp_path / "report.md").read_text()


def test_tiny_lease_measuring_steps_run(tmp_path):
    report = _run(tmp_path, "throughput", "peers")
    assert report.startswith("## GPU check, ") and "- **Card:** no CUDA device" in report
    assert "### throughput: ok" in report and "### peers: ok" in report
    log = (tmp_path / "steps.log").read_text()
    assert "frames padded to" in log and "eager step 0" in log  # bucket padding and the per-step log
    assert "ours_encoder" in log and "wenet: skipped" in log or "wenet " in log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "steps.log"]  # few files: a lease returns 8


@pytest.mark.slow
def test_tiny_lease_whole_plan_runs(tmp_path):
    report = _run(tmp_path)
    for name in ("env", "cuda_tests", "attention", "throughput", "peers", "lookahead", "sync"):
        assert f"### {name}: ok" in report
    assert "### quickstart: skipped" in report
