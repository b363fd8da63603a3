"""Fine-tuning an imported Wenet U2++ model with the README's command, on the default experiment (whose
features group is sherpa's and whose CMVN file the user's corpus lacks): the run adopts the source's
fbank, CMVN and loss weights and says so, and the right-to-left decoder trains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from asr.data.features import FeatureConfig
from asr.interop.wenet import import_wenet, write_checkpoint
from asr.train.checkpoint import load_model, model_state_dict
from asr.train.run import train
from tests.interop.own_data import own_data, wenet_model_folder

ROOT = Path(__file__).resolve().parents[2]


def prepare_data(argv):
    """The README's prepare step, as the user runs it."""
    done = subprocess.run([sys.executable, "scripts/prepare_data.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def readme_overrides(ckpt, data, model_folder) -> list[str]:
    """What the README's fine-tuning command puts on the command line."""
    return [f"init_from={ckpt}", f"data.data_dir={data}", f"data.tokenizer_path={model_folder}",
            "trainer.max_steps=3", "optim.scheduler.warmup_steps=1"]


# A seconds-long CPU run: not the user's choices, so not on the command line Hydra records.
SHRINK = ["data.num_workers=0", "data.max_duration=4.0", "data.max_duration_per_utt=2.0", "data.num_buckets=2",
          "trainer.val_check_interval=3", "trainer.check_val_every_n_epoch=null", "trainer.limit_val_batches=1",
          "trainer.max_time=null", "~callbacks.progress_bar", "+trainer.enable_model_summary=false", "logger=csv"]


def test_finetuning_an_imported_model_adopts_its_frames_cmvn_and_loss_weights(tmp_path, capsys):
    folder = wenet_model_folder(tmp_path)
    ckpt = write_checkpoint(import_wenet(folder), tmp_path / "exp" / "wenet.ckpt")
    data = own_data(tmp_path)
    prepare_data(["--corpus", "wenet", "--src", f"train={data / 'train' / 'data.list'}",
                  f"dev={data / 'dev' / 'data.list'}", "--data-dir", str(tmp_path / "data_mine"), "--units", "char",
                  "--workers", "0", "--lm-order", "0", "--word-lm-order", "0"])
    user = readme_overrides(ckpt, tmp_path / "data_mine", folder)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[*user, *SHRINK, f"out_dir={tmp_path / 'run'}"])
    with open_dict(cfg):
        cfg.hydra = {"overrides": {"task": user}}  # what python -m asr.train's Hydra records of the command line
    assert cfg.features.mel_banks == "librosa" and cfg.data.cmvn_file == "cmvn_sherpa.json"  # the experiment's
    train(cfg)
    printed = capsys.readouterr().out
    assert "init_from: features: the source's (" in printed and "snip_edges=True" in printed
    assert "init_from: CMVN: the source's global CMVN" in printed
    assert "init_from: loss weights: the source's, it has a right-to-left decoder (ctc_weight 0.3, reverse_weight 0.3" \
        in printed
    tuned_path = tmp_path / "run" / "checkpoints" / "last.ckpt"
    hparams = torch.load(tuned_path, weights_only=True)["hyper_parameters"]
    source_model, _, source_cfg = load_model(ckpt)
    assert FeatureConfig.from_dict(hparams["features"]) == FeatureConfig.from_dict(source_cfg.features)
    assert hparams["model_kwargs"]["reverse_weight"] == 0.3
    tuned = model_state_dict(torch.load(tuned_path, weights_only=True))
    source = source_model.state_dict()
    r2l = [k for k, v in source.items() if k.startswith("r2l_decoder.") and v.is_floating_point()]
    assert len(r2l) >= 20 and all(not torch.equal(tuned[k], source[k]) for k in r2l)  # every R2L tensor moved
    assert torch.equal(tuned["encoder.cmvn_mean"], source["encoder.cmvn_mean"])  # the source's CMVN, kept
    assert "re-initialized" not in printed  # the model folder's units: every token row kept


def test_a_warmup_longer_than_the_run_is_refused_before_training(tmp_path):
    folder = wenet_model_folder(tmp_path)
    ckpt = write_checkpoint(import_wenet(folder), tmp_path / "wenet.ckpt")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"init_from={ckpt}", "trainer.max_steps=4", f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(ValueError, match=r"warmup_steps \(300\) does not fit the run's 4 optimizer steps "
                                         r"\(trainer.max_steps\).*optim.scheduler.warmup_steps=0"):
        train(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()
