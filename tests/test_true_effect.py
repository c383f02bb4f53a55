"""The true effect in a new data source: the Bayesian normal–normal predictive interval against a second quadrature
over (μ, τ) and against its exact frequentist coverage when τ is drawn from its prior; Hartung–Knapp and the
Higgins–Thompson–Spiegelhalter interval against metafor's published BCG numbers and a hand computation; the mean's
sensitivity to weighting against the module's other random-effects code and the methodologist's numbers; and the
coverage simulation against the pooled one it shares its worlds with."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import (SOURCE_SPREAD_PRIOR_SCALE, bayesian_true_effect, hartung_knapp, hartung_knapp_true_effect,
                            random_effects, weighting_sensitivity)
from study.analysis.coverage import source_pooling_coverage, true_effect_coverage
from study.analysis.true_effect import _bayesian_rows, _hartung_knapp_rows

# tuned ArcFace − Fixed AdaCos relative to Fixed AdaCos's score on the benchmark's headline cells (off the floor), each
# standard error floored at its seed noise, on its df.
HEADLINE = [-0.01762, 0.02006, 0.01164, 0.00857, 0.00802, -0.0233, 0.00579, -0.03775, 0.02992]
HEADLINE_SE = [0.04086, 0.00493, 0.00351, 0.00531, 0.00291, 0.02212, 0.00474, 0.02863, 0.01783]
HEADLINE_DF = [2, 2, 2, 2, 2, 2, 2, 2, 6]
HEADLINE_SOURCES = ["mnist", "fashion-mnist", "digits", "fashion-mnist", "mnist", "strokes", "emoji", "glyphs",
                    "glyphs"]

# BCG vaccine trials (Colditz et al. 1994; metafor's dat.bcg): vaccinated TB+, TB−, control TB+, TB−.
BCG = np.array([[4, 119, 11, 128], [6, 300, 29, 274], [3, 228, 11, 209], [62, 13536, 248, 12619],
                [33, 5036, 47, 5761], [180, 1361, 372, 1079], [8, 2537, 10, 619], [505, 87886, 499, 87892],
                [29, 7470, 45, 7232], [17, 1699, 65, 1600], [186, 50448, 141, 27197], [5, 2493, 3, 2338],
                [27, 16886, 29, 17825]], dtype=float)


def _bcg_log_relative_risks() -> tuple[np.ndarray, np.ndarray]:
    """metafor's escalc(measure="RR"): log((a/n₁)/(c/n₂)) with variance 1/a − 1/n₁ + 1/c − 1/n₂."""
    a, b, c, d = BCG.T
    return np.log(a / (a + b)) - np.log(c / (c + d)), np.sqrt(1 / a - 1 / (a + b) + 1 / c - 1 / (c + d))


# --- the Bayesian predictive interval ------------------------------------------------------------------------------


def _by_hand_source_means(y, se, sources):
    frame = pd.DataFrame({"y": y, "v": np.square(se), "source": sources})
    grouped = frame.groupby("source", sort=False)
    return grouped["y"].mean().to_numpy(), np.sqrt(grouped["v"].sum() / grouped.size() ** 2).to_numpy()


def test_the_bayesian_interval_matches_a_second_quadrature_over_mu_and_tau():
    # The function integrates μ out in closed form and τ on a log grid; here both are integrated on a midpoint grid
    # of the raw likelihood Πᵢ N(ȳᵢ; μ, sᵢ² + τ²)·HN(τ), and θ_new | μ, τ ~ N(μ, τ²) gives the predictive CDF.
    y = [0.012, -0.004, 0.020, 0.001, -0.015, 0.008]
    se = [0.004, 0.006, 0.010, 0.003, 0.012, 0.005]
    sources = ["a", "a", "b", "c", "d", "e"]
    scale = 0.01
    result = bayesian_true_effect(y, se, sources, prior_scale=scale)
    means, errors = _by_hand_source_means(y, se, sources)
    assert [mean for _, mean, _, _ in result.source_means] == pytest.approx(means)
    assert [error for _, _, error, _ in result.source_means] == pytest.approx(errors)
    mu = np.linspace(-0.08, 0.08, 1601)
    tau = (np.arange(1200) + 0.5) * (8 * scale / 1200)
    log_joint = (stats.norm.logpdf(means[:, None, None], mu[None, :, None],
                                   np.sqrt(errors[:, None, None] ** 2 + tau[None, None, :] ** 2)).sum(axis=0)
                 + stats.halfnorm.logpdf(tau, scale=scale)[None, :])
    joint = np.exp(log_joint - log_joint.max())
    joint /= joint.sum()

    def predictive_cdf(x):
        return float(np.sum(joint * stats.norm.cdf((x - mu[:, None]) / tau[None, :])))

    assert predictive_cdf(result.prediction_low) == pytest.approx(0.025, abs=5e-4)
    assert predictive_cdf(result.prediction_high) == pytest.approx(0.975, abs=5e-4)
    mu_mass, tau_mass = joint.sum(axis=1), joint.sum(axis=0)
    mu_cdf = np.cumsum(mu_mass) - mu_mass / 2  # each grid point holds its cell's mass, half of it below the point
    assert np.interp([result.low, result.mean, result.high], mu, mu_cdf) == pytest.approx([0.025, 0.5, 0.975],
                                                                                           abs=2e-3)
    tau_cdf = np.cumsum(tau_mass) - tau_mass / 2
    assert np.interp([result.tau_low, result.tau, result.tau_high], tau, tau_cdf) == pytest.approx(
        [0.025, 0.5, 0.975], abs=2e-3)
    assert result.prediction_low < result.low < result.mean < result.high < result.prediction_high


def test_the_bayesian_interval_covers_exactly_when_tau_comes_from_its_prior():
    # With a flat prior on μ the interval is location-equivariant, so drawing τ from its half-normal prior (any μ)
    # makes the posterior predictive interval an exact 95% interval for θ_new: a brute-force Monte Carlo check of
    # the likelihood, the grid and the quantiles together, which any slip in them would push off 95%.
    rng = np.random.default_rng(7)
    errors = np.array([0.004, 0.015, 0.006, 0.02, 0.003])
    scale, draws, mu = 0.02, 2000, 0.3
    tau = np.abs(rng.normal(0.0, scale, draws))
    means = mu + rng.normal(0.0, 1.0, (draws, 5)) * tau[:, None] + rng.normal(0.0, 1.0, (draws, 5)) * errors
    new = mu + rng.normal(0.0, 1.0, draws) * tau
    hits = {"prediction": [], "mean": []}
    for chunk in np.array_split(np.arange(draws), 4):
        rows = _bayesian_rows(means[chunk], np.broadcast_to(errors, (chunk.size, 5)), scale, 0.95)
        hits["prediction"].append((rows["prediction_low"] <= new[chunk]) & (new[chunk] <= rows["prediction_high"]))
        hits["mean"].append((rows["low"] <= mu) & (mu <= rows["high"]))
    tolerance = 3 * math.sqrt(0.95 * 0.05 / draws)
    assert np.concatenate(hits["prediction"]).mean() == pytest.approx(0.95, abs=tolerance)
    assert np.concatenate(hits["mean"]).mean() == pytest.approx(0.95, abs=tolerance)


def test_a_prior_that_rules_out_spread_gives_the_fixed_effect_interval():
    y, se = np.array([0.01, 0.03, -0.01, 0.02]), np.array([0.01, 0.02, 0.015, 0.01])
    result = bayesian_true_effect(y, se, ["a", "b", "c", "d"], prior_scale=1e-7)
    weights = 1 / se ** 2
    fixed, half = np.sum(weights * y) / weights.sum(), 1.959964 / math.sqrt(weights.sum())
    assert (result.prediction_low, result.prediction_high) == pytest.approx((fixed - half, fixed + half), rel=1e-4)
    assert (result.low, result.mean, result.high) == pytest.approx((fixed - half, fixed, fixed + half), rel=1e-4)
    assert result.tau < 1e-7


def test_the_headline_pool_separates_spread_from_noise():
    # Cochran's Q over the sources' means is about its df (5.8 on 5): τ's posterior sits far below the prior's
    # scale, and the interval for a new source's true effect is narrower than the one for a new configuration's that
    # carries the cells' noise (pool_across_sources: [−4.7%, +4.6%]).
    result = bayesian_true_effect(HEADLINE, HEADLINE_SE, HEADLINE_SOURCES)
    assert result.prior_scale == SOURCE_SPREAD_PRIOR_SCALE and (result.sources, result.configurations) == (6, 9)
    assert result.tau < 0.2 * SOURCE_SPREAD_PRIOR_SCALE
    assert -0.03 < result.prediction_low < -0.01 and 0.02 < result.prediction_high < 0.04
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.tau = 0.0
    assert result["prediction_high"] == result.prediction_high and "half-normal" in result.method


@pytest.mark.parametrize("arguments, keywords, message", [
    (([0.1, 0.2], [0.01, 0.0], ["a", "b"]), {}, "finite and positive"),
    (([0.1, 0.2], [0.01, 0.01], ["a", "b"]), {"prior_scale": 0.0}, "prior scale"),
    (([0.1, 0.2], [0.01, 0.01], ["a", "b"]), {"prior_scale": math.inf}, "prior scale"),
    (([0.1, 0.2], [0.01], ["a", "b"]), {}, "one standard error per estimate"),
    (([0.1, 0.2], [0.01, 0.01], ["a", None]), {}, "needs its data source"),
])
def test_invalid_input_is_refused(arguments, keywords, message):
    with pytest.raises(ValueError, match=message):
        bayesian_true_effect(*arguments, **keywords)


# --- Hartung–Knapp and the Higgins–Thompson–Spiegelhalter interval --------------------------------------------------


def test_hartung_knapp_reproduces_metafor_on_the_bcg_trials():
    # metafor (and Stata's metan): DerSimonian–Laird τ² = 0.3088, μ = −0.7141, Q = 152.2330. metafor's REML fit with
    # test="knha": τ² = 0.3132, μ = −0.7145, SE 0.1808, CI [−1.1084, −0.3206] on t₁₂ (its q is 1.01, so the floor
    # at 1 is not met).
    y, se = _bcg_log_relative_risks()
    assert y[7:] == pytest.approx([0.0120, -0.4694, -1.3713, -0.3394, 0.4459, -0.0173], abs=1e-4)
    dl = hartung_knapp_true_effect(y, se, range(13))
    assert (dl.tau2, dl.mean) == pytest.approx((0.3088, -0.7141), abs=1e-4)
    assert (dl.df, dl.prediction_df, dl.sources) == (12, 11, 13)
    reml = _hartung_knapp_rows(y[None, :], se[None, :], 0.95, tau2=[0.3132])
    assert reml["mean"][0] == pytest.approx(-0.7145, abs=1e-4)
    assert reml["standard_error"][0] == pytest.approx(0.1808, abs=1e-4)
    assert (reml["low"][0], reml["high"][0]) == pytest.approx((-1.1084, -0.3206), abs=2e-4)
    # HTS by hand from the published numbers: −0.7145 ± t₁₁·√(0.3132 + 0.1808²).
    half = stats.t.ppf(0.975, 11) * math.sqrt(0.3132 + 0.1808 ** 2)
    assert (reml["prediction_low"][0], reml["prediction_high"][0]) == pytest.approx((-0.7145 - half, -0.7145 + half),
                                                                                   abs=3e-4)


def test_hartung_knapp_over_sources_is_hartung_knapp_over_their_means():
    y = [0.012, -0.004, 0.020, 0.001, -0.015, 0.008, 0.03]
    se = [0.004, 0.006, 0.010, 0.003, 0.012, 0.005, 0.02]
    sources = ["a", "a", "b", "c", "d", "e", "e"]
    means, errors = _by_hand_source_means(y, se, sources)
    result = hartung_knapp_true_effect(y, se, sources, confidence=0.9)
    classic, robust = random_effects(means, errors, 0.9), hartung_knapp(means, errors, 0.9)
    assert (result.mean, result.tau2) == pytest.approx((classic["estimate"], classic["tau2"]))
    assert (result.low, result.high) == pytest.approx((robust["low"], robust["high"]))
    half = stats.t.ppf(0.95, 3) * math.sqrt(classic["tau2"] + result.standard_error ** 2)
    assert (result.prediction_low, result.prediction_high) == pytest.approx((result.mean - half, result.mean + half))
    assert [weight for _, weight in result.weights] == pytest.approx(classic["weights"])


def test_hartung_knapp_is_nan_where_the_design_cannot_give_it():
    two = hartung_knapp_true_effect([0.1, 0.3, 0.2], [0.01, 0.02, 0.01], ["s", "s", "t"])
    assert math.isfinite(two.low) and math.isnan(two.prediction_low) and two.sources == 2
    one = hartung_knapp_true_effect([0.1, 0.3], [0.01, 0.02], ["s", "s"])
    assert one.mean == pytest.approx(0.2) and math.isnan(one.low) and math.isnan(one.prediction_high)


# --- the mean's sensitivity to weighting ----------------------------------------------------------------------------


def test_the_weighting_moves_the_mean_as_the_methodologist_measured():
    # Equal weights over sources −0.0%; inverse-variance over sources +1.0% [+0.3%, +1.7%], Q = 5.8 on 5 df.
    result = weighting_sensitivity(HEADLINE, HEADLINE_SE, HEADLINE_SOURCES)
    assert round(result.equal_mean, 3) == 0.0
    assert (round(result.inverse_variance_mean, 3), round(result.inverse_variance_low, 3),
            round(result.inverse_variance_high, 3)) == (0.010, 0.003, 0.017)
    assert result.shift == pytest.approx(result.inverse_variance_mean - result.equal_mean)
    means, errors = _by_hand_source_means(HEADLINE, HEADLINE_SE, HEADLINE_SOURCES)
    assert random_effects(means, errors)["q"] == pytest.approx(5.8, abs=0.05)
    assert result.equal_mean == pytest.approx(means.mean())
    half = stats.t.ppf(0.975, 5) * means.std(ddof=1) / math.sqrt(6)
    assert (result.equal_low, result.equal_high) == pytest.approx((means.mean() - half, means.mean() + half))
    assert sum(weight for _, weight in result.inverse_variance_weights) == pytest.approx(1.0)
    assert [weight for _, weight in result.equal_weights] == pytest.approx([1 / 6] * 6)


# --- the coverage simulation ----------------------------------------------------------------------------------------


def test_the_true_effect_simulation_draws_the_pooled_simulations_worlds():
    # Same seed, same worlds: pool_across_sources' rows must agree with source_pooling_coverage's to the last digit.
    arguments = (HEADLINE_SE, HEADLINE_DF, HEADLINE_SOURCES, 0.02)
    ours = true_effect_coverage(*arguments, source_ratios=(1.0,), worlds=300, seed=4)
    theirs = source_pooling_coverage(*arguments, source_ratios=(1.0,), benchmarks=300, seed=4)
    for interval in ("mean", "prediction"):
        mine = ours[(ours["estimator"] == "pool_across_sources") & (ours["interval"] == interval)].iloc[0]
        other = theirs[(theirs["pooling"] == "pool_across_sources") & (theirs["interval"] == interval)].iloc[0]
        assert (mine["coverage"], mine["mean_width"]) == (other["coverage"], other["mean_width"])


def test_the_simulation_tells_an_interval_that_holds_from_one_that_does_not():
    # Where the configurations barely differ (sd 0.5% of the score) and there is no source effect, DerSimonian–Laird's
    # τ² over 6 sources with standard errors on 2 df is often 0 and the HTS interval falls well short of 95%; the
    # Bayesian one integrates τ's uncertainty and holds.
    table = true_effect_coverage(HEADLINE_SE, HEADLINE_DF, HEADLINE_SOURCES, 0.005, source_ratios=(0.0,),
                                 worlds=1500, seed=2)
    coverage = table[table["interval"] == "prediction"].set_index("estimator")["coverage"]
    assert coverage["bayesian"] >= 0.95
    assert coverage["hartung_knapp_hts"] < 0.91
    assert table["worlds"].eq(1500).all() and table["mc_error"].iloc[0] == pytest.approx(math.sqrt(0.95 * 0.05 / 1500))
