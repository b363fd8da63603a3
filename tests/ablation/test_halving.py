"""Adaptive stopping: deterministic decisions, never a stop while the interval overlaps the best's."""

import numpy as np
import pytest

from asr.ablation.convergence import Convergence, plateau_convergence
from asr.ablation.halving import CONTINUE, FINISHED, STOPPED, Progress, best_scheme, decide, next_steps
from asr.ablation.stats import PairedDifference

MAX_STEPS = 4000


def falling(per_1000: float, low: float, high: float) -> Convergence:
    return Convergence(per_1000, low, high, points=6, seeds=1)


def table(diffs: dict[str, tuple[float, float, float]]):
    """difference(a, b) from a table of (difference, low, high) of each scheme against the best."""
    asked = []

    def difference(a: str, b: str) -> PairedDifference:
        asked.append((a, b))
        return PairedDifference(*diffs[a], p_value=0.01)

    return difference, asked


def test_a_clear_loser_stops_and_says_why() -> None:
    progress = {
        "rel_xl": Progress(1000, 30.0, falling(-6.0, -9.0, -3.0)),
        "none": Progress(1000, 50.0, falling(-4.0, -5.0, -3.0)),  # 18 points behind, gains <= 15 in 3000 steps
        "rope": Progress(1000, 40.0, falling(-6.0, -9.0, -3.0)),  # 8 behind, could gain 27: continues
    }
    difference, asked = table({"none": (20.0, 18.0, 22.0), "rope": (10.0, 8.0, 12.0)})
    decisions = decide(progress, difference, MAX_STEPS)
    assert decisions["none"].action == STOPPED
    assert decisions["none"].reason == ("+20.00 [+18.00, +22.00] points above `rel_xl` at 1000 steps; at its steepest "
                                        "plausible slope (-5.0 points per 1000 steps) the remaining 3000 steps gain "
                                        "at most 15.00")
    assert decisions["rope"].action == CONTINUE and "could close in 3000 steps (up to 27.00)" in decisions["rope"].reason
    assert decisions["rel_xl"].action == CONTINUE and "lowest WER" in decisions["rel_xl"].reason
    assert sorted(asked) == [("none", "rel_xl"), ("rope", "rel_xl")]  # only ever against the best


def test_an_interval_that_only_touches_what_the_slope_could_gain_continues() -> None:
    # -5 points per 1000 steps over the 3000 steps left: at most 15.00 points, exactly the interval's low end
    progress = {"rel_xl": Progress(1000, 30.0, falling(-6.0, -9.0, -3.0)),
                "none": Progress(1000, 50.0, falling(-4.0, -5.0, -3.0))}
    touching, _ = table({"none": (17.0, 15.0, 19.0)})
    decision = decide(progress, touching, MAX_STEPS)["none"]
    assert decision.action == CONTINUE and "could close in 3000 steps (up to 15.00)" in decision.reason
    beyond, _ = table({"none": (17.0, 15.01, 19.0)})
    assert decide(progress, beyond, MAX_STEPS)["none"].action == STOPPED


def test_converged_or_out_of_steps_finish_and_an_unbounded_slope_continues() -> None:
    flat = plateau_convergence([[[s, 0.3 + 0.001 * (-1) ** k] for k, s in enumerate(range(100, 2100, 100))]])
    assert flat.converged
    progress = {
        "rel_xl": Progress(2000, 30.0, flat),
        "shaw": Progress(MAX_STEPS, 45.0, falling(-3.0, -6.0, -0.5)),
        "rope": Progress(2000, 45.0, Convergence(-3.0, None, None, points=2, seeds=1)),  # no interval
    }
    difference, _ = table({"shaw": (15.0, 13.0, 17.0), "rope": (15.0, 13.0, 17.0)})
    decisions = decide(progress, difference, MAX_STEPS)
    assert decisions["rel_xl"].action == FINISHED and decisions["rel_xl"].reason.startswith("converged at 2000 steps")
    assert decisions["shaw"].action == FINISHED and "largest budget, 4000 steps" in decisions["shaw"].reason
    assert decisions["rope"].action == CONTINUE and "no interval" in decisions["rope"].reason


def random_round(rng: np.random.Generator):
    schemes = ["rel_xl", "wenet_rel", "shaw", "abs_sin", "abs_learned", "rel_bias", "rope", "none"]
    steps = int(rng.choice([500, 1000, 2000]))
    progress, diffs = {}, {}
    for s in schemes:
        slope = rng.normal(-3, 4)
        half = rng.uniform(0.2, 6)
        progress[s] = Progress(steps, float(rng.uniform(20, 60)), falling(slope, slope - half, slope + half))
        centre = rng.normal(8, 8)
        width = rng.uniform(0.5, 10)
        diffs[s] = (centre, centre - width, centre + width)
    return progress, diffs


def test_no_scheme_is_stopped_while_its_interval_overlaps_the_best() -> None:
    rng = np.random.default_rng(0)
    stops = overlaps = 0
    for _ in range(400):
        progress, diffs = random_round(rng)
        difference, _ = table(diffs)
        for scheme, decision in decide(progress, difference, MAX_STEPS).items():
            if diffs[scheme][1] <= 0 and scheme != best_scheme(progress):
                overlaps += 1
                assert decision.action != STOPPED, (scheme, diffs[scheme], decision)
            stops += decision.action == STOPPED
    assert stops > 50 and overlaps > 50  # both cases were exercised


def test_decisions_are_deterministic_and_ignore_the_input_order() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        progress, diffs = random_round(rng)
        difference, _ = table(diffs)
        first = decide(progress, difference, MAX_STEPS)
        assert decide(progress, difference, MAX_STEPS) == first
        shuffled = dict(reversed(list(progress.items())))
        assert decide(shuffled, difference, MAX_STEPS) == first
    tied = {"rope": Progress(1000, 30.0, None), "abs_sin": Progress(1000, 30.0, None)}
    assert best_scheme(tied) == best_scheme(dict(reversed(list(tied.items())))) == "abs_sin"


def test_the_undecided_share_what_is_left_at_most_doubling() -> None:
    assert next_steps(1000, undecided=4, steps_left=20000, max_steps=MAX_STEPS) == 2000  # doubling bounds it
    assert next_steps(1000, undecided=4, steps_left=2000, max_steps=MAX_STEPS) == 1500  # 500 more each
    assert next_steps(3000, undecided=1, steps_left=9000, max_steps=MAX_STEPS) == MAX_STEPS
    assert next_steps(1000, undecided=8, steps_left=7, max_steps=MAX_STEPS) == 1000  # nothing left: no rung
    with pytest.raises(ValueError, match="undecided"):
        next_steps(1000, undecided=0, steps_left=10, max_steps=MAX_STEPS)
