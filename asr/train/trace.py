"""A debugging callback that records what each rank trained on, one JSON line per batch.

Used by the DDP tests (which batches each rank saw; whether a skipped step left the
parameters untouched) and handy when chasing divergence between ranks:
``+callbacks.trace._target_=asr.train.trace.BatchTrace +callbacks.trace.out_dir=/tmp/trace``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch


def parameter_checksum(module: torch.nn.Module) -> float:
    """Sum of every parameter in float64: changes whenever an optimizer step does."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in module.parameters()))


class BatchTrace(pl.Callback):
    """Appends ``{rank, step, epoch, keys, checksum_before, checksum_after, nonfinite_skips}``
    per training batch to ``<out_dir>/trace_rank<r>.jsonl``."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self._before: float | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._before = parameter_checksum(pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        record = {
            "rank": trainer.global_rank,
            # global_step has already advanced past this batch's optimizer step.
            "step": trainer.global_step - 1,
            "epoch": trainer.current_epoch,
            "keys": list(batch.keys),
            "checksum_before": self._before,
            "checksum_after": parameter_checksum(pl_module),
            "nonfinite_skips": getattr(pl_module, "nonfinite_skips", None),
        }
        with open(self.out_dir / f"trace_rank{trainer.global_rank}.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
