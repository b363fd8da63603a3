"""The training config groups the LightningModule reads, as typed objects.

Each field is named exactly as its YAML key, so a value keeps one name from
``conf/`` through ``AsrLightningModule`` into the checkpoint's hyper-parameters:
``optim.scheduler`` -> :class:`SchedulerConfig`, ``streaming`` -> :class:`StreamingConfig`,
``finetune`` -> :class:`FinetuneConfig`, ``debug`` -> :class:`DebugConfig`. Build them with :func:`from_group`, which names the
valid keys when a group has one the code does not know (a typo would otherwise be
silently ignored or fail deep inside a run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import asr

GroupConfig = TypeVar("GroupConfig")


@dataclass(frozen=True)
class SchedulerConfig:
    """``optim.scheduler``: see ``asr.train.schedule.WarmupSchedule``; ``total_steps=None``
    uses the trainer's ``estimated_stepping_batches``."""

    kind: str = "noam"
    warmup_steps: int = 25000
    total_steps: int | None = None
    min_lr_ratio: float = 0.0


@dataclass(frozen=True)
class StreamingConfig:
    """``streaming``: dynamic chunk training (``asr.train.chunks.DynamicChunkSampler``) and
    the streaming setting whose greedy CTC WER is validated beside the full-context one
    (``val_chunk_size=0`` disables it)."""

    p_full: float = 0.5
    max_chunk: int = 25
    max_left: int = 8
    p_unlimited_left: float = 0.5
    random_phase: bool = False
    onset_edge_prob: float = 0.0
    onset_edge_frames: int = 4
    min_chunk: int = 1
    val_chunk_size: int = 16
    val_left_chunks: int = -1


@dataclass(frozen=True)
class FinetuneConfig:
    """``finetune``: how a run started with ``init_from`` trains (``asr.train.init_from``).

    ``keep_architecture``: build the source checkpoint's model (true) or this config's (false);
    ``freeze_encoder_steps``: the encoder is not updated for the first N optimizer steps;
    ``encoder_lr``: the encoder's own peak learning rate (None: the optimizer's ``lr``), on
    the same schedule as the rest."""

    keep_architecture: bool = True
    freeze_encoder_steps: int = 0
    encoder_lr: float | None = None

    def __post_init__(self) -> None:
        if self.freeze_encoder_steps < 0:
            raise ValueError(f"finetune.freeze_encoder_steps ({self.freeze_encoder_steps}) must be >= 0.")
        if self.encoder_lr is not None and not self.encoder_lr >= 0:
            raise ValueError(f"finetune.encoder_lr ({self.encoder_lr}) must be >= 0 (or null).")


@dataclass(frozen=True)
class DebugConfig:
    """``debug``: test hook forcing a NaN loss on one rank at one global step (-1: off)."""

    nan_on_rank: int = -1
    nan_at_step: int = -1


def from_group(cls: type[GroupConfig], group: Mapping[str, Any] | None) -> GroupConfig:
    """``cls(**group)``, with a ValueError naming the valid keys when ``group`` has others.

    ``group`` is a plain mapping or an OmegaConf node (``None``: the defaults).
    """
    values = dict(group or {})
    valid = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown keys {unknown}; valid keys are {valid}.")
    return cls(**values)


def repository_conf_dir() -> Path:
    """The ``conf/`` folder beside the imported ``asr`` package: the Hydra configs training composes.

    The package is used from a repository checkout (``pip install -e .``, or an ablation's frozen
    copy on ``PYTHONPATH``), so the configs sit next to it; a FileNotFoundError names the folder
    when they do not.
    """
    conf = Path(asr.__file__).resolve().parents[1] / "conf"
    if not (conf / "train.yaml").is_file():
        raise FileNotFoundError(
            f"{conf / 'train.yaml'} is missing: training composes the Hydra configs of the repository "
            f"checkout the asr package is imported from (pip install -e . in a checkout).")
    return conf
