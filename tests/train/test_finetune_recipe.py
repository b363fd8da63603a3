"""The README's fine-tune command (``experiment=finetune``), run as written with a short max_steps on a tiny
corpus: it validates, writes a best checkpoint, has no time cap and regularizes."""

from __future__ import annotations

import shlex

import torch
from hydra import compose, initialize_config_dir

from asr.train.run import train
from tests.interop.test_own_model_readme import README_COMMANDS

from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides

# What a 2-core test machine needs, not the user's choices: batches of the tiny corpus, a short warmup.
SHRINK = ["optim.scheduler.warmup_steps=1", "data.num_workers=0", "data.max_duration=4.0",
          "data.max_duration_per_utt=2.0", "data.num_buckets=2", "trainer.limit_val_batches=1",
          "~callbacks.progress_bar", "+trainer.enable_model_summary=false", "logger=csv"]


def readme_overrides(source, corpus, out, max_steps: int) -> list[str]:
    """The README's fine-tune command's overrides, with this test's paths and ``max_steps``."""
    words = shlex.split(README_COMMANDS["finetune"])
    assert words[:3] == ["python", "scripts/train.py", "experiment=finetune"]
    replace = {"init_from": str(source), "data.data_dir": str(corpus), "data.tokenizer_path": str(corpus / "tokenizer"),
               "trainer.max_steps": str(max_steps)}
    overrides = []
    for word in words[2:]:
        key, value = word.split("=", 1)
        if key == "hydra.run.dir":
            overrides.append(f"out_dir={out}")
        else:
            overrides.append(f"{key}={replace.get(key, value)}")
    assert set(replace) <= {o.split("=", 1)[0] for o in overrides}
    return overrides


def test_the_readme_fine_tune_command_validates_and_keeps_a_best_checkpoint(tmp_path, capsys):
    corpus = make_tiny_corpus(tmp_path / "corpus", n_train=12, n_eval=2)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        source_cfg = compose("train", overrides=[*tiny_overrides(corpus, tmp_path / "source"), "trainer.max_steps=2"])
        cfg = compose("train", overrides=[*readme_overrides(tmp_path / "source" / "checkpoints" / "last.ckpt", corpus,
                                                            tmp_path / "tuned", max_steps=4), *SHRINK])
    train(source_cfg)
    capsys.readouterr()
    summary = train(cfg)
    said = capsys.readouterr().out
    assert "trainer.val_check_interval (200) is longer than trainer.max_steps (4): validating" in said
    assert summary["global_step"] == 4 and summary["time_cap_s"] is None
    assert summary["best_checkpoint"] is not None and summary["best_val_wer"] is not None
    saved = torch.load(summary["best_checkpoint"], weights_only=True)
    assert saved["global_step"] == 4
    run = saved["hyper_parameters"]["cfg"]
    assert run["experiment_name"] == "finetune" and run["data"]["spec_augment"] is True
    assert saved["hyper_parameters"]["model_kwargs"]["encoder_kwargs"]["dropout"] == 0.1  # not the source's 0
    assert saved["hyper_parameters"]["model_kwargs"]["encoder_kwargs"]["d_model"] == 16  # the source's size
