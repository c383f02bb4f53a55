"""Bands over the whole tuning curve (study.analysis.tuning_bands), checked against independent references: opda's own
bands, numerical integration, a linear-programme solver, enumeration of subsets and closed forms."""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from study.analysis.tuning import expected_selected_after_n_trials
from study.analysis.tuning_bands import (
    _all_in_bounds_probability,
    _extreme_mean,
    expected_best_band,
    order_statistic_band,
    simultaneous_critical_value,
    successive_difference_sd,
    val_cdf_selected_band,
    whole_curve_band,
)



def _opda_nonparametric():
    """opda's nonparametric module, or a skip with the reason: opda is optional (a benchmark and test reference)."""
    return pytest.importorskip("opda.nonparametric", reason="opda is not installed (pip install opda==0.8.0)")


def _sample(size=12, seed=0, rho=0.8):
    rng = np.random.default_rng(seed)
    quality = rng.normal(0.35, 0.04, size)
    noise = 0.04 * math.sqrt(1 / rho - 1)
    return quality + rng.normal(0, noise, size), quality + rng.normal(0, noise, size)


# ---- the simultaneous band on uniform order statistics -------------------------------------------------------------

def test_all_in_bounds_probability_matches_closed_forms():
    # One uniform: P(l ≤ U ≤ h) = h − l.
    assert _all_in_bounds_probability(np.array([0.2]), np.array([0.7])) == pytest.approx(0.5, abs=1e-12)
    # Two: the joint density of (U_(1), U_(2)) is 2 on 0 < u1 < u2 < 1; integrate it over the box numerically.
    low, high = np.array([0.1, 0.3]), np.array([0.6, 0.9])
    exact, _ = integrate.dblquad(lambda u2, u1: 2.0, low[0], high[0], lambda u1: max(u1, low[1]),
                                 lambda u1: high[1])
    assert _all_in_bounds_probability(low, high) == pytest.approx(exact, abs=1e-9)
    # No constraint at all: probability one.
    assert _all_in_bounds_probability(np.zeros(5), np.ones(5)) == pytest.approx(1.0, abs=1e-12)


def test_all_in_bounds_probability_matches_monte_carlo():
    rng = np.random.default_rng(1)
    size = 6
    ranks = np.arange(1, size + 1)
    low, high = stats.beta.ppf(0.05, ranks, size + 1 - ranks), stats.beta.ppf(0.97, ranks, size + 1 - ranks)
    uniforms = np.sort(rng.random((400_000, size)), axis=1)
    simulated = np.mean(np.all((uniforms >= low) & (uniforms <= high), axis=1))
    assert _all_in_bounds_probability(low, high) == pytest.approx(simulated, abs=0.004)


@pytest.mark.parametrize("method", ["ld", "dkw"])
def test_order_statistic_band_is_simultaneous_and_ordered(method):
    low, high = order_statistic_band(10, 0.9, method)
    assert np.all(np.diff(low) >= 0) and np.all(np.diff(high) >= 0) and np.all(low < high)
    probability = _all_in_bounds_probability(low, high)
    if method == "ld":  # exact
        assert probability == pytest.approx(0.9, abs=1e-6)
    else:  # conservative
        assert probability >= 0.9
    wider_low, wider_high = order_statistic_band(10, 0.99, method)
    assert np.all(wider_low <= low + 1e-12) and np.all(wider_high >= high - 1e-12)


def test_order_statistic_band_matches_opdas_monte_carlo_band():
    nonparametric = _opda_nonparametric()
    ours_low, ours_high = order_statistic_band(12, 0.95, "ld")
    theirs_low, theirs_high = nonparametric._ld_band_weights(12, 0.95, "equal_tailed", np.random.default_rng(0),
                                                             n_jobs=1)
    # opda's cumulative weights: [0, low_1…low_N] and [high_1…high_N, 1]; its level comes from 100,000 draws.
    np.testing.assert_allclose(theirs_low[1:], ours_low, atol=0.005)
    np.testing.assert_allclose(theirs_high[:-1], ours_high, atol=0.005)


# ---- opda's band on the expected best val --------------------------------------------------------------------------

def test_expected_best_band_equals_opdas_dkw_band_exactly():
    nonparametric = _opda_nonparametric()
    val, _ = _sample()
    lower_cdf, _, upper_cdf = nonparametric.EmpiricalDistribution.confidence_bands(val, 0.9, a=0.0, b=1.0,
                                                                                   method="dkw")
    draws = np.arange(1, 25)
    band = expected_best_band(val, 0.9, max_n=24, method="dkw")
    np.testing.assert_allclose(band["low"], upper_cdf.average_tuning_curve(draws), atol=1e-12)
    np.testing.assert_allclose(band["high"], lower_cdf.average_tuning_curve(draws), atol=1e-12)


def test_expected_best_band_matches_opdas_ld_band():
    nonparametric = _opda_nonparametric()
    val, _ = _sample(seed=3)
    lower_cdf, point, upper_cdf = nonparametric.EmpiricalDistribution.confidence_bands(
        val, 0.95, a=0.0, b=1.0, method="ld_equal_tailed", generator=np.random.default_rng(0), n_jobs=1)
    draws = np.arange(1, 13)
    band = expected_best_band(val, 0.95)
    np.testing.assert_allclose(band["low"], upper_cdf.average_tuning_curve(draws), atol=0.01)
    np.testing.assert_allclose(band["high"], lower_cdf.average_tuning_curve(draws), atol=0.01)
    np.testing.assert_allclose(band["estimate"], point.u_tuning_curve(draws), atol=1e-12)


def test_expected_best_band_is_monotone_and_reaches_the_bounds():
    val, _ = _sample()
    band = expected_best_band(val, max_n=200)
    assert np.all(np.diff(band["low"]) >= -1e-12) and np.all(np.diff(band["high"]) >= -1e-12)
    assert band["high"].iloc[-1] == pytest.approx(1.0, abs=1e-6)  # the unseen top of the support
    assert band["low"].iloc[-1] <= val.max() + 1e-12
    inside = band["estimate"].notna()
    low, estimate, high = (band[column][inside] for column in ("low", "estimate", "high"))
    assert np.all((low <= estimate) & (estimate <= high))
    with pytest.raises(ValueError, match="within bounds"):
        expected_best_band(np.array([0.5, 1.5]))


# ---- the selected-test bands ---------------------------------------------------------------------------------------

def test_extreme_mean_matches_a_linear_programme():
    rng = np.random.default_rng(2)
    for _ in range(20):
        size = int(rng.integers(2, 8))
        values = rng.normal(size=size + 1)
        low, high = order_statistic_band(size, 0.8)
        low, high = low ** 3, high ** 3
        # Variables: masses p_1…p_{K+1} ≥ 0 summing to one, with low_i ≤ p_1 + … + p_i ≤ high_i.
        cumulative = np.tril(np.ones((size, size + 1)))
        solution = optimize.linprog(-values, A_ub=np.vstack([cumulative, -cumulative]),
                                    b_ub=np.concatenate([high, -low]), A_eq=np.ones((1, size + 1)), b_eq=[1.0],
                                    bounds=[(0, None)] * (size + 1), method="highs")
        assert _extreme_mean(values, low, high) == pytest.approx(-solution.fun, abs=1e-6)  # HiGHS tolerance


def test_estimate_is_the_subset_average():
    val, test = _sample(size=7, seed=4)
    band = whole_curve_band(val, test)
    for n in range(1, 8):
        subsets = itertools.combinations(range(7), n)
        brute = np.mean([test[list(subset)][np.argmax(val[list(subset)])] for subset in subsets])
        assert band["estimate"].iloc[n - 1] == pytest.approx(brute, abs=1e-12)


def test_whole_curve_band_contains_the_estimate_and_rests_on_the_noise_at_n_equal_N():
    val, test = _sample(size=12, seed=5)
    band = whole_curve_band(val, test)
    assert list(band["n"]) == list(range(1, 13))
    assert np.all((band["low"] < band["estimate"]) & (band["estimate"] < band["high"]))
    # At n = N no trial can be left out: the half-width is c·σ̂ (one trial's test score).
    half = (band["high"] - band["low"]).iloc[-1] / 2
    assert half == pytest.approx(simultaneous_critical_value(12) * successive_difference_sd(val, test), rel=1e-12)
    assert band["estimate"].iloc[-1] == pytest.approx(test[np.argmax(val)])
    clipped = whole_curve_band(val, test, bounds=(0.3, 0.4))
    assert clipped["low"].min() >= 0.3 and clipped["high"].max() <= 0.4


def test_successive_difference_sd_by_hand():
    val = np.array([3.0, 1.0, 2.0, 4.0])
    test = np.array([0.5, 0.1, 0.4, 0.2])  # in val order: 0.1, 0.4, 0.5, 0.2
    expected = math.sqrt((0.3 ** 2 + 0.1 ** 2 + 0.3 ** 2) / 6)
    assert successive_difference_sd(val, test) == pytest.approx(expected)
    assert math.isnan(successive_difference_sd([1.0], [0.5]))


def test_simultaneous_critical_value_lies_between_pointwise_and_bonferroni():
    for size in (12, 30):
        critical = simultaneous_critical_value(size, 0.95)
        pointwise = stats.t.ppf(0.975, 10)
        bonferroni = stats.t.ppf(1 - 0.025 / size, 10) * 1.3  # σ̂ estimated: a little above Bonferroni's normal
        assert pointwise < critical < bonferroni
    assert simultaneous_critical_value(12, 0.99) > simultaneous_critical_value(12, 0.9)


def test_degenerate_inputs_give_exact_answers():
    # Every test score equal: nothing varies, the band is that score at every n.
    band = whole_curve_band([0.1, 0.5, 0.3, 0.2], [0.4] * 4)
    np.testing.assert_allclose(band[["estimate", "low", "high"]].to_numpy(), 0.4, atol=1e-15)
    carried = val_cdf_selected_band([0.1, 0.5, 0.3, 0.2], [0.4] * 4)
    np.testing.assert_allclose(carried[["estimate", "low", "high"]].to_numpy(), 0.4, atol=1e-15)
    # One or two trials: the estimate is exact arithmetic and no band exists.
    single = whole_curve_band([0.3], [0.2])
    assert single["estimate"].iloc[0] == 0.2 and single[["low", "high"]].isna().all(axis=None)
    pair = whole_curve_band([0.3, 0.1], [0.2, 0.6])
    assert list(pair["estimate"]) == pytest.approx([0.4, 0.2]) and pair[["low", "high"]].isna().all(axis=None)
    # A pruned trial (val −inf) is drawn but never selected.
    pruned = whole_curve_band([0.3, -np.inf, 0.5], [0.2, 0.9, 0.4])
    assert pruned["estimate"].iloc[-1] == pytest.approx(0.4)


def test_val_cdf_selected_band_contains_the_estimate_and_widens_with_bounds():
    val, test = _sample(size=12, seed=6)
    band = val_cdf_selected_band(val, test)
    wide = val_cdf_selected_band(val, test, bounds=(0.0, 1.0))
    assert np.all((band["low"] <= band["estimate"]) & (band["estimate"] <= band["high"]))
    assert np.all(wide["high"] >= band["high"] - 1e-12) and np.all(wide["low"] <= band["low"] + 1e-12)
    np.testing.assert_allclose(band["estimate"], expected_selected_after_n_trials(val, test))


def test_whole_curve_band_covers_a_known_truth():
    # A world with an exact truth by numerical integration: val ~ N(0, 1), test = ρ·val + noise, so the expected
    # test score of the best-by-val of n draws is ρ·E[max of n normals] = ρ·∫ v·n·Φ(v)^(n−1)·φ(v) dv.
    rho, size, studies = 0.7, 12, 150
    truth = np.array([rho * integrate.quad(lambda v: v * n * stats.norm.cdf(v) ** (n - 1) * stats.norm.pdf(v),
                                           -10, 10)[0] for n in range(1, size + 1)])
    rng = np.random.default_rng(7)
    held = 0
    for _ in range(studies):
        val = rng.standard_normal(size)
        test = rho * val + math.sqrt(1 - rho ** 2) * rng.standard_normal(size)
        band = whole_curve_band(val, test)
        held += bool(np.all((band["low"] <= truth) & (truth <= band["high"])))
    assert held / studies >= 0.9  # nominal 95% simultaneous; 150 searches leave a Monte Carlo error of about 2%
