"""Learning-curve reader: sparse CSVLogger tables, column choice, resumed versions."""

from pathlib import Path

from asr.ablation.curves import archive_metrics, as_percent, pick_wer_column, read_learning_curve


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_reads_sparse_rows_and_skips_empty_cells(tmp_path: Path) -> None:
    _write(
        tmp_path / "csv" / "version_0" / "metrics.csv",
        "epoch,step,train/loss,val/wer\n"
        "0,9,5.0,\n"
        "0,9,,0.9\n"
        "0,19,4.0,\n"
        "0,19,,0.7\n"
        "1,29,,nan\n",
    )
    assert read_learning_curve(tmp_path) == [[9.0, 0.9], [19.0, 0.7]]


def test_resumed_version_overrides_repeated_steps(tmp_path: Path) -> None:
    _write(tmp_path / "logs" / "version_0" / "metrics.csv", "step,val/wer\n10,0.9\n20,0.8\n")
    _write(tmp_path / "logs" / "version_1" / "metrics.csv", "step,val/wer\n20,0.75\n30,0.6\n")
    assert read_learning_curve(tmp_path) == [[10.0, 0.9], [20.0, 0.75], [30.0, 0.6]]


def test_full_context_wer_is_preferred_over_streaming() -> None:
    columns = ["epoch", "step", "val/wer_chunk16", "val/loss", "val/wer_full"]
    assert pick_wer_column(columns) == "val/wer_full"
    assert pick_wer_column(["val_wer_chunk", "val_wer"]) == "val_wer"
    assert pick_wer_column(["step", "train/loss"]) is None


def test_missing_metrics_gives_empty_curve(tmp_path: Path) -> None:
    assert read_learning_curve(tmp_path) == []
    _write(tmp_path / "metrics.csv", "step,train/loss\n1,3.0\n")
    assert read_learning_curve(tmp_path) == []


def test_as_percent_only_rescales_fractions() -> None:
    assert as_percent([[1, 0.5], [2, 0.25]]) == [[1, 50.0], [2, 25.0]]
    assert as_percent([[1, 80.0], [2, 40.0]]) == [[1, 80.0], [2, 40.0]]


def test_archived_parts_survive_a_logger_that_restarts_its_file(tmp_path: Path) -> None:
    live = tmp_path / "csv" / "metrics.csv"
    _write(live, "step,val_wer\n10,0.9\n20,0.8\n")
    assert len(archive_metrics(tmp_path)) == 1 and not live.exists()
    _write(live, "step,val_wer\n30,0.7\n")  # the resumed run's fresh file
    archive_metrics(tmp_path)
    _write(live, "step,val_wer\n40,0.6\n")
    assert read_learning_curve(tmp_path) == [[10.0, 0.9], [20.0, 0.8], [30.0, 0.7], [40.0, 0.6]]
