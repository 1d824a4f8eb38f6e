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


def test_the_module_examples_hold():
    import doctest

    result = doctest.testmod(stats)
    assert result.attempted >= 10 and result.failed == 0


# -- outcomes that pass or fail -----------------------------------------------------------------------------


@pytest.mark.parametrize("k,n", [(0, 1), (0, 5), (1, 5), (3, 5), (5, 5), (7, 20), (19, 20), (0, 40), (13, 40)])
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_clopper_pearson_matches_scipy(k, n, alpha):
    ref = sp.binomtest(k, n).proportion_ci(confidence_level=1 - alpha, method="exact")
    assert stats.clopper_pearson(k, n, alpha) == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_clopper_pearson_by_hand_and_bad_counts():
    low, high = stats.clopper_pearson(0, 5)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 5))  # P(0 of 5 | p) = (1 - p)^5 = alpha / 2
    low, high = stats.clopper_pearson(5, 5)
    assert low == pytest.approx(0.025 ** (1 / 5)) and high == 1.0
    assert stats.clopper_pearson(0, 0) == (0.0, 1.0)
    for args, match in [((6, 5), "successes must be <= n"), ((-1, 5), "successes must be an int >= 0"),
                        ((2.0, 5), "successes must be an int"), ((1, True), "n must be an int"),
                        ((1, 5, 1.5), r"alpha must be in \(0, 1\)")]:
        with pytest.raises(ValueError, match=match):
            stats.clopper_pearson(*args)


def test_success_rate_counts_runs_at_the_bar_on_the_good_side():
    rate = stats.success_rate([0.95, 0.99, 0.2, math.nan, 0.949], bar=0.95, higher=True)
    ref = sp.binomtest(2, 5).proportion_ci(method="exact")
    assert rate[:3] == (2, 5, 0.4) and (rate.low, rate.high) == pytest.approx((ref.low, ref.high))
    assert stats.success_rate([3.0, 4.0, 4.5], bar=4.0, higher=False)[:2] == (2, 3)  # lower is better: <= bar
    empty = stats.success_rate([], bar=0.9, higher=True)
    assert empty[:2] == (0, 0) and math.isnan(empty.rate) and (empty.low, empty.high) == (0.0, 1.0)
    with pytest.raises(ValueError, match="bar must be a finite number"):
        stats.success_rate([1.0], bar=math.nan, higher=True)


@pytest.mark.parametrize("table", [(5, 5, 0, 5), (4, 6, 1, 7), (0, 3, 3, 3), (2, 10, 2, 10), (9, 12, 3, 11)])
def test_fisher_matches_scipy_both_sided_and_one_sided(table):
    k_a, n_a, k_b, n_b = table
    for alternative in ("two-sided", "greater", "less"):
        ref = sp.fisher_exact([[k_a, n_a - k_a], [k_b, n_b - k_b]], alternative=alternative).pvalue
        assert stats.fisher(k_a, n_a, k_b, n_b, alternative) == pytest.approx(ref)


def test_fisher_by_hand_and_bad_input():
    # 5 of 5 against 0 of 5: the only tables as extreme are this one (and its mirror, two-sided) of C(10, 5) = 252
    assert stats.fisher(5, 5, 0, 5, "greater") == pytest.approx(1 / 252)
    assert stats.fisher(5, 5, 0, 5) == pytest.approx(2 / 252)
    assert stats.fisher(5, 5, 0, 5, "less") == pytest.approx(1.0)
    assert math.isnan(stats.fisher(0, 0, 2, 5))
    with pytest.raises(ValueError, match="k_b must be <= n_b"):
        stats.fisher(1, 5, 6, 5)
    with pytest.raises(ValueError, match="alternative must be"):
        stats.fisher(1, 5, 2, 5, "bigger")


def test_mann_whitney_is_exact_where_possible():
    a, b = [0.91, 0.12, 0.95, 0.88, 0.15], [0.11, 0.09, 0.14, 0.93, 0.13]
    test = stats.mann_whitney(a, b)
    assert test.p_value == pytest.approx(sp.mannwhitneyu(a, b, method="exact").pvalue)
    assert test.shift == pytest.approx(np.median(np.subtract.outer(a, b)))  # Hodges-Lehmann
    # ties (every run solved the task or not): exact over the C(6, 3) = 20 relabellings, 2 as extreme -> 0.1
    tied = stats.mann_whitney([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert tied == (pytest.approx(0.1), 1.0)
    assert sp.mannwhitneyu([1.0] * 3, [0.0] * 3, method="asymptotic").pvalue != pytest.approx(0.1)
    rng = np.random.default_rng(0)
    big_a, big_b = list(rng.choice([0.0, 1.0], 30)), list(rng.choice([0.0, 1.0], 30))  # ties, C(60, 30) splits
    assert stats.mann_whitney(big_a, big_b).p_value == pytest.approx(
        sp.mannwhitneyu(big_a, big_b, method="asymptotic").pvalue)
    assert stats.mann_whitney([0.5, 0.5], [0.5]) == (1.0, 0.0)
    assert all(math.isnan(x) for x in stats.mann_whitney([], [1.0]))
    with pytest.raises(ValueError, match="b holds nan"):
        stats.mann_whitney([1.0], [math.nan])


def test_wilcoxon_paired_drops_zeros_and_is_exact_where_possible():
    a, b = [0.9, 0.7, 0.95, 0.4, 0.85, 0.6, 0.2], [0.1, 0.72, 0.3, 0.1, 0.2, 0.45, 0.5]
    test = stats.wilcoxon_paired(a, b)
    assert test.p_value == pytest.approx(sp.wilcoxon(a, b, method="exact").pvalue)
    d = np.subtract(a, b)
    walsh = [(d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d))]
    assert test.shift == pytest.approx(np.median(walsh)) and test.shift != pytest.approx(np.median(d))
    # a zero difference is dropped: as the 5 positive differences alone, 2 / 2^5
    assert stats.wilcoxon_paired([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0] * 6).p_value == pytest.approx(0.0625)
    # tied differences: exact over the 2^4 sign flips, 2 as extreme -> 0.125 (the normal approximation says less)
    assert stats.wilcoxon_paired([1.0] * 4, [0.0] * 4) == (pytest.approx(0.125), 1.0)
    assert stats.wilcoxon_paired([0.3, 0.8], [0.3, 0.8]) == (1.0, 0.0)  # every difference zero: p = 1
    with pytest.raises(ValueError, match="one value per run on both sides, got 2 and 1"):
        stats.wilcoxon_paired([1.0, 2.0], [1.0])


def test_pair_by_run_matches_runs_across_kinds():
    rope = {(0, 0): 1.0, (1, 1): 0.2, (2, 0): 0.9}
    alibi = {(2, 0): 0.3, (1, 1): 0.25, (4, 1): 0.7}
    assert stats.pair_by_run(rope, alibi) == ([0.2, 0.9], [0.25, 0.3])  # runs (1, 1), (2, 0), in that order
    assert stats.pair_by_run(rope, {}) == ([], [])
    with pytest.raises(ValueError, match=r"dict of \(seed, data seed\) -> value"):
        stats.pair_by_run([1.0], rope)


@pytest.mark.parametrize("values,bar,higher,bimodal", [
    ([1.0, 0.99, 0.05, 1.0], 0.95, True, True),  # solved or not at all
    ([0.97, 0.93, 0.96], 0.95, True, False),  # near misses only
    ([0.3, 0.2, 0.1], 0.95, True, False),  # none passes: not learned, not bimodal
    ([1.0, 0.99], 0.95, True, False),  # all pass
    ([0.95, 0.7125 - 1e-9], 0.95, True, True),  # a miss by more than a quarter of the bar
    ([0.95, 0.75], 0.95, True, False),  # a miss by less
    ([1.0, math.nan], 0.95, True, True),  # a run that diverged
    ([3.0, 9.0], 4.0, False, True),  # perplexity: 9 > 4 + 1
    ([3.0, 4.9], 4.0, False, False),
])
def test_is_bimodal_rule(values, bar, higher, bimodal):
    assert stats.is_bimodal(values, bar, higher) is bimodal


def test_is_bimodal_margin():
    assert stats.is_bimodal([0.1, -0.5], bar=0.0, higher=True, margin=0.2)
    assert not stats.is_bimodal([0.1, -0.5], bar=0.0, higher=True, margin=0.6)
    with pytest.raises(ValueError, match="explicit margin for a bar of 0"):
        stats.is_bimodal([0.1], bar=0.0, higher=True)
    with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
        stats.is_bimodal([0.1], bar=0.5, higher=True, margin=-1)
