"""The rung's progress bar: the steps its runs trained since the rung began, read from their step files."""

import io
import time
from pathlib import Path

import pytest

from asr.ablation.adaptive import mark_trained
from asr.ablation.progress import RungProgress
from asr.ablation.step_timer import STEP_TIMES_NAME


def write_steps(run: Path, first: int, last: int) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with (run / STEP_TIMES_NAME).open("a") as handle:
        handle.writelines(f"{step},0.100000\n" for step in range(first, last + 1))


def test_the_bar_counts_each_runs_steps_since_its_last_rung_and_follows_them(tmp_path: Path) -> None:
    fresh, extended, finished = tmp_path / "rel_xl", tmp_path / "shaw", tmp_path / "rope"
    write_steps(extended, 1, 400)
    mark_trained(extended, 400, 10.0, 100.0)  # its first rung
    write_steps(extended, 401, 450)  # the rung began before an interruption
    write_steps(finished, 1, 800)
    mark_trained(finished, 800, 10.0, 100.0)  # a replayed rung: nothing left to train
    out = io.StringIO()
    progress = RungProgress(poll_s=0.05, file=out)
    progress.start(800, [fresh, extended, finished])
    assert progress._bar.total == 800 + 400 + 0 and progress._bar.n == 50
    assert "rung to 800 steps, 3 runs (2 left to train)" in progress._bar.desc
    write_steps(fresh, 1, 300)
    write_steps(extended, 451, 900)  # past the rung (a stray line) counts up to the rung's end only
    deadline = time.monotonic() + 120  # a bound, not a timing
    while progress._bar.n != 300 + 400 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert progress._bar.n == 700
    mark_trained(extended, 800, 10.0, 100.0)  # the rung ended
    progress.start(1600, [extended])  # the next rung closes this bar and opens its own
    assert "700/1200" in out.getvalue()
    assert progress._bar.total == 800 and progress.done() == 100  # from 800: the lines to 900 are this rung's
    assert progress._bar.desc.endswith("rung to 1600 steps, 1 run")
    progress.close()
    progress.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="poll_s"):
        RungProgress(poll_s=0)
