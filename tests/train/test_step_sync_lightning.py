"""The whole Lightning training step never makes the host wait, except where the logger writes.

``test_step_sync`` checks the model's forward, backward and clipping; here a tiny ``Trainer.fit``
runs the module's own hooks (training step, non-finite flag, backward, clipping, fused AdamW step,
LR schedule, progress bar, CSV logger) and every host read is put down to the batch it happened
in: only batches after which the logger writes (``log_every_n_steps``) may read. The chunk draw's
generator lives on the host by design (``asr.train.chunks``: CPU tensors, never the device's), so
its reads are left out. A non-finite step is skipped on the device (``found_inf`` handed to the
fused optimizer) exactly as the host-side skip does it.
"""

from __future__ import annotations

import functools
import warnings

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

import asr.train.module as module_file
from asr.train.config import DebugConfig, SchedulerConfig, StreamingConfig
from asr.train.module import AsrLightningModule
from asr.train.progress import EstimatedTotalProgressBar
from tests.train.helpers import LetterTokenizer, random_batches, tiny_model
from tests.train.test_step_sync import ALLOWED_CUDA_SYNCS, OpLog

LOG_EVERY = 3
STEPS = 6
HOST_SIDE_CALLERS = ("train/chunks.py",)  # the chunk draw's CPU generator


def _module(debug: DebugConfig = DebugConfig()) -> AsrLightningModule:
    torch.manual_seed(0)
    return AsrLightningModule(
        model=tiny_model(), optimizer=functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.01, fused=True),
        tokenizer=LetterTokenizer(), scheduler=SchedulerConfig(warmup_steps=2),
        streaming=StreamingConfig(max_chunk=4, val_chunk_size=0), debug=debug,
    )


def _fit(module, tmp_path, accelerator="cpu", callbacks=(), progress_bar=False, n_batches=STEPS) -> pl.Trainer:
    bar = [EstimatedTotalProgressBar()] if progress_bar else []
    trainer = pl.Trainer(
        accelerator=accelerator, devices=1, max_epochs=1, enable_checkpointing=False, enable_model_summary=False,
        logger=CSVLogger(tmp_path) if progress_bar else False, log_every_n_steps=LOG_EVERY,
        enable_progress_bar=progress_bar, default_root_dir=tmp_path, gradient_clip_val=5.0,
        num_sanity_val_steps=0, limit_val_batches=0, callbacks=[*bar, *callbacks],
    )
    loader = torch.utils.data.DataLoader(random_batches(n_batches), batch_size=None, shuffle=False)
    trainer.fit(module, train_dataloaders=loader)
    return trainer


class _BatchOfEachRead(pl.Callback):
    """Puts the batch index on the op log, so that each host read is put down to its batch (the
    logger writes after a batch's ``on_train_batch_end``, before the next batch starts)."""

    def __init__(self, ops: OpLog, on_start=None) -> None:
        self.ops, self.on_start = ops, on_start
        self.ops.batch = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.ops.batch = batch_idx
        if self.on_start is not None:
            self.on_start(batch_idx)

    def on_train_end(self, trainer, pl_module):
        self.ops.batch = "after training"


class _BatchedOpLog(OpLog):
    """OpLog whose reads carry the batch they happened in: ``(batch, read)``."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = len(self.host_reads)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.host_reads[before:] = [(self.batch, read) for read in self.host_reads[before:]]
        return out


def _logging_batch(batch_idx: int) -> bool:
    return (batch_idx + 1) % LOG_EVERY == 0


def test_fit_reads_the_host_only_where_the_logger_writes(tmp_path):
    module = _module()
    with _BatchedOpLog() as ops:
        trainer = _fit(module, tmp_path, callbacks=[_BatchOfEachRead(ops)], progress_bar=True)
    assert module.skip_on_device and trainer.global_step == STEPS
    reads = [(batch, read) for batch, read in ops.host_reads if isinstance(batch, int)
             and not any(caller in read for caller in HOST_SIDE_CALLERS)]
    off_cadence = [(batch, read) for batch, read in reads if not _logging_batch(batch)]
    assert off_cadence == [], f"host reads outside the logging cadence: {off_cadence}"
    # The detector sees the logger's own reads where it writes.
    assert {batch for batch, _ in reads} == {b for b in range(STEPS) if _logging_batch(b)}


def _optimizer_state(trainer: pl.Trainer) -> list[torch.Tensor]:
    optimizer = trainer.optimizers[0]
    return [t.clone() for p in optimizer.param_groups[0]["params"] for t in optimizer.state[p].values()]


def test_device_skip_leaves_what_the_host_skip_leaves(tmp_path, monkeypatch):
    """A non-finite loss at step 1: parameters, AdamW moments and step counts end bit-equal to the
    host-side skip's (no backward on the skipped step); both count one skip."""
    results = {}
    for way in ("device", "host"):
        if way == "host":
            monkeypatch.setattr(module_file, "optimizer_takes_found_inf", lambda optimizer: False)
        module = _module(debug=DebugConfig(nan_on_rank=0, nan_at_step=1))
        trainer = _fit(module, tmp_path / way, n_batches=3)
        assert module.skip_on_device == (way == "device")
        assert module.nonfinite_skips == 1 and trainer.global_step == 3
        results[way] = ([p.detach().clone() for p in module.parameters()], _optimizer_state(trainer))
        steps = {int(s["step"]) for s in trainer.optimizers[0].state.values()}
        assert steps == {2}, f"optimizer step counts {steps}: the skipped step must not count"
    device_params, device_state = results["device"]
    host_params, host_state = results["host"]
    assert all(torch.isfinite(p).all() for p in device_params)
    assert all(torch.equal(a, b) for a, b in zip(device_params, host_params, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(device_state, host_state, strict=True))


def test_skip_count_survives_a_checkpoint(tmp_path):
    module = _module(debug=DebugConfig(nan_on_rank=0, nan_at_step=0))
    _fit(module, tmp_path, n_batches=1)
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint["asr_training_state"]["nonfinite_skips"] == 1
    restored = _module()
    restored.on_load_checkpoint(checkpoint)
    assert restored.nonfinite_skips == 1 and "nonfinite_skip_count" not in restored.state_dict()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fit_syncs_only_in_ctc_or_where_the_logger_writes(tmp_path):
    """Batches after which the logger does not write run under ``set_sync_debug_mode("error")``;
    only ATen's CTC (its lengths) runs with the check off."""

    class _ErrorExceptInCtc(_BatchedOpLog):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func) not in ALLOWED_CUDA_SYNCS:
                return super().__torch_dispatch__(func, types, args, kwargs)
            mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode(0)
            try:
                return super().__torch_dispatch__(func, types, args, kwargs)
            finally:
                torch.cuda.set_sync_debug_mode(mode)

    def error_outside_logging(batch_idx: int) -> None:
        # The first batch loads kernels and allocates the optimizer's state: checked from the second.
        checked = batch_idx > 0 and not _logging_batch(batch_idx)
        torch.cuda.set_sync_debug_mode("error" if checked else 0)

    module = _module()
    try:
        with warnings.catch_warnings(), _ErrorExceptInCtc() as ops:
            _fit(module, tmp_path, accelerator="gpu", callbacks=[_BatchOfEachRead(ops, error_outside_logging)],
                 progress_bar=True)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert module.skip_on_device and module.nonfinite_skips == 0
