"""Every config group option composes and builds what it describes."""

import inspect
import re
from dataclasses import asdict, fields
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from asr.model.asr_model import build_asr_model
from asr.model.positions import POSITION_SCHEMES
from asr.train.checkpoint import model_kwargs_from_config
from asr.train.chunks import DynamicChunkSampler
from asr.train.config import DebugConfig, SchedulerConfig, StreamingConfig, from_group
from asr.train.schedule import build_scheduler

CONF = Path(__file__).resolve().parents[2] / "conf"
SCHEMES = list(POSITION_SCHEMES)  # the registry: a scheme without its conf/pos_enc file fails below


class TinyTokenizer:
    vocab_size, blank_id, sos_eos_id = 10, 0, 9


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def make_cfg(tmp_path, overrides=()):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[f"out_dir={tmp_path}", *overrides])


def test_every_group_has_the_expected_options():
    assert options("pos_enc") == sorted(SCHEMES)
    assert {"quickstart", "librispeech_u2pp", "aishell_u2pp"} <= set(options("experiment"))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pos_enc_option_builds_its_encoder(tmp_path, scheme):
    cfg = make_cfg(tmp_path, [f"pos_enc={scheme}", "model.encoder.num_layers=1", "model.decoder_layers=1"])
    assert cfg.pos_enc.name == scheme
    kwargs = model_kwargs_from_config(OmegaConf.to_container(cfg.model), OmegaConf.to_container(cfg.pos_enc),
                                      TinyTokenizer())
    assert kwargs["encoder_kwargs"]["pos_enc"] == scheme
    model = build_asr_model(**kwargs)
    feats = torch.randn(1, 40, 80)
    out, lens = model.encode(feats, torch.tensor([40]))
    assert out.shape == (1, int(lens[0]), cfg.model.encoder.d_model)


def test_pos_enc_options_are_overridable(tmp_path):
    cfg = make_cfg(tmp_path, ["pos_enc=shaw", "pos_enc.max_distance=7"])
    kwargs = model_kwargs_from_config(OmegaConf.to_container(cfg.model), OmegaConf.to_container(cfg.pos_enc),
                                      TinyTokenizer())
    assert kwargs["encoder_kwargs"]["max_distance"] == 7
    assert kwargs["vocab_size"] == 10 and kwargs["sos_eos_id"] == 9


@pytest.mark.parametrize("option", options("data"))
def test_data_option_matches_the_datamodule_signature(tmp_path, option):
    cfg = make_cfg(tmp_path, [f"data={option}"])
    cls = get_class(cfg.data._target_)
    params = inspect.signature(cls).parameters
    assert set(cfg.data) - {"_target_"} <= set(params)


@pytest.mark.parametrize("option", options("optim"))
def test_optim_option_builds_optimizer_and_schedule(tmp_path, option):
    cfg = make_cfg(tmp_path, [f"optim={option}", "optim.scheduler.total_steps=100000"])
    opt = instantiate(cfg.optim.optimizer)(params=[torch.nn.Parameter(torch.zeros(2))])
    assert isinstance(opt, torch.optim.AdamW)
    config = from_group(SchedulerConfig, cfg.optim.scheduler)
    assert asdict(config) == OmegaConf.to_container(cfg.optim.scheduler)
    sched = build_scheduler(opt, **asdict(config))
    assert sched.get_last_lr()[0] < cfg.optim.optimizer.lr  # warmup starts low


@pytest.mark.parametrize("option", options("streaming"))
def test_streaming_option_builds_sampler(tmp_path, option):
    cfg = make_cfg(tmp_path, [f"streaming={option}"])
    s = from_group(StreamingConfig, cfg.streaming)
    assert asdict(s) == OmegaConf.to_container(cfg.streaming)
    sampler = DynamicChunkSampler(s.p_full, s.max_chunk, s.max_left, s.p_unlimited_left, seed=0)
    draws = {sampler.sample() for _ in range(50)}
    assert (draws == {(0, -1)}) == (option == "full_context")


def test_debug_group_builds_its_config(tmp_path):
    cfg = make_cfg(tmp_path, ["debug.nan_at_step=3"])
    assert from_group(DebugConfig, cfg.debug) == DebugConfig(nan_on_rank=-1, nan_at_step=3)


@pytest.mark.parametrize("cls, group", [(SchedulerConfig, "optim.scheduler"), (StreamingConfig, "streaming")])
def test_unknown_key_in_a_group_names_the_valid_keys(tmp_path, cls, group):
    cfg = make_cfg(tmp_path, [f"+{group}.warmup_stpes=5"])
    valid = [f.name for f in fields(cls)]
    with pytest.raises(ValueError, match=re.escape(f"unknown keys ['warmup_stpes']; valid keys are {valid}.")):
        from_group(cls, OmegaConf.select(cfg, group))


@pytest.mark.parametrize("option", options("trainer"))
def test_trainer_option_instantiates(tmp_path, option):
    cfg = make_cfg(tmp_path, [f"trainer={option}"])
    params = inspect.signature(pl.Trainer).parameters
    assert set(cfg.trainer) - {"_target_"} <= set(params)
    if option != "cpu":
        assert cfg.trainer.precision == "bf16-mixed"
    # No GPU here: build the same trainer on CPU.
    cpu = OmegaConf.merge(cfg.trainer, {"accelerator": "cpu", "devices": 1, "strategy": "auto",
                                         "precision": "32-true"})
    assert isinstance(instantiate(cpu, logger=False), pl.Trainer)


@pytest.mark.parametrize("group", ["callbacks", "logger"])
def test_callbacks_and_loggers_instantiate(tmp_path, group):
    for option in options(group):
        cfg = make_cfg(tmp_path, [f"{group}={option}"])
        built = [instantiate(node) for node in cfg[group].values()]
        assert all(b is not None for b in built)


@pytest.mark.parametrize("experiment", ["quickstart", "ablation", "librispeech_u2pp", "aishell_u2pp"])
def test_experiment_composes_and_builds_its_model(tmp_path, experiment):
    cfg = make_cfg(tmp_path, [f"experiment={experiment}"])
    assert cfg.experiment_name == experiment
    kwargs = model_kwargs_from_config(OmegaConf.to_container(cfg.model), OmegaConf.to_container(cfg.pos_enc),
                                      TinyTokenizer())
    model = build_asr_model(**kwargs)
    enc = cfg.model.encoder
    if experiment in ("quickstart", "ablation"):
        assert cfg.trainer.accelerator == "cpu" and cfg.trainer.max_time
        if experiment == "ablation":  # the quickstart's recipe with a smaller model
            assert (enc.num_layers, enc.d_model, enc.ffn_dim, cfg.model.decoder_layers) == (2, 96, 384, 1)
            assert cfg.data.feature_store and cfg.model.encoder.online_cmn_frames == 100.0
    else:
        # Wenet-sized U2++: 12 x 256, 4 heads, ffn 2048, 6 + 3 decoder layers, bf16 DDP.
        assert (enc.num_layers, enc.d_model, enc.num_heads, enc.ffn_dim, enc.conv_kernel) == (12, 256, 4, 2048, 15)
        assert (cfg.model.decoder_layers, cfg.model.r2l_decoder_layers) == (6, 3)
        assert (cfg.model.ctc_weight, cfg.model.reverse_weight) == (0.3, 0.3)
        assert cfg.trainer.strategy == "ddp" and cfg.trainer.precision == "bf16-mixed"
        assert model.r2l_decoder is not None
    assert len(model.encoder.blocks) == enc.num_layers


def test_command_line_multi_node_overrides(tmp_path):
    cfg = make_cfg(tmp_path, ["experiment=librispeech_u2pp", "trainer.devices=8", "trainer.num_nodes=2"])
    assert (cfg.trainer.devices, cfg.trainer.num_nodes) == (8, 2)
    assert cfg.data.data_dir == "data/librispeech"


def test_vocab_is_never_in_yaml():
    text = "\n".join(p.read_text() for p in CONF.rglob("*.yaml"))
    assert "vocab_size:" not in text and "sos_eos_id:" not in text and "blank_id:" not in text
