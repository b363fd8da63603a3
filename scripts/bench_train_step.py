"""Profile the training step, and compare eager with compiled steps on the same batches.

The run is built from the Hydra configs as scripts/train.py builds it (default
experiment=quickstart); extra arguments are Hydra overrides. See asr/bench/train_step.py.

Usage (from the repository root):
    python scripts/bench_train_step.py --profile --steps 60                 # where a step's time goes
    python scripts/bench_train_step.py --profile --validation               # + one validation pass
    python scripts/bench_train_step.py --compare eager,blocks --steps 500 --warmup 30   # interleaved A/B
    python scripts/bench_train_step.py --compare eager,blocks,model --steps 120 data.data_dir=/data/synth
    python scripts/bench_train_step.py --optimizers                         # AdamW for-loop / foreach / fused
    python scripts/bench_train_step.py --recompiles blocks                  # graphs compiled over one epoch
    python scripts/bench_train_step.py --recompiles blocks --epochs 2       # ... and whether a second adds any
    python scripts/bench_train_step.py --compare eager,blocks --synthetic 5000 --device cuda --precision bf16 \
        --steps 60 --warmup 20 experiment=librispeech_u2pp trainer=gpu   # a recipe's model without its corpus
    python scripts/bench_train_step.py --help

--compare prints, per variant: the wall time of the warm-up steps (where compiles happen),
graphs compiled (and how many after the warm-up), the median step time (wall and this
process's CPU time) and its ratio to the first variant, then the training loss of every
variant every --loss-every steps (the curves of a compiled and an eager model must agree).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from asr.bench.train_step import (  # noqa: E402
    VARIANTS, build_synthetic, build_training, compare_steps, comparison_table, profile_steps, recompile_census,
    synthetic_batches, take, time_optimizers, time_validation,
)
from asr.decode.options import add_threads_argument, set_threads  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="quickstart")
    p.add_argument("--profile", action="store_true", help="time each phase of the step (eager model)")
    p.add_argument("--validation", action="store_true", help="with --profile: time one validation pass too")
    p.add_argument("--compare", default=None, help=f"comma-separated variants, the first is the reference "
                                                   f"({', '.join(VARIANTS)})")
    p.add_argument("--optimizers", action="store_true", help="time AdamW's step: for-loop, foreach, fused")
    p.add_argument("--recompiles", choices=("blocks", "model"), default=None,
                   help="count the graphs the epochs' batch shapes and chunk draws compile (that scope)")
    p.add_argument("--epochs", type=int, default=1, help="with --recompiles: epochs to go through (default 1)")
    p.add_argument("--steps", type=int, default=60, help="measured steps (--compare: batches, warm-up included)")
    p.add_argument("--warmup", type=int, default=5, help="steps not measured (compiles happen there)")
    p.add_argument("--loss-every", type=int, default=50)
    add_threads_argument(p)
    p.add_argument("--device", default="cpu", help="cpu or cuda (--compare and --synthetic)")
    p.add_argument("--precision", choices=("32", "bf16"), default="32", help="bf16: autocast as bf16-mixed does")
    p.add_argument("--synthetic", type=int, default=None, metavar="VOCAB",
                   help="--compare on random duration-bucketed batches and a VOCAB-token model: no corpus needed")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.data_dir=/data/synth")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs ({args.epochs}) must be >= 1")
    if not (args.profile or args.compare or args.optimizers or args.recompiles):
        p.error("choose --profile, --compare, --optimizers or --recompiles")
    if args.compare:
        unknown = [v for v in args.compare.split(",") if v not in VARIANTS]
        if unknown:
            p.error(f"unknown variant(s) {unknown}; valid: {', '.join(VARIANTS)}")
    if args.synthetic is not None and (args.profile or args.recompiles or not args.compare):
        p.error("--synthetic goes with --compare (the profile times the real data loader, the census "
                "walks the real sampler's epoch)")
    if args.device != "cpu" and args.profile:
        p.error("--profile runs on the CPU (its phase marks do not synchronize a GPU)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    set_threads(args.threads)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={args.experiment}", "out_dir=/tmp/bench_train_step",
                                          *args.overrides])
    torch.manual_seed(cfg.seed)
    if args.synthetic is not None:
        module, optimizer, scheduler = build_synthetic(cfg, args.synthetic)
        data = f"synthetic batches of up to {cfg.data.max_duration:g} s"
    else:
        datamodule, module, optimizer, scheduler = build_training(cfg)
        data = (f"data {cfg.data.data_dir}, feature store {cfg.data.get('feature_store')}, "
                f"workers {cfg.data.num_workers}")
    module.to(args.device)
    print(f"threads {torch.get_num_threads()}, device {args.device}, precision {args.precision}, {data}, "
          f"{sum(p.numel() for p in module.model.parameters()) / 1e6:.2f} M parameters, load {os.getloadavg()}",
          flush=True)
    if args.optimizers:
        print(time_optimizers(module.model))
    if args.recompiles:
        recompile_census(cfg, datamodule, args.recompiles, epochs=args.epochs)
    if args.profile:
        prof = profile_steps(module, optimizer, scheduler, datamodule.train_dataloader(), args.steps, args.warmup,
                             cfg.trainer.get("gradient_clip_val"))
        print(f"\nprofile of {prof.steps} steps after {args.warmup} warm-up steps (eager)\n{prof.table()}")
        if args.validation:
            wall, cpu, n = time_validation(module, datamodule.val_dataloader(), cfg.streaming.val_chunk_size,
                                           cfg.streaming.val_left_chunks)
            print(f"\none validation pass: {n} utterances, {wall:.1f} s wall, {cpu:.1f} s CPU")
    if args.compare:
        if args.synthetic is not None:
            batches = synthetic_batches(args.steps, cfg.data.max_duration, args.synthetic, cfg.model.encoder.input_dim,
                                        cfg.seed)
        else:
            batches = take(datamodule.train_dataloader(), args.steps)
        autocast = torch.bfloat16 if args.precision == "bf16" else None
        results = compare_steps(cfg, module, batches, args.compare.split(","), args.warmup, args.loss_every, autocast)
        print(f"\n{args.steps} batches, {args.warmup} warm-up steps per variant, interleaved\n"
              f"{comparison_table(results)}")


if __name__ == "__main__":
    main()
