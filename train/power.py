"""The power of the exact tests the claims use on success rates (train/claims.py): the smallest difference Fisher's
exact test, or the binomial test against a coin, detects with 80 % power at the claim's level, computed exactly over
every outcome of the runs (scipy's distributions), so a half on bimodal runs states its detectable effect as a t test
does (:meth:`train.stats.Estimate.detectable`)."""
from __future__ import annotations

import functools
import math

from .stats import ALPHA, POWER, fisher

def fisher_power(n_a: int, n_b: int, p_a: float, p_b: float, alpha: float = ALPHA) -> float:
    """The power of Fisher's two-sided exact test at ``alpha`` to tell success probabilities ``p_a`` and ``p_b``
    apart with ``n_a`` and ``n_b`` runs: the probability, summed over every outcome, of a rejection.

    >>> round(fisher_power(10, 10, 1.0, 0.0), 3), round(fisher_power(10, 10, 0.5, 0.5), 3) <= ALPHA
    (1.0, True)
    """
    from scipy.stats import binom

    reject = _fisher_rejections(n_a, n_b, alpha)
    pa, pb = binom.pmf(range(n_a + 1), n_a, p_a), binom.pmf(range(n_b + 1), n_b, p_b)
    return float(sum(pa[ka] * pb[kb] for ka, kb in reject))


@functools.lru_cache(maxsize=64)
def _fisher_rejections(n_a: int, n_b: int, alpha: float) -> tuple[tuple[int, int], ...]:
    """The outcomes (successes of a, of b) Fisher's two-sided test rejects at ``alpha``."""
    return tuple((ka, kb) for ka in range(n_a + 1) for kb in range(n_b + 1) if fisher(ka, n_a, kb, n_b) < alpha)


def fisher_detectable(n_a: int, n_b: int, base: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest difference of success rates (in steps of 0.01) that Fisher's exact test detects with ``power``
    at ``alpha``, one kind at the pooled rate ``base`` and the other that much further from it (toward the side with
    more room); nan when no difference up to the whole range is detected.

    >>> fisher_detectable(10, 10, 0.0)   # 0 of 10 runs against p: detected with 80 % power from p = 0.59 on
    0.59
    """
    if not n_a or not n_b:
        return math.nan
    up = base <= 0.5
    for step in range(1, 101):
        d = step / 100
        other = base + d if up else base - d
        if not 0.0 <= other <= 1.0:
            break
        if fisher_power(n_a, n_b, other, base, alpha) >= power:
            return d
    return math.nan


def binomial_detectable(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest distance of a success rate from 1/2 (in steps of 0.01) that the exact two-sided binomial test of
    ``n`` runs detects with ``power`` at ``alpha``; nan when even a rate of 1 is not.

    >>> binomial_detectable(10)   # 10 runs: only a rate of 0.92 or more is told from a coin
    0.42
    """
    from scipy.stats import binom, binomtest

    if not n:
        return math.nan
    reject = [k for k in range(n + 1) if binomtest(k, n, 0.5).pvalue < alpha]
    for step in range(1, 51):
        if sum(binom.pmf(k, n, 0.5 + step / 100) for k in reject) >= power:
            return step / 100
    return math.nan
