"""Runner bookkeeping with a fake trainer: skip finished, resume interrupted, isolate failures."""

from pathlib import Path

import pytest

from asr.ablation.results import MARKER_NAME, is_finished, read_marker
from asr.ablation.runner import AblationRunner, AblationSettings
from asr.ablation.training import TrainJob, TrainOutcome


class FakeTrainer:
    """Writes what a real run would (last.ckpt, metrics.csv); fails for chosen schemes."""

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.fail = set(fail)
        self.jobs: list[TrainJob] = []

    def __call__(self, job: TrainJob) -> TrainOutcome:
        self.jobs.append(job)
        log = job.run_dir / "train.log"
        job.run_dir.mkdir(parents=True, exist_ok=True)
        if job.scheme in self.fail:
            log.write_text("Traceback (most recent call last):\n  File a\nRuntimeError: shaw exploded\n")
            return TrainOutcome(returncode=1, wall_s=0.1, peak_rss_mb=100.0, log_path=log)
        ckpt = job.run_dir / "checkpoints" / "last.ckpt"
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_text("fake")
        csv = job.run_dir / "csv" / "version_0" / "metrics.csv"
        csv.parent.mkdir(parents=True, exist_ok=True)
        csv.write_text("step,val/wer,val_loss\n5,0.9,50.0\n10,0.5,40.0\n")
        log.write_text("ok\n")
        return TrainOutcome(returncode=0, wall_s=0.1, peak_rss_mb=321.0, log_path=log)


def _evaluate(run_dir: Path, ckpt: Path):
    assert ckpt.name == "last.ckpt"
    eval_data = {"test": {"cuts": "cuts_test.jsonl.gz", "max_utts": 2, "utterances": 2, "skipped": {}}}
    return {"params_m": 1.5, "wer_test_greedy": 40.0, "wer_long": None}, {"wer_long": "too long"}, eval_data


def _runner(tmp_path: Path, trainer: FakeTrainer, schemes=("rel_xl", "shaw"), lines=None) -> AblationRunner:
    settings = AblationSettings(out_dir=tmp_path, data_dir="data/synth", schemes=schemes, budget_steps=10)
    log = lines.append if lines is not None else (lambda _: None)
    return AblationRunner(settings, _evaluate, lambda _: (0.25, 10), train_fn=trainer, log=log)


def test_failure_is_isolated_and_reported(tmp_path: Path) -> None:
    lines: list[str] = []
    results = _runner(tmp_path, FakeTrainer(fail={"shaw"}), schemes=("shaw", "rel_xl"), lines=lines).run()
    by_scheme = {r.scheme: r for r in results}
    assert not by_scheme["shaw"].ok and by_scheme["shaw"].error == "RuntimeError: shaw exploded"
    assert by_scheme["rel_xl"].ok
    assert by_scheme["rel_xl"].metrics["peak_rss_mb"] == 321.0
    assert by_scheme["rel_xl"].metrics["step_time_s"] == 0.25
    assert by_scheme["rel_xl"].curve == [[5.0, 0.9], [10.0, 0.5]]
    assert by_scheme["rel_xl"].loss_curve == [[5.0, 50.0], [10.0, 40.0]]
    assert by_scheme["rel_xl"].metrics["val_loss"] == 40.0
    assert by_scheme["rel_xl"].eval_data["test"]["utterances"] == 2
    report = (tmp_path / "report.md").read_text()
    assert "failed (train)" in report and "RuntimeError: shaw exploded" in report
    assert (tmp_path / "results.json").is_file() and (tmp_path / "learning_curves.png").is_file()
    assert any("shaw: FAILED in train" in line for line in lines)
    assert "report:" in lines[-1]


def test_rerun_skips_finished_and_retries_failed(tmp_path: Path) -> None:
    _runner(tmp_path, FakeTrainer(fail={"shaw"})).run()
    assert is_finished(tmp_path / "rel_xl") and not is_finished(tmp_path / "shaw")
    second = FakeTrainer()
    results = _runner(tmp_path, second).run()
    assert [job.scheme for job in second.jobs] == ["shaw"]
    assert all(r.ok for r in results)
    assert read_marker(tmp_path / "rel_xl").metrics["wer_test_greedy"] == 40.0


def test_interrupted_training_resumes_from_last_ckpt(tmp_path: Path) -> None:
    ckpt = tmp_path / "rel_xl" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_text("partial")
    first_half = tmp_path / "rel_xl" / "csv" / "metrics.csv"
    first_half.parent.mkdir()
    first_half.write_text("step,val_wer\n2,0.95\n")
    lines: list[str] = []
    trainer = FakeTrainer()
    _runner(tmp_path, trainer, schemes=("rel_xl",), lines=lines).run()
    assert trainer.jobs[0].resume_from == ckpt
    assert any("rel_xl: resume from" in line for line in lines)
    assert (tmp_path / "rel_xl" / MARKER_NAME).is_file()
    # The interrupted run's curve points were archived before the resumed logger could delete them.
    assert read_marker(tmp_path / "rel_xl").curve == [[2.0, 0.95], [5.0, 0.9], [10.0, 0.5]]


def test_evaluation_error_fails_only_that_scheme(tmp_path: Path) -> None:
    def broken(run_dir: Path, ckpt: Path):
        if run_dir.name == "rel_xl":
            raise KeyError("missing hyper-parameter 'encoder'")
        return _evaluate(run_dir, ckpt)

    settings = AblationSettings(out_dir=tmp_path, data_dir="d", schemes=("rel_xl", "rope"), budget_minutes=1)
    results = AblationRunner(settings, broken, lambda _: (None, None), train_fn=FakeTrainer(), log=lambda _: None).run()
    assert results[0].failed_phase == "evaluate" and "KeyError" in results[0].error
    assert results[1].ok and "step_time_s" in results[1].metric_errors


def test_settings_reject_unknown_schemes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid schemes: rel_xl, wenet_rel, shaw"):
        AblationSettings(out_dir=tmp_path, data_dir="d", schemes=("rel_xl", "alibi"), budget_steps=1)
    with pytest.raises(ValueError, match="budget_steps or budget_minutes"):
        AblationSettings(out_dir=tmp_path, data_dir="d", schemes=("rel_xl",)).job("rel_xl", None)


def test_skip_warns_when_the_settings_changed(tmp_path: Path) -> None:
    _runner(tmp_path, FakeTrainer(), schemes=("rel_xl",)).run()
    lines: list[str] = []
    settings = AblationSettings(out_dir=tmp_path, data_dir="data/synth", schemes=("rel_xl",), budget_steps=99)
    trainer = FakeTrainer()
    AblationRunner(settings, _evaluate, lambda _: (0.25, 10), train_fn=trainer, log=lines.append).run()
    assert trainer.jobs == []
    assert any("WARNING" in line and "'budget_steps': (10, 99)" in line for line in lines)


def test_report_only_rebuilds_from_markers_without_training(tmp_path: Path) -> None:
    _runner(tmp_path, FakeTrainer(fail={"shaw"})).run()
    (tmp_path / "report.md").unlink()
    trainer = FakeTrainer()
    results = _runner(tmp_path, trainer, schemes=("rel_xl", "shaw", "rope")).report_only()
    assert trainer.jobs == []
    assert [r.scheme for r in results] == ["rel_xl", "shaw"]  # rope never ran
    report = (tmp_path / "report.md").read_text()
    assert "| `rel_xl` | ok |" in report and "| `shaw` | failed (train) |" in report


def test_a_run_that_died_before_any_checkpoint_restarts_clean(tmp_path: Path) -> None:
    dead = tmp_path / "rel_xl"
    dead.mkdir()
    (dead / "step_times.csv").write_text("1,9.0\n2,9.0\n")
    trainer = FakeTrainer()
    _runner(tmp_path, trainer, schemes=("rel_xl",)).run()
    assert trainer.jobs[0].resume_from is None
    assert not (dead / "step_times.csv").exists()
    stale = [p for p in tmp_path.iterdir() if p.name.startswith("rel_xl.stale-")]
    assert len(stale) == 1 and (stale[0] / "step_times.csv").read_text() == "1,9.0\n2,9.0\n"


def test_seeds_train_one_run_per_seed_in_its_own_folder(tmp_path: Path) -> None:
    settings = AblationSettings(out_dir=tmp_path, data_dir="data/synth", schemes=("rel_xl", "shaw"), seed=7,
                                seeds=2, budget_steps=10)
    trainer = FakeTrainer()
    results = AblationRunner(settings, _evaluate, lambda _: (0.25, 10), train_fn=trainer, log=lambda _: None).run()
    # The first seed keeps the one-seed folder name, so a one-seed ablation can grow seeds later.
    assert [(j.scheme, j.seed, j.run_dir.name) for j in trainer.jobs] == [
        ("rel_xl", 7, "rel_xl"), ("rel_xl", 8, "rel_xl-seed8"), ("shaw", 7, "shaw"), ("shaw", 8, "shaw-seed8"),
    ]
    assert [(r.scheme, r.seed, Path(r.run_dir).name) for r in results] == [
        ("rel_xl", 7, "rel_xl"), ("rel_xl", 8, "rel_xl-seed8"), ("shaw", 7, "shaw"), ("shaw", 8, "shaw-seed8"),
    ]
    assert read_marker(tmp_path / "shaw-seed8").settings["seed"] == 8
    # report-only finds every seed's marker; nothing is trained again.
    again = FakeTrainer()
    rebuilt = AblationRunner(settings, _evaluate, lambda _: (0.25, 10), train_fn=again, log=lambda _: None)
    assert [r.seed for r in rebuilt.report_only()] == [7, 8, 7, 8] and again.jobs == []
    with pytest.raises(ValueError, match=r"seeds \(0\)"):
        AblationSettings(out_dir=tmp_path, data_dir="d", seeds=0, budget_steps=1)


def test_some_schemes_get_more_seeds(tmp_path: Path) -> None:
    settings = AblationSettings(out_dir=tmp_path, data_dir="d", schemes=("rel_xl", "shaw", "wenet_rel"), seed=0,
                                scheme_seeds={"rel_xl": 2, "wenet_rel": 3, "rope": 2}, budget_steps=1)
    assert [(s, seed, d.name) for s, seed, d in settings.runs()] == [
        ("rel_xl", 0, "rel_xl"), ("rel_xl", 1, "rel_xl-seed1"), ("shaw", 0, "shaw"), ("wenet_rel", 0, "wenet_rel"),
        ("wenet_rel", 1, "wenet_rel-seed1"), ("wenet_rel", 2, "wenet_rel-seed2"),
    ]  # rope is not run: its extra seeds do not make it run
    assert settings.describe()["scheme_seeds"] == "rel_xl=2,wenet_rel=3"
    assert AblationSettings(out_dir=tmp_path, data_dir="d", seeds=3, scheme_seeds={"shaw": 2},
                            budget_steps=1).seeds_for("shaw") == 3  # --seeds is the floor
    with pytest.raises(ValueError, match="per-scheme seeds"):
        AblationSettings(out_dir=tmp_path, data_dir="d", scheme_seeds={"alibi": 2}, budget_steps=1)
