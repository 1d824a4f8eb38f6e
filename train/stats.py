"""The benchmark's statistics: t intervals, Welch and paired t-tests, Holm's correction, detectable effects.

Every comparison in the report goes through these functions, so a reader checks the statistics
in one place. Runs are independent trainings (model seed x data seed); a number measured twice on
the same run (at the training size and beyond it) is compared *paired*, per run. scipy gives the t
distribution.

>>> round(t_interval([1.0, 2.0, 3.0]).half_width, 3)   # t(0.975, df=2) * 1 / sqrt(3)
2.484
>>> [round(p, 3) for p in holm([0.01, 0.04, 0.03])]
[0.03, 0.06, 0.06]
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

ALPHA = 0.05  # two-sided level of every interval and test (family-wise within a claim, by Holm)
POWER = 0.8  # power at which the smallest detectable effect is stated


@dataclass(frozen=True)
class Estimate:
    """A mean (or a mean difference) with its standard error and degrees of freedom."""

    mean: float
    se: float  # nan with fewer than two runs
    df: float  # degrees of freedom of its t distribution (Welch-Satterthwaite for two groups)
    n: int  # runs (per group, the smaller group for a two-group difference)

    @property
    def half_width(self) -> float:
        """Half the width of the two-sided (1 - ALPHA) t interval (nan when it cannot be computed)."""
        return _t_quantile(1 - ALPHA / 2, self.df) * self.se if self.df > 0 else math.nan

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    @property
    def p_value(self) -> float:
        """Two-sided p-value of "the true mean is 0" (nan with fewer than two runs)."""
        if not self.df > 0 or not self.se > 0:
            return math.nan if not self.df > 0 else (0.0 if self.mean != 0 else 1.0)
        from scipy.stats import t

        return float(2 * t.sf(abs(self.mean) / self.se, self.df))

    def detectable(self, alpha: float = ALPHA, power: float = POWER) -> float:
        """The smallest true effect this design detects at level ``alpha`` with ``power`` (normal-t approximation)."""
        if not self.df > 0:
            return math.nan
        return (_t_quantile(1 - alpha / 2, self.df) + _t_quantile(power, self.df)) * self.se

    def fmt(self, digits: int = 3) -> str:
        """``"0.12 [0.05, 0.19]"`` (the mean and its interval), or the mean alone when no interval exists."""
        if math.isnan(self.half_width):
            return f"{self.mean:.{digits}g}"
        return f"{self.mean:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


def _t_quantile(q: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def t_interval(values: Sequence[float]) -> Estimate:
    """The mean of ``values`` with its t interval (one group of independent runs)."""
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, 0, 0)
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(n) if n > 1 else math.nan
    return Estimate(mean, se, n - 1, n)


def welch(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """``mean(a) - mean(b)`` for two independent groups of runs, with Welch's standard error and df."""
    if not a or not b:
        return Estimate(math.nan, math.nan, 0, 0)  # a side not measured: no test (its p-value is nan)
    if len(a) < 2 or len(b) < 2:
        return Estimate(statistics.fmean(a) - statistics.fmean(b), math.nan, 0, min(len(a), len(b)))
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Estimate(statistics.fmean(a) - statistics.fmean(b), 0.0, len(a) + len(b) - 2, min(len(a), len(b)))
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return Estimate(statistics.fmean(a) - statistics.fmean(b), se, df, min(len(a), len(b)))


def paired(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """``mean(a - b)`` over runs measured twice (``a[i]`` and ``b[i]`` come from the same run)."""
    if len(a) != len(b):
        raise ValueError(f"paired needs one value per run on both sides, got {len(a)} and {len(b)}")
    return t_interval([x - y for x, y in zip(a, b)])


def above(values: Sequence[float], bar: float, higher: bool) -> Estimate:
    """How far ``values`` clear ``bar`` on the good side (positive: better than the bar), as a t estimate."""
    return t_interval([(v - bar) if higher else (bar - v) for v in values])


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given): compare each with ALPHA for a family-wise level.

    A nan p-value (a comparison that could not be tested) counts as a test that fails (adjusted p = 1).
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        p = 1.0 if math.isnan(p_values[i]) else p_values[i]
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted
