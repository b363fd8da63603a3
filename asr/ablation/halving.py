"""Adaptive budget for an ablation: successive halving with a stop rule a scheme's own curve cannot refute.

Every scheme trains to a first budget (a rung). After each rung every scheme still training
is judged against the best one (lowest pooled WER at this rung; ties go to the name that
sorts first, so the input's order never matters):

- *stopped*: its paired interval to the best lies above zero by more than its remaining
  steps could close at its steepest plausible slope (the low end of its plateau slope's
  interval, extrapolated linearly: learning curves flatten, so a straight line is the
  optimistic case for the trailing scheme). A scheme whose interval still overlaps the
  best's is never stopped, and neither is one without a slope interval (nothing bounds it).
- *finished*: it converged (more steps would not move it), or it reached ``max_steps``,
  or the overall budget has no steps left for another rung.
- *continue* otherwise: the undecided share what the stopped and finished leave of the
  overall budget, each at most doubling its steps per rung.

:func:`decide` and :func:`next_steps` are pure: the same curves, WERs and differences give
the same decisions, and each decision carries its reason for the report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from asr.ablation.convergence import Convergence
from asr.ablation.stats import PairedDifference

CONTINUE, STOPPED, FINISHED = "continue", "stopped", "finished"
# Each rung at most doubles a scheme's steps: successive halving's usual factor, and the
# slope measured on the last half of a run still describes the next rung's start.
GROWTH = 2


@dataclass(frozen=True)
class Progress:
    """One scheme after a rung: its steps, pooled WER (percent) and plateau slope (None: no curve)."""

    steps: int
    wer: float
    convergence: Convergence | None


@dataclass(frozen=True)
class Decision:
    """What happens to one scheme after a rung, and why (a sentence for the report)."""

    scheme: str
    action: str
    reason: str
    # The scheme a stopped one was judged behind (the rung's best); None for the other actions.
    against: str | None = None


def best_scheme(progress: Mapping[str, Progress]) -> str:
    """The scheme with the lowest WER; ties to the name that sorts first."""
    if not progress:
        raise ValueError("no schemes to compare")
    return min(progress, key=lambda s: (progress[s].wer, s))


def closable(convergence: Convergence | None, remaining_steps: int) -> float | None:
    """The most WER points ``remaining_steps`` could gain at the steepest slope the interval allows;
    None when the slope has no interval (nothing bounds the gain)."""
    if convergence is None or convergence.low is None:
        return None
    return max(0.0, -convergence.low) * remaining_steps / 1000.0


def decide(
    progress: Mapping[str, Progress],
    difference: Callable[[str, str], PairedDifference],
    max_steps: int,
) -> dict[str, Decision]:
    """Decisions for every scheme in ``progress`` (those still training) after a rung.

    ``difference(a, b)`` is WER(a) - WER(b) in points with its paired interval (the caller's
    bootstrap, seeded so that it is deterministic); it is asked only about pairs with the best.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps ({max_steps}) must be >= 1")
    best = best_scheme(progress)
    decisions = {}
    for scheme in sorted(progress):
        p = progress[scheme]
        c = p.convergence
        remaining = max(0, max_steps - p.steps)
        if c is not None and c.converged:
            decisions[scheme] = Decision(scheme, FINISHED, f"converged at {p.steps} steps (slope {c.describe()})")
            continue
        if remaining == 0:
            decisions[scheme] = Decision(scheme, FINISHED, f"reached the largest budget, {max_steps} steps")
            continue
        if scheme == best:
            decisions[scheme] = Decision(scheme, CONTINUE, f"lowest WER at {p.steps} steps ({p.wer:.2f}%)")
            continue
        d = difference(scheme, best)
        gain = closable(c, remaining)
        span = f"{d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}] points above `{best}`"
        if d.low <= 0:
            reason = f"{span}: the interval overlaps the best's"
        elif gain is None:
            reason = f"{span}, but its slope has no interval to bound what {remaining} more steps could gain"
        elif d.low > gain:
            decisions[scheme] = Decision(scheme, STOPPED, (
                f"{span} at {p.steps} steps; at its steepest plausible slope ({c.low:+.1f} points per 1000 steps) "
                f"the remaining {remaining} steps gain at most {gain:.2f}"), against=best)
            continue
        else:
            reason = f"{span}, which its steepest plausible slope could close in {remaining} steps (up to {gain:.2f})"
        decisions[scheme] = Decision(scheme, CONTINUE, reason)
    return decisions


def next_steps(current: int, undecided: int, steps_left: int, max_steps: int) -> int:
    """The next rung's steps for each of ``undecided`` schemes now at ``current`` steps.

    At most ``GROWTH`` x ``current`` and ``max_steps``; the ``steps_left`` of the overall
    budget are shared equally. Returns ``current`` when nothing is left for another rung.
    """
    if undecided < 1 or current < 1:
        raise ValueError(f"undecided ({undecided}) and current ({current}) must be >= 1")
    share = max(0, steps_left) // undecided
    return max(current, min(GROWTH * current, max_steps, current + share))
