"""train(cfg) with the real configs shrunk, on a tiny random-noise corpus."""

import json
import re
import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from asr.data.features import LEGACY, SHERPA, FeatureConfig
from asr.train.checkpoint import average_to_file, load_model, top_k_checkpoints, write_averaged_checkpoint
import asr
from asr.train.config import repository_conf_dir
from asr.train.run import train

from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides



@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_tiny_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, out), "trainer.max_epochs=2",
                                          "callbacks.model_checkpoint.save_top_k=2"])
    return cfg, train(cfg), out


def test_train_writes_checkpoints_logs_and_summary(trained):
    cfg, summary, out = trained
    assert summary["global_step"] > 0 and summary["epochs"] == 2
    assert (out / "checkpoints" / "last.ckpt").is_file()
    assert summary["best_checkpoint"] and summary["best_val_wer"] is not None
    assert (out / "csv" / "metrics.csv").is_file()
    assert json.loads((out / "train_summary.json").read_text())["global_step"] == summary["global_step"]
    assert summary["nonfinite_skips"] == 0 and isinstance(summary["skipped_utterances"], dict)
    # what asr.train.outcome needs: the step limit, and that the epochs, not a time cap, ended the run
    assert summary["max_steps"] == cfg.trainer.max_steps and summary["global_step"] < summary["max_steps"]
    assert summary["time_cap_s"] is None and summary["stopped_by_time_cap"] is False


def test_load_model_rebuilds_without_hydra(trained, corpus):
    cfg, summary, out = trained
    model, tokenizer, saved_cfg = load_model(out / "checkpoints" / "last.ckpt")
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)
    state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items()}
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert tokenizer.vocab_size == model.vocab_size and tokenizer.sos_eos_id == model.sos_eos_id
    assert saved_cfg.pos_enc.name == "rel_xl" and saved_cfg.data.data_dir == str(corpus)
    # CMVN from cmvn.json travelled with the weights.
    assert torch.allclose(model.encoder.cmvn_istd, torch.full((80,), 0.25))
    assert not model.training


def test_checkpoint_stores_the_config_groups_under_their_yaml_names(trained):
    cfg, summary, out = trained
    hparams = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["hyper_parameters"]
    assert hparams["features"] == OmegaConf.to_container(cfg.features) == LEGACY.to_dict()
    assert hparams["scheduler"] == OmegaConf.to_container(cfg.optim.scheduler)
    assert hparams["streaming"] == OmegaConf.to_container(cfg.streaming)
    assert hparams["seed"] == cfg.seed


# hyper_parameters as asr.train wrote them before the config groups were stored
# (only build_info: no "scheduler", "streaming" or "seed").
OLD_HPARAM_KEYS = ("model_kwargs", "tokenizer_path", "cfg")


def test_old_style_checkpoint_loads_and_resumes(trained, tmp_path):
    cfg, summary, out = trained
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)
    ckpt["hyper_parameters"] = {k: ckpt["hyper_parameters"][k] for k in OLD_HPARAM_KEYS}
    old = tmp_path / "old.ckpt"
    torch.save(ckpt, old)

    model, tokenizer, saved_cfg = load_model(old)
    assert all(torch.equal(v, ckpt["state_dict"]["model." + k]) for k, v in model.state_dict().items())
    assert saved_cfg.experiment_name == cfg.experiment_name
    # trained before the fbank options were recorded: today's options
    del ckpt["hyper_parameters"]["cfg"]["features"]
    torch.save(ckpt, old)
    assert FeatureConfig.from_dict(load_model(old)[2].features) == LEGACY

    resumed_cfg = cfg.copy()
    resumed_cfg.out_dir, resumed_cfg.ckpt_path = str(tmp_path / "resumed"), str(old)
    resumed_cfg.trainer.max_epochs = summary["epochs"] + 2
    resumed = train(resumed_cfg)
    assert resumed["resumed_from"] == str(old)
    assert resumed["global_step"] > summary["global_step"] and resumed["epochs"] == summary["epochs"] + 2


def test_average_of_top_k_is_the_mean_and_loads(trained, tmp_path):
    cfg, summary, out = trained
    ranked = top_k_checkpoints(out, 2)
    assert len(ranked) == 2 and ranked[0][1] <= ranked[1][1]
    avg = write_averaged_checkpoint([p for p, _ in ranked], tmp_path / "avg.ckpt")
    model, _, _ = load_model(avg)
    a, b = (load_model(p)[0].state_dict() for p, _ in ranked)
    for k, v in model.state_dict().items():
        if v.is_floating_point():
            assert torch.allclose(v, (a[k] + b[k]) / 2, atol=1e-6)


def test_an_averaged_model_as_ckpt_path_is_refused_before_the_run_folder_is_touched(trained, tmp_path):
    from asr.train.checkpoint_file import CheckpointError

    cfg, summary, out = trained
    avg = write_averaged_checkpoint([p for p, _ in top_k_checkpoints(out, 2)], tmp_path / "avg.ckpt")
    curve = (out / "csv" / "metrics.csv").read_bytes()
    resumed = cfg.copy()
    resumed.ckpt_path = str(avg)
    # the CSV logger deletes metrics.csv when it starts, so the refusal comes before any logger
    with pytest.raises(CheckpointError, match=re.escape(f"init_from={avg} starts a new one")):
        train(resumed)
    assert (out / "csv" / "metrics.csv").read_bytes() == curve


def test_average_checkpoints_script_writes_loadable_average(trained, tmp_path, capsys):
    cfg, summary, out = trained
    written = average_to_file(run_dir=out, num=2, out=tmp_path / "avg2.ckpt")
    assert written == tmp_path / "avg2.ckpt" and "averaged 2 checkpoints" in capsys.readouterr().out
    model, tokenizer, saved_cfg = load_model(written)
    assert saved_cfg.experiment_name == cfg.experiment_name and tokenizer.vocab_size == model.vocab_size


@pytest.mark.parametrize("flags", [["--checkpoint", "A", "B"], ["--checkpoint", "A", "--checkpoint", "B"],
                                   ["--ckpts", "A", "B"]])
def test_average_checkpoints_script_takes_explicit_checkpoints(trained, tmp_path, flags):
    cfg, summary, out = trained
    paths = {"A": str(out / "checkpoints" / "last.ckpt"), "B": str(top_k_checkpoints(out, 1)[0][0])}
    done = subprocess.run([sys.executable, "scripts/average_checkpoints.py", *[paths.get(f, f) for f in flags],
                           "--out", str(tmp_path / "avg.ckpt")], cwd=CONF.parent, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "avg.ckpt"
    assert torch.load(written, weights_only=False)["averaged_from"] == [paths["A"], paths["B"]]


def test_averaging_needs_an_output_for_explicit_checkpoints_and_something_to_average(tmp_path):
    with pytest.raises(ValueError, match="output path is needed"):
        average_to_file([tmp_path / "a.ckpt", tmp_path / "b.ckpt"])
    with pytest.raises(ValueError, match="give a run folder or the checkpoints"):
        average_to_file(out=tmp_path / "avg.ckpt")
    assert not (tmp_path / "avg.ckpt").exists()


def test_resume_flag_picks_last_checkpoint(tmp_path):
    from asr.train.checkpoint_file import CheckpointError
    from asr.train.resume import ResumePoint, write_atomically
    from asr.train.run import resolve_ckpt_path

    assert resolve_ckpt_path(None, True, tmp_path) is None  # nothing to resume yet
    last = write_atomically({"global_step": 4, "optimizer_states": [], "loops": {}, "state_dict": {}},
                            tmp_path / "checkpoints" / "last.ckpt")
    assert resolve_ckpt_path(None, True, tmp_path) == ResumePoint(last, 4)
    assert resolve_ckpt_path(None, False, tmp_path) is None
    assert resolve_ckpt_path(str(last), False, tmp_path) == ResumePoint(last, 4)  # explicit, with its step
    with pytest.raises(FileNotFoundError, match="nope.ckpt"):
        resolve_ckpt_path(str(tmp_path / "nope.ckpt"), False, tmp_path)
    last.write_bytes(last.read_bytes()[:100])  # an explicit checkpoint cut short: one line, before anything runs
    with pytest.raises(CheckpointError, match="last.ckpt' is truncated or damaged"):
        resolve_ckpt_path(str(last), False, tmp_path)


def test_the_configs_are_found_beside_the_package_and_named_when_missing(tmp_path, monkeypatch):
    assert repository_conf_dir() == CONF
    monkeypatch.setattr(asr, "__file__", str(tmp_path / "asr" / "__init__.py"))
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "conf" / "train.yaml")) + " is missing"):
        repository_conf_dir()


def test_the_package_entry_point_composes_the_training_config():
    out = subprocess.run([sys.executable, "-m", "asr.train", "--cfg", "job", "pos_enc=shaw"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "name: shaw" in out.stdout and "model:" in out.stdout


def test_summary_lists_noise_skips_apart_from_utterance_skips():
    from asr.train.run import format_summary

    summary = {"out_dir": "o", "checkpoint_dir": "c", "best_checkpoint": None, "log_dirs": [], "best_val_wer": None,
               "global_step": 3, "epochs": 1, "seconds": 1.0, "nonfinite_skips": 0,
               "train_data_read": {"cuts": 5, "hours": 0.01},
               "skipped_utterances": {"audio_corrupt": 2, "noise_audio_missing": 1, "empty_text": 1}}
    lines = format_summary(summary).splitlines()
    assert "skipped utts    : audio_corrupt=2, empty_text=1" in lines
    assert "noise skipped   : noise_audio_missing=1" in lines
    summary["skipped_utterances"] = {}
    assert "noise skipped   : none" in format_summary(summary).splitlines()


def test_features_other_than_the_cmvn_stats_are_refused(corpus, tmp_path):
    """Stats of other frames would normalize the wrong features: the run stops before it starts."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, tmp_path), "features=sherpa"])
    with pytest.raises(ValueError, match=r"snip_edges: stats True vs run False.*compute_cmvn.py"):
        train(cfg)


def test_a_run_with_sherpa_features_records_them(corpus, tmp_path):
    import json

    from asr.data.cmvn import compute_cmvn, save_cmvn
    from asr.data.features import FbankExtractor, training_backend
    from asr.data.manifest import read_cuts

    stats = compute_cmvn(read_cuts(corpus / "cuts_train.jsonl.gz"), FbankExtractor(SHERPA, training_backend(SHERPA)),
                         num_workers=0)
    save_cmvn(stats, tmp_path / "cmvn_sherpa.json")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, tmp_path / "run"), "features=sherpa",
                                          f"data.cmvn_file={tmp_path / 'cmvn_sherpa.json'}", "trainer.max_steps=2"])
    train(cfg)
    model, _, saved = load_model(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert FeatureConfig.from_dict(saved.features) == SHERPA
    assert torch.allclose(model.encoder.cmvn_mean, torch.tensor(json.loads((tmp_path / "cmvn_sherpa.json").read_text())["mean"]))


def test_a_resumed_run_keeps_its_csv_log_up_to_the_checkpoint(corpus, tmp_path):
    import csv

    out = tmp_path / "run"

    def run(max_epochs, resume):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=[*tiny_overrides(corpus, out), f"trainer.max_epochs={max_epochs}",
                                              f"resume={str(resume).lower()}"])
        return train(cfg)

    def logged():
        with (out / "csv" / "metrics.csv").open(newline="") as f:
            return [(int(float(r["step"])), r.get("val_wer", "") != "") for r in csv.DictReader(f)]

    first = run(1, False)
    before = logged()
    assert before and first["global_step"] >= 2
    with (out / "csv" / "metrics.csv").open("a") as f:
        f.write("0,0.001")  # a row cut short by a kill: dropped, and the resume goes on
    second = run(first["epochs"] + 2, True)
    after = logged()
    assert second["resumed_from"] and second["global_step"] > first["global_step"]
    assert after[:len(before)] == before  # the first run's rows, all before its checkpoint's step
    assert [step for step, _ in after[len(before):]] and min(step for step, _ in after[len(before):]) >= first["global_step"]
    # the first run's validation is kept beside the resumed run's, each step's once
    validated = [step for step, val in after if val]
    assert len(validated) > sum(val for _, val in before) >= 1 and len(set(validated)) == len(validated)
