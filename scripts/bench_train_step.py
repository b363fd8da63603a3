"""Profile the training step, and compare eager with compiled steps on the same batches.

The run is built from the Hydra configs as scripts/train.py builds it (default
experiment=quickstart); extra arguments are Hydra overrides. See asr/bench/train_step.py.

Usage (from the repository root):
    python scripts/bench_train_step.py --profile --steps 60                 # where a step's time goes
    python scripts/bench_train_step.py --profile --validation               # + one validation pass
    python scripts/bench_train_step.py --compare eager,blocks --steps 500 --warmup 30   # interleaved A/B
    python scripts/bench_train_step.py --compare eager,eager-bf16 --steps 60 experiment=quickstart_rooms  # fp32 / bf16
    python scripts/bench_train_step.py --compare eager,blocks,model --steps 120 data.data_dir=/data/synth
    python scripts/bench_train_step.py --optimizers                         # AdamW for-loop / foreach / fused
    python scripts/bench_train_step.py --recompiles blocks                  # graphs compiled over one epoch
    python scripts/bench_train_step.py --recompiles blocks --epochs 2       # ... and whether a second adds any
    python scripts/bench_train_step.py --compare eager,blocks --synthetic 5000 --device cuda --precision bf16 \
        --steps 60 --warmup 20 experiment=librispeech_u2pp trainer=gpu   # a recipe's model without its corpus
    python scripts/bench_train_step.py --compare eager,blocks --synthetic 5000 --pad-buckets 4 --log-steps \
        --device cuda --precision bf16 --steps 16 --warmup 6 experiment=librispeech_u2pp trainer=gpu
    python scripts/bench_train_step.py --help

--compare prints, per variant: the wall time of the warm-up steps (where compiles happen),
graphs compiled (and how many after the warm-up), the median step time (wall and this
process's CPU time) and its ratio to the first variant, then the training loss of every
variant every --loss-every steps (the curves of a compiled and an eager model must agree).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.bench.train_step import VARIANTS  # noqa: E402
from asr.bench.train_step_run import PRECISIONS, RECOMPILE_SCOPES, TrainStepBench, run_train_step_bench  # noqa: E402
from asr.decode.options import add_threads_argument  # noqa: E402


def parse_args(argv: list[str] | None = None) -> TrainStepBench:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", default="quickstart")
    p.add_argument("--profile", action="store_true", help="time each phase of the step (eager model)")
    p.add_argument("--validation", action="store_true", help="with --profile: time one validation pass too")
    p.add_argument("--compare", default=None, help=f"comma-separated variants, the first is the reference "
                                                   f"({', '.join(VARIANTS)}; NAME-bf16: under bf16 autocast)")
    p.add_argument("--optimizers", action="store_true", help="time AdamW's step: for-loop, foreach, fused")
    p.add_argument("--recompiles", choices=RECOMPILE_SCOPES, default=None,
                   help="count the graphs the epochs' batch shapes and chunk draws compile (that scope)")
    p.add_argument("--epochs", type=int, default=1, help="with --recompiles: epochs to go through (default 1)")
    p.add_argument("--steps", type=int, default=60, help="measured steps (--compare: batches, warm-up included)")
    p.add_argument("--warmup", type=int, default=5, help="steps not measured (compiles happen there)")
    p.add_argument("--loss-every", type=int, default=50)
    add_threads_argument(p)
    p.add_argument("--device", default="cpu", help="cpu or cuda (--compare and --synthetic)")
    p.add_argument("--precision", choices=PRECISIONS, default="32", help="bf16: autocast as bf16-mixed does")
    p.add_argument("--synthetic", type=int, default=None, metavar="VOCAB",
                   help="--compare on random duration-bucketed batches and a VOCAB-token model: no corpus needed")
    p.add_argument("--pad-buckets", type=int, default=0, metavar="N",
                   help="with --synthetic: pad each batch's frames to one of N lengths (tokens to a multiple of 8), "
                        "as data.frame_buckets does for real batches: N shapes for a compiled step")
    p.add_argument("--log-steps", action="store_true",
                   help="--compare: print every step's time as it ends (a run cut short still shows the warm-up)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data.data_dir=/data/synth")
    args = p.parse_args(argv)
    try:
        return TrainStepBench(**{**vars(args), "overrides": tuple(args.overrides)})
    except ValueError as err:
        p.error(str(err))


def main(argv: list[str] | None = None) -> None:
    run_train_step_bench(parse_args(argv))


if __name__ == "__main__":
    main()
