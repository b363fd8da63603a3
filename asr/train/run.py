"""``train(cfg)``: build data, model and Trainer from the composed Hydra config and fit.

This is the plain function behind :func:`main` (``python -m asr.train``, ``scripts/train.py``),
which only adds Hydra's command line; tests call it with the real configs shrunk. Hydra builds objects only at the seams
(data module, optimizer partial, trainer, callbacks, loggers); the model is built from
plain kwargs so a checkpoint can rebuild it without Hydra. The groups the module reads
(``optim.scheduler``, ``streaming``, ``finetune``, ``debug``) reach it as ``asr.train.config`` objects
whose fields are the YAML keys. The ``features`` group (``asr.data.features.FeatureConfig``)
goes to the data module and into the checkpoint, and must match the CMVN stats' options.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import hydra
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from asr.data.cmvn import cmvn_features, load_cmvn
from asr.data.features import FeatureConfig
from asr.train.allocator import allocator_in_use
from asr.train.checkpoint import model_kwargs_from_config, pack_tokenizer
from asr.train.compile import CompileConfig
from asr.train.checkpoint_file import CheckpointError
from asr.train.config import (DebugConfig, FinetuneConfig, SchedulerConfig, StreamingConfig, from_group,
                              repository_conf_dir)
from asr.train.init_from import (Adoption, Source, adopt_from_source, finetune_model_kwargs, load_source_weights,
                                 read_source)
from asr.train.module import AsrLightningModule
from asr.train.outcome import run_conditions
from asr.train.precision import measure_recipe_step, resolve_precision
from asr.train.resume import (AtomicCheckpointIO, ResumePoint, keep_logged_rows, newest_resumable,
                              remove_interrupted_writes, set_aside, training_state_problem)
from asr.train.schedule import check_schedule
from asr.train.time_fit import cap_timer, fitted_schedule


def cmvn_for_features(path: str | Path, features: FeatureConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean (F,), istd (F,)) from a cmvn.json computed with ``features``; a clear error when it is
    missing or was computed with other fbank options (it would normalize the wrong frames)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: global CMVN stats are computed by scripts/prepare_data.py "
                                "or scripts/compute_cmvn.py.")
    differ = cmvn_features(path).differences(features)
    if differ:
        listed = ", ".join(f"{k}: stats {a!r} vs run {b!r}" for k, (a, b) in differ.items())
        raise ValueError(
            f"{path} was computed with other fbank options than this run's features ({listed}). Compute stats "
            f"for them (python scripts/compute_cmvn.py <train cuts> <out.json> --features ...) and set "
            f"data.cmvn_file."
        )
    return load_cmvn(path)



def resolve_ckpt_path(ckpt_path: str | None, resume: bool, out_dir: Path) -> ResumePoint | None:
    """The checkpoint to resume from, with its step: explicit ``ckpt_path`` (checked whole), else with
    ``resume`` the newest whole training checkpoint of the run folder
    (:func:`asr.train.resume.newest_resumable`: ``last.ckpt`` unless a kill or a full disk cut it short),
    said in a line; None for a fresh start.

    Raises ``CheckpointError`` (one line) for an explicit file that is not whole or holds no training
    state, or a run folder whose checkpoints are none of them usable. Either is refused here, before
    any logger starts: Lightning's CSV logger deletes the run folder's ``metrics.csv`` when it starts.
    """
    if ckpt_path:
        if not Path(ckpt_path).is_file():
            raise FileNotFoundError(f"ckpt_path {ckpt_path!r} does not exist.")
        problem, step = training_state_problem(Path(ckpt_path))
        if problem is not None and problem.kind == "not_ours":
            raise CheckpointError(ckpt_path, "not_ours", f"{problem.detail}; ckpt_path resumes a training run, "
                                  f"init_from={ckpt_path} starts a new one from its weights")
        if problem is not None:
            raise problem
        return ResumePoint(Path(ckpt_path), step)
    if not resume:
        return None
    folder = out_dir / "checkpoints"
    for stale in remove_interrupted_writes(folder):
        print(f"resume: removed {stale} (a checkpoint write that was interrupted)")
    point = newest_resumable(folder)
    if point is None:
        print(f"resume=true but {folder} holds no checkpoint: starting from scratch.")
        return None
    print("\n".join(point.lines()))
    for damaged, aside in zip(point.damaged, set_aside(point.damaged)):
        print(f"resume: moved {damaged} aside to {aside.name} (the run writes its checkpoints afresh)")
    return point


def fit_validation_to_steps(trainer_cfg: DictConfig) -> str | None:
    """Validate at the last step of a run shorter than its validation interval (a line says so).

    With ``check_val_every_n_epoch: null`` an integer ``val_check_interval`` counts optimizer steps;
    a run of fewer ``max_steps`` would never validate and so never write a best checkpoint.
    """
    interval, max_steps = trainer_cfg.get("val_check_interval"), trainer_cfg.get("max_steps", -1)
    steps_based = trainer_cfg.get("check_val_every_n_epoch") is None and isinstance(interval, int)
    if not steps_based or max_steps is None or not 0 < max_steps < interval:
        return None
    trainer_cfg.val_check_interval = max_steps
    return (f"trainer.val_check_interval ({interval}) is longer than trainer.max_steps ({max_steps}): validating "
            f"(and checkpointing) at step {max_steps}")


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    """Instantiate every entry of a callbacks/logger group that has a ``_target_``."""
    if not group:
        return []
    return [instantiate(node) for node in group.values() if node and "_target_" in node]


def plain_config(cfg: DictConfig) -> dict:
    """The resolved config as plain data, without the ``hydra`` node (saved in checkpoints)."""
    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("hydra", None)
    return data


def run_features(cfg: DictConfig) -> FeatureConfig:
    """The run's ``features`` group (``LEGACY`` when a config has none)."""
    return FeatureConfig.from_dict(cfg.get("features"))


def command_line_overrides(cfg: DictConfig) -> list[str]:
    """The Hydra overrides the user gave (``python -m asr.train``'s command line, or a composed config's
    ``hydra.overrides.task``); none when the config was composed without them."""
    from hydra.core.hydra_config import HydraConfig

    task = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if task is None and HydraConfig.initialized():
        task = HydraConfig.get().overrides.task
    return list(task or [])


def finetune_start(cfg: DictConfig) -> tuple[Source, Adoption] | None:
    """The ``init_from`` checkpoint and what the run adopts from it (None without ``init_from``)."""
    if not cfg.get("init_from"):
        return None
    source = read_source(cfg.init_from)
    keep = from_group(FinetuneConfig, cfg.get("finetune")).keep_architecture
    return source, adopt_from_source(source, run_features(cfg), command_line_overrides(cfg), keep)


def build_module(cfg: DictConfig, tokenizer: Any, cmvn_path: str | Path,
                 start: tuple[Source, Adoption] | None = None) -> AsrLightningModule:
    """The model (CMVN filled from ``cmvn_path``, or the ``init_from`` checkpoint's weights and
    CMVN) wrapped in the LightningModule. ``start``: :func:`finetune_start` when the caller has it."""
    from asr.model.asr_model import build_asr_model

    start = start if start is not None else finetune_start(cfg)
    source, adoption = start if start is not None else (None, None)
    features = adoption.features if adoption is not None else run_features(cfg)
    model_kwargs = model_kwargs_from_config(
        OmegaConf.to_container(cfg.model, resolve=True), OmegaConf.to_container(cfg.pos_enc, resolve=True),
        tokenizer,
    )
    finetune = from_group(FinetuneConfig, cfg.get("finetune"))
    if source is not None and finetune.keep_architecture:
        model_kwargs = {**finetune_model_kwargs(source, model_kwargs), **adoption.loss_weights}
    input_dim = model_kwargs["encoder_kwargs"].get("input_dim", features.num_mel_bins)
    if input_dim != features.num_mel_bins:
        raise ValueError(f"model.encoder.input_dim ({input_dim}) differs from features.num_mel_bins "
                         f"({features.num_mel_bins}).")
    model = build_asr_model(**model_kwargs)
    run_cmvn = adoption is None or not adoption.source_cmvn
    if run_cmvn:
        model.encoder.set_cmvn(*cmvn_for_features(cmvn_path, features))
    if source is not None:
        # After the fresh (seeded) initialization: the rows and tensors not taken from the
        # source keep it, and no random number is drawn here (a resumed run builds the same).
        cmvn = (model.encoder.cmvn_mean.clone(), model.encoder.cmvn_istd.clone())
        report = load_source_weights(model, source, tokenizer)
        if not run_cmvn and "encoder.cmvn_mean" in report.reinitialized:
            raise ValueError(f"init_from: the source's CMVN does not fit this model "
                             f"({report.reinitialized['encoder.cmvn_mean']}); set data.cmvn_file to stats of its "
                             "frames.")
        if run_cmvn:  # the run's stats, as the command line asked, over the source's
            model.encoder.set_cmvn(*cmvn)
        print("\n".join([f"init_from {source.path} (keep_architecture={finetune.keep_architecture})",
                         *adoption.lines(), *report.lines()]))
    return AsrLightningModule(
        model=model,
        optimizer=instantiate(cfg.optim.optimizer),
        tokenizer=tokenizer,
        scheduler=from_group(SchedulerConfig, cfg.optim.scheduler),
        streaming=from_group(StreamingConfig, cfg.streaming),
        seed=cfg.seed,
        debug=from_group(DebugConfig, cfg.get("debug")),
        finetune=finetune,
        build_info={
            "model_kwargs": model_kwargs,
            "features": features.to_dict(),
            "tokenizer_path": str(cfg.data.tokenizer_path),
            "cfg": plain_config(cfg),
        },
        tokenizer_files=pack_tokenizer(cfg.data.tokenizer_path),
        compile=from_group(CompileConfig, cfg.get("compile")),
    )


def _best_checkpoint(trainer: pl.Trainer) -> tuple[str | None, float | None]:
    for cb in trainer.callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.monitor:
            score = None if cb.best_model_score is None else float(cb.best_model_score)
            return (cb.best_model_path or None), score
    return None, None


def time_cap(callbacks: list) -> tuple[float | None, bool]:
    """(the ``max_time`` cap in seconds, or None without one; whether it ran out) from the Trainer's
    callbacks, which hold a ``Timer`` when ``max_time`` is set."""
    if (timer := cap_timer(callbacks)) is None:
        return None, False
    remaining = timer.time_remaining()
    return remaining + timer.time_elapsed(), remaining <= 0


def _reasons(skipped: dict, noise: bool) -> str:
    """``reason=count`` pairs of the skip counts whose reason is (or is not) a ``noise_*`` one."""
    chosen = {k: v for k, v in sorted(skipped.items()) if k.startswith("noise_") == noise}
    return ", ".join(f"{k}={v}" for k, v in chosen.items()) or "none"


def format_summary(summary: dict) -> str:
    """Human-readable end-of-run report."""
    wer = summary["best_val_wer"]
    lines = [
        "=" * 64,
        f"run folder      : {summary['out_dir']}",
        f"checkpoints     : {summary['checkpoint_dir']}",
        f"best checkpoint : {summary['best_checkpoint']}",
        f"logs            : {', '.join(summary['log_dirs']) or '(no logger)'}",
        f"best val WER    : {'n/a' if wer is None else f'{100 * wer:.2f}%'}",
        f"steps / epochs  : {summary['global_step']} / {summary['epochs']}",
        *([f"schedule        : fitted to the time cap, {fitted['steps']} of {fitted['planned_steps']} planned steps"]
          if (fitted := summary.get("fitted_to_time_cap")) else []),
        f"time            : {summary['seconds']:.1f} s{run_conditions(summary)}",
        f"non-finite skips: {summary['nonfinite_skips']}",
        *([f"compiled graphs : {graphs['count']} (the last at step {graphs['last_at_step']})"]
          if (graphs := summary.get("compiled_graphs")) else []),
        f"training data   : {summary['train_data_read']['cuts']} cuts, "
        f"{summary['train_data_read']['hours']:.2f} h read (this rank)",
        "skipped utts    : " + _reasons(summary["skipped_utterances"], noise=False),
        # A bad noise file costs the augmentation, not the utterance (it trains without noise).
        "noise skipped   : " + _reasons(summary["skipped_utterances"], noise=True),
        "=" * 64,
    ]
    return "\n".join(lines)


def train(cfg: DictConfig) -> dict:
    """Fit the model described by ``cfg``; returns (and prints on rank 0) a run summary."""
    start = time.monotonic()
    pl.seed_everything(cfg.seed, workers=True)
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    check_schedule(from_group(SchedulerConfig, cfg.optim.scheduler), cfg.trainer.get("max_steps", -1))
    # Before anything is built: a run folder with nothing usable to resume from is refused at once.
    resume_point = resolve_ckpt_path(cfg.get("ckpt_path"), bool(cfg.get("resume")), out_dir)
    ckpt_path = None if resume_point is None else str(resume_point.path)
    finetune_from = finetune_start(cfg)
    features = finetune_from[1].features if finetune_from is not None else run_features(cfg)
    callbacks = _instantiate_all(cfg.get("callbacks"))
    loggers = _instantiate_all(cfg.get("logger"))
    trainer_cfg = cfg.trainer.copy()
    if (fitted := fit_validation_to_steps(trainer_cfg)) is not None:
        print(fitted)
    precision = resolve_precision(trainer_cfg.get("precision", "32-true"), {
        key: trainer_cfg.get(key) for key in ("accelerator", "devices", "num_nodes")}, out_dir,
        lambda device: measure_recipe_step(cfg, features.num_mel_bins, device))
    if precision.precision != trainer_cfg.get("precision", "32-true"):  # a trainer config may not name one
        trainer_cfg.precision = precision.precision
    if precision.fp32_ms is not None:
        print(precision.line())
    trainer: pl.Trainer = instantiate(trainer_cfg, callbacks=callbacks, logger=loggers or False,
                                      plugins=[AtomicCheckpointIO()])
    # The Trainer knows this process's rank already (DDP children are started with
    # LOCAL_RANK/NODE_RANK set), so the data module can shard its samplers from the start.
    datamodule = instantiate(cfg.data, world_size=trainer.world_size, rank=trainer.global_rank,
                             features=features.to_dict())
    module = build_module(cfg, datamodule.tokenizer, datamodule.cmvn_path, finetune_from)

    if resume_point is not None:  # the learning curve up to the checkpoint stays in the CSV log
        keep_logged_rows(loggers, resume_point.global_step)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)

    best_path, best_score = _best_checkpoint(trainer)
    cap_s, cap_reached = time_cap(trainer.callbacks)
    steps_left = trainer.max_steps < 0 or trainer.global_step < trainer.max_steps
    fitted = fitted_schedule(trainer.callbacks)
    summary = {
        "out_dir": str(out_dir),
        "checkpoint_dir": str(out_dir / "checkpoints"),
        "best_checkpoint": best_path,
        "log_dirs": [str(lg.log_dir) for lg in trainer.loggers if getattr(lg, "log_dir", None)],
        "best_val_wer": best_score if best_score is not None else module.best_val_wer,
        "global_step": int(trainer.global_step),
        # What a driver needs to say whether the time cap cut the run short (asr.train.outcome).
        "max_steps": int(trainer.max_steps if fitted is None else fitted["planned_steps"]),
        "time_cap_s": cap_s,
        "stopped_by_time_cap": bool(cap_reached and steps_left),
        # the cosine moved to end within the cap (asr.train.time_fit): {"planned_steps", "steps"}, or None
        "fitted_to_time_cap": fitted,
        "epochs": int(trainer.current_epoch),
        "precision": precision.precision,
        "allocator": allocator_in_use(),
        "seconds": time.monotonic() - start,
        "nonfinite_skips": int(module.nonfinite_skips),
        "compiled_graphs": {"count": module.compiled_graphs, "last_at_step": module.last_compile_step}
        if module.compiled else None,
        "skipped_utterances": dict(datamodule.skip_report()),
        "train_data_read": datamodule.read_summary(),
        "resumed_from": ckpt_path,
    }
    if trainer.is_global_zero:
        (out_dir / "train_summary.json").write_text(json.dumps(summary, indent=2))
        print(format_summary(summary))
    return summary


def _hydra_task(cfg: DictConfig) -> float | None:
    try:
        summary = train(cfg)
    except CheckpointError as err:  # init_from=CKPT that is not a usable model: one line, not Hydra's traceback
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    # Returned for Hydra sweepers that optimise a metric.
    return summary["best_val_wer"]


def main() -> None:
    """``python -m asr.train [overrides]`` (and ``scripts/train.py``): Hydra reads the command line
    (overrides, ``-m`` for a sweep, ``--help``) and composes ``conf/train.yaml``."""
    try:
        conf = repository_conf_dir()
    except FileNotFoundError as err:
        sys.exit(f"error: {err}")
    hydra.main(version_base="1.3", config_path=str(conf), config_name="train")(_hydra_task)()


def ensure_run_cmvn(data_dir: str | Path, overrides: tuple[str, ...] | list[str] = (), max_cuts: int = 8000) -> Path:
    """Compute the CMVN stats a training run with ``overrides`` reads, when they are missing.

    A recipe may choose its own fbank preset and stats file (the quickstart experiment: ``features=sherpa``,
    ``data.cmvn_file=cmvn_sherpa.json``), which ``prepare_data.py`` does not write; a driver that starts many
    runs (the ablation) calls this once before them instead of letting every run fail on the missing file.
    A run with a feature store (``data.feature_store``) gets its store built here, as training would build it,
    and the stats read from it: the fbank of the training cuts is computed once, not once more for the stats.
    Returns the stats path (existing stats are left alone: training checks their options).
    """
    from hydra import compose, initialize_config_dir

    from asr.data.cmvn import compute_cmvn, save_cmvn
    from asr.data.manifest import manifest_stats, read_cuts

    with initialize_config_dir(config_dir=str(repository_conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"data.data_dir={data_dir}", *overrides])
    cmvn_file = Path(cfg.data.cmvn_file)
    path = cmvn_file if cmvn_file.is_absolute() else Path(data_dir) / cmvn_file
    if path.is_file():
        return path
    train_cuts = Path(data_dir) / cfg.data.train_cuts
    if not train_cuts.is_file():
        raise FileNotFoundError(f"{train_cuts} is missing: build the corpus first (scripts/prepare_data.py).")
    # the data module training builds: its extractor, and its feature store when the run has one
    datamodule = instantiate(cfg.data, world_size=1, rank=0, features=run_features(cfg).to_dict())
    stored = datamodule.stored_train_cuts()
    print(f"computing {path.name} for the run's fbank options (once; at most {max_cuts} training cuts"
          f"{', read from the feature store' if stored is not None else ''})")
    cuts = stored if stored is not None else read_cuts(train_cuts, lazy=True)
    stats = compute_cmvn(cuts, datamodule.extractor, max_cuts=max_cuts, total=manifest_stats(train_cuts).cuts,
                         stored=stored is not None)
    return save_cmvn(stats, path)
