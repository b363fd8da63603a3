"""The compile switch: config, regions, and a compiled training run through train(cfg)."""

import functools
import re
from dataclasses import asdict, fields

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from asr.train.compile import CompileConfig, compile_model, compiled_regions
from asr.train.config import SchedulerConfig, StreamingConfig, from_group
from asr.train.module import AsrLightningModule
from asr.train.run import train

from helpers import LetterTokenizer, random_batches, tiny_model
from tiny_corpus import CONF, make_tiny_corpus, tiny_overrides


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_config_group_is_the_dataclass_and_checks_its_values():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["out_dir=/tmp/unused"])
    assert asdict(from_group(CompileConfig, cfg.compile)) == OmegaConf.to_container(cfg.compile)
    with pytest.raises(ValueError, match=re.escape(f"valid keys are {[f.name for f in fields(CompileConfig)]}")):
        from_group(CompileConfig, {"enable": True})
    with pytest.raises(ValueError, match="blocks, model"):
        CompileConfig(scope="encoder")


def test_layout_optimization_is_off_for_dynamic_shapes():
    """Inductor's process-wide layout switch follows the config; on with dynamic shapes is refused
    (it specializes a block's backward on the frame count: asr.train.compile)."""
    import torch._inductor.config as inductor_config

    before = inductor_config.layout_optimization
    try:
        inductor_config.layout_optimization = True  # inductor's own default on this CPU
        compile_model(tiny_model(), CompileConfig(enabled=True, backend="eager"))
        assert inductor_config.layout_optimization is False
        compile_model(tiny_model(), CompileConfig(enabled=True, backend="eager", dynamic=False, layout_optimization=True))
        assert inductor_config.layout_optimization is True
    finally:
        inductor_config.layout_optimization = before
    with pytest.raises(ValueError, match="needs compile.dynamic=false"):
        CompileConfig(layout_optimization=True)


def test_regions_are_the_blocks_and_layers_and_the_state_dict_is_unchanged():
    model = tiny_model()
    keys = list(model.state_dict())
    assert compile_model(model, CompileConfig(enabled=False)) == []
    regions = compile_model(model, CompileConfig(enabled=True, backend="eager"))
    assert regions == [*model.encoder.blocks, *model.decoder.layers]
    assert compiled_regions(model, "model") == [model]
    assert list(model.state_dict()) == keys  # checkpoints of a compiled run load into an eager model


def test_compiled_module_counts_its_graphs_and_stops_compiling(tmp_path):
    torch.manual_seed(0)
    module = AsrLightningModule(
        model=tiny_model(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), tokenizer=LetterTokenizer(),
        scheduler=SchedulerConfig(warmup_steps=2), streaming=StreamingConfig(max_chunk=4, val_chunk_size=2),
        compile=CompileConfig(enabled=True, backend="aot_eager"),
    )
    # every batch of another length: the dynamic graphs serve them all once each mask layout was seen
    batches = [b for i, frames in enumerate((40, 52, 47, 61, 44, 58, 49, 66)) for b in random_batches(1, frames=frames, seed=i)]
    trainer = pl.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert module.compiled and module.compiled_graphs > 0
    assert module.last_compile_step is not None and module.last_compile_step < len(batches) - 1


def test_train_with_compile_switch(tmp_path):
    corpus = make_tiny_corpus(tmp_path / "corpus")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*tiny_overrides(corpus, tmp_path / "run"), "compile.enabled=true",
                                          "compile.backend=aot_eager"])
    summary = train(cfg)
    assert summary["global_step"] > 0 and summary["compiled_graphs"]["count"] > 0
