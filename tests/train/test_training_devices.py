"""The LightningModule on each device (``device`` fixture) and under the GPU recipe's precision
(bf16-mixed) run on the CPU: training steps, the non-finite guard and validation decoding."""

import functools

import lightning.pytorch as pl
import torch

from asr.train.config import SchedulerConfig, StreamingConfig
from asr.train.module import AsrLightningModule

from helpers import LetterTokenizer, random_batches, tiny_model


def _fit(tmp_path, accelerator: str, precision: str, callbacks=()) -> tuple[AsrLightningModule, pl.Trainer]:
    torch.manual_seed(0)
    module = AsrLightningModule(
        model=tiny_model(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-3), tokenizer=LetterTokenizer(),
        scheduler=SchedulerConfig(warmup_steps=2), streaming=StreamingConfig(max_chunk=4, val_chunk_size=2),
    )
    trainer = pl.Trainer(accelerator=accelerator, devices=1, precision=precision, max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, gradient_clip_val=5.0, num_sanity_val_steps=0,
                         callbacks=list(callbacks))
    loader = functools.partial(torch.utils.data.DataLoader, batch_size=None)
    trainer.fit(module, train_dataloaders=loader(random_batches(4)), val_dataloaders=loader(random_batches(2, seed=1)))
    return module, trainer


class _ParameterDevices(pl.Callback):
    """The device types of the module's parameters at each training step (Lightning moves the
    module back to the CPU when fit ends, so they must be read while it trains)."""

    def __init__(self):
        self.seen: set[str] = set()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.seen |= {p.device.type for p in module.parameters()}


def test_lightning_training_and_validation_on_device(device, tmp_path):
    devices = _ParameterDevices()
    module, trainer = _fit(tmp_path, "gpu" if device.type == "cuda" else "cpu", "32-true", callbacks=[devices])
    assert trainer.global_step == 4 and module.nonfinite_skips == 0
    assert devices.seen == {device.type}
    assert torch.isfinite(trainer.callback_metrics["val_loss"])


def test_bf16_mixed_training_and_validation_on_cpu(tmp_path, cpu_bf16_without_onednn):
    module, trainer = _fit(tmp_path, "cpu", "bf16-mixed")
    assert trainer.global_step == 4 and module.nonfinite_skips == 0
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in module.parameters())
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["val_loss"]) and {"val_wer", "val_wer_chunk2"} <= set(metrics)
