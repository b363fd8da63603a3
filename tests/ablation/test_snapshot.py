"""The ablation's frozen training code (asr/ablation/snapshot.py): what is copied, that a resumed
ablation keeps it, and that training processes import it instead of the checkout."""

import json
import shutil
import sys
from pathlib import Path

from asr.ablation.runner import AblationSettings
from asr.ablation.snapshot import REPO_ROOT, freeze_code
from asr.ablation.training import TrainJob, run_training, train_command


def _small_source(tmp_path: Path) -> Path:
    """A stand-in checkout: the real asr/ and conf/."""
    src = tmp_path / "src"
    shutil.copytree(REPO_ROOT / "asr", src / "asr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "conf", src / "conf")
    return src


def test_the_copy_is_made_once_and_a_resumed_ablation_keeps_it(tmp_path):
    src = _small_source(tmp_path)
    messages = []
    code = freeze_code(tmp_path / "out", src, log=messages.append)
    assert code == tmp_path / "out" / "code"
    assert (code / "asr" / "model" / "encoder.py").read_text() == (src / "asr" / "model" / "encoder.py").read_text()
    assert (code / "conf" / "experiment" / "quickstart.yaml").is_file() and (code / "asr" / "train" / "__main__.py").is_file()
    assert not list(code.rglob("__pycache__")) and not (tmp_path / "out" / "code.partial").exists()
    info = json.loads((code / "FROZEN.json").read_text())
    assert set(info) == {"commit", "dirty", "frozen_at", "source"} and info["source"] == str(src)
    # An edit after the first start does not reach the frozen copy, and the second start says what it uses.
    (src / "asr" / "model" / "encoder.py").write_text("raise SystemExit('edited')\n")
    assert freeze_code(tmp_path / "out", src, log=messages.append) == code
    assert "edited" not in (code / "asr" / "model" / "encoder.py").read_text()
    assert "froze the training code" in messages[0] and "delete that folder" in messages[1]


def test_a_copy_that_did_not_finish_is_made_again(tmp_path):
    src = _small_source(tmp_path)
    (tmp_path / "out" / "code.partial" / "asr").mkdir(parents=True)  # an interrupted earlier copy
    code = freeze_code(tmp_path / "out", src, log=lambda _: None)
    assert (code / "FROZEN.json").is_file() and not (tmp_path / "out" / "code.partial").exists()


def test_training_processes_import_the_frozen_package(tmp_path):
    code = freeze_code(tmp_path / "out", _small_source(tmp_path), log=lambda _: None)
    job = TrainJob(scheme="rel_xl", run_dir=tmp_path / "run", data_dir="data/synth", budget_steps=1, code_root=code)
    assert train_command(job)[1:3] == ["-m", "asr.train"]  # the package's entry point, never a script by path
    outcome = run_training(job, [sys.executable, "-c", "import asr; print('package at', asr.__file__)"])
    assert outcome.returncode == 0
    assert f"package at {code / 'asr' / '__init__.py'}" in outcome.log_path.read_text()
    # The frozen package composes the configs frozen beside it.
    probe = "from asr.train.config import repository_conf_dir; print('conf at', repository_conf_dir())"
    outcome = run_training(job, [sys.executable, "-c", probe])
    assert outcome.returncode == 0 and f"conf at {code / 'conf'}" in outcome.log_path.read_text()
    # Without a frozen copy the runs use this checkout's package.
    plain = TrainJob(scheme="rel_xl", run_dir=tmp_path / "run2", data_dir="data/synth", budget_steps=1)
    assert train_command(plain)[1:3] == ["-m", "asr.train"]


def test_the_settings_hand_the_copy_to_every_job(tmp_path):
    settings = AblationSettings(out_dir=tmp_path, data_dir="data/synth", schemes=("rel_xl",), budget_steps=5)
    assert settings.job("rel_xl", None).code_root is None
    settings.code_root = tmp_path / "code"
    assert settings.job("rel_xl", None).code_root == tmp_path / "code"
