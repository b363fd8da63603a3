"""scripts/ablate.py end to end: two schemes, a few steps, a tiny noise corpus with a probe split."""

import json
import sys

import pytest
from tiny_ablation import TINY_MODEL, make_corpus

from asr.ablation.results import METRIC_KEYS, METRICS, read_marker

from asr.cli import ablate


def _rows(report: str) -> dict[str, list[str]]:
    table = [line for line in report.splitlines() if line.startswith("| `")]
    return {line.split("|")[1].strip(" `"): [c.strip() for c in line.strip("|").split("|")] for line in table}


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    corpus = make_corpus(tmp_path_factory.mktemp("corpus"))
    out = tmp_path_factory.mktemp("ablation")
    argv = ["--schemes", "rel_xl,wenet_rel", "--budget-steps", "4", "--val-every", "2", "--out", str(out),
            "--data-dir", str(corpus), "--rtf-utts", "2", "--beam", "2", "--seeds-for", "none", *TINY_MODEL]
    code = ablate.main(argv)
    return code, out, argv


def test_report_has_a_row_per_scheme_with_every_number(ablation) -> None:
    code, out, _ = ablation
    report = (out / "report.md").read_text()
    assert code == 0, report
    rows = _rows(report)
    assert set(rows) == {"rel_xl", "wenet_rel"}
    for scheme, cells in rows.items():
        assert cells[1] == "ok", (scheme, cells)
        assert len(cells) == 2 + len(METRICS)
        for metric, cell in zip(METRICS, cells[2:]):
            float(cell)  # a number in every column, not n/a or a dash
        assert float(cells[2 + METRIC_KEYS.index("train_steps")]) == 4
    data = json.loads((out / "results.json").read_text())
    for result in data["schemes"]:
        assert all(result["metrics"][key] is not None for key in METRIC_KEYS), result
        assert len(result["curve"]) >= 2  # validation every 2 of 4 steps
    for name in ("learning_curves.png", "wer_intervals.png", "wer_vs_chunk.png", "wer_vs_length.png",
                 "speed_memory.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    # The translation probe and the rel_shift comparison, with numbers for both schemes.
    probe = report.split("## Translation probe")[1].split("##")[0]
    assert "| `rel_xl` | " in probe and "| `wenet_rel` | " in probe and "600 s - 0 s" in probe
    section = report.split("## rel_shift or not")[1].split("\n## ")[0]
    assert "| translation probe, clock at 600 s |" in section and "| 160 s passages, C16/L4 |" in section
    assert "Seed spread" in section and "n/a" not in section.split("| test, rescoring, full context |")[1].split("\n")[0]
    for run in ("rel_xl", "wenet_rel"):
        assert (out / run / "eval" / "decode_wer_shift600.jsonl").is_file()
        # Trained with the code frozen at the ablation's start, not the checkout's.
        assert f"PYTHONPATH={out / 'code'} {sys.executable} -m asr.train pos_enc={run}" in (out / run / "train.log").read_text()
    assert (out / "code" / "FROZEN.json").is_file() and (out / "code" / "asr" / "model" / "encoder.py").is_file()


def test_rerun_skips_finished_schemes(ablation, capsys) -> None:
    code, out, argv = ablation
    before = read_marker(out / "rel_xl")
    assert ablate.main(argv) == 0
    lines = capsys.readouterr().out
    assert "rel_xl: skip" in lines and "wenet_rel: skip" in lines and ": train" not in lines
    assert read_marker(out / "rel_xl") == before


def test_arguments_default_to_the_adaptive_budget_and_reject_stray_words(capsys) -> None:
    args = ablate.parse_args([])
    assert args.adaptive and args.budget_minutes is None and args.budget_steps is None
    assert (args.first_steps, args.max_steps, args.total_steps) == (
        ablate.ADAPTIVE_FIRST_STEPS, ablate.ADAPTIVE_MAX_STEPS, ablate.ADAPTIVE_TOTAL_STEPS)
    assert args.first_steps % args.val_every == 0 and args.first_steps // args.val_every == 8
    adaptive = ablate.ablation_overrides(args.first_steps, [], adaptive=True)
    assert "optim.scheduler.kind=noam" in adaptive and f"optim.scheduler.warmup_steps={args.first_steps // 2}" in adaptive
    assert args.train_timeout_minutes is None
    timed = ablate.parse_args(["--budget-minutes", "30"])
    assert not timed.adaptive and timed.budget_steps is None and timed.train_timeout_minutes == 65
    assert not ablate.parse_args(["--budget-steps", "60"]).adaptive
    assert args.no_freeze is False and ablate.parse_args(["--no-freeze"]).no_freeze is True  # frozen by default
    assert args.schemes.split(",") == ["rel_xl", "wenet_rel", "shaw", "abs_sin", "abs_learned", "rel_bias", "rope",
                                       "none"]
    assert args.scheme_seeds == {"rel_xl": 2, "wenet_rel": 2}  # the rel_shift comparison gets a seed spread
    assert ablate.parse_args(["--seeds-for", "none"]).scheme_seeds == {}
    with pytest.raises(SystemExit):
        ablate.parse_args(["--seeds-for", "rel_xl:2"])
    assert ablate.parse_args(["--budget-steps", "60"]).val_every == 5  # 12 validations: the convergence fit's points
    with pytest.raises(SystemExit):
        ablate.parse_args(["rel_xl"])
    assert "key=value" in capsys.readouterr().err
    assert ablate.main(["--schemes", "rel_xl,alibi"]) == 2
    assert "valid schemes" in capsys.readouterr().err


def warmup_of(overrides) -> str:
    return next(o for o in overrides if o.startswith("optim.scheduler.warmup_steps="))


def test_warmup_is_a_tenth_of_the_step_budget_and_user_overrides_win() -> None:
    assert warmup_of(ablate.ablation_overrides(1800, [])) == "optim.scheduler.warmup_steps=180"
    assert warmup_of(ablate.ablation_overrides(25, [])) == "optim.scheduler.warmup_steps=2"
    assert warmup_of(ablate.ablation_overrides(3, [])) == "optim.scheduler.warmup_steps=1"
    time_budget = warmup_of(ablate.ablation_overrides(None, []))
    assert time_budget == f"optim.scheduler.warmup_steps={ablate.WARMUP_FOR_TIME_BUDGET}"
    # Hydra applies overrides in order, so the user's come last to win over the ablation's.
    overrides = ablate.ablation_overrides(1800, ["optim.scheduler.warmup_steps=7"])
    assert overrides[-1] == "optim.scheduler.warmup_steps=7" and "trainer.limit_val_batches=4" in overrides


def test_the_ablation_trains_its_own_model_unless_the_user_names_an_experiment() -> None:
    assert ablate.ablation_overrides(1800, [])[0] == "experiment=ablation"
    mine = ablate.ablation_overrides(1800, ["experiment=quickstart"])
    # one experiment only: Hydra refuses a config group given twice
    assert [o for o in mine if o.startswith("experiment=")] == ["experiment=quickstart"]


def test_the_adaptive_budget_end_to_end_trains_in_rungs_and_reports_them(tmp_path_factory) -> None:
    """Real training runs, resumed from rung to rung, the dev decode behind each decision, the report."""
    corpus = make_corpus(tmp_path_factory.mktemp("corpus"))
    out = tmp_path_factory.mktemp("adaptive")
    argv = ["--schemes", "rel_xl,abs_sin", "--first-steps", "4", "--max-steps", "8", "--total-steps", "16",
            "--val-every", "2", "--out", str(out), "--data-dir", str(corpus), "--rtf-utts", "2", "--beam", "2",
            "--seeds-for", "none", "--no-freeze", *TINY_MODEL]
    code = ablate.main(argv)
    report = (out / "report.md").read_text()
    assert code == 0, report
    budget = report.split("## Budget")[1].split("\n## ")[0]
    assert "rung 1, `rel_xl` at 4 steps" in budget and "rung 1, `abs_sin` at 4 steps" in budget
    for run in ("rel_xl", "abs_sin"):
        assert (out / run / "rungs" / "dev_4.jsonl").is_file()
        log = (out / run / "train.log").read_text()
        assert "optim.scheduler.kind=noam" in log and "trainer.max_steps=4" in log
        assert "trainer.max_time=null" in log  # no recipe's wall-clock guard cuts a rung short
        # two validations in the first rung leave no slope interval: nobody stops, both go to a second rung,
        # resuming their own checkpoints
        assert json.loads((out / run / "rungs" / "trained.json").read_text())["steps"] == 8
        assert "trainer.max_steps=8" in log and "ckpt_path=" in log and (out / run / "rungs" / "dev_8.jsonl").is_file()
        assert float(_rows(report)[run][2 + METRIC_KEYS.index("train_steps")]) == 8
    assert json.loads((out / "budget.json").read_text())["rungs"] == [
        line[2:] for line in budget.splitlines() if line.startswith("- rung")]


@pytest.mark.slow
def test_two_jobs_train_the_rungs_to_the_records_and_decisions_of_one(tmp_path_factory, monkeypatch) -> None:
    """Real training runs, two at once: every dev record, rung decision and test metric equals one job's."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the same kernels' reduction order in every process
    corpus = make_corpus(tmp_path_factory.mktemp("corpus"))
    outs = {}
    for jobs in (1, 2):
        out = outs[jobs] = tmp_path_factory.mktemp(f"jobs{jobs}")
        argv = ["--schemes", "rel_xl,abs_sin", "--first-steps", "4", "--max-steps", "8", "--total-steps", "16",
                "--val-every", "2", "--out", str(out), "--data-dir", str(corpus), "--rtf-utts", "2", "--beam", "2",
                "--seeds-for", "none", "--no-freeze", "--jobs", str(jobs), *TINY_MODEL]
        assert ablate.main(argv) == 0, (out / "report.md").read_text()

    def comparable(out) -> dict:
        records = {str(p.relative_to(out)): p.read_text() for p in sorted(out.glob("*/rungs/dev_*.jsonl"))}
        schemes = json.loads((out / "results.json").read_text())["schemes"]
        metrics = {s["scheme"]: {k: v for k, v in s["metrics"].items()
                                 if k not in ("step_time_s", "peak_rss_mb", "stream_rtf")} for s in schemes}
        return {"records": records, "rungs": json.loads((out / "budget.json").read_text()), "metrics": metrics}

    one, two = comparable(outs[1]), comparable(outs[2])
    assert len(one["records"]) == 4 and one == two
    assert "jobs: `2`" in (outs[2] / "report.md").read_text()
