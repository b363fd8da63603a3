"""Read learning curves from Lightning CSVLogger ``metrics.csv`` files.

The CSV logger writes one sparse table per run version (``.../version_N/metrics.csv``):
a header with ``step`` and every logged name, and one row per logging call in
which only the logged columns are filled. An interrupted and resumed run has
several versions; their rows are merged, the later version winning for a step it
repeats (the resumed run re-validates from the restored step).
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

# Tried in order when no metric name is given: the full-context validation WER
# before any streaming variant of it.
_WER_PATTERNS = (
    re.compile(r"^val[/_]wer$"),
    re.compile(r"^val[/_]wer[/_]full"),
    re.compile(r"^val.*wer(?!.*(chunk|stream))"),
    re.compile(r"^val.*wer"),
)


ARCHIVE_DIR = "metrics_before_resume"
# The validation loss as AsrLightningModule logs it.
VAL_LOSS = "val_loss"


def find_metrics_files(run_dir: Path) -> list[Path]:
    """Every metrics table under ``run_dir``, oldest first: archived parts
    (:func:`archive_metrics`), then logger versions in order."""

    def order(path: Path) -> tuple[int, int, float]:
        archived = path.parent.name == ARCHIVE_DIR
        match = re.search(r"(?:version_|part)(\d+)", str(path.relative_to(run_dir)))
        return (0 if archived else 1, int(match.group(1)) if match else -1, path.stat().st_mtime)

    found = [*run_dir.rglob("metrics.csv"), *(run_dir / ARCHIVE_DIR).glob("metrics_part*.csv")]
    return sorted(found, key=order)


def archive_metrics(run_dir: Path) -> list[Path]:
    """Move the run's ``metrics.csv`` files aside before a resume.

    A CSVLogger with a fixed version (``version: ""``) deletes an existing
    metrics.csv when a resumed run starts; the archived parts keep the curve's
    first half. Returns the archived paths.
    """
    run_dir = Path(run_dir)
    moved = []
    for path in sorted(run_dir.rglob("metrics.csv")):
        archive = run_dir / ARCHIVE_DIR
        archive.mkdir(exist_ok=True)
        target = archive / f"metrics_part{len(list(archive.glob('metrics_part*.csv'))):03d}.csv"
        path.replace(target)
        moved.append(target)
    return moved


def pick_wer_column(columns: list[str]) -> str | None:
    """The validation-WER column of a metrics table, or None when it has none."""
    for pattern in _WER_PATTERNS:
        for name in columns:
            if pattern.search(name.lower()):
                return name
    return None


def read_metric(path: Path, metric: str | None = None) -> tuple[str | None, dict[int, float]]:
    """One metric of one ``metrics.csv`` as ``(column, {step: value})``.

    ``metric=None`` picks the validation WER column (see :func:`pick_wer_column`).
    Rows where the column is empty or not a finite number are skipped.
    """
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames or [])
        column = metric if metric is not None else pick_wer_column(columns)
        if column is None or column not in columns or "step" not in columns:
            return None, {}
        points: dict[int, float] = {}
        for row in reader:
            raw_value, raw_step = row.get(column) or "", row.get("step") or ""
            try:
                value, step = float(raw_value), int(float(raw_step))
            except ValueError:
                continue
            if math.isfinite(value):
                points[step] = value
    return column, points


def read_learning_curve(run_dir: Path, metric: str | None = None) -> list[list[float]]:
    """Validation WER against step for one run, merged over its versions.

    Returns ``[[step, value], ...]`` sorted by step (empty when no metrics file
    or no WER column exists). Values are as logged; :func:`as_percent` rescales.
    """
    merged: dict[int, float] = {}
    for path in find_metrics_files(Path(run_dir)):
        _, points = read_metric(path, metric)
        merged.update(points)
    return [[float(step), merged[step]] for step in sorted(merged)]


def as_percent(curve: list[list[float]]) -> list[list[float]]:
    """Rescale a WER curve logged as a fraction (all values <= 1.5) to percent."""
    if curve and max(value for _, value in curve) <= 1.5:
        return [[step, 100.0 * value] for step, value in curve]
    return curve
