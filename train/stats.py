"""The benchmark's statistics: t intervals, Welch and paired t-tests, Holm's correction, detectable effects.

Every comparison in the report goes through these functions, so a reader checks the statistics
in one place. Runs are independent trainings (model seed x data seed); a number measured twice on
the same run (at the training size and beyond it) is compared *paired*, per run. scipy gives the t
distribution.

>>> round(t_interval([1.0, 2.0, 3.0]).half_width, 3)   # t(0.975, df=2) * 1 / sqrt(3)
2.484
>>> [round(p, 3) for p in holm([0.01, 0.04, 0.03])]
[0.03, 0.06, 0.06]

**Outcomes that pass or fail.** Some tasks are learned by some runs and not at all by others (a copy task
solved exactly or not), so a mean ± t interval describes no run. For those the benchmark counts the runs that
pass the task's bar (:func:`success_rate`, with the exact Clopper-Pearson interval :func:`clopper_pearson`),
compares two kinds' counts with Fisher's exact test (:func:`fisher`) and their values with rank tests
(:func:`mann_whitney` for independent runs, :func:`wilcoxon_paired` for the runs two kinds share, matched by
:func:`pair_by_run`), each with a Hodges-Lehmann shift as its effect size.

*The rule* (:func:`is_bimodal`): a task's outcomes for one kind are summarised by success rate when at least
one run passes the bar and at least one misses it by more than ``BIMODAL_MARGIN`` (a quarter) of the bar's
value, in the metric's units (a bar of 0.95 accuracy: one run at >= 0.95 and one below 0.7125). A value
that is nan (a run that diverged) counts as such a miss. Runs that all pass, or all miss, or miss only
narrowly, keep the mean ± t interval.

>>> math.isclose(clopper_pearson(0, 5)[1], 1 - 0.025 ** (1 / 5))   # 0 of 5: (1 - high)^5 = alpha / 2
True
>>> success_rate([1.0, 0.98, 0.1, 1.0, 0.2], bar=0.95, higher=True)[:3]
(3, 5, 0.6)
>>> is_bimodal([1.0, 0.98, 0.1], bar=0.95, higher=True), is_bimodal([0.97, 0.93, 0.9], bar=0.95, higher=True)
(True, False)
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple, Sequence

ALPHA = 0.05  # two-sided level of every interval and test (family-wise within a claim, by Holm)
POWER = 0.8  # power at which the smallest detectable effect is stated
BIMODAL_MARGIN = 0.25  # is_bimodal: a miss by more than this fraction of the bar's value is a failed run
EXACT_LIMIT = 20_000  # rank tests with ties: exact over every relabelling when there are at most this many


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


# -- outcomes that pass or fail: success rates, exact intervals and tests, rank tests ---------------------------


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return value


def clopper_pearson(successes: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``1 - alpha`` interval of a success probability from ``successes``
    of ``n`` runs; ``(0.0, 1.0)`` for ``n = 0`` (nothing measured).

    >>> [round(x, 4) for x in clopper_pearson(3, 5)]   # scipy.stats.binomtest(3, 5).proportion_ci()
    [0.1466, 0.9473]
    """
    from scipy.stats import beta

    k, n = _count("successes", successes), _count("n", n)
    if k > n:
        raise ValueError(f"successes must be <= n, got {k} of {n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


class Rate(NamedTuple):
    """Runs that pass a bar: ``k`` of ``n``, the rate ``k / n`` (nan for no runs) and its exact interval."""

    k: int
    n: int
    rate: float
    low: float
    high: float


def passes(value: float, bar: float, higher: bool) -> bool:
    """Whether one run's value reaches ``bar`` on the good side (a nan value never does)."""
    return value >= bar if higher else value <= bar


def _check_bar(bar: float) -> float:
    if isinstance(bar, bool) or not isinstance(bar, (int, float)) or not math.isfinite(bar):
        raise ValueError(f"bar must be a finite number, got {bar!r}")
    return float(bar)


def success_rate(values: Sequence[float], bar: float, higher: bool) -> Rate:
    """The runs among ``values`` that pass ``bar`` (>= it when ``higher``, else <= it), with the Clopper-Pearson
    interval of the success probability.

    >>> success_rate([2.0, 9.0, 3.0], bar=4.0, higher=False)[:3]   # perplexity: lower is better
    (2, 3, 0.6666666666666666)
    """
    bar = _check_bar(bar)
    return rate_of(sum(passes(v, bar, higher) for v in values), len(values))


def rate_of(k: int, n: int) -> Rate:
    """``k`` successes of ``n`` runs as a :class:`Rate`, with the Clopper-Pearson interval."""
    return Rate(k, n, k / n if n else math.nan, *clopper_pearson(k, n))


def above_rate(accuracy: float, rate: float, n: int, alpha: float = ALPHA) -> bool:
    """Whether an accuracy measured on ``n`` items is above a guessing ``rate`` (an order-blind ceiling) by a
    one-sided exact binomial test at ``alpha`` (scipy.stats.binomtest): the run learned what the rate cannot.

    >>> above_rate(0.5, 0.498, 512), above_rate(0.6, 0.498, 512), above_rate(0.535, 0.498, 512)
    (False, True, False)
    """
    from scipy.stats import binomtest

    n = _count("n", n)
    if n < 1 or not 0.0 <= accuracy <= 1.0 or not 0.0 <= rate <= 1.0:
        raise ValueError(f"above_rate takes an accuracy and a rate in [0, 1] and n >= 1 items, got {accuracy!r}, "
                         f"{rate!r}, {n!r}")
    return bool(binomtest(round(accuracy * n), n, rate, alternative="greater").pvalue < alpha)


def fisher(k_a: int, n_a: int, k_b: int, n_b: int, alternative: str = "two-sided") -> float:
    """Fisher's exact p-value that kinds a (``k_a`` successes of ``n_a`` runs) and b succeed equally often, against
    ``alternative``: ``"two-sided"``, ``"greater"`` (a succeeds more often) or ``"less"``; nan when a side has
    no runs.

    >>> round(fisher(5, 5, 0, 5, "greater"), 4)   # 1 / C(10, 5): the only table at least as extreme
    0.004
    """
    from scipy.stats import fisher_exact

    for name, k, n in (("a", k_a, n_a), ("b", k_b, n_b)):
        if _count(f"k_{name}", k) > _count(f"n_{name}", n):
            raise ValueError(f"k_{name} must be <= n_{name}, got {k} of {n}")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, got {alternative!r}")
    if not n_a or not n_b:
        return math.nan
    return float(fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]], alternative=alternative).pvalue)


class RankTest(NamedTuple):
    """A rank test's two-sided p-value (nan when it cannot be computed) and its effect size: the Hodges-Lehmann
    estimate of the shift a - b (nan without values)."""

    p_value: float
    shift: float


def _values(name: str, values: Sequence[float]) -> list[float]:
    out = [float(v) for v in values]
    if any(math.isnan(v) for v in out):
        raise ValueError(f"{name} holds nan; drop the runs that diverged or count them with success_rate")
    return out


def _exact_or_permutation(tied: bool, relabellings: int):
    """scipy's method: exact without ties; with ties, a permutation test over every relabelling where there are
    at most EXACT_LIMIT (exact, ties included); the normal approximation beyond that."""
    from scipy.stats import PermutationMethod

    if not tied:
        return "exact"
    return PermutationMethod(n_resamples=EXACT_LIMIT) if relabellings <= EXACT_LIMIT else "asymptotic"


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> RankTest:
    """The Mann-Whitney U test of two independent groups of runs (two-sided; exact where possible, see
    :func:`_exact_or_permutation`), with the Hodges-Lehmann shift: the median of every difference ``a_i - b_j``.

    >>> mann_whitney([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])   # U = 9 of 9: 2 / C(6, 3)
    RankTest(p_value=0.1, shift=3.0)
    """
    from scipy.stats import mannwhitneyu

    a, b = _values("a", a), _values("b", b)
    if not a or not b:
        return RankTest(math.nan, math.nan)
    shift = statistics.median(x - y for x in a for y in b)
    if len(set(a + b)) == 1:
        return RankTest(1.0, shift)  # every run the same: nothing tells the groups apart
    method = _exact_or_permutation(len(set(a + b)) < len(a + b), math.comb(len(a) + len(b), len(a)))
    return RankTest(float(mannwhitneyu(a, b, alternative="two-sided", method=method).pvalue), shift)


def wilcoxon_paired(a: Sequence[float], b: Sequence[float]) -> RankTest:
    """The Wilcoxon signed-rank test of ``a[i] - b[i]`` (the same run on both sides: see :func:`pair_by_run`),
    two-sided, zero differences dropped (Wilcoxon's convention; all zero: p = 1), exact where possible; with the
    Hodges-Lehmann shift: the median of the Walsh averages ``(d_i + d_j) / 2``, i <= j, zeros included.

    >>> wilcoxon_paired([2.0, 3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 1.0, 1.0, 1.0])   # all 5 positive: 2 / 2^5
    RankTest(p_value=0.0625, shift=3.0)
    """
    from scipy.stats import wilcoxon

    a, b = _values("a", a), _values("b", b)
    if len(a) != len(b):
        raise ValueError(f"wilcoxon_paired needs one value per run on both sides, got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b)]
    if not d:
        return RankTest(math.nan, math.nan)
    shift = statistics.median((d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d)))
    nonzero = [x for x in d if x != 0]
    if not nonzero:
        return RankTest(1.0, shift)
    magnitudes = [abs(x) for x in nonzero]
    method = _exact_or_permutation(len(set(magnitudes)) < len(magnitudes), 2 ** len(nonzero))
    return RankTest(float(wilcoxon(nonzero, alternative="two-sided", method=method).pvalue), shift)


def pair_by_run(a: dict, b: dict) -> tuple[list[float], list[float]]:
    """The values of two kinds on the runs both have, keyed by (seed, data seed) (``Cell.runs``), in the same
    (sorted) order, for :func:`wilcoxon_paired` or :func:`paired`.

    >>> pair_by_run({(0, 0): 0.9, (1, 1): 0.8, (2, 0): 0.7}, {(2, 0): 0.1, (0, 0): 0.3, (3, 1): 0.5})
    ([0.9, 0.7], [0.3, 0.1])
    """
    for name, runs in (("a", a), ("b", b)):
        if not isinstance(runs, dict):
            raise ValueError(f"pair_by_run needs {name} as a dict of (seed, data seed) -> value, "
                             f"got {type(runs).__name__}")
    shared = sorted(set(a) & set(b))
    return [a[k] for k in shared], [b[k] for k in shared]


def is_bimodal(values: Sequence[float], bar: float, higher: bool, margin: float | None = None) -> bool:
    """Whether these runs should be summarised by success rate (the module's rule): at least one run passes
    ``bar`` and at least one misses it by more than ``margin`` (default ``BIMODAL_MARGIN * |bar|``, in the
    metric's units; give it for a bar of 0) or is nan.

    >>> is_bimodal([0.99, 0.5], bar=0.9, higher=True), is_bimodal([0.99, 0.8], bar=0.9, higher=True)
    (True, False)
    """
    bar = _check_bar(bar)
    if margin is None:
        if bar == 0:
            raise ValueError("is_bimodal needs an explicit margin for a bar of 0 (the default is a fraction of it)")
        margin = BIMODAL_MARGIN * abs(bar)
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    far = [math.isnan(v) or ((bar - v) if higher else (v - bar)) > margin for v in values]
    return any(passes(v, bar, higher) for v in values) and any(far)

