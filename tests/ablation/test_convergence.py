"""Convergence criterion: plateau slope with a t interval, converged only inside the band."""

import numpy as np
import pytest

from asr.ablation.convergence import (
    CONVERGED,
    CONVERGED_BAND,
    FALLING,
    UNDETERMINED,
    WIDE,
    plateau_convergence,
    plateau_tail,
    t_quantile,
)

STEPS = np.arange(1, 21) * 100.0  # 20 validations, every 100 steps


def curve(wer_percent: np.ndarray) -> list[list[float]]:
    return [[float(s), float(w) / 100] for s, w in zip(STEPS, wer_percent)]


def test_flat_curve_converges() -> None:
    wobble = np.random.default_rng(0).normal(0.0, 0.3, STEPS.size)  # 0.3-point validation noise
    result = plateau_convergence([curve(30.0 + wobble)])
    assert result.state == CONVERGED and result.converged
    assert -CONVERGED_BAND <= result.low < result.slope < result.high <= CONVERGED_BAND
    assert result.points == 11 and result.seeds == 1  # steps 1000-2000, the last half


def test_falling_curve_is_not_converged() -> None:
    wobble = np.random.default_rng(1).normal(0.0, 0.3, STEPS.size)
    result = plateau_convergence([curve(60.0 - 8.0 * STEPS / 1000 + wobble)])  # -8 points per 1000 steps
    assert result.state == FALLING and not result.converged
    assert result.slope == pytest.approx(-8.0, abs=1.0) and result.high < -CONVERGED_BAND


def test_noisy_flat_curve_is_not_converged_though_its_slope_is_near_zero() -> None:
    wobble = np.random.default_rng(2).normal(0.0, 4.0, STEPS.size)  # 4-point validation noise
    result = plateau_convergence([curve(30.0 + wobble)])
    assert abs(result.slope) < CONVERGED_BAND  # the point estimate alone would call it converged
    assert result.state == WIDE and not result.converged and result.low < -CONVERGED_BAND


def test_seeds_share_the_slope_and_keep_their_own_level() -> None:
    wobble = np.random.default_rng(3).normal(0.0, 0.3, (2, STEPS.size))
    # Two seeds 5 points apart on the same plateau: one line through both would be tilted by nothing,
    # but its residuals would hold the 5-point gap and the interval would leave the band.
    seeds = [curve(30.0 + wobble[0]), curve(35.0 + wobble[1])]
    result = plateau_convergence(seeds)
    assert result.seeds == 2 and result.points == 22 and result.converged
    single = plateau_convergence(seeds[:1])
    assert result.high - result.low < single.high - single.low  # more points, a narrower interval


def test_short_curves_use_their_last_points_or_say_undetermined() -> None:
    rows = plateau_tail([[100, 0.5], [200, 0.4], [900, 0.3], [1000, 0.3]])
    assert rows[:, 0].tolist() == [200, 900, 1000]  # the window (>= 500) holds two: the last three instead
    two = plateau_convergence([[[100, 0.5], [200, 0.4]]])
    assert two.state == UNDETERMINED and two.low is None and not two.converged
    assert "no interval from 2 validations" in two.describe()
    assert plateau_convergence([[[100, 0.5]], []]) is None


def test_t_quantiles_match_the_tables() -> None:
    for df, table in ((1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (30, 2.042), (1000, 1.962)):
        assert t_quantile(0.975, df) == pytest.approx(table, abs=1e-3)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0.975, 0)
