"""Crash-safe checkpoints: written whole or not at all, and a resume from the newest one that reads.

A run may be killed at any moment, a checkpoint write included (SIGKILL, a lost node, a full disk).
Two things make ``resume=true`` continue it whatever the moment was:

- :class:`AtomicCheckpointIO` writes each checkpoint to a temporary file beside its target, flushes
  it to the disk and renames it over the target: a reader sees the old file or the new one, never
  half of one. (Lightning's own writer stages the bytes in the system temp folder and moves them,
  which is a copy, and so a half-written target, when that folder is on another file system; and a
  kill leaves the staged copy behind there.)
- :func:`newest_resumable` picks the newest checkpoint of the run folder that is whole and holds
  a training state (``last.ckpt`` normally; an older top-k file when ``last.ckpt`` was cut short
  by something else), says which and why it skipped the others, or refuses in one line naming the
  newest one when none is usable.
"""

from __future__ import annotations

import csv
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO

from asr.train.checkpoint_file import PROBLEMS, CheckpointError, check_file
from asr.train.outcome import CSV_METRICS_FILE

TEMP_MARK = ".partial-"  # a write in progress (or one a kill interrupted): never a candidate
DAMAGED_SUFFIX = ".damaged"  # a checkpoint set aside by a resume: not a *.ckpt, so never a candidate again
DAMAGED = ("truncated", "empty", "unreadable")  # CheckpointError kinds of a file a write or a disk cut short
# What Lightning stores in a checkpoint it can resume from; an averaged checkpoint has only weights.
TRAINING_STATE_KEYS = ("optimizer_states", "loops", "global_step")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer with an all-or-nothing write (temporary file, fsync, rename)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}.")
        write_atomically(checkpoint, Path(path))


def write_atomically(obj: Any, path: Path) -> Path:
    """``torch.save(obj)`` to ``path`` through a temporary file in its folder that is renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}{TEMP_MARK}{os.getpid()}")
    try:
        with open(temp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    _sync_folder(path.parent)
    return path


def _sync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` survive a power loss (where the platform lets a folder be synced)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a resumed run starts from, and why it passed over the newer ones."""

    path: Path
    global_step: int
    skipped: tuple[CheckpointError, ...] = ()

    def lines(self) -> list[str]:
        passed = [f"resume: skipped {problem}" for problem in self.skipped]
        return [*passed, f"resume: from {self.path} (step {self.global_step})"]

    @property
    def damaged(self) -> list[Path]:
        """The newer files that are cut short or damaged (not the averaged or exported models beside them)."""
        return [Path(p.path) for p in self.skipped if p.kind in DAMAGED]


def training_state_problem(path: Path) -> tuple[CheckpointError | None, int]:
    """(None, global step) for a whole checkpoint Lightning can resume from; (why not, -1) otherwise.

    The zip archive's CRCs are checked first (:func:`~asr.train.checkpoint_file.check_file`); the
    tensors are then mapped, not read, to look at the keys.
    """
    try:
        check_file(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except CheckpointError as err:
        return err, -1
    except Exception as err:  # noqa: BLE001 - any file torch cannot map is not a resume point
        return CheckpointError(path, "not_a_checkpoint", f"torch cannot read it ({type(err).__name__})"), -1
    missing = [key for key in TRAINING_STATE_KEYS if not isinstance(checkpoint, dict) or key not in checkpoint]
    if missing:
        return CheckpointError(path, "not_ours", f"no training state to resume ({', '.join(missing)} missing: an "
                                                 "averaged or exported model)"), -1
    return None, int(checkpoint["global_step"])


def checkpoint_candidates(folder: Path) -> list[Path]:
    """The ``*.ckpt`` files of a run's checkpoint folder, newest first (``last.ckpt`` first among equals)."""
    if not folder.is_dir():
        return []
    files = [p for p in folder.glob("*.ckpt") if p.is_file() and TEMP_MARK not in p.name]
    return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name == "last.ckpt"), reverse=True)


def newest_resumable(folder: Path) -> ResumePoint | None:
    """The newest checkpoint in ``folder`` that is whole and holds a training state.

    None when the folder holds no checkpoint (a fresh start). Raises :class:`CheckpointError` in one
    line, naming the newest file and why it cannot be used, when there are checkpoints and none is usable.
    """
    problems: list[CheckpointError] = []
    for path in checkpoint_candidates(folder):
        problem, step = training_state_problem(path)
        if problem is None:
            return ResumePoint(path, step, tuple(problems))
        problems.append(problem)
    if not problems:
        return None
    newest = problems[0]
    detail = str(newest)[len(PROBLEMS[newest.kind].format(path=repr(newest.path))):].removeprefix(": ")
    older = f"none of the {len(problems) - 1} older checkpoints beside it is usable either" if len(problems) > 1 else ""
    advice = f"resume=true has nothing to resume from (move {folder} aside to start afresh)"
    raise CheckpointError(newest.path, newest.kind, "; ".join(part for part in (detail, older, advice) if part))


def remove_interrupted_writes(folder: Path) -> list[Path]:
    """Delete the temporary files of checkpoint writes a kill interrupted; returns them."""
    if not folder.is_dir():
        return []
    stale = [p for p in folder.iterdir() if p.is_file() and TEMP_MARK in p.name]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def set_aside(paths: list[Path]) -> list[Path]:
    """Rename damaged checkpoints to ``<name>.damaged`` (a counter added when taken); returns the new names.

    A resumed run then writes ``last.ckpt`` afresh: Lightning gives a new last checkpoint another name
    (``last-v1.ckpt``) while a file it did not write holds the name, and readers of ``last.ckpt`` would go on
    finding the damaged one.
    """
    moved = []
    for path in paths:
        target = path.with_name(path.name + DAMAGED_SUFFIX)
        count = 1
        while target.exists():
            target, count = path.with_name(f"{path.name}{DAMAGED_SUFFIX}{count}"), count + 1
        os.replace(path, target)
        moved.append(target)
    return moved


def keep_logged_rows(loggers: list, resume_step: int) -> int:
    """Keep the CSV log's rows of the steps before ``resume_step`` across a resume; returns how many.

    Lightning's CSV logger deletes an existing ``metrics.csv`` when its writer starts, so a resumed run
    in the same folder would lose its learning curve up to the checkpoint. Here the rows logged before
    the checkpoint's step are read first, the writer is started (which deletes the file) and they are
    written back through it: the resumed run's rows then follow them. Rows from the checkpoint's step on
    were logged by the interrupted run after its checkpoint, and are logged again by the resumed run.
    Only the first process writes logs (the others' writer is a stand-in).
    """
    kept = 0
    for logger in loggers:
        if not isinstance(logger, CSVLogger):
            continue
        path = Path(logger.log_dir) / CSV_METRICS_FILE
        if not path.is_file():
            continue
        with path.open(newline="", errors="replace") as f:
            rows = [row for row in csv.DictReader(f) if _logged_step(row) < resume_step]
        writer = logger.experiment  # started now: the old file is gone
        if not hasattr(writer, "save"):  # not the first process
            continue
        # a row cut short by a kill has missing fields (None) or spilled ones (under the key None)
        writer.metrics = [{k: v for k, v in row.items() if k is not None and v not in ("", None)} for row in rows]
        writer.save()
        kept += len(rows)
    return kept


def _logged_step(row: dict) -> float:
    """A CSV log row's step; infinity for a row whose step does not read (cut short by a kill): not kept."""
    try:
        return float(row.get("step") or "inf")
    except (TypeError, ValueError):
        return float("inf")
