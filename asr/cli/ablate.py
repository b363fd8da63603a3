"""Ablation of the encoder's position schemes: train each on the same data and budget, report.

Usage (from the repository root):
    python scripts/ablate.py                                          # all 8 schemes, 2250 steps each, rel_xl and wenet_rel x 2 seeds
    python scripts/ablate.py --schemes rel_xl,abs_sin --budget-steps 20 --seeds-for none   # two-scheme smoke, minutes
    python scripts/ablate.py --schemes rel_xl,abs_sin --seeds 3 --out runs/ablation_seeds  # seed spread
    python scripts/ablate.py --seeds-for rel_xl=3,wenet_rel=3,shaw=2  # more seeds for some schemes
    python scripts/ablate.py --budget-minutes 30 --out runs/ablation_long  # overnight-sized budget
    python scripts/ablate.py --schemes shaw model.encoder.num_layers=6     # extra Hydra overrides for training

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

from asr.ablation.evaluate import EvalConfig, evaluate_checkpoint
from asr.ablation.runner import ALL_SCHEMES, AblationRunner, AblationSettings
from asr.ablation.step_timer import read_step_stats
from asr.ablation.training import exit_on_sigterm
from asr.decode.options import add_search_arguments

# The default budget is the same number of optimizer steps for every scheme, with a
# wall-clock cap (Lightning max_time) as a guard on a slower machine. 2250 steps of the
# quickstart recipe (60 s batches) with the cosine ending at the last step rather than
# fewer steps and more seeds at equal wall time: at fewer steps the seed, not the scheme,
# decides most differences (data/results/ablation.md, "Steps or seeds"). A run of `rel_xl`
# takes about 13 min (training and evaluation) on an idle 2-core host; the cap only acts on a
# slower host, and the Steps column shows who was cut short.
DEFAULT_BUDGET_STEPS = 2250
DEFAULT_BUDGET_MINUTES = 20.0
DEFAULT_VAL_EVERY = 360
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


def ablation_overrides(budget_steps: int | None, user_overrides: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Training overrides for every scheme: the ablation's own first, the user's after (they win)."""
    warmup = max(1, round(WARMUP_FRACTION * budget_steps)) if budget_steps else WARMUP_FOR_TIME_BUDGET
    return (f"optim.scheduler.warmup_steps={warmup}", *DEFAULT_OVERRIDES, *user_overrides)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--schemes", default=",".join(ALL_SCHEMES),
                        help=f"comma-separated position schemes (default: all: {','.join(ALL_SCHEMES)})")
    parser.add_argument("--budget-steps", type=int, default=None,
                        help="optimizer steps per scheme (same steps for every scheme); with "
                             "--budget-minutes too, whichever comes first")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help=f"wall-clock training minutes per scheme, Lightning max_time (default: "
                             f"{DEFAULT_BUDGET_STEPS} steps capped at {DEFAULT_BUDGET_MINUTES:g} min when "
                             "no budget is given)")
    parser.add_argument("--val-every", type=int, default=None,
                        help=f"validate every N steps for the learning curves (default: budget-steps/"
                             f"{VALIDATIONS_PER_BUDGET}, "
                             f"or {DEFAULT_VAL_EVERY} for a time budget)")
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
    if args.budget_steps is None and args.budget_minutes is None:
        args.budget_steps, args.budget_minutes = DEFAULT_BUDGET_STEPS, DEFAULT_BUDGET_MINUTES
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
            extra_overrides=ablation_overrides(args.budget_steps, args.overrides),
            train_timeout_minutes=args.train_timeout_minutes,
        )
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
        ensure_run_cmvn(args.data_dir, ablation_overrides(args.budget_steps, args.overrides))
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
    results = runner.run()
    print(f"[ablate] total {time.monotonic() - start:.0f} s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
