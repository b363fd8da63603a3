"""WER against SNR as a PNG: the points are the report's rows, ordered mildest first, gaps stay gaps."""

import json
import math
import subprocess
import sys
from pathlib import Path

from asr.bench.robust_plot import plot_wer_against_snr, wer_by_kind

ROOT = Path(__file__).resolve().parents[2]


def _row(wer: float) -> dict:
    return {"wer": wer, "low": wer - 0.02, "high": wer + 0.03, "errors": 1, "words": 10}


def _report(rows: dict[str, float]) -> dict:
    return {"conditions": list(rows), "alone": {name: _row(wer) for name, wer in rows.items()}}


def test_points_follow_the_report_mildest_level_first():
    report = _report({"clean": 0.20, "music@10dB": 0.40, "babble@5dB": 0.60, "babble@20dB": 0.25,
                      "reverb@0.9s": 0.80, "reverb@0.3s": 0.41, "babble@10dB": 0.35})
    by_kind, clean = wer_by_kind(report)
    assert list(by_kind) == ["music", "babble", "reverb"]  # the order of the report's conditions
    assert [(p.level, round(p.wer, 6)) for p in by_kind["babble"]] == [(20.0, 25.0), (10.0, 35.0), (5.0, 60.0)]
    assert [p.level for p in by_kind["reverb"]] == [0.3, 0.9]  # longer rooms are the harsher ones
    first = by_kind["babble"][0]
    assert math.isclose(first.low, 23.0) and math.isclose(first.high, 28.0)
    assert math.isclose(clean.wer, 20.0) and math.isnan(clean.level)


def test_a_row_without_a_wer_is_a_gap_not_a_zero():
    report = _report({"clean": 0.2, "pink@20dB": 0.3})
    report["alone"]["pink@10dB"] = {"wer": None, "low": None, "high": None, "errors": 0, "words": 0}
    by_kind, _ = wer_by_kind(report)
    assert [p.level for p in by_kind["pink"]] == [20.0]


def test_the_png_is_written_for_several_reports_and_not_for_clean_alone(tmp_path):
    a = _report({"clean": 0.2, "babble@20dB": 0.25, "babble@10dB": 0.35, "reverb@0.6s": 0.7})
    b = _report({"clean": 0.22, "babble@20dB": 0.24, "music@20dB": 0.3})
    out = plot_wer_against_snr([("a", a), ("b", b)], tmp_path / "plots" / "robust.png")
    assert out == tmp_path / "plots" / "robust.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_wer_against_snr([("clean only", _report({"clean": 0.2}))], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_the_script_plots_reports_and_refuses_what_is_not_one(tmp_path):
    run = tmp_path / "run_a" / "decode" / "robust_test"
    run.mkdir(parents=True)
    report = _report({"clean": 0.2, "music@20dB": 0.3, "music@10dB": 0.45})
    (run / "robust.json").write_text(json.dumps(report))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot_robust.py"), str(run / "robust.json"),
                           "--out", str(tmp_path / "r.png")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.png").is_file() and "wrote" in done.stdout
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    refused = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot_robust.py"), str(tmp_path / "other.json"),
                              "--out", str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "not a robustness report" in refused.stderr
    assert not (tmp_path / "x.png").exists()
