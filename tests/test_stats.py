"""The benchmark's statistics against scipy's own tests and hand-computed cases."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sp

from train import stats


@pytest.mark.parametrize("values", [[0.8, 0.9, 0.85], [1.0, 3.0, 2.0, 8.0, 4.0], [5.0, 5.5]])
def test_t_interval_matches_scipy(values):
    est = stats.t_interval(values)
    low, high = sp.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=sp.sem(values))
    assert (est.low, est.high) == pytest.approx((low, high))
    assert est.p_value == pytest.approx(sp.ttest_1samp(values, 0.0).pvalue)


def test_welch_matches_scipy():
    a, b = [0.9, 0.85, 0.95, 0.8, 0.88], [0.7, 0.72, 0.6]
    est = stats.welch(a, b)
    ref = sp.ttest_ind(a, b, equal_var=False)
    assert est.mean == pytest.approx(np.mean(a) - np.mean(b)) and est.p_value == pytest.approx(ref.pvalue)
    assert est.df == pytest.approx(ref.df)


def test_paired_matches_scipy_and_is_sharper_than_unpaired():
    """The same runs measured twice: pairing removes the run-to-run spread (ALiBi's case in the issue)."""
    first = [9.1, 9.6, 9.3, 9.9, 9.0]
    last = [v + 0.12 + d for v, d in zip(first, [0.01, -0.01, 0.02, 0.0, -0.02])]
    est = stats.paired(last, first)
    assert est.p_value == pytest.approx(sp.ttest_rel(last, first).pvalue)
    assert est.p_value < 1e-4 < stats.welch(last, first).p_value
    with pytest.raises(ValueError, match="one value per run"):
        stats.paired([1.0], [1.0, 2.0])


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06; nan counts as failed
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.2, math.nan]) == pytest.approx([0.4, 1.0])
    assert stats.holm([]) == []


def test_one_run_gives_no_interval_and_no_test():
    est = stats.t_interval([0.7])
    assert math.isnan(est.half_width) and math.isnan(est.p_value) and est.fmt() == "0.7"
    assert math.isnan(stats.welch([0.7], [0.5, 0.6]).p_value)


def test_detectable_effect_shrinks_with_runs():
    few, many = stats.t_interval([0.1, 0.2, 0.3]), stats.t_interval([0.1, 0.2, 0.3] * 4)
    assert many.detectable() < few.detectable()
    # normal approximation: (1.96 + 0.84) * se for large df
    big = stats.Estimate(0.0, 1.0, 10 ** 6, 10 ** 6)
    assert big.detectable() == pytest.approx(1.96 + 0.8416, abs=1e-3)
