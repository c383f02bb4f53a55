"""Tests for study.statistics against scipy's own tests, hand computations, brute force and simulation."""

import math

import numpy as np
import pytest
from scipy import stats

from study.statistics import (
    difference_ci,
    equivalence_test,
    holm_adjusted,
    mean_ci,
    minimum_detectable_difference,
    normal_density,
    paired_difference,
    seeds_to_detect,
    seeds_to_show_equivalence,
)

# Simulated rates are means of this many Bernoulli draws: sd ≤ 0.0036, so 0.015 is > 4 sd.
SIMULATIONS = 20_000


def simulated_t_test_power(difference, sd, n, alpha, seed):
    """Rejection rate of scipy's two-sided one-sample t-test on simulated paired differences."""
    rng = np.random.default_rng(seed)
    differences = rng.normal(difference, sd, size=(SIMULATIONS, n))
    return float(np.mean(stats.ttest_1samp(differences, 0.0, axis=1).pvalue < alpha))


def simulated_tost_rates(difference, sd, margin, sizes, alpha=0.05, seed=0):
    """TOST equivalence rate at each n in sizes, by scipy's one-sided one-sample t-tests.

    The sizes share their random numbers (the first n columns of one draw), so the rates at
    neighbouring n differ by the effect of the extra seed, not by simulation noise.
    """
    rng = np.random.default_rng(seed)
    draws = rng.normal(difference, sd, size=(SIMULATIONS, max(sizes)))
    rates = []
    for n in sizes:
        sample = draws[:, :n]
        above_lower = stats.ttest_1samp(sample, -margin, axis=1, alternative="greater").pvalue
        below_upper = stats.ttest_1samp(sample, margin, axis=1, alternative="less").pvalue
        rates.append(float(np.mean(np.maximum(above_lower, below_upper) < alpha)))
    return rates


# --- paired_difference ---------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 12, 40])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_paired_difference_matches_scipy_ttest_rel(n, confidence):
    rng = np.random.default_rng(1000 * n + int(confidence * 100))
    base = rng.normal(0.7, 0.05, size=n)  # a shared per-seed effect, as in real paired runs
    a = base + rng.normal(0.01, 0.02, size=n)
    b = base + rng.normal(0.0, 0.02, size=n)
    result = paired_difference(a, b, confidence)
    reference = stats.ttest_rel(a, b)
    interval = reference.confidence_interval(confidence)

    assert result["difference"] == pytest.approx(np.mean(a - b), rel=1e-12)
    assert result["p_value"] == pytest.approx(reference.pvalue, rel=1e-9)
    assert result["low"] == pytest.approx(interval.low, rel=1e-9)
    assert result["high"] == pytest.approx(interval.high, rel=1e-9)
    assert result["df"] == reference.df == n - 1
    assert result["n"] == n
    assert result["sd"] == pytest.approx(np.std(a - b, ddof=1), rel=1e-12)
    assert result["standard_error"] == pytest.approx(result["difference"] / reference.statistic, rel=1e-9)
    assert result["significant"] == bool(interval.low > 0 or interval.high < 0)
    # The interval excludes 0 exactly when the two-sided test rejects at 1 − confidence.
    assert result["significant"] == (reference.pvalue < 1 - confidence)


def test_paired_difference_finds_a_clear_paired_effect_that_unpaired_would_hide():
    # Seeds vary a lot, the method gap is small but consistent: only pairing reveals it.
    seed_effect = np.array([0.60, 0.75, 0.68, 0.81, 0.55, 0.72])
    a = seed_effect + np.array([0.012, 0.009, 0.011, 0.010, 0.013, 0.008])
    result = paired_difference(a, seed_effect)
    assert result["significant"]
    assert result["low"] > 0
    assert stats.ttest_ind(a, seed_effect).pvalue > 0.5


def test_paired_difference_rejects_unequal_lengths():
    with pytest.raises(ValueError, match="equal length"):
        paired_difference([0.1, 0.2, 0.3], [0.1, 0.2])


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([[0.1, 0.2]], [[0.1, 0.2]], "one-dimensional"),
        ([], [], "empty"),
        ([0.1, float("nan")], [0.1, 0.2], "NaN"),
        ([0.1, 0.2], [0.1, float("inf")], "NaN or inf"),
    ],
)
def test_paired_difference_rejects_malformed_input(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_difference(a, b)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, float("nan")])
def test_paired_difference_rejects_bad_confidence(confidence):
    with pytest.raises(ValueError, match="confidence"):
        paired_difference([0.1, 0.2], [0.0, 0.1], confidence)


def test_paired_difference_with_one_pair_knows_nothing_about_spread():
    result = paired_difference([0.8], [0.7])
    assert result["difference"] == pytest.approx(0.1)
    assert result["n"] == 1
    assert result["significant"] is False
    for key in ("low", "high", "p_value", "df", "sd", "standard_error"):
        assert math.isnan(result[key]), key


def test_paired_difference_with_identical_nonzero_differences_collapses_and_is_significant():
    b = np.array([0.25, 0.5, 0.75, 1.0])
    result = paired_difference(b + 0.125, b)  # exact binary fractions: every difference is 0.125
    assert result["difference"] == 0.125
    assert result["low"] == result["high"] == 0.125
    assert result["p_value"] == 0.0
    assert result["significant"] is True
    assert result["sd"] == 0.0
    assert result["standard_error"] == 0.0
    assert result["df"] == 3
    assert result["n"] == 4


def test_paired_difference_with_identical_zero_differences_is_not_significant():
    a = [0.3, 0.4, 0.5]
    result = paired_difference(a, a)
    assert result["difference"] == 0.0
    assert result["low"] == result["high"] == 0.0
    assert result["p_value"] == 1.0
    assert result["significant"] is False
    assert result["standard_error"] == 0.0


def test_paired_difference_zero_variance_survives_a_mean_that_rounds():
    # 0.1 summed three times and divided by three is not exactly 0.1: a naive sd would be
    # ~1e-17 and the t statistic astronomically large instead of an exact collapse.
    differences = np.full(3, 0.1)
    result = paired_difference(differences, np.zeros(3))
    assert result["sd"] == 0.0
    assert result["standard_error"] == 0.0
    assert result["low"] == result["high"] == result["difference"]
    assert result["p_value"] == 0.0 and result["significant"] is True


# --- holm_adjusted -------------------------------------------------------------------------


def textbook_holm_rejections(p_values, alpha):
    """Holm's procedure as written: walk the sorted p-values, reject while p_(k) < alpha/(m − k + 1)."""
    p = np.asarray(p_values, dtype=float)
    present = np.flatnonzero(~np.isnan(p))
    m = present.size
    rejected = np.zeros(p.size, dtype=bool)
    for k, index in enumerate(sorted(present, key=lambda i: p[i]), start=1):
        if p[index] < alpha / (m - k + 1):
            rejected[index] = True
        else:
            break  # the first retained hypothesis retains all larger p-values too
    return rejected


def test_holm_adjusted_hand_computed():
    # Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06.
    adjusted = holm_adjusted([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)


def test_holm_adjusted_keeps_nan_and_leaves_it_out_of_the_family():
    # m = 2, not 3: 0.01·2 = 0.02 and 0.04·1 = 0.04.
    adjusted = holm_adjusted([0.01, float("nan"), 0.04])
    assert math.isnan(adjusted[1])
    np.testing.assert_allclose(adjusted[[0, 2]], [0.02, 0.04], rtol=1e-12)


def test_holm_adjusted_caps_at_one():
    # 0.001·3 = 0.003, 0.5·2 = 1.0, 0.6·1 = 0.6 → running max keeps 1.0.
    np.testing.assert_allclose(holm_adjusted([0.5, 0.6, 0.001]), [1.0, 1.0, 0.003], rtol=1e-12)
    np.testing.assert_allclose(holm_adjusted([0.9, 0.8]), [1.0, 1.0])


def test_holm_adjusted_gives_ties_the_same_value():
    np.testing.assert_allclose(holm_adjusted([0.02, 0.02, 0.5]), [0.06, 0.06, 0.5], rtol=1e-12)


def test_holm_adjusted_single_test_is_unchanged():
    np.testing.assert_allclose(holm_adjusted([0.037]), [0.037])


def test_holm_adjusted_empty_and_all_nan():
    assert holm_adjusted([]).shape == (0,)
    assert np.all(np.isnan(holm_adjusted([float("nan"), float("nan")])))


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
def test_holm_adjusted_reproduces_the_step_down_rejections(seed, alpha):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 15))
    # A mix of real effects (tiny p) and nulls (uniform p), with the odd missing test.
    p = np.where(rng.random(m) < 0.4, rng.random(m) * 0.02, rng.random(m))
    p[rng.random(m) < 0.15] = np.nan
    adjusted = holm_adjusted(p)
    np.testing.assert_array_equal(np.isnan(adjusted), np.isnan(p))
    np.testing.assert_array_equal(np.nan_to_num(adjusted, nan=1.0) < alpha, textbook_holm_rejections(p, alpha))
    present = ~np.isnan(p)
    assert np.all(adjusted[present] >= p[present])
    assert np.all(adjusted[present] <= 1.0)


@pytest.mark.parametrize("bad", [[0.1, 1.2], [-0.01], [0.1, float("inf")], [[0.1, 0.2]]])
def test_holm_adjusted_rejects_invalid_p_values(bad):
    with pytest.raises(ValueError):
        holm_adjusted(bad)


# --- equivalence_test ----------------------------------------------------------------------


def test_equivalence_test_hand_computed_on_a_small_sample():
    differences = np.array([0.010, -0.004, 0.006, 0.002, -0.001, 0.008])
    n = differences.size
    mean = differences.sum() / n
    se = math.sqrt(((differences - mean) ** 2).sum() / (n - 1) / n)
    margin, alpha = 0.01, 0.05
    # Lower test: H0 δ ≤ −margin, rejected for large t; upper test: H0 δ ≥ margin, small t.
    p_lower = stats.t.sf((mean + margin) / se, n - 1)
    p_upper = stats.t.cdf((mean - margin) / se, n - 1)
    result = equivalence_test(mean, se, n - 1, margin, alpha)
    assert result["p_lower"] == pytest.approx(p_lower, rel=1e-10)
    assert result["p_upper"] == pytest.approx(p_upper, rel=1e-10)
    assert result["p_value"] == pytest.approx(max(p_lower, p_upper), rel=1e-10)
    assert result["equivalent"] == (max(p_lower, p_upper) < alpha)
    t_quantile = stats.t.ppf(0.95, n - 1)
    assert result["low"] == pytest.approx(mean - t_quantile * se, rel=1e-10)
    assert result["high"] == pytest.approx(mean + t_quantile * se, rel=1e-10)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_equivalence_test_matches_one_sided_ttest_1samp(seed, alpha):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 30))
    differences = rng.normal(rng.normal(0, 0.01), 0.015, size=n)
    margin = float(rng.uniform(0.002, 0.03))
    # The independent definition: one-sided one-sample t-tests on the shifted differences.
    p_lower = stats.ttest_1samp(differences + margin, 0.0, alternative="greater").pvalue
    p_upper = stats.ttest_1samp(differences - margin, 0.0, alternative="less").pvalue
    interval = stats.ttest_1samp(differences, 0.0).confidence_interval(1 - 2 * alpha)

    summary = paired_difference(differences, np.zeros(n))
    result = equivalence_test(summary["difference"], summary["standard_error"], summary["df"], margin, alpha)
    assert result["p_lower"] == pytest.approx(p_lower, rel=1e-8)
    assert result["p_upper"] == pytest.approx(p_upper, rel=1e-8)
    assert result["p_value"] == pytest.approx(max(p_lower, p_upper), rel=1e-8)
    assert result["equivalent"] == (max(p_lower, p_upper) < alpha)
    assert result["low"] == pytest.approx(interval.low, rel=1e-9)
    assert result["high"] == pytest.approx(interval.high, rel=1e-9)
    assert result["equivalent"] == (-margin < interval.low and interval.high < margin)


def test_equivalence_test_decides_both_ways():
    assert equivalence_test(0.001, 0.002, 9, margin=0.01)["equivalent"] is True
    assert equivalence_test(0.001, 0.008, 9, margin=0.01)["equivalent"] is False  # too noisy
    assert equivalence_test(0.02, 0.002, 9, margin=0.01)["equivalent"] is False  # outside the margin
    assert equivalence_test(-0.02, 0.002, 9, margin=0.01)["equivalent"] is False


def test_equivalence_test_with_zero_standard_error():
    inside = equivalence_test(0.004, 0.0, 5, margin=0.01)
    assert inside["equivalent"] is True and inside["p_value"] == 0.0
    assert inside["low"] == inside["high"] == 0.004
    outside = equivalence_test(-0.01, 0.0, 5, margin=0.01)  # on the margin is not inside it
    assert outside["equivalent"] is False and outside["p_value"] == 1.0
    # df cannot matter once the interval is a point (e.g. a Welch df left NaN at zero variance).
    assert equivalence_test(0.004, 0.0, float("nan"), margin=0.01)["equivalent"] is True


@pytest.mark.parametrize(
    ("difference", "se", "df"),
    [(0.0, float("nan"), float("nan")), (0.0, 0.01, float("nan")), (0.0, float("nan"), 4), (float("nan"), 0.01, 4)],
)
def test_equivalence_test_with_unknown_spread_is_undecided(difference, se, df):
    result = equivalence_test(difference, se, df, margin=0.01)
    assert math.isnan(result["p_value"])
    assert result["equivalent"] is False


@pytest.mark.parametrize("margin", [0.0, -0.01, float("nan")])
def test_equivalence_test_rejects_a_non_positive_margin(margin):
    with pytest.raises(ValueError, match="margin"):
        equivalence_test(0.0, 0.01, 5, margin)


# --- minimum_detectable_difference ---------------------------------------------------------


@pytest.mark.parametrize(
    ("sd", "n", "alpha", "power", "seed"),
    [(1.0, 2, 0.05, 0.8, 1), (1.0, 5, 0.05, 0.8, 2), (0.02, 10, 0.05, 0.8, 3),
     (3.0, 25, 0.05, 0.9, 4), (0.5, 8, 0.01, 0.8, 5)],
)
def test_minimum_detectable_difference_has_the_target_power_in_simulation(sd, n, alpha, power, seed):
    difference = minimum_detectable_difference(sd, n, alpha, power)
    assert difference > 0
    assert simulated_t_test_power(difference, sd, n, alpha, seed) == pytest.approx(power, abs=0.015)


def test_minimum_detectable_difference_agrees_with_the_tabulated_sample_size():
    # A one-sample two-sided t-test (alpha 0.05) needs n = 10 for effect 1 sd at 80% power.
    assert minimum_detectable_difference(1.0, 10) <= 1.0 < minimum_detectable_difference(1.0, 9)


def test_minimum_detectable_difference_approaches_the_normal_formula_for_many_seeds():
    # With df → ∞ the noncentral t becomes a shifted normal: (z_{1−α/2} + z_power)·sd/√n.
    normal = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 2.0 / math.sqrt(10_000)
    assert minimum_detectable_difference(2.0, 10_000) == pytest.approx(normal, rel=1e-3)


def test_minimum_detectable_difference_falls_with_n():
    values = [minimum_detectable_difference(1.0, n) for n in range(2, 60)]
    assert all(later < earlier for earlier, later in zip(values, values[1:]))


def test_minimum_detectable_difference_degenerate_inputs():
    assert math.isnan(minimum_detectable_difference(1.0, 1))
    assert math.isnan(minimum_detectable_difference(1.0, 0))
    assert math.isnan(minimum_detectable_difference(float("nan"), 10))
    assert math.isnan(minimum_detectable_difference(float("inf"), 10))
    assert minimum_detectable_difference(0.0, 10) == 0.0
    with pytest.raises(ValueError, match="sd"):
        minimum_detectable_difference(-1.0, 10)
    with pytest.raises(ValueError, match="power"):
        minimum_detectable_difference(1.0, 10, alpha=0.05, power=0.05)
    with pytest.raises(ValueError, match="alpha"):
        minimum_detectable_difference(1.0, 10, alpha=1.0)


# --- seeds_to_detect -----------------------------------------------------------------------


def brute_force_seeds_to_detect(difference, sd, alpha=0.05, power=0.8, max_seeds=2_000):
    """Walk n = 2, 3, … until the minimum detectable difference reaches |difference|."""
    for n in range(2, max_seeds + 1):
        if minimum_detectable_difference(sd, n, alpha, power) <= abs(difference):
            return n
    return None


@pytest.mark.parametrize(
    ("difference", "sd", "alpha", "power"),
    [(1.0, 1.0, 0.05, 0.8), (0.01, 0.02, 0.05, 0.8), (-0.01, 0.02, 0.05, 0.8),
     (5.0, 1.0, 0.05, 0.8), (0.3, 1.0, 0.01, 0.9), (0.004, 0.01, 0.05, 0.8)],
)
def test_seeds_to_detect_matches_brute_force(difference, sd, alpha, power):
    expected = brute_force_seeds_to_detect(difference, sd, alpha, power)
    assert seeds_to_detect(difference, sd, alpha, power) == expected


def test_seeds_to_detect_tabulated_case():
    assert seeds_to_detect(1.0, 1.0) == 10


def test_seeds_to_detect_none_cases():
    assert seeds_to_detect(0.0, 1.0) is None
    needed = seeds_to_detect(0.1, 1.0)
    assert needed is not None and needed > 50
    assert seeds_to_detect(0.1, 1.0, max_seeds=needed - 1) is None
    assert seeds_to_detect(0.1, 1.0, max_seeds=needed) == needed


def test_seeds_to_detect_without_noise_needs_the_minimum():
    assert seeds_to_detect(0.001, 0.0) == 2


def test_seeds_to_detect_rejects_unknown_spread():
    with pytest.raises(ValueError):
        seeds_to_detect(0.1, float("nan"))
    with pytest.raises(ValueError, match="max_seeds"):
        seeds_to_detect(0.1, 1.0, max_seeds=1)


# --- seeds_to_show_equivalence -------------------------------------------------------------


@pytest.mark.parametrize(
    ("difference", "sd", "margin", "seed"),
    [(0.0, 1.0, 0.5, 11), (0.0, 0.01, 0.01, 12), (0.2, 1.0, 0.5, 13), (-0.3, 1.0, 1.0, 14)],
)
def test_seeds_to_show_equivalence_has_about_the_target_power_in_simulation(difference, sd, margin, seed):
    n = seeds_to_show_equivalence(difference, sd, margin)
    assert n is not None and n > 2
    before, at = simulated_tost_rates(difference, sd, margin, [n - 1, n], seed=seed)
    assert at >= 0.8 - 0.02  # an approximate formula: a little slack below the target
    assert before < at


def test_seeds_to_show_equivalence_matches_brute_force_over_n():
    def brute_force(difference, sd, margin, alpha=0.05, power=0.8):
        beta = (1 - power) if difference != 0 else (1 - power) / 2
        for n in range(2, 10_000):
            width = (stats.t.ppf(1 - alpha, n - 1) + stats.t.ppf(1 - beta, n - 1)) * sd / math.sqrt(n)
            if width <= margin - abs(difference):
                return n
        return None

    cases = [(0.0, 1.0, 0.5), (0.1, 1.0, 0.5), (-0.1, 1.0, 0.5), (0.004, 0.01, 0.005), (0.0, 0.3, 2.0)]
    for difference, sd, margin in cases:
        assert seeds_to_show_equivalence(difference, sd, margin) == brute_force(difference, sd, margin)


def test_seeds_to_show_equivalence_none_cases():
    assert seeds_to_show_equivalence(0.5, 1.0, 0.5) is None  # on the margin: never inside it
    assert seeds_to_show_equivalence(-0.7, 1.0, 0.5) is None
    needed = seeds_to_show_equivalence(0.0, 1.0, 0.1)
    assert needed is not None and needed > 100
    assert seeds_to_show_equivalence(0.0, 1.0, 0.1, max_seeds=needed - 1) is None
    assert seeds_to_show_equivalence(0.0, 1.0, 0.1, max_seeds=needed) == needed


def test_seeds_to_show_equivalence_without_noise_needs_the_minimum():
    assert seeds_to_show_equivalence(0.1, 0.0, 0.5) == 2


def test_seeds_to_show_equivalence_rejects_bad_margin():
    with pytest.raises(ValueError, match="margin"):
        seeds_to_show_equivalence(0.0, 1.0, 0.0)


# --- confidence intervals --------------------------------------------------------------


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_mean_ci_matches_scipy_t_interval(confidence):
    values = np.array([0.971, 0.968, 0.975, 0.962, 0.979])
    mean, low, high = mean_ci(values, confidence)
    ref_low, ref_high = stats.t.interval(confidence, values.size - 1, loc=values.mean(), scale=stats.sem(values))
    assert mean == pytest.approx(values.mean())
    assert low == pytest.approx(ref_low, abs=1e-12)
    assert high == pytest.approx(ref_high, abs=1e-12)


def test_mean_ci_single_value_has_nan_bounds_and_constant_values_collapse():
    mean, low, high = mean_ci([0.9])
    assert mean == 0.9 and np.isnan(low) and np.isnan(high)
    assert mean_ci([0.7, 0.7, 0.7]) == (pytest.approx(0.7), pytest.approx(0.7), pytest.approx(0.7))


@pytest.mark.parametrize("bad", [[], [0.1, np.nan]])
def test_mean_ci_rejects_empty_or_non_finite(bad):
    with pytest.raises(ValueError):
        mean_ci(bad)


def test_difference_ci_hand_computed_welch():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0]
    # By hand: var_a/n_a = (5/3)/4 = 5/12, var_b/n_b = 4/3, se² = 21/12 = 1.75,
    # df = 1.75² / ((5/12)²/3 + (4/3)²/2) = 3.0625 / (25/432 + 8/9).
    df = 3.0625 / (25 / 432 + 8 / 9)
    half_width = stats.t.ppf(0.975, df) * np.sqrt(1.75)
    result = difference_ci(a, b)
    assert result["difference"] == pytest.approx(-1.5)
    assert result["df"] == pytest.approx(df, rel=1e-12)
    assert result["low"] == pytest.approx(-1.5 - half_width, rel=1e-12)
    assert result["high"] == pytest.approx(-1.5 + half_width, rel=1e-12)
    assert result["significant"] is False
    assert result["p_value"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-10)


@pytest.mark.parametrize("shift", [0.0, 0.004, 0.02])
def test_difference_ci_matches_scipy_welch(shift):
    rng = np.random.default_rng(7)
    a = rng.normal(0.97 + shift, 0.005, size=5)
    b = rng.normal(0.97, 0.01, size=4)
    result = difference_ci(a, b, confidence=0.95)
    reference = stats.ttest_ind(a, b, equal_var=False)
    assert result["p_value"] == pytest.approx(reference.pvalue, rel=1e-10)
    # The standard error behind the statistic: scipy's t is the difference over it.
    assert result["difference"] / result["standard_error"] == pytest.approx(reference.statistic, rel=1e-10)
    if hasattr(reference, "confidence_interval"):  # scipy ≥ 1.11
        interval = reference.confidence_interval(0.95)
        assert result["low"] == pytest.approx(interval.low, rel=1e-10)
        assert result["high"] == pytest.approx(interval.high, rel=1e-10)
        assert result["df"] == pytest.approx(reference.df, rel=1e-10)
    # Significance at 95% ⇔ the interval excludes zero ⇔ p < 0.05.
    assert result["significant"] == (result["low"] > 0 or result["high"] < 0)
    assert result["significant"] == (reference.pvalue < 0.05)


def test_difference_ci_clear_difference_is_significant():
    result = difference_ci([0.98, 0.981, 0.979, 0.982], [0.95, 0.952, 0.949, 0.951])
    assert result["significant"] is True and result["low"] > 0


def test_difference_ci_small_groups_give_nan_interval():
    result = difference_ci([0.9], [0.8, 0.85])
    assert result["difference"] == pytest.approx(0.075)
    assert np.isnan(result["low"]) and np.isnan(result["high"]) and np.isnan(result["p_value"])
    assert np.isnan(result["df"]) and result["significant"] is False


def test_difference_ci_zero_variance_in_both_groups():
    equal = difference_ci([0.5, 0.5, 0.5], [0.5, 0.5])
    assert equal["difference"] == 0.0 and equal["low"] == equal["high"] == 0.0
    assert equal["significant"] is False and equal["p_value"] == 1.0
    apart = difference_ci([0.75, 0.75, 0.75], [0.5, 0.5])
    assert apart["low"] == apart["high"] == pytest.approx(0.25)
    assert apart["significant"] is True and apart["p_value"] == 0.0


# scipy warns about "catastrophic cancellation" for any constant sample; the reference value is still exact.
@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")
def test_difference_ci_zero_variance_in_one_group_is_ordinary_welch():
    a, b = [0.875, 0.875, 0.875], [0.85, 0.87, 0.86, 0.88]
    result = difference_ci(a, b)
    assert result["df"] == pytest.approx(3.0)  # all the variance comes from b: df = n_b − 1
    assert result["p_value"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-10)


def test_difference_ci_rejects_non_finite():
    with pytest.raises(ValueError):
        difference_ci([0.1, np.nan], [0.2, 0.3])


def test_the_normal_density_is_scipys_float_for_float():
    z = np.concatenate([np.linspace(-40.0, 40.0, 2001), [0.0, 1e-300, -7.5, 38.6]])
    assert np.array_equal(normal_density(z), stats.norm.pdf(z))
    assert normal_density(0.0) == pytest.approx(1 / math.sqrt(2 * math.pi), rel=1e-15)
