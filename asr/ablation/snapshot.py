"""Freeze the code an ablation trains with: its own copy of the package and the configs.

An ablation runs for hours and starts a training process per run; each process imports the
package anew. Without a copy, a commit (or an edit) made while it runs reaches the runs that
start afterwards, and one ablation mixes two versions of the code without saying so. With
:func:`freeze_code` every run of the ablation, a resumed one included, trains with the code
as it was when the ablation first started; ``FROZEN.json`` beside the copy says which commit
that was and whether the tree had uncommitted changes.

The evaluation runs in the ablation's own process, which imported the package when it started.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CODE_DIR = "code"
STAMP = "FROZEN.json"


def _git(root: Path, *args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def freeze_code(out_dir: Path, source_root: Path = REPO_ROOT, log=print) -> Path:
    """``out_dir/code`` holding ``asr/`` and ``conf/`` of ``source_root``; made once,
    then reused (a resumed ablation keeps training with the code it started with). Returns the folder to
    put first on the training processes' PYTHONPATH."""
    dest = Path(out_dir) / CODE_DIR
    stamp = dest / STAMP
    if stamp.is_file():
        info = json.loads(stamp.read_text())
        log(f"[ablate] training with the code frozen in {dest} at {info.get('frozen_at')} "
            f"(commit {info.get('commit')}{', with uncommitted changes' if info.get('dirty') else ''}); "
            f"delete that folder to train with the current code")
        return dest
    partial = dest.with_name(CODE_DIR + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # an earlier copy that did not finish
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source_root / "asr", partial / "asr", ignore=ignore)
    shutil.copytree(source_root / "conf", partial / "conf", ignore=ignore)
    status = _git(source_root, "status", "--porcelain", "--", "asr", "conf")
    info = {"commit": _git(source_root, "rev-parse", "--short", "HEAD"), "dirty": bool(status),
            "frozen_at": time.strftime("%Y-%m-%d %H:%M:%S"), "source": str(source_root)}
    (partial / STAMP).write_text(json.dumps(info, indent=1) + "\n")
    partial.rename(dest)
    log(f"[ablate] froze the training code into {dest} (commit {info['commit']}"
        f"{', with uncommitted changes' if info['dirty'] else ''}): edits from now on do not reach this ablation")
    return dest
