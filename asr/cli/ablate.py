"""Ablation of the encoder's position schemes: train each on the same data and budget, report.

Usage (from the repository root):
    python scripts/ablate.py                                          # all 8 schemes, adaptive budget, rel_xl and wenet_rel x 2 seeds
    python scripts/ablate.py --budget-steps 2250                      # a fixed budget: 2250 steps each (cosine to the last)
    python scripts/ablate.py --schemes rel_xl,abs_sin --budget-steps 20 --seeds-for none   # two-scheme smoke, minutes
    python scripts/ablate.py --schemes rel_xl,abs_sin --seeds 3 --out runs/ablation_seeds  # seed spread
    python scripts/ablate.py --seeds-for rel_xl=3,wenet_rel=3,shaw=2  # more seeds for some schemes
    python scripts/ablate.py --budget-minutes 30 --out runs/ablation_long  # overnight-sized budget
    python scripts/ablate.py --schemes shaw model.encoder.num_layers=6     # extra Hydra overrides for training
    python scripts/ablate.py experiment=quickstart --out runs/ablation_qs  # the quickstart's model instead
    python scripts/ablate.py --jobs 2                                  # two runs of a rung at once

The adaptive budget (the default) trains in rungs (asr/ablation/adaptive.py): every run to
--first-steps, then a decision per scheme on the dev split: stopped when its paired interval to the best
scheme lies further above it than its plateau slope could still close, finished when it converged or
reached --max-steps, else it goes on to a rung of twice the steps, sharing what is left of --total-steps.
The report's Budget section gives every decision and its reason. The schedule is an inverse square root
(a longer rung extends a run without changing its first steps).

Each scheme trains in its own subprocess (python -m asr.train with pos_enc=<scheme>,
hydra.run.dir=<out>/<scheme>), then its last checkpoint is evaluated: WER on the
test split full-context (attention rescoring, CTC greedy) and streaming at chunk
32, 16, 8 and 4 (64 frames of memory each), WER on the length probe set (5-160 s,
full context and C16/L4; built on first use), the translation probe (the first 200 test
utterances streamed at C16/L4 with the stream clock at 0 s, 60 s and 600 s after a silent
lead-in; asr/ablation/translation.py), parameters, mean training step time, peak RSS of the
training process and streaming RTF. Every WER keeps its per-utterance errors, and the report
gives bootstrap intervals (seeds, then utterances), paired differences to rel_xl, whether each
scheme's validation curve converged (only converged schemes are ranked) and a "rel_shift or not"
section (rel_xl against wenet_rel, Wenet's rel_pos attention without rel_shift, seeds pooled).

Outputs in --out: report.md (table + notes), results.json, learning_curves.png,
wer_by_scheme.png, speed_memory.png, and one folder per scheme. Re-running skips
schemes that finished (<out>/<scheme>/ablation_result.json) and resumes a scheme
whose training was interrupted from its checkpoints/last.ckpt. Failed schemes are
shown as failed in the report and retried by the next run. --report-only rebuilds
the report from what has finished (e.g. while a long ablation is still running).

The training code is frozen: on its first start the ablation copies asr/ and conf/
into <out>/code (asr/ablation/snapshot.py, with the commit in FROZEN.json),
and every training run, a resumed one too, imports that copy, so edits and commits made
while it runs do not reach it. Delete <out>/code to pick up new code; --no-freeze trains
with the checkout as it is at each run's start.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

from asr.ablation.adaptive import AdaptiveBudget
from asr.ablation.evaluate import EvalConfig, dev_records, evaluate_checkpoint
from asr.ablation.runner import ALL_SCHEMES, AblationRunner, AblationSettings
from asr.ablation.step_timer import read_step_stats
from asr.ablation.training import exit_on_sigterm
from asr.decode.options import add_search_arguments

# Validation interval of a time budget (a step budget validates VALIDATIONS_PER_BUDGET times).
DEFAULT_VAL_EVERY = 360
# The adaptive budget (the default when no fixed budget is given; asr/ablation/adaptive.py): a first
# rung of a third of the quickstart's steps for every run, rungs that double, at most 12160 steps a run
# (the ablation model's curves flatten within about 6000: a rung past that shows the plateau), and a
# total that lets every run reach it (about 8-9 hours of training on 2 cores with --jobs 2, measured
# over a first rung; in sittings: a rerun resumes). Eight validations in the first rung, so the plateau slope
# has points to fit; the schedule is an inverse square root, which a longer rung extends without
# changing the steps already taken.
ADAPTIVE_FIRST_STEPS = 1520
ADAPTIVE_MAX_STEPS = 12160
ADAPTIVE_TOTAL_STEPS = 121600
ADAPTIVE_VALIDATIONS_PER_RUNG = 8
# The inverse square-root rate peaks at the end of its warmup and falls as 1/sqrt(step) after it: a warmup
# of a tenth of the first rung leaves a third of the peak by its end, and the runs learn far slower than
# the quickstart's cosine (data/results/ablation.md). Half the first rung keeps the rate near the cosine's
# mean over 6080 steps (a 3e-3 peak: 2.1e-3 at 1520 steps, 1.1e-3 at 6080, 0.75e-3 at 12160).
ADAPTIVE_WARMUP_FRACTION = 0.5
# Validations in a step budget: the report's convergence criterion fits the last half of
# each curve, and six or seven points there give a one-seed slope interval t = 2.6-2.8
# (five validations left three, t = 12.7, too wide to call any scheme converged).
VALIDATIONS_PER_BUDGET = 12
# Ablation-wide training overrides placed before the user's (which win):
# - a warmup of a tenth of the step budget (a little above the quickstart's share, 300 of 4560);
# - validation on 4 dev batches (the same ones each time): learning-curve points for
#   a few % of the budget. Checkpoints (last.ckpt, for resume and for the evaluation)
#   are saved at each validation, so a time-budget stop evaluates the weights of the
#   last validation (the Steps column says which step that was).
# The comparison the report's "rel_shift or not" section makes gets a seed spread by default.
DEFAULT_SEEDS_FOR = "rel_xl=2,wenet_rel=2"
WARMUP_FRACTION = 0.1
WARMUP_FOR_TIME_BUDGET = 180
DEFAULT_OVERRIDES = ("trainer.limit_val_batches=4",)
# The ablation's model (conf/experiment/ablation.yaml): small enough that its curves flatten within the
# budget. An ``experiment=`` among the user's overrides replaces it.
ABLATION_EXPERIMENT = "experiment=ablation"


def ablation_overrides(budget_steps: int | None, user_overrides: tuple[str, ...] | list[str],
                       adaptive: bool = False) -> tuple[str, ...]:
    """Training overrides for every scheme: the ablation's own first, the user's after (they win).
    ``adaptive``: ``budget_steps`` is the first rung, and the schedule must not depend on the budget."""
    fraction = ADAPTIVE_WARMUP_FRACTION if adaptive else WARMUP_FRACTION
    warmup = max(1, round(fraction * budget_steps)) if budget_steps else WARMUP_FOR_TIME_BUDGET
    schedule = ("optim.scheduler.kind=noam",) if adaptive else ()
    experiment = () if any(o.startswith("experiment=") for o in user_overrides) else (ABLATION_EXPERIMENT,)
    return (*experiment, f"optim.scheduler.warmup_steps={warmup}", *schedule, *DEFAULT_OVERRIDES, *user_overrides)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--schemes", default=",".join(ALL_SCHEMES),
                        help=f"comma-separated position schemes (default: all: {','.join(ALL_SCHEMES)})")
    parser.add_argument("--budget-steps", type=int, default=None,
                        help="a fixed budget instead of the adaptive one: optimizer steps per scheme (the "
                             "same for every scheme, cosine schedule to the last); with --budget-minutes too, "
                             "whichever comes first")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="a fixed budget instead of the adaptive one: wall-clock training minutes per scheme "
                             "(Lightning max_time)")
    parser.add_argument("--first-steps", type=int, default=ADAPTIVE_FIRST_STEPS,
                        help=f"adaptive budget (the default without --budget-steps/--budget-minutes): every run's "
                             f"first rung (default {ADAPTIVE_FIRST_STEPS})")
    parser.add_argument("--max-steps", type=int, default=ADAPTIVE_MAX_STEPS,
                        help=f"adaptive budget: the most steps a run gets (default {ADAPTIVE_MAX_STEPS})")
    parser.add_argument("--total-steps", type=int, default=ADAPTIVE_TOTAL_STEPS,
                        help=f"adaptive budget: the steps of all runs together (default {ADAPTIVE_TOTAL_STEPS})")
    parser.add_argument("--dev-utts", type=int, default=0,
                        help="adaptive budget: dev utterances its decisions decode (default 0 = all)")
    parser.add_argument("--val-every", type=int, default=None,
                        help=f"validate every N steps for the learning curves (default: first-steps/"
                             f"{ADAPTIVE_VALIDATIONS_PER_RUNG} for the adaptive budget, budget-steps/"
                             f"{VALIDATIONS_PER_BUDGET}, or {DEFAULT_VAL_EVERY} for a time budget)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="adaptive budget: runs of a rung that train at once, each with its share of the CPU "
                             "cores (OMP_NUM_THREADS); a small model uses many cores poorly (default 1)")
    parser.add_argument("--out", default="runs/ablation", help="output folder (default runs/ablation)")
    parser.add_argument("--data-dir", default="data/synth", help="corpus folder (default data/synth)")
    parser.add_argument("--seed", type=int, default=0, help="seed shared by every scheme (default 0)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="training runs per scheme with seeds seed, seed+1, ...; the report pools them "
                             "(intervals resample the seeds, then the utterances) and shows the seed spread (default 1)")
    parser.add_argument("--seeds-for", default=DEFAULT_SEEDS_FOR,
                        help=f"more seeds for some schemes, scheme=N,... (at least --seeds each; 'none' for no "
                             f"extras; default {DEFAULT_SEEDS_FOR})")
    parser.add_argument("--translation-utts", type=int, default=200,
                        help="test utterances of the translation probe (the first N; default 200)")
    parser.add_argument("--max-utts", type=int, default=0,
                        help="test utterances decoded per WER column (default 0 = all)")
    parser.add_argument("--rtf-utts", type=int, default=10, help="test utterances streamed for the RTF")
    add_search_arguments(parser, rescoring=False)  # the evaluation rescores at the default weights
    parser.add_argument("--train-timeout-minutes", type=float, default=None,
                        help="kill a training run after this long (default: 2x the minute budget + 5)")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite report.md, results.json and plots from the finished schemes; train nothing")
    parser.add_argument("--no-freeze", action="store_true",
                        help="train with this checkout as it is when each run starts, not with <out>/code")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides passed to every training run")
    args = parser.parse_args(argv)
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(f"extra arguments must be Hydra overrides key=value, got {bad}")
    args.adaptive = args.budget_steps is None and args.budget_minutes is None
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.jobs > 1 and not args.adaptive:
        parser.error("--jobs needs the adaptive budget: a fixed budget trains one run at a time")
    if args.adaptive and args.val_every is None:
        args.val_every = max(1, args.first_steps // ADAPTIVE_VALIDATIONS_PER_RUNG)
    if args.val_every is None:
        args.val_every = (max(1, args.budget_steps // VALIDATIONS_PER_BUDGET) if args.budget_steps is not None
                          else DEFAULT_VAL_EVERY)
    if args.train_timeout_minutes is None and args.budget_minutes is not None:
        args.train_timeout_minutes = 2 * args.budget_minutes + 5
    try:
        args.scheme_seeds = parse_seeds_for(args.seeds_for)
    except ValueError as err:
        parser.error(str(err))
    return args


def parse_seeds_for(text: str) -> dict[str, int]:
    """``"rel_xl=2,wenet_rel=2"`` -> {scheme: seeds}; ``"none"`` or ``""`` -> {}."""
    if text.strip().lower() in ("", "none"):
        return {}
    seeds = {}
    for item in text.split(","):
        scheme, _, count = item.strip().partition("=")
        if not scheme or not count.strip().isdigit():
            raise ValueError(f"--seeds-for: expected scheme=N items, got {item.strip()!r}")
        seeds[scheme.strip()] = int(count)
    return seeds


def main(argv: list[str] | None = None) -> int:
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, exit_on_sigterm) if on_main_thread else None
    try:
        return _run(parse_args(argv))
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    schemes = tuple(s.strip() for s in args.schemes.split(",") if s.strip())
    try:
        settings = AblationSettings(
            out_dir=Path(args.out), data_dir=args.data_dir, schemes=schemes, seed=args.seed, seeds=args.seeds,
            scheme_seeds=args.scheme_seeds,
            budget_steps=args.budget_steps, budget_minutes=args.budget_minutes, val_every_steps=args.val_every,
            extra_overrides=ablation_overrides(args.first_steps if args.adaptive else args.budget_steps,
                                               args.overrides, args.adaptive),
            train_timeout_minutes=args.train_timeout_minutes, jobs=args.jobs,
        )
        budget = AdaptiveBudget(args.first_steps, args.max_steps, args.total_steps) if args.adaptive else None
        eval_cfg = EvalConfig(
            data_dir=args.data_dir, max_utts=args.max_utts or None,
            beam=args.beam, rtf_utts=args.rtf_utts, translation_utts=args.translation_utts,
        )
    except ValueError as err:
        print(f"ablate: {err}", file=sys.stderr)
        return 2
    if not (Path(args.data_dir) / eval_cfg.test_cuts).is_file():
        print(f"ablate: no {eval_cfg.test_cuts} in {args.data_dir}: build the corpus first "
              "(scripts/prepare_data.py)", file=sys.stderr)
        return 2
    if not args.report_only:
        from asr.train.run import ensure_run_cmvn

        # the recipe's fbank preset may read stats prepare_data.py does not write (cmvn_sherpa.json)
        ensure_run_cmvn(args.data_dir, settings.extra_overrides)
    if not args.report_only and not (Path(args.data_dir) / eval_cfg.probe_cuts).is_file():
        from asr.synth.probes import build_probe_set

        print(f"[ablate] building the length probe set in {args.data_dir} (once, ~1-2 min)")
        build_probe_set(args.data_dir)

    def evaluate(run_dir: Path, ckpt: Path):
        return evaluate_checkpoint(ckpt, eval_cfg, out_dir=run_dir / "eval")

    runner = AblationRunner(settings, evaluate, read_step_stats)
    if args.report_only:
        runner.report_only()
        return 0
    if not args.no_freeze:
        from asr.ablation.snapshot import freeze_code

        settings.code_root = freeze_code(settings.out_dir)
    start = time.monotonic()
    print(f"[ablate] {len(schemes)} scheme(s), {len(settings.runs())} run(s): {','.join(schemes)} -> {settings.out_dir}")
    if budget is None:
        results = runner.run()
    else:
        def dev(run_dir: Path, ckpt: Path) -> list[dict]:
            return dev_records(ckpt, args.data_dir, max_utts=args.dev_utts or None)

        try:
            results = runner.run_adaptive(budget, dev)
        except ValueError as err:  # a budget that cannot hold a rung for every run
            print(f"ablate: {err}", file=sys.stderr)
            return 2
    print(f"[ablate] total {time.monotonic() - start:.0f} s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
