"""Random-effects pooling: hand-computed cases, a published meta-analysis, and a second implementation by matrix
algebra (generalised least squares with the method-of-moments τ² written from Q's expectation)."""

import math

import numpy as np
import pytest
from scipy import stats

from study.analysis import (dersimonian_laird_tau2, equal_weight_mean, equal_weight_slope, hartung_knapp,
                            random_effects, random_effects_slope, standard_error_from_interval)
from study.analysis.coverage import pooled_interval_coverage

Z = stats.norm.ppf(0.975)


# --- hand-computed cases --------------------------------------------------------------------------


def test_two_studies_by_hand():
    # w = 1, 1; ȳ = 2; Q = 1 + 1 = 2 on 1 df; Σw − Σw²/Σw = 2 − 1 = 1, so τ² = 1; w* = 1/2 each: μ = 2, SE = 1.
    pooled = random_effects([1.0, 3.0], [1.0, 1.0])
    assert pooled["tau2"] == pytest.approx(1.0) and pooled["q"] == pytest.approx(2.0)
    assert pooled["estimate"] == pytest.approx(2.0) and pooled["standard_error"] == pytest.approx(1.0)
    assert (pooled["low"], pooled["high"]) == pytest.approx((2.0 - Z, 2.0 + Z))
    assert pooled["i2"] == pytest.approx(0.5)  # (Q − df)/Q = 1/2
    assert math.isnan(pooled["prediction_low"]) and math.isnan(pooled["prediction_high"])  # k = 2 < 3


def test_three_studies_by_hand_with_the_prediction_interval():
    # ȳ = 1; Q = 1 + 1 + 4 = 6 on 2 df; Σw − Σw²/Σw = 3 − 1 = 2, so τ² = (6 − 2)/2 = 2; w* = 1/3 each:
    # μ = 1, SE = 1; I² = 4/6; prediction 1 ± t_{1, .975}·√(2 + 1).
    pooled = random_effects([0.0, 0.0, 3.0], [1.0, 1.0, 1.0])
    assert (pooled["tau2"], pooled["estimate"], pooled["standard_error"]) == pytest.approx((2.0, 1.0, 1.0))
    assert pooled["i2"] == pytest.approx(2 / 3)
    half = 12.706204736174698 * math.sqrt(3.0)  # t_{1, 0.975}
    assert (pooled["prediction_low"], pooled["prediction_high"]) == pytest.approx((1.0 - half, 1.0 + half))
    assert pooled["weights"] == pytest.approx([1 / 3] * 3) and pooled["k"] == 3


def test_homogeneous_studies_give_the_fixed_effect_mean():
    # Q = 0 < df: τ² truncates at 0, I² is 0 and the weights are 1/se²: (1·1 + 0.25·1 + 0.25·1)/1.5 = 1.
    pooled = random_effects([1.0, 1.0, 1.0], [1.0, 2.0, 2.0])
    assert pooled["tau2"] == 0.0 and pooled["i2"] == 0.0
    assert pooled["estimate"] == pytest.approx(1.0)
    assert pooled["standard_error"] == pytest.approx(1 / math.sqrt(1.5))
    # τ² = 0: the prediction interval is μ ± t_{1}·SE(μ).
    assert pooled["prediction_high"] - 1.0 == pytest.approx(12.706204736174698 / math.sqrt(1.5))


def test_one_study_is_its_own_estimate_without_heterogeneity_or_prediction():
    pooled = random_effects([0.3], [0.1], confidence=0.9)
    assert pooled["estimate"] == 0.3 and pooled["tau2"] == 0.0 and math.isnan(pooled["i2"])
    assert (pooled["low"], pooled["high"]) == pytest.approx((0.3 - 0.1 * stats.norm.ppf(0.95),
                                                             0.3 + 0.1 * stats.norm.ppf(0.95)))
    assert math.isnan(pooled["prediction_low"])


def test_bad_inputs_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="one standard error per estimate"):
        random_effects([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="must be positive"):
        random_effects([1.0, 2.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="must be finite"):
        random_effects([1.0, float("nan")], [1.0, 1.0])
    with pytest.raises(ValueError, match="confidence"):
        random_effects([1.0], [1.0], confidence=95)


# --- a published meta-analysis ---------------------------------------------------------------------

# BCG vaccine trials (Colditz et al. 1994; metafor's dat.bcg): vaccinated TB+, TB−, control TB+, TB−.
BCG = [(4, 119, 11, 128), (6, 300, 29, 274), (3, 228, 11, 209), (62, 13536, 248, 12619), (33, 5036, 47, 5761),
       (180, 1361, 372, 1079), (8, 2537, 10, 619), (505, 87886, 499, 87892), (29, 7470, 45, 7232),
       (17, 1699, 65, 1600), (186, 50448, 141, 27197), (5, 2493, 3, 2338), (27, 16886, 29, 17825)]


def bcg_log_risk_ratios():
    """The trials' log risk ratios and their standard errors."""
    y = [math.log((a / (a + b)) / (c / (c + d))) for a, b, c, d in BCG]
    v = [1 / a - 1 / (a + b) + 1 / c - 1 / (c + d) for a, b, c, d in BCG]
    return np.array(y), np.sqrt(v)


def test_the_bcg_meta_analysis_matches_metafors_published_dersimonian_laird_fit():
    # Viechtbauer (2010), metafor: rma(yi, vi, data = dat.bcg, method = "DL"): estimate −0.7141 (SE 0.1787),
    # 95% CI [−1.0644, −0.3638], τ² = 0.3088, I² = 92.12%, Q(df = 12) = 152.2330.
    pooled = random_effects(*bcg_log_risk_ratios())
    assert pooled["estimate"] == pytest.approx(-0.7141, abs=5e-5)
    assert pooled["standard_error"] == pytest.approx(0.1787, abs=5e-5)
    assert (pooled["low"], pooled["high"]) == pytest.approx((-1.0644, -0.3638), abs=5e-5)
    assert pooled["tau2"] == pytest.approx(0.3088, abs=5e-5)
    assert pooled["i2"] == pytest.approx(0.9212, abs=5e-5)
    assert pooled["q"] == pytest.approx(152.2330, abs=5e-4)


# --- a second implementation ----------------------------------------------------------------------------


def matrix_random_effects(y, se, confidence=0.95):
    """Independently: Q = yᵀPy with P = W − W11ᵀW/(1ᵀW1); E[Q] = (k − 1) + τ²·tr(P) solved for τ² (truncated at 0);
    then generalised least squares with V = diag(se²) + τ²I for μ and its variance (1ᵀV⁻¹1)⁻¹."""
    y, se = np.asarray(y, float), np.asarray(se, float)
    k, ones = y.size, np.ones((y.size, 1))
    weights = np.diag(1 / se ** 2)
    projection = weights - weights @ ones @ ones.T @ weights / (ones.T @ weights @ ones).item()
    q = (y @ projection @ y).item()
    tau2 = max(0.0, (q - (k - 1)) / np.trace(projection))
    inverse = np.linalg.inv(np.diag(se ** 2) + tau2 * np.eye(k))
    variance = 1 / (ones.T @ inverse @ ones).item()
    mu = variance * (ones.T @ inverse @ y).item()
    half = stats.t.ppf(0.5 + confidence / 2, k - 2) * math.sqrt(tau2 + variance) if k >= 3 else math.nan
    h2 = q / (k - 1)  # Higgins & Thompson's H²; I² = (H² − 1)/H²
    return {"estimate": mu, "standard_error": math.sqrt(variance), "tau2": tau2, "q": q,
            "i2": max(0.0, (h2 - 1) / h2), "prediction_low": mu - half, "prediction_high": mu + half,
            "low": mu - stats.norm.ppf(0.5 + confidence / 2) * math.sqrt(variance),
            "high": mu + stats.norm.ppf(0.5 + confidence / 2) * math.sqrt(variance)}


@pytest.mark.parametrize("seed", range(6))
def test_random_cases_agree_with_the_matrix_implementation(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 12))
    se = rng.uniform(0.005, 0.05, k)
    y = rng.normal(0.01, rng.choice([0.0, 0.01, 0.05]), k) + rng.normal(0, se)
    confidence = float(rng.choice([0.9, 0.95, 0.99]))
    ours, theirs = random_effects(y, se, confidence), matrix_random_effects(y, se, confidence)
    for key in theirs:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-9, abs=1e-12), key


def test_statsmodels_combine_effects_agrees_where_installed():
    meta = pytest.importorskip("statsmodels.stats.meta_analysis")
    y, se = bcg_log_risk_ratios()
    result = meta.combine_effects(y, se ** 2, method_re="dl")
    ours = random_effects(y, se)
    assert ours["estimate"] == pytest.approx(result.mean_effect_re, rel=1e-9)
    assert ours["tau2"] == pytest.approx(result.tau2, rel=1e-9)


def test_dersimonian_laird_alone_matches_the_matrix_implementation():
    y, se = bcg_log_risk_ratios()
    tau2, q = dersimonian_laird_tau2(y, se)
    theirs = matrix_random_effects(y, se)
    assert (tau2, q) == pytest.approx((theirs["tau2"], theirs["q"]))


# --- the slope on a covariate, and standard errors from intervals -----------------------------------------


def test_the_slope_is_weighted_least_squares_with_the_random_effects_weights():
    rng = np.random.default_rng(3)
    x = np.log10([10, 50, 100, 300, 1000, 30])
    se = rng.uniform(0.01, 0.03, x.size)
    y = 0.02 * x - 0.03 + rng.normal(0, se)
    slope = random_effects_slope(y, se, x)
    tau2 = random_effects(y, se)["tau2"]
    weights = 1 / (se ** 2 + tau2)
    fitted = np.polyfit(x, y, 1, w=np.sqrt(weights))  # numpy weights multiply residuals: √w
    assert slope["slope"] == pytest.approx(fitted[0], rel=1e-9)
    # Var(β̂) = 1/Σw(x − x̄_w)² for a straight line.
    centre = np.sum(weights * x) / np.sum(weights)
    assert slope["standard_error"] == pytest.approx(1 / math.sqrt(np.sum(weights * (x - centre) ** 2)), rel=1e-9)
    assert slope["high"] - slope["slope"] == pytest.approx(Z * slope["standard_error"])
    assert math.isnan(random_effects_slope(y[:2], se[:2], x[:2])["slope"])  # too few studies
    assert math.isnan(random_effects_slope(y[:3], se[:3], [1.0, 1.0, 1.0])["slope"])  # one covariate value


def test_standard_errors_come_back_from_t_and_normal_intervals():
    sample = np.array([0.01, 0.03, -0.02, 0.04])
    result = stats.ttest_1samp(sample, 0.0)
    interval = result.confidence_interval(0.95)
    se = sample.std(ddof=1) / 2
    assert standard_error_from_interval(interval.low, interval.high, 0.95, df=3) == pytest.approx(se)
    assert standard_error_from_interval(-Z * 0.5, Z * 0.5) == pytest.approx(0.5)
    assert math.isnan(standard_error_from_interval(float("nan"), 1.0))
    assert math.isnan(standard_error_from_interval(0.0, 1.0, df=0))


# --- the intervals that hold their level when the standard errors are themselves estimated -----------------------


def test_hartung_knapp_by_hand():
    # ȳ = 1, τ² = 2, w* = 1/3 each (as above): q = Σw*(y − μ)²/(k − 1) = (1 + 1 + 4)/3/2 = 1, so the floor is not
    # reached: SE = √(1/Σw*) = 1 and the interval is 1 ± t_{2, .975}.
    robust = hartung_knapp([0.0, 0.0, 3.0], [1.0, 1.0, 1.0])
    assert robust["q"] == pytest.approx(1.0) and robust["standard_error"] == pytest.approx(1.0)
    assert (robust["low"], robust["high"]) == pytest.approx((1.0 - 4.302652729911275, 1.0 + 4.302652729911275))
    # Homogeneous studies: q = 0 < 1, so the floor keeps the normal-theory SE, with t on k − 1 df.
    floored = hartung_knapp([1.0, 1.0, 1.0], [1.0, 2.0, 2.0])
    assert floored["q"] == 0.0 and floored["standard_error"] == pytest.approx(1 / math.sqrt(1.5))
    assert math.isnan(hartung_knapp([0.3], [0.1])["low"])


def test_equal_weight_mean_is_the_one_sample_t_interval_and_its_prediction_interval():
    y = np.array([0.01, -0.004, 0.02, 0.007, 0.0])
    equal = equal_weight_mean(y)
    assert (equal["low"], equal["high"]) == pytest.approx(tuple(stats.ttest_1samp(y, 0.0).confidence_interval()))
    # A new draw from the same normal: (y_new − ȳ)/(s·√(1 + 1/k)) is t on k − 1 df.
    half = stats.t.ppf(0.975, 4) * y.std(ddof=1) * math.sqrt(1.2)
    assert (equal["prediction_low"], equal["prediction_high"]) == pytest.approx((y.mean() - half, y.mean() + half))
    assert math.isnan(equal_weight_mean([0.2])["low"])


def test_equal_weight_slope_by_hand():
    # y = 1 + 2x + (+1, −2, +1) at x = 0, 1, 2: the residuals are orthogonal to (1, x), so the slope is exactly 2;
    # SSR = 6 on 1 df, Sxx = 2: SE = √(6/2) and the interval is 2 ± t_{1, .975}·√3.
    slope = equal_weight_slope([2.0, 1.0, 6.0], [0.0, 1.0, 2.0])
    assert slope["slope"] == pytest.approx(2.0) and slope["standard_error"] == pytest.approx(math.sqrt(3.0))
    assert slope["high"] - 2.0 == pytest.approx(12.706204736174698 * math.sqrt(3.0))
    assert math.isnan(equal_weight_slope([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])["slope"])


def test_pooled_coverage_finds_the_random_effects_interval_short_where_standard_errors_are_estimated():
    # Seven cells whose standard errors span 5×. With exact standard errors and no heterogeneity the
    # DerSimonian–Laird CI holds 95% (so the simulation can see a correct interval); with standard errors on 2 df
    # and τ = 2 median SEs it falls near 87%, while the equal-weight intervals hold their level.
    se = np.geomspace(0.004, 0.02, 7)
    exact = pooled_interval_coverage(se, [math.inf] * 7, tau_ratios=(0.0,), benchmarks=600, seed=1).iloc[0]
    assert abs(exact["dl_coverage"] - 0.95) < 3 * exact["mc_error"]
    noisy = pooled_interval_coverage(se, [2] * 7, np.log10([10, 10, 50, 100, 100, 300, 1000]), tau_ratios=(2.0,),
                                     benchmarks=600, seed=2).iloc[0]
    assert noisy["dl_coverage"] < 0.92 and noisy["equal_coverage"] >= 0.93
    assert noisy["equal_prediction_coverage"] >= 0.93 and noisy["equal_slope_coverage"] >= 0.93
    assert noisy["dl_width"] < noisy["equal_width"]  # the short interval is short because it is too narrow
