"""Has a scheme converged? The plateau slope of its validation WER curve, with an interval.

The slope is a least-squares line through the validations of the last half of every seed's
run (at least its last three), in WER points per 1000 steps. Seeds share the slope and each has its own intercept
(one seed can sit a point higher for the whole plateau without tilting it), so the
residuals are the validation-to-validation wobble around each seed's line; the 95%
interval is the regression's Student-t interval with ``n - seeds - 1`` degrees of freedom.

A scheme is *converged* when that whole interval lies within :data:`CONVERGED_BAND` of
zero: a point estimate near zero from a noisy or short tail is not enough, and a curve
that is still falling is not converged however small its wobble. Too few validations for
an interval (fewer than ``seeds + 2`` points) is "undetermined", which is not converged.

The interval is deterministic (no resampling), so a decision built on it (the adaptive
budget, ``asr.ablation.halving``) is a pure function of the curves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The plateau is the last half of a run's steps: long enough to measure a slope against the
# validation wobble, late enough to be the slope the budget ended on. At least the last three
# validations are used. A single-seed fit of three points has 1 degree of freedom (t = 12.7):
# an interval that wide calls nothing converged, so a convergence run validates often
# (ten validations in the half give t = 2.31).
PLATEAU_FRACTION = 0.5
MIN_PLATEAU_POINTS = 3
# Half-width of the band around zero (WER points per 1000 steps) that the slope's
# interval must lie in. A scheme at the band's edge gains at most 2 points from another
# 1000 steps (two thirds of the adaptive budget's first rung again): about the half-width of the
# paired test intervals the report resolves differences with (1.2-1.5 points), so a
# ranking between converged schemes is not one that a longer budget would plausibly flip.
CONVERGED_BAND = 2.0
LEVEL = 0.95

CONVERGED, FALLING, RISING, WIDE, UNDETERMINED = "converged", "still falling", "rising", "interval too wide", \
    "undetermined"


@dataclass(frozen=True)
class Convergence:
    """The plateau slope of one scheme (points per 1000 steps) with its interval and verdict.

    ``low``/``high`` are None when the fit has no degrees of freedom left (``UNDETERMINED``).
    ``state`` is one of converged, still falling (interval below zero), rising (above zero),
    interval too wide (straddles zero but leaves the band) or undetermined.
    """

    slope: float
    low: float | None
    high: float | None
    points: int
    seeds: int
    band: float = CONVERGED_BAND

    @property
    def state(self) -> str:
        if self.low is None or self.high is None:
            return UNDETERMINED
        if -self.band <= self.low and self.high <= self.band:
            return CONVERGED
        if self.high < 0:
            return FALLING
        if self.low > 0:
            return RISING
        return WIDE

    @property
    def converged(self) -> bool:
        return self.state == CONVERGED

    def describe(self) -> str:
        """``-8.1 [-12.0, -4.2] from 6 validations`` (points per 1000 steps)."""
        if self.low is None or self.high is None:
            return f"{self.slope:+.1f} (no interval from {self.points} validations)"
        return f"{self.slope:+.1f} [{self.low:+.1f}, {self.high:+.1f}] from {self.points} validations"


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom.

    Bisection on the CDF, which is the integral of the density from 0 (Simpson's rule on a
    fine grid: the density is smooth, so 4000 panels are exact to ~1e-12 for the ranges a
    95% interval needs).
    """
    if not 0.5 < p < 1.0:
        raise ValueError(f"p ({p}) must be in (0.5, 1)")
    if df < 1:
        raise ValueError(f"df ({df}) must be >= 1")
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        grid = np.linspace(0.0, x, 4001)
        density = np.exp(log_norm - (df + 1) / 2 * np.log1p(grid**2 / df))
        h = x / 4000
        integral = h / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum() + 2 * density[2:-1:2].sum())
        return 0.5 + integral

    low, high = 0.0, 1.0
    while cdf(high) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if cdf(mid) < p else (low, mid)
    return (low + high) / 2


def plateau_tail(curve: Sequence[Sequence[float]], fraction: float = PLATEAU_FRACTION,
                 min_points: int = MIN_PLATEAU_POINTS) -> np.ndarray:
    """(P, 2) [step, value] rows of ``curve`` (sorted by step) in the last ``fraction`` of its
    steps, or its last ``min_points`` rows when the window holds fewer."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction ({fraction}) must be in (0, 1]")
    rows = np.asarray(curve, dtype=np.float64).reshape(-1, 2)
    if len(rows) == 0:
        return rows
    window = rows[rows[:, 0] >= rows[-1, 0] * (1.0 - fraction)]
    return window if len(window) >= min_points else rows[-min_points:]


def plateau_convergence(
    curves: Sequence[Sequence[Sequence[float]]], fraction: float = PLATEAU_FRACTION,
    min_points: int = MIN_PLATEAU_POINTS, band: float = CONVERGED_BAND, level: float = LEVEL,
) -> Convergence | None:
    """The common plateau slope of ``curves`` (one per seed, ``[[step, WER fraction], ...]``).

    Each curve contributes its :func:`plateau_tail` (one with fewer than two points at
    different steps is left out); None when no curve is left.
    """
    xs, ys = [], []
    for curve in curves:
        tail = plateau_tail(curve, fraction, min_points)
        if len(tail) >= 2 and np.ptp(tail[:, 0]) > 0:
            xs.append(tail[:, 0] / 1000.0)  # thousands of steps
            ys.append(100.0 * tail[:, 1])  # WER points
    if not xs:
        return None
    # Centring each seed on its own means fits one intercept per seed and the shared slope.
    dx = [x - x.mean() for x in xs]
    dy = [y - y.mean() for y in ys]
    sxx = float(sum((d**2).sum() for d in dx))
    slope = float(sum((a * b).sum() for a, b in zip(dx, dy)) / sxx)
    n = sum(len(x) for x in xs)
    df = n - len(xs) - 1
    if df < 1:
        return Convergence(slope, None, None, n, len(xs), band)
    residual = float(sum(((b - slope * a) ** 2).sum() for a, b in zip(dx, dy)))
    half = t_quantile(0.5 + level / 2, df) * math.sqrt(residual / df / sxx)
    return Convergence(slope, slope - half, slope + half, n, len(xs), band)
