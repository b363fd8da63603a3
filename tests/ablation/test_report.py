"""Report builder: table rows, failed runs, per-metric failures, results.json, plots,
intervals and findings from per-utterance records, n/a cells for lengths past a table."""

import json
from pathlib import Path

import numpy as np

from asr.ablation.analysis import analyze, records_path
from asr.ablation.evaluate import ALL_WER_METRICS, NOT_APPLICABLE
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
    rows = _table_rows(text.split("## Runs")[1].split("\n\n")[1])
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
    # Without per-utterance records there are no intervals: only the run-level plots.
    assert names == ["learning_curves.png", "speed_memory.png"]
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


def _records(run_dir: Path, metric: str, errors: list[int], words: int = 10) -> None:
    path = records_path(run_dir, metric)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"key": f"u{i:03d}", "ref_words": words, "word_errors": e} for i, e in enumerate(errors)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


# A validation curve that has converged: ten validations on a plateau with a 0.1-point wobble.
PLATEAU = [[100.0 * (k + 1), 0.30 + 0.001 * (-1) ** k] for k in range(10)]
# One still falling 10 points per 1000 steps when its budget ends.
FALLING = [[100.0 * (k + 1), 0.60 - 0.01 * k + 0.001 * (-1) ** k] for k in range(10)]


def _measured_run(tmp_path: Path, scheme: str, errors: list[int], seed: int = 0, curve=PLATEAU) -> SchemeResult:
    """A finished run whose every WER measurement has the same per-utterance errors."""
    run_dir = tmp_path / (scheme if seed == 0 else f"{scheme}-seed{seed}")
    result = _ok(scheme, 10.0)
    result.run_dir, result.seed, result.curve = str(run_dir), seed, curve
    for metric in ALL_WER_METRICS:
        _records(run_dir, metric, errors)
    return result


def test_report_gives_intervals_and_states_only_resolved_findings(tmp_path: Path) -> None:
    base = np.random.default_rng(0).integers(1, 4, size=60).tolist()
    worse = [e + 3 for e in base]  # 3 more errors on every utterance: resolved
    near = [e + (1 if i % 2 else -1) for i, e in enumerate(base)]  # +-1 alternating, one extra: not resolved
    near[0] += 1
    results = [_measured_run(tmp_path, "rel_xl", base), _measured_run(tmp_path, "abs_sin", worse),
               _measured_run(tmp_path, "rope", near)]
    # abs_learned could not run the 160 s probes: n/a in its table cells, a gap in the plot.
    learned = _measured_run(tmp_path, "abs_learned", base)
    for context in ("full", "c16"):
        records_path(learned.run_dir, f"wer_probe160_{context}").unlink()
        learned.metric_errors[f"wer_probe160_{context}"] = f"{NOT_APPLICABLE} (TooLongForTable: max_len=5000)"
    results.append(learned)
    report, _ = write_report(tmp_path, results, {})
    text = report.read_text()
    findings = text.split("## Findings")[1].split("##")[0]
    assert "`abs_sin` has a higher (worse) WER than `rel_xl` on test WER (rescoring, full context) " \
           "(+30.00 points" in findings
    assert "`rope`" in findings and "not resolved" in findings.lower()
    assert "`rope` has a" not in findings  # no direction without a resolved interval
    assert f"`abs_learned` cannot run 160 s passages: {NOT_APPLICABLE}" in findings
    assert "One training seed per scheme" in findings
    assert "Convergence (" in findings and "converged: `rel_xl` -0.2 [-0.9, +0.6] from 6 validations" in findings
    main = _table_rows(text.split("## Test WER with 95% intervals")[1].split("\n\n")[1])
    expected = 100 * sum(base) / (10 * len(base))
    assert main["rel_xl"][2].startswith(f"{expected:.2f} [") and main["rel_xl"][3] == "reference"
    assert main["abs_sin"][3] == "+30.00 [+30.00, +30.00], p<0.001"  # 2000 replicates: p resolves to 1/1000
    lengths = _table_rows(text.split("## Length extrapolation")[1].split("\n\n")[2])
    assert lengths["abs_learned"][-1] == NOT_APPLICABLE and lengths["rel_xl"][-1].startswith(f"{expected:.2f}")
    chunk_header = text.split("## Streaming trade-off")[1].split("\n\n")[1].splitlines()[0]
    assert "C4/L16 (160 ms)" in chunk_header and "C32/L2 (1280 ms)" in chunk_header
    names = sorted(p.name for p in write_plots(results, tmp_path / "plots"))
    assert names == ["learning_curves.png", "speed_memory.png", "wer_intervals.png", "wer_vs_chunk.png",
                     "wer_vs_length.png"]


def test_seeds_are_pooled_and_their_spread_shown(tmp_path: Path) -> None:
    a = [1, 2, 0, 3] * 10
    b = [2, 2, 1, 3] * 10
    results = [_measured_run(tmp_path, "rel_xl", a, seed=0), _measured_run(tmp_path, "rel_xl", b, seed=1)]
    text = write_report(tmp_path, results, {})[0].read_text()
    main = _table_rows(text.split("## Test WER with 95% intervals")[1].split("\n\n")[1])
    wer_a, wer_b = 100 * sum(a) / 400, 100 * sum(b) / 400
    assert main["rel_xl"][1] == "2" and main["rel_xl"][6] == f"{wer_a:.2f}, {wer_b:.2f}"
    assert main["rel_xl"][2].startswith(f"{(wer_a + wer_b) / 2:.2f} [")  # pooled = mean of the seeds
    assert f"`rel_xl` {wer_a:.2f}-{wer_b:.2f} (2 seeds)" in text
    assert "One training seed per scheme" not in text


def test_rel_shift_section_pairs_wenet_rel_with_rel_xl_and_the_probe_table_every_scheme(tmp_path: Path) -> None:
    base = [1, 2, 0, 3] * 15
    worse = [e + 1 for e in base]
    results = [_measured_run(tmp_path, "rel_xl", base), _measured_run(tmp_path, "rel_xl", base, seed=1),
               _measured_run(tmp_path, "wenet_rel", base), _measured_run(tmp_path, "wenet_rel", base, seed=1),
               _measured_run(tmp_path, "abs_sin", base)]
    # wenet_rel loses two errors per utterance at 600 s with seed 0 and one with seed 1 (pooled, +1.5 a line;
    # seeds resampled: +1, +1.5 or +2); abs_sin one at 60 and 600 s.
    _records(tmp_path / "wenet_rel", "wer_shift600", [e + 2 for e in base])
    _records(tmp_path / "wenet_rel-seed1", "wer_shift600", worse)
    for offset in (60, 600):
        _records(tmp_path / "abs_sin", f"wer_shift{offset}", worse)
    text = write_report(tmp_path, results, {})[0].read_text()
    section = text.split("## rel_shift or not")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows["translation probe, clock at 600 s"][3] == "+15.00 [+10.00, +20.00], p<0.001"
    assert rows["test, rescoring, full context"][3].startswith("+0.00 [+0.00, +0.00]")
    assert rows["translation probe, clock at 0 s"][5] == "15.00, 15.00"  # each seed's WER
    assert "C4/L16 (160 ms)" in section and "160 s passages, C16/L4" in section
    assert "worse than `rel_xl` (interval excludes zero) on: translation probe, clock at 600 s (+15.00)" in section
    probe = _table_rows(text.split("## Translation probe")[1].split("\n\n")[2])
    assert probe["rel_xl"][-1].startswith("+0.00") and probe["abs_sin"][-1].startswith("+10.00 [+10.00, +10.00]")
    assert probe["abs_sin"][2].startswith("25.00 [") and probe["wenet_rel"][3].startswith("30.00 [")


def test_rel_shift_section_says_when_a_scheme_is_missing(tmp_path: Path) -> None:
    text = write_report(tmp_path, [_measured_run(tmp_path, "rel_xl", [1, 2] * 10)], {})[0].read_text()
    assert "lacks a finished `rel_xl` or `wenet_rel` run" in text


def test_schemes_that_did_not_converge_are_not_ranked(tmp_path: Path) -> None:
    base = [1, 2, 0, 3] * 15
    worse = [e + 3 for e in base]  # resolved by far: only convergence keeps it from a ranking
    results = [_measured_run(tmp_path, "rel_xl", base), _measured_run(tmp_path, "abs_sin", worse),
               _measured_run(tmp_path, "wenet_rel", worse, curve=FALLING)]
    text = write_report(tmp_path, results, {})[0].read_text()
    findings = text.split("## Findings")[1].split("\n## ")[0]
    assert "`abs_sin` has a higher (worse) WER than `rel_xl` on test WER" in findings  # both converged
    assert "`wenet_rel` has a" not in findings
    assert "Not ranked against `rel_xl` on test WER (rescoring, full context), because the two did not both " \
           "converge" in findings and "`wenet_rel` +30.00 [+30.00, +30.00]" in findings
    assert "not converged: `wenet_rel` -10.2 [-10.9, -9.4] from 6 validations" in findings and "(still falling)" in findings
    assert "Lowest test WER (attention rescoring, full context) at this budget (not a ranking" in findings
    section = text.split("## rel_shift or not")[1].split("\n## ")[0]
    assert "is worse than" not in section and "- Not ranked: `rel_xl` and `wenet_rel` did not both converge" in section
    main = _table_rows(text.split("## Test WER with 95% intervals")[1].split("\n\n")[1])
    assert main["wenet_rel"][-1].endswith("from 6 validations: still falling")
    assert main["rel_xl"][-1].endswith("from 6 validations: converged")


def test_a_scheme_the_adaptive_budget_stopped_behind_the_reference_ranks_below_it(tmp_path: Path) -> None:
    base = [1, 2, 0, 3] * 15
    worse = [e + 3 for e in base]
    results = [_measured_run(tmp_path, "rel_xl", base), _measured_run(tmp_path, "wenet_rel", worse, curve=FALLING),
               _measured_run(tmp_path, "abs_sin", worse, curve=FALLING)]
    # wenet_rel was stopped behind rel_xl; abs_sin behind another scheme (not a ranking against rel_xl)
    stopped = {"wenet_rel": {"behind": "rel_xl", "steps": 3040}, "abs_sin": {"behind": "shaw", "steps": 3040}}
    analysis = analyze(results, list(ALL_WER_METRICS), stopped=stopped)
    text = write_report(tmp_path, results, {}, [], analysis)[0].read_text()
    findings = text.split("## Findings")[1].split("\n## ")[0]
    ranked = next(line for line in findings.splitlines() if "Ranked below `rel_xl`" in line)
    assert "`wenet_rel` (stopped at 3040 steps) +30.00 [+30.00, +30.00]" in ranked and "abs_sin" not in ranked
    unranked = next(line for line in findings.splitlines() if line.startswith("- Not ranked against `rel_xl` on test"))
    assert "`abs_sin` +30.00" in unranked and "wenet_rel" not in unranked
    # every scheme converged or was stopped (behind some scheme), and the best converged: a ranking
    assert "- Lowest test WER (attention rescoring, full context): `rel_xl` at" in findings
    assert "`wenet_rel` -10.2 [-10.9, -9.4] from 6 validations (stopped at 3040 steps behind `rel_xl`)" in findings
    section = text.split("## rel_shift or not")[1].split("\n## ")[0]
    assert "The adaptive budget stopped `wenet_rel` at 3040 steps behind `rel_xl`" in section
    not_ranked = next(line for line in section.splitlines() if line.startswith("- Not ranked"))
    assert "test, rescoring, full context" not in not_ranked  # that one is ranked by the stop
    # abs_sin neither converged nor stopped: it might still pass the best, so the lowest WER is no ranking
    unsettled = analyze(results, list(ALL_WER_METRICS), stopped={"wenet_rel": stopped["wenet_rel"]})
    text = write_report(tmp_path, results, {}, [], unsettled)[0].read_text()
    assert "Lowest test WER (attention rescoring, full context) at this budget (not a ranking" in text


def test_the_report_says_which_source_dominates_a_difference(tmp_path: Path) -> None:
    base = [1, 2, 0, 3] * 15
    results = [_measured_run(tmp_path, "rel_xl", base), _measured_run(tmp_path, "rel_xl", base, seed=1),
               # wenet_rel's seeds lie 2 and 4 errors an utterance above rel_xl (WER 35 and 55%): seed sd
               # sqrt(100 / 2), and no utterance noise (every utterance moves alike)
               _measured_run(tmp_path, "wenet_rel", [e + 2 for e in base]),
               _measured_run(tmp_path, "wenet_rel", [e + 4 for e in base], seed=1)]
    text = write_report(tmp_path, results, {})[0].read_text()
    findings = text.split("## Findings")[1].split("\n## ")[0]
    assert "`wenet_rel` seeds 7.07, utterances 0.00 (seeds dominate)" in findings
    section = text.split("## rel_shift or not")[1].split("\n## ")[0]
    assert "dominated by the seeds: standard deviation 7.07 points when only seeds are resampled" in section
    main = _table_rows(text.split("## Test WER with 95% intervals")[1].split("\n\n")[1])
    assert main["wenet_rel"][3].startswith("+30.00 [+20.00, +40.00]")  # seeds resampled: 20, 30 or 40 points
