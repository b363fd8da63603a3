"""A training run killed with SIGKILL at random moments, one of them inside a checkpoint write and one
followed by a cut-short ``last.ckpt``, and resumed with ``resume=true`` each time, ends with the weights
of the run that was never interrupted.

The runs are forked from the test process (nothing to import again), each with one thread, as the
uninterrupted run: the same arithmetic in the same order, so the weights must be equal bit for bit.
The kill moments come from a seeded generator, as fractions of the uninterrupted run's duration.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from asr.train.checkpoint import model_state_dict
from asr.train.resume import TEMP_MARK, newest_resumable
from asr.train.run import train

from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides

MAX_STEPS = 12
KILLS = 3  # at random moments, after the kill inside a checkpoint write


def compose_run(corpus: Path, out: Path):
    overrides = [*tiny_overrides(corpus, out), "resume=true", f"trainer.max_steps={MAX_STEPS}",
                 "trainer.max_epochs=-1", "trainer.val_check_interval=2", "trainer.check_val_every_n_epoch=null",
                 "trainer.limit_val_batches=1", "optim.scheduler.total_steps=12",
                 "callbacks.model_checkpoint.save_top_k=-1", "~callbacks.lr_monitor", "~logger",
                 # every generator a step draws from: dropout, SpecAugment, speed perturbation
                 "model.encoder.dropout=0.1", "model.decoder_dropout=0.1", "data.spec_augment=true",
                 "data.speed_perturb=true"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=overrides)


def _child(cfg, die_in_write: int | None) -> None:
    """The forked run: train, or die by SIGKILL halfway through checkpoint write number ``die_in_write``."""
    code = 1
    try:
        sys.stdout.reconfigure(line_buffering=True)  # what it said survives the kill
        torch.set_num_threads(1)
        if die_in_write is not None:
            import asr.train.resume as resume

            writes = iter(range(1, 1 << 30))
            whole = resume.write_atomically

            def write(obj, path):
                if next(writes) < die_in_write:
                    return whole(obj, path)
                temp = path.with_name(f"{path.name}{TEMP_MARK}{os.getpid()}")
                temp.write_bytes(b"PK\x03\x04" + b"\0" * 4096)  # half a file, then the kill
                os.kill(os.getpid(), signal.SIGKILL)

            resume.write_atomically = write
        train(cfg)
        code = 0
    finally:
        sys.stdout.flush()
        os._exit(code)


def fork_run(cfg, die_in_write: int | None = None) -> int:
    pid = os.fork()
    if pid == 0:
        _child(cfg, die_in_write)
    return pid


def wait(pid: int, timeout_s: float = 600.0) -> int:
    """The child's exit status (negative: the signal that ended it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"training run {pid} did not end within {timeout_s} s")


def weights(run: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert checkpoint["global_step"] == MAX_STEPS
    return model_state_dict(checkpoint)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks the training runs")
def test_runs_killed_at_random_moments_resume_to_the_uninterrupted_weights(tmp_path, capfd):
    corpus = make_tiny_corpus(tmp_path / "corpus", n_train=16, n_eval=2)
    started = time.monotonic()
    assert wait(fork_run(compose_run(corpus, tmp_path / "straight"))) == 0
    duration = time.monotonic() - started

    out = tmp_path / "killed"
    cfg = compose_run(corpus, out)
    # A kill inside the third checkpoint write (the second validation's top-k file) leaves a temporary file;
    # then last.ckpt cut short, as a writer that is not atomic leaves it (or a full disk).
    assert wait(fork_run(cfg, die_in_write=3)) == -signal.SIGKILL
    assert [p.name for p in (out / "checkpoints").iterdir() if TEMP_MARK in p.name]
    last = out / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    point = newest_resumable(out / "checkpoints")  # what the next run starts from
    assert point.global_step == 2 and point.path != last and str(last) in point.lines()[0]
    rng = random.Random(67)
    for _ in range(KILLS):
        pid = fork_run(cfg)
        time.sleep(rng.uniform(0.2, 0.9) * duration)
        os.kill(pid, signal.SIGKILL)
        assert wait(pid) in (0, -signal.SIGKILL)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the forked runs
    try:
        summary = train(cfg)  # to the end, here
    finally:
        torch.set_num_threads(threads)
    said = capfd.readouterr().out
    assert f"resume: skipped checkpoint '{last}' is truncated or damaged" in said, said[-3000:]
    assert "(a checkpoint write that was interrupted)" in said
    assert f"resume: moved {last} aside to last.ckpt.damaged" in said
    assert said.count("resume: from ") >= 2 and summary["global_step"] == MAX_STEPS
    straight, resumed = weights(tmp_path / "straight"), weights(out)
    assert straight.keys() == resumed.keys()
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name
