"""One scheme's ablation result, the metrics it carries, and its on-disk marker.

A scheme run is *finished* when ``<run_dir>/ablation_result.json`` exists: the
marker holds the whole :class:`SchemeResult`, so a re-run reads it back instead
of training again. Failed runs are written too (status ``failed``) so the report
can show them, but they do not count as finished: the next run retries them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MARKER_NAME = "ablation_result.json"

STATUS_OK = "ok"
STATUS_FAILED = "failed"


@dataclass(frozen=True)
class Metric:
    """A report column: ``key`` in :attr:`SchemeResult.metrics`, its header and number format."""

    key: str
    header: str
    fmt: str


# The summary table's columns, in order. WERs are percentages. "C16/L4" = chunk of 16
# encoder frames attending to 4 left chunks (the streaming memory); "160 s" = the
# longest passages of the probe set.
METRICS: tuple[Metric, ...] = (
    Metric("params_m", "Params (M)", "{:.2f}"),
    Metric("wer_test_rescore", "WER test rescore (%)", "{:.2f}"),
    Metric("wer_test_greedy", "WER test greedy (%)", "{:.2f}"),
    Metric("cer_test_greedy", "CER test greedy (%)", "{:.2f}"),
    Metric("wer_chunk16", "WER C16/L4 (%)", "{:.2f}"),
    Metric("wer_chunk4", "WER C4/L16 (%)", "{:.2f}"),
    Metric("wer_probe160_full", "WER 160 s full (%)", "{:.2f}"),
    Metric("wer_probe160_c16", "WER 160 s C16/L4 (%)", "{:.2f}"),
    Metric("val_loss", "Val loss (last)", "{:.2f}"),
    Metric("step_time_s", "Step time (s)", "{:.3f}"),
    Metric("peak_rss_mb", "Peak RSS (MB)", "{:.0f}"),
    Metric("stream_rtf", "Stream RTF", "{:.3f}"),
    Metric("train_steps", "Steps", "{:.0f}"),
)
METRIC_KEYS: tuple[str, ...] = tuple(m.key for m in METRICS)


@dataclass
class SchemeResult:
    """Everything the report knows about one position scheme.

    ``metrics`` maps a key of :data:`METRICS` to a number, or ``None`` when that
    measurement failed; ``metric_errors`` then holds the failure's last line
    (e.g. abs_learned refusing utterances past its table length on the long set).
    ``curve`` and ``loss_curve`` are the validation WER and loss learning curves as
    ``[step, value]`` pairs (the loss still separates schemes when short budgets
    leave every WER at 100 %). ``eval_data`` is what each evaluation split
    contributed (see ``asr.ablation.evaluate.evaluate_checkpoint``): manifest,
    cut limit, utterances decoded and cuts skipped by reason.
    """

    scheme: str
    status: str = STATUS_OK
    error: str | None = None
    failed_phase: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    metric_errors: dict[str, str] = field(default_factory=dict)
    curve: list[list[float]] = field(default_factory=list)
    loss_curve: list[list[float]] = field(default_factory=list)
    eval_data: dict[str, dict] = field(default_factory=dict)
    run_dir: str = ""
    # The training seed of this run (one scheme may have several runs, one per seed).
    seed: int | None = None
    wall_s: float = 0.0
    # What the scheme was trained with (budget, seed, data, overrides): a re-run with
    # other settings is warned that it reuses this result.
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        # JSON has no NaN/inf: a diverged run's numbers become null with a reason.
        for key, value in list(data["metrics"].items()):
            if value is not None and not math.isfinite(float(value)):
                data["metrics"][key] = None
                data["metric_errors"].setdefault(key, f"non-finite value {value}")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SchemeResult:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fields {unknown} in scheme result; known: {sorted(known)}")
        if "scheme" not in data:
            raise ValueError(f"scheme result without a 'scheme' field: {sorted(data)}")
        return cls(**data)


def failed_result(scheme: str, phase: str, error: BaseException | str, run_dir: Path | str = "") -> SchemeResult:
    """A ``failed`` result whose error is the exception's (or text's) last non-empty line."""
    return SchemeResult(
        scheme=scheme,
        status=STATUS_FAILED,
        error=last_line(error),
        failed_phase=phase,
        run_dir=str(run_dir),
    )


def last_line(error: BaseException | str) -> str:
    """The last non-empty line of an error text (a traceback's final ``Type: message``)."""
    if isinstance(error, BaseException):
        text = f"{type(error).__name__}: {error}"
    else:
        text = error
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else "unknown error"


def write_marker(run_dir: Path, result: SchemeResult) -> Path:
    """Write ``result`` atomically to ``run_dir/ablation_result.json`` and return the path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / MARKER_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=2))
    # rename is atomic: an interrupted write never leaves a half marker that reads as finished.
    tmp.replace(path)
    return path


def read_marker(run_dir: Path) -> SchemeResult | None:
    """The result stored in ``run_dir``, or None when there is none or it is unreadable."""
    path = run_dir / MARKER_NAME
    if not path.is_file():
        return None
    try:
        return SchemeResult.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        # A marker from an older format is treated as absent: the scheme reruns.
        print(f"[ablate] ignoring unreadable marker {path}: {last_line(err)}")
        return None


def is_finished(run_dir: Path) -> bool:
    """True when ``run_dir`` holds a successful result (a re-run skips the scheme)."""
    result = read_marker(run_dir)
    return result is not None and result.ok


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Per-utterance records, one JSON object a line (the evaluation's and the adaptive budget's)."""
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict]:
    """What :func:`write_jsonl` wrote."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
