"""The ablation on an adaptive budget: rungs of training, a dev measurement, a decision per scheme.

Rung k trains every undecided scheme (each of its seeds) to that scheme's rung steps, resuming
each run where the previous rung left it, then decodes the dev split with CTC greedy, full
context, and keeps the per-utterance errors. :func:`asr.ablation.halving.decide` then judges
every scheme against the best one at this rung: the paired difference of their dev WERs (a
hierarchical bootstrap over seeds and utterances) against what the scheme's plateau slope
could still close. Stopped and finished schemes leave; the undecided share what is left of
the overall budget (:func:`asr.ablation.halving.next_steps`). When none is undecided, every
run is evaluated on the test split as in a fixed-budget ablation, and the report carries the
rungs with every decision and its reason.

Decisions use dev, never test: the split the report ranks on plays no part in choosing who
trains longer. The learning-rate schedule must not depend on the budget (the ablation asks
for an inverse square-root one): a run taken to 2000 steps in two rungs is then the same run
as one trained to 2000 steps at once, so extending a scheme changes nothing it has learnt.

Everything a decision reads is on disk (the runs' learning curves, ``<run>/rungs/dev_<steps>.jsonl``,
``<run>/rungs/trained.json``), so a rerun after an interruption replays the decisions made so far
(they are pure functions of those files) and goes on from the rung it was in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from asr.ablation.analysis import pooled_difference
from asr.ablation.convergence import plateau_convergence
from asr.ablation.curves import read_learning_curve
from asr.ablation.halving import CONTINUE, FINISHED, STOPPED, Decision, Progress, decide, next_steps
from asr.ablation.stats import PairedDifference, align_records, pool_seeds

RUNG_DIR = "rungs"
TRAINED_FILE = "trained.json"
SUMMARY_FILE = "train_summary.json"  # written by asr.train at the end of every run
# The bootstrap behind each decision is seeded: the same records give the same decisions.
DECISION_BOOTSTRAP_SEED = 0

# dev_records(run_dir, checkpoint) -> per-utterance rows {key, word_errors, ref_words} on dev.
DevRecordsFn = Callable[[Path, Path], list[dict]]


@dataclass(frozen=True)
class AdaptiveBudget:
    """A first rung's steps, the most steps any scheme gets, and the steps of all runs together.

    ``first_steps`` and ``max_steps`` are multiples of the validation interval (a rung ends on a
    saved checkpoint); ``total_steps`` counts every seed's steps.
    """

    first_steps: int
    max_steps: int
    total_steps: int

    def __post_init__(self) -> None:
        if not 1 <= self.first_steps <= self.max_steps:
            raise ValueError(f"need 1 <= first_steps ({self.first_steps}) <= max_steps ({self.max_steps})")
        if self.total_steps < self.first_steps:
            raise ValueError(f"total_steps ({self.total_steps}) is below one first rung ({self.first_steps})")

    def check_runs(self, runs: int, val_every: int | None) -> None:
        """The first rung must fit the total for every run, and rungs must end on validations."""
        if self.first_steps * runs > self.total_steps:
            raise ValueError(f"total_steps ({self.total_steps}) does not cover a first rung of {self.first_steps} "
                             f"steps for each of the {runs} runs ({self.first_steps * runs})")
        if val_every and (self.first_steps % val_every or self.max_steps % val_every):
            raise ValueError(f"first_steps ({self.first_steps}) and max_steps ({self.max_steps}) must be multiples "
                             f"of the validation interval ({val_every}): a rung ends on a saved checkpoint")


@dataclass
class Rung:
    """One rung: the steps every scheme in it trained to, their dev WERs (percent) and what was decided."""

    index: int
    steps: int
    dev_wer: dict[str, float]
    decisions: dict[str, Decision] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The report's lines for this rung: one per scheme, its action and reason."""
        return [f"rung {self.index}, `{scheme}` at {self.steps} steps (dev {self.dev_wer[scheme]:.2f}%): "
                f"**{d.action}**: {d.reason}" for scheme, d in sorted(self.decisions.items())]


def stops_of(rungs: Sequence[Rung]) -> dict[str, dict]:
    """Every stopped scheme: ``{"behind": the best it was judged against, "steps": where it stopped}``
    (the report ranks it below that scheme)."""
    return {scheme: {"behind": d.against, "steps": rung.steps}
            for rung in rungs for scheme, d in sorted(rung.decisions.items()) if d.action == STOPPED}


def read_trained(run_dir: Path) -> dict:
    """What the finished rungs did to a run: ``steps`` trained to (0: none yet), ``wall_s`` spent training
    and decoding dev over all its rungs, and the largest ``peak_rss_mb``."""
    path = Path(run_dir) / RUNG_DIR / TRAINED_FILE
    if not path.is_file():
        return {"steps": 0, "wall_s": 0.0, "peak_rss_mb": 0.0}
    return json.loads(path.read_text())


def mark_trained(run_dir: Path, steps: int, wall_s: float, peak_rss_mb: float) -> dict:
    """Record a finished rung of a run (after its training succeeded); returns the record."""
    before = read_trained(run_dir)
    record = {"steps": steps, "wall_s": before["wall_s"] + wall_s,
              "peak_rss_mb": max(before["peak_rss_mb"], peak_rss_mb)}
    _write_trained(run_dir, record)
    return record


def add_dev_seconds(run_dir: Path, seconds: float) -> None:
    """Count a rung's dev decode in the run's ``wall_s`` (the rung's training is already recorded)."""
    record = read_trained(run_dir)
    record["wall_s"] += seconds
    _write_trained(run_dir, record)


def _write_trained(run_dir: Path, record: dict) -> None:
    path = Path(run_dir) / RUNG_DIR / TRAINED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def steps_reached(run_dir: Path) -> int | None:
    """The global step a run's training ended at (its ``train_summary.json``); None when unrecorded."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        return None
    return int(json.loads(path.read_text())["global_step"])


def dev_records_path(run_dir: Path, steps: int) -> Path:
    return Path(run_dir) / RUNG_DIR / f"dev_{steps}.jsonl"


def rung_progress(runs: Sequence[Path], steps: int, records: Sequence[list[dict]]) -> Progress:
    """One scheme after a rung: its seeds' pooled dev WER and their common plateau slope."""
    _, errors, words = align_records(records)
    wer = 100.0 * float(pool_seeds(errors).sum() / max(words.sum(), 1.0))
    # The curve as it stood at this rung: a replayed rung must not see validations of later rungs.
    curves = [[point for point in read_learning_curve(Path(run)) if point[0] <= steps] for run in runs]
    return Progress(steps, wer, plateau_convergence([c for c in curves if c]))


def decision_difference(records: dict[str, Sequence[list[dict]]]) -> Callable[[str, str], PairedDifference]:
    """difference(a, b): pooled dev WER(a) - WER(b) in points, hierarchical bootstrap, seeded."""

    def difference(a: str, b: str) -> PairedDifference:
        d = pooled_difference(records[a], records[b], seed=DECISION_BOOTSTRAP_SEED)
        if d is None:
            raise ValueError(f"`{a}` and `{b}` share no scored dev utterance")
        return d

    return difference


def plan_rungs(
    schemes: Sequence[str],
    runs_of: Callable[[str], Sequence[Path]],
    budget: AdaptiveBudget,
    train_to: Callable[[str, Path, int], bool],
    measure: Callable[[str, Path, int], list[dict] | None],
    val_every: int = 1,
    log: Callable[[str], None] = print,
    jobs: int = 1,
    interrupt: Callable[[], None] = lambda: None,
    on_rung: Callable[[int, Sequence[Path]], None] = lambda steps, runs: None,
) -> tuple[list[Rung], dict[str, str]]:
    """Run the rungs; returns them and the schemes that failed (scheme -> why).

    A rung after the first ends on a multiple of ``val_every`` steps past the last (a saved checkpoint).

    ``train_to(scheme, run_dir, steps)`` trains (or resumes) one run to ``steps`` and says whether
    it succeeded; ``measure(scheme, run_dir, steps)`` returns its dev records (None: failed).
    A failed scheme leaves the rungs (the report shows it failed); the others go on.
    ``jobs`` runs of a rung train at once (``train_to`` is called from that many threads; ``measure``
    from one at a time); the decisions read only the records, so they do not depend on it. Only this
    thread sees Ctrl-C or SIGTERM: ``interrupt()`` then stops the trainings the other threads wait on.
    ``on_rung(steps, runs)`` is told each rung before it trains (the runner's progress bar).
    """
    rungs: list[Rung] = []
    failed: dict[str, str] = {}
    steps = budget.first_steps  # every undecided scheme trains to the same rung
    undecided = list(schemes)
    spent = {str(run): 0 for scheme in schemes for run in runs_of(scheme)}
    while undecided:
        on_rung(steps, [run for scheme in undecided for run in runs_of(scheme)])
        records = _train_rung(undecided, runs_of, steps, train_to, measure, jobs, spent, failed, interrupt)
        undecided = [s for s in undecided if s not in failed]
        if not undecided:
            break
        progress = {s: rung_progress(runs_of(s), steps, records[s]) for s in undecided}
        rung = Rung(len(rungs) + 1, steps, {s: p.wer for s, p in progress.items()})
        rung.decisions = decide(progress, decision_difference(records), budget.max_steps)
        rungs.append(rung)
        for line in rung.lines():
            log(f"[ablate] {line}")
        undecided = [s for s in undecided if rung.decisions[s].action == CONTINUE]
        if not undecided:
            break
        steps_left = budget.total_steps - sum(spent.values())
        runs_left = sum(len(runs_of(s)) for s in undecided)
        grown = next_steps(steps, runs_left, steps_left, budget.max_steps)
        grown = steps + (grown - steps) // val_every * val_every
        if grown <= steps:
            for s in undecided:
                rung.decisions[s] = Decision(s, FINISHED, f"the overall budget ({budget.total_steps} steps over "
                                                            f"all runs) has no steps left for another rung")
            log(f"[ablate] budget spent: {', '.join(undecided)} end at {steps} steps")
            break
        steps = grown
    return rungs, failed


def _train_rung(
    schemes: Sequence[str],
    runs_of: Callable[[str], Sequence[Path]],
    steps: int,
    train_to: Callable[[str, Path, int], bool],
    measure: Callable[[str, Path, int], list[dict] | None],
    jobs: int,
    spent: dict[str, int],
    failed: dict[str, str],
    interrupt: Callable[[], None],
) -> dict[str, list[list[dict]]]:
    """Train and measure every run of ``schemes`` at ``steps``, ``jobs`` at a time; returns each
    scheme's dev records (in its runs' order) and adds the schemes that failed to ``failed``.

    A scheme whose run failed starts none of its runs not yet started; its reason is that of its
    first failed run, whichever finished first.
    """
    if jobs < 1:
        raise ValueError(f"jobs ({jobs}) must be >= 1")
    lock = threading.Lock()  # guards spent, failed and reasons
    measuring = threading.Lock()  # one dev decode at a time: it runs in this process
    stopping = threading.Event()  # set when this thread is interrupted: start no more tasks
    reasons: dict[str, dict[int, str]] = {scheme: {} for scheme in schemes}
    rows: dict[tuple[str, int], list[dict]] = {}

    def one(scheme: str, index: int, run: Path) -> None:
        with lock:
            if reasons[scheme] or stopping.is_set():
                return
        if not train_to(scheme, run, steps):
            with lock:
                reasons[scheme][index] = f"training to {steps} steps failed"
            return
        with lock:
            spent[str(run)] = steps
        with measuring:
            measured = measure(scheme, run, steps)
        with lock:
            if measured is None:
                reasons[scheme][index] = f"the dev measurement at {steps} steps failed"
            else:
                rows[scheme, index] = measured

    tasks = [(scheme, index, run) for scheme in schemes for index, run in enumerate(runs_of(scheme))]
    if jobs == 1:
        for task in tasks:
            one(*task)
    else:
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="rung")
        futures = [pool.submit(one, *task) for task in tasks]
        try:
            for future in futures:
                future.result()
        except BaseException:
            # A worker freed by a stopped training may already have taken the next task: no task
            # starts from now on, and interrupt() repeats until every worker is idle.
            stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            while not all(future.done() for future in futures):
                interrupt()
                wait(futures, timeout=1.0)
            raise
        pool.shutdown()
    records: dict[str, list[list[dict]]] = {}
    for scheme in schemes:
        if reasons[scheme]:
            failed[scheme] = reasons[scheme][min(reasons[scheme])]
        else:
            records[scheme] = [rows[scheme, index] for index in range(len(runs_of(scheme)))]
    return records
