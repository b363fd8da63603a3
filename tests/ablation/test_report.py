"""Report builder: table rows, failed runs, per-metric failures, results.json, plots."""

import json
from pathlib import Path

from asr.ablation.plots import write_plots
from asr.ablation.report import markdown_table, write_report
from asr.ablation.results import METRIC_KEYS, METRICS, SchemeResult, failed_result


def _ok(scheme: str, base: float) -> SchemeResult:
    metrics = {key: base + i for i, key in enumerate(METRIC_KEYS)}
    return SchemeResult(scheme=scheme, metrics=metrics, curve=[[10, 0.9], [20, base / 100]])


def _table_rows(table: str) -> dict[str, list[str]]:
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def test_table_has_a_row_per_scheme_and_a_column_per_metric() -> None:
    table = markdown_table([_ok("rel_xl", 10.0), _ok("abs_sin", 20.0)])
    header = table.splitlines()[0]
    assert all(m.header in header for m in METRICS)
    rows = _table_rows(table)
    assert set(rows) == {"rel_xl", "abs_sin"}
    assert rows["rel_xl"][1] == "ok"
    assert rows["rel_xl"][2] == "10.00"  # params_m is the first metric
    assert len(rows["abs_sin"]) == 2 + len(METRICS)


def test_failed_run_row_shows_failed_and_the_error_last_line(tmp_path: Path) -> None:
    traceback = "Traceback (most recent call last):\n  File x\nRuntimeError: loss is nan at step 7\n"
    results = [_ok("rel_xl", 10.0), failed_result("shaw", "train", traceback)]
    report, _ = write_report(tmp_path, results, {"budget_steps": 5})
    text = report.read_text()
    rows = _table_rows(text.split("## Results")[1].split("\n\n")[1])
    assert rows["shaw"][1] == "failed (train)"
    assert all(cell == "failed" for cell in rows["shaw"][2:])
    assert "`shaw` failed in train: `RuntimeError: loss is nan at step 7`" in text
    assert rows["rel_xl"][1] == "ok"


def test_metric_failure_is_na_with_a_note(tmp_path: Path) -> None:
    result = _ok("abs_learned", 5.0)
    result.metrics["wer_probe160_full"] = None
    result.metric_errors["wer_probe160_full"] = "ValueError: 1500 frames | exceed max_len 1000"
    report, json_path = write_report(tmp_path, [result], {})
    text = report.read_text()
    assert "| n/a |" in text
    assert "exceed max_len 1000" in text and "frames \\| exceed" in text
    data = json.loads(json_path.read_text())
    assert data["schemes"][0]["metrics"]["wer_probe160_full"] is None
    assert SchemeResult.from_json(data["schemes"][0]).metric_errors == result.metric_errors


def test_non_finite_numbers_become_null_in_json(tmp_path: Path) -> None:
    result = _ok("rope", 1.0)
    result.metrics["stream_rtf"] = float("nan")
    _, json_path = write_report(tmp_path, [result], {})
    data = json.loads(json_path.read_text())  # strict JSON: NaN would not parse in other tools
    assert data["schemes"][0]["metrics"]["stream_rtf"] is None
    assert "non-finite" in data["schemes"][0]["metric_errors"]["stream_rtf"]


def test_plots_are_written_and_skip_failed_runs(tmp_path: Path) -> None:
    results = [_ok("rel_xl", 10.0), _ok("none", 30.0), failed_result("shaw", "evaluate", "boom")]
    results[1].metrics["wer_probe160_full"] = None
    paths = write_plots(results, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == ["learning_curves.png", "speed_memory.png", "wer_by_scheme.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert write_plots([failed_result("shaw", "train", "boom")], tmp_path / "none") == []


def test_report_states_the_cuts_used_and_the_skips(tmp_path: Path) -> None:
    data = {
        "test": {"cuts": "cuts_test.jsonl.gz", "max_utts": 200, "utterances": 200,
                 "skipped": {"audio_corrupt": 2, "empty_text": 1}},
        "long": {"cuts": "cuts_long.jsonl.gz", "max_utts": None, "utterances": 12, "skipped": {}},
    }
    same = [_ok("rel_xl", 10.0), _ok("shaw", 20.0)]
    for result in same:
        result.eval_data = json.loads(json.dumps(data))
    report, json_path = write_report(tmp_path, [*same, failed_result("rope", "train", "boom")], {})
    section = report.read_text().split("## Evaluation data")[1].split("##")[0]
    assert "- test: the first 200 usable cuts of `cuts_test.jsonl.gz`, 200 decoded; skipped cuts: audio_corrupt 2, " \
           "empty_text 1" in section
    assert "- long: every usable cut of `cuts_long.jsonl.gz`, 12 decoded; skipped cuts: none" in section
    assert "`rel_xl`" not in section  # one description fits every scheme
    saved = json.loads(json_path.read_text())["schemes"][0]
    assert SchemeResult.from_json(saved).eval_data["test"]["skipped"] == {"audio_corrupt": 2, "empty_text": 1}
    # A scheme evaluated on other data (a result reused from an earlier run) is named.
    same[1].eval_data["test"].update(max_utts=50, utterances=50)
    text = write_report(tmp_path, same, {})[0].read_text()
    assert "- `shaw`: long: every usable cut" in text and "the first 50 usable cuts" in text
    unreadable = _ok("none", 1.0)
    unreadable.eval_data = {"long": {"cuts": "cuts_long.jsonl.gz", "max_utts": 40,
                                     "error": "FileNotFoundError: manifest not found"}}
    text = write_report(tmp_path, [unreadable], {})[0].read_text()
    assert "- long: `cuts_long.jsonl.gz` could not be read: `FileNotFoundError: manifest not found`" in text
