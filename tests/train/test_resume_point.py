"""resume=true starts from the newest whole training checkpoint and says which, or refuses in one line;
checkpoints are written whole or not at all."""

from __future__ import annotations

import os

import pytest
import torch

from asr.train.checkpoint_file import CheckpointError
from asr.train.resume import (TEMP_MARK, newest_resumable, remove_interrupted_writes, set_aside,
                              training_state_problem, write_atomically)


def training_checkpoint(step: int) -> dict:
    return {"global_step": step, "optimizer_states": [{}], "loops": {"fit_loop": {}},
            "state_dict": {"model.w": torch.full((4, 4), float(step))}}


def save(folder, name: str, data: dict, age_s: int):
    """``data`` saved as ``folder/name``, last modified ``age_s`` seconds ago (larger: older)."""
    path = write_atomically(data, folder / name)
    stamp = 1_700_000_000 - age_s
    os.utime(path, (stamp, stamp))
    return path


def cut_short(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    os.utime(path, (1_700_000_000, 1_700_000_000))  # the cut file stays the newest


@pytest.fixture
def folder(tmp_path):
    ckpts = tmp_path / "checkpoints"
    save(ckpts, "epoch000-step000003-wer0.9000.ckpt", training_checkpoint(3), age_s=30)
    save(ckpts, "epoch000-step000006-wer0.8000.ckpt", training_checkpoint(6), age_s=20)
    save(ckpts, "last.ckpt", training_checkpoint(6), age_s=20)  # written just after the top-k file
    return ckpts


def test_the_newest_whole_checkpoint_is_last_ckpt(folder):
    point = newest_resumable(folder)
    assert point.path == folder / "last.ckpt" and point.global_step == 6 and not point.skipped
    assert point.lines() == [f"resume: from {folder / 'last.ckpt'} (step 6)"]


@pytest.mark.parametrize("keep", [0.0, 0.3, 0.97])
def test_a_cut_last_ckpt_is_skipped_for_the_newest_whole_one_and_the_lines_say_so(folder, keep):
    save(folder, "epoch000-step000009-wer0.7000.ckpt", training_checkpoint(9), age_s=10)
    save(folder, "last.ckpt", training_checkpoint(9), age_s=10)
    cut_short(folder / "last.ckpt", keep)
    point = newest_resumable(folder)
    assert point.path == folder / "epoch000-step000009-wer0.7000.ckpt" and point.global_step == 9
    skipped, chosen = point.lines()
    assert skipped.startswith(f"resume: skipped checkpoint '{folder / 'last.ckpt'}' is ")
    assert ("empty" if keep == 0 else "truncated or damaged") in skipped
    assert chosen == f"resume: from {folder / 'epoch000-step000009-wer0.7000.ckpt'} (step 9)"


def test_an_averaged_model_beside_the_training_checkpoints_is_not_a_resume_point(folder):
    averaged = save(folder, "avg3.ckpt", {"state_dict": {"model.w": torch.zeros(4, 4)}, "hyper_parameters": {}},
                    age_s=1)
    problem, _ = training_state_problem(averaged)
    assert problem is not None and "no training state to resume" in str(problem)
    assert newest_resumable(folder).path == folder / "last.ckpt"


def test_nothing_usable_is_refused_in_one_line_naming_the_newest(folder):
    for path in folder.iterdir():
        cut_short(path)
    with pytest.raises(CheckpointError) as err:
        newest_resumable(folder)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"checkpoint '{folder / 'last.ckpt'}' is truncated")
    assert "none of the 2 older checkpoints beside it is usable either" in message
    assert "move" in message and "aside to start afresh" in message


def test_an_empty_or_missing_folder_is_a_fresh_start(tmp_path):
    assert newest_resumable(tmp_path / "checkpoints") is None
    (tmp_path / "checkpoints").mkdir()
    assert newest_resumable(tmp_path / "checkpoints") is None


def test_an_interrupted_write_leaves_the_old_file_and_its_temporary_file_is_never_a_candidate(folder, monkeypatch):
    before = (folder / "last.ckpt").read_bytes()

    def dies_halfway(obj, fh):  # the process is gone after half the bytes: here the write raises instead
        fh.write(b"PK\x03\x04" + b"\0" * 1000)
        raise KeyboardInterrupt

    monkeypatch.setattr("asr.train.resume.torch.save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(training_checkpoint(9), folder / "last.ckpt")
    assert (folder / "last.ckpt").read_bytes() == before
    assert not [p for p in folder.iterdir() if TEMP_MARK in p.name]  # cleaned when the writer lives on
    # What a SIGKILL leaves: the temporary file. It is ignored, then removed at the resume.
    left = folder / f"last.ckpt{TEMP_MARK}12345"
    left.write_bytes(b"PK\x03\x04" + b"\0" * 1000)
    assert newest_resumable(folder).path == folder / "last.ckpt"
    assert remove_interrupted_writes(folder) == [left] and not left.exists()


def test_damaged_files_are_set_aside_so_the_run_writes_last_ckpt_afresh(folder):
    averaged = save(folder, "avg3.ckpt", {"state_dict": {}, "hyper_parameters": {}}, age_s=0)
    cut_short(folder / "last.ckpt")
    point = newest_resumable(folder)
    assert len(point.skipped) == 2 and point.damaged == [folder / "last.ckpt"]  # the average is no damage
    assert set_aside(point.damaged) == [folder / "last.ckpt.damaged"]
    (folder / "last.ckpt").write_bytes(b"again")
    cut_short(folder / "last.ckpt")
    assert set_aside([folder / "last.ckpt"]) == [folder / "last.ckpt.damaged1"]
    assert averaged.is_file() and not (folder / "last.ckpt").exists()
    assert newest_resumable(folder).path == folder / "epoch000-step000006-wer0.8000.ckpt"
