"""One run of the training-step benchmark (``scripts/bench_train_step.py``): which measurements, on
which batches, and the tables it prints. The measurements themselves are ``asr.bench.train_step``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from hydra import compose, initialize_config_dir

from asr.bench.train_step import (build_synthetic, build_training, compare_steps, comparison_table, profile_steps,
                                  recompile_census, synthetic_batches, take, time_optimizers, time_validation,
                                  variant_parts)
from asr.bench.synthetic import FRAMES_PER_SECOND
from asr.data.buckets import geometric_buckets, pad_to_buckets
from asr.train.config import repository_conf_dir

RECOMPILE_SCOPES = ("blocks", "model")
PRECISIONS = ("32", "bf16")
SYNTHETIC_SECONDS = (2.0, 16.0)  # utterance lengths of the synthetic batches


@dataclass(frozen=True)
class TrainStepBench:
    """What to measure. ``compare``: comma-separated variants (:data:`VARIANTS`, each optionally ``-bf16``: under
    bf16 autocast), the first the reference; ``recompiles``: a scope of :data:`RECOMPILE_SCOPES`;
    ``synthetic``: the vocabulary of random duration-bucketed batches (``--compare`` only, no corpus);
    ``overrides``: Hydra overrides."""

    experiment: str = "quickstart"
    profile: bool = False
    validation: bool = False
    compare: str | None = None
    optimizers: bool = False
    recompiles: str | None = None
    epochs: int = 1
    steps: int = 60
    warmup: int = 5
    loss_every: int = 50
    threads: int | None = None
    device: str = "cpu"
    precision: str = "32"
    synthetic: int | None = None
    pad_buckets: int = 0
    log_steps: bool = False
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"--epochs ({self.epochs}) must be >= 1")
        if not (self.profile or self.compare or self.optimizers or self.recompiles):
            raise ValueError("choose --profile, --compare, --optimizers or --recompiles")
        if self.compare:
            for variant in self.compare.split(","):
                variant_parts(variant)  # an unknown one is an error that lists the valid ones
        if self.recompiles is not None and self.recompiles not in RECOMPILE_SCOPES:
            raise ValueError(f"--recompiles {self.recompiles!r}; valid: {', '.join(RECOMPILE_SCOPES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"--precision {self.precision!r}; valid: {', '.join(PRECISIONS)}")
        if self.synthetic is not None and (self.profile or self.recompiles or not self.compare):
            raise ValueError("--synthetic goes with --compare (the profile times the real data loader, the census "
                             "walks the real sampler's epoch)")
        if self.pad_buckets < 0 or (self.pad_buckets and self.synthetic is None):
            raise ValueError(f"--pad-buckets ({self.pad_buckets}) must be >= 0 and goes with --synthetic (the data "
                             "module pads real batches itself: data.frame_buckets)")
        if self.device != "cpu" and self.profile:
            raise ValueError("--profile runs on the CPU (its phase marks do not synchronize a GPU)")


def run_train_step_bench(bench: TrainStepBench) -> None:
    """Build the run from the composed config (or a synthetic one) and print each asked-for table."""
    if bench.threads:
        torch.set_num_threads(bench.threads)
    with initialize_config_dir(config_dir=str(repository_conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={bench.experiment}", "out_dir=/tmp/bench_train_step",
                                          *bench.overrides])
    torch.manual_seed(cfg.seed)
    if bench.synthetic is not None:
        module, optimizer, scheduler = build_synthetic(cfg, bench.synthetic)
        data = f"synthetic batches of up to {cfg.data.max_duration:g} s"
    else:
        datamodule, module, optimizer, scheduler = build_training(cfg)
        data = (f"data {cfg.data.data_dir}, feature store {cfg.data.get('feature_store')}, "
                f"workers {cfg.data.num_workers}")
    module.to(bench.device)
    print(f"threads {torch.get_num_threads()}, device {bench.device}, precision {bench.precision}, {data}, "
          f"{sum(p.numel() for p in module.model.parameters()) / 1e6:.2f} M parameters, load {os.getloadavg()}",
          flush=True)
    if bench.optimizers:
        print(time_optimizers(module.model))
    if bench.recompiles:
        recompile_census(cfg, datamodule, bench.recompiles, epochs=bench.epochs)
    if bench.profile:
        prof = profile_steps(module, optimizer, scheduler, datamodule.train_dataloader(), bench.steps, bench.warmup,
                             cfg.trainer.get("gradient_clip_val"))
        print(f"\nprofile of {prof.steps} steps after {bench.warmup} warm-up steps (eager)\n{prof.table()}")
        if bench.validation:
            wall, cpu, n = time_validation(module, datamodule.val_dataloader(), cfg.streaming.val_chunk_size,
                                           cfg.streaming.val_left_chunks)
            print(f"\none validation pass: {n} utterances, {wall:.1f} s wall, {cpu:.1f} s CPU")
    if bench.compare:
        if bench.synthetic is not None:
            batches = synthetic_batches(bench.steps, cfg.data.max_duration, bench.synthetic,
                                        cfg.model.encoder.input_dim, cfg.seed, seconds=SYNTHETIC_SECONDS)
            if bench.pad_buckets:
                frames = [round(s * FRAMES_PER_SECOND) for s in SYNTHETIC_SECONDS]
                buckets = geometric_buckets(*frames, bench.pad_buckets)
                batches = [pad_to_buckets(b, buckets, token_multiple=8) for b in batches]
                print(f"frames padded to {list(buckets)}, tokens to a multiple of 8", flush=True)
        else:
            batches = take(datamodule.train_dataloader(), bench.steps)
        autocast = torch.bfloat16 if bench.precision == "bf16" else None
        results = compare_steps(cfg, module, batches, bench.compare.split(","), bench.warmup, bench.loss_every,
                                autocast, log=print if bench.log_steps else None)
        print(f"\n{bench.steps} batches, {bench.warmup} warm-up steps per variant, interleaved\n"
              f"{comparison_table(results)}")
