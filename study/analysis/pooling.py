"""Pooling studies: the random-effects mean of one difference measured in several studies, what a new study should
expect (the prediction interval), and how the difference moves with a study-level covariate such as log C.

Each estimator is one function whose docstring states its formula; estimates are treated as independent, each with a
known standard error (the usual assumption of a meta-analysis: with few replicates per study it is an approximation).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from study.statistics import check_probability

RANDOM_EFFECTS_METHOD = "DerSimonian-Laird τ², inverse-variance weights 1/(se² + τ²), normal CI, " \
                        "Higgins-Thompson-Spiegelhalter prediction interval (t on k − 2 df)"


def _checked(estimates, standard_errors) -> tuple[np.ndarray, np.ndarray]:
    """Estimates and standard errors as float arrays of one length, every one finite and every error positive."""
    y = np.asarray(estimates, dtype=float).ravel()
    se = np.asarray(standard_errors, dtype=float).ravel()
    if y.size == 0 or y.size != se.size:
        raise ValueError(f"give one standard error per estimate, at least one of each; got {y.size} estimates and "
                         f"{se.size} standard errors")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(se))):
        raise ValueError("estimates and standard errors must be finite; leave out the studies that have none")
    if np.any(se <= 0):
        raise ValueError("every standard error must be positive: a study with a zero standard error would take all "
                         "the weight; leave it out or give its real uncertainty")
    return y, se


def dersimonian_laird_tau2(estimates, standard_errors) -> tuple[float, float]:
    """(τ², Q): Cochran's Q = Σ wᵢ(yᵢ − ȳ_w)² with wᵢ = 1/seᵢ², and τ² = max(0, (Q − (k − 1)) / (Σw − Σw²/Σw))
    (DerSimonian & Laird 1986). One estimate has no between-study information: τ² = 0, Q = 0."""
    return _dersimonian_laird(*_checked(estimates, standard_errors))


def _dersimonian_laird(y: np.ndarray, se: np.ndarray) -> tuple[float, float]:
    """dersimonian_laird_tau2 of inputs already checked."""
    w = 1.0 / se ** 2
    fixed = float(np.sum(w * y) / np.sum(w))
    q = float(np.sum(w * (y - fixed) ** 2))
    scaling = float(np.sum(w) - np.sum(w ** 2) / np.sum(w))
    if y.size < 2 or scaling <= 0:
        return 0.0, q
    return max(0.0, (q - (y.size - 1)) / scaling), q


def _random_effects_mean(y: np.ndarray, se: np.ndarray) -> tuple[float, float, np.ndarray, float]:
    """(τ², Q, weights 1/(seᵢ² + τ²), weighted mean) of inputs already checked."""
    tau2, q = _dersimonian_laird(y, se)
    weights = 1.0 / (se ** 2 + tau2)
    return tau2, q, weights, float(np.sum(weights * y) / np.sum(weights))


def random_effects(estimates, standard_errors, confidence: float = 0.95) -> dict:
    """The random-effects pooled mean of k estimates with its interval, heterogeneity and prediction interval.

    τ² by DerSimonian–Laird; weights wᵢ* = 1/(seᵢ² + τ²); μ = Σwᵢ*yᵢ / Σwᵢ*, SE(μ) = 1/√Σwᵢ*, and the normal CI
    μ ± z·SE(μ). I² = max(0, (Q − (k − 1))/Q) (Higgins & Thompson 2002; NaN for one estimate, 0 when Q = 0). The
    Higgins–Thompson–Spiegelhalter (2009) prediction interval for the difference in a new study,
    μ ± t_{k−2}·√(τ² + SE(μ)²), needs k ≥ 3 (NaN otherwise).
    """
    check_probability(confidence, "confidence")
    y, se = _checked(estimates, standard_errors)
    k = int(y.size)
    tau2, q, weights, estimate = _random_effects_mean(y, se)
    standard_error = float(1.0 / math.sqrt(np.sum(weights)))
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    if k < 2:
        i2 = math.nan
    else:
        i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    if k >= 3:
        half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 2)) * math.sqrt(tau2 + standard_error ** 2)
        prediction = (estimate - half, estimate + half)
    else:
        prediction = (math.nan, math.nan)
    return {"estimate": estimate, "low": estimate - z * standard_error, "high": estimate + z * standard_error,
            "standard_error": standard_error, "tau2": tau2, "i2": i2, "q": q, "k": k,
            "prediction_low": prediction[0], "prediction_high": prediction[1], "confidence": confidence,
            "weights": (weights / weights.sum()).tolist(), "method": RANDOM_EFFECTS_METHOD}


HARTUNG_KNAPP_METHOD = "Hartung-Knapp-Sidik-Jonkman: the random-effects mean with variance max(1, q)/Σwᵢ* and t on k − 1 df"


def hartung_knapp(estimates, standard_errors, confidence: float = 0.95) -> dict:
    """The random-effects mean's interval by Hartung–Knapp–Sidik–Jonkman, for few studies whose standard errors are
    themselves estimated: with random_effects' weights wᵢ* and mean μ, q = Σwᵢ*(yᵢ − μ)² / (k − 1) and
    μ ± t_{k−1}·√(max(1, q)/Σwᵢ*). The floor at q = 1 keeps it never narrower than the normal-theory SE (Röver,
    Knapp & Friede 2015). The DerSimonian–Laird normal CI under-covers when k is small and τ² > 0 (measured by
    study.analysis.coverage.pooled_interval_coverage); this one comes closer to its level there. Needs k ≥ 2 (NaN
    bounds otherwise)."""
    check_probability(confidence, "confidence")
    y, se = _checked(estimates, standard_errors)
    k = int(y.size)
    _, _, weights, estimate = _random_effects_mean(y, se)
    if k < 2:
        return {"estimate": estimate, "low": math.nan, "high": math.nan, "standard_error": math.nan, "q": math.nan,
                "df": 0, "k": k, "confidence": confidence, "method": HARTUNG_KNAPP_METHOD}
    q = float(np.sum(weights * (y - estimate) ** 2) / (k - 1))
    standard_error = math.sqrt(max(1.0, q) / float(np.sum(weights)))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1)) * standard_error
    return {"estimate": estimate, "low": estimate - half, "high": estimate + half, "standard_error": standard_error,
            "q": q, "df": k - 1, "k": k, "confidence": confidence, "method": HARTUNG_KNAPP_METHOD}


EQUAL_WEIGHT_METHOD = "equal weights: the configurations' mean with t on k − 1 df over their spread"


def equal_weight_mean(estimates, confidence: float = 0.95) -> dict:
    """The plain mean of k estimates, each configuration one draw of (its true difference + its own noise): the
    interval ȳ ± t_{k−1}·s/√k for the mean and the prediction interval ȳ ± t_{k−1}·s·√(1 + 1/k) for a new
    configuration's estimate (s the estimates' sd). It uses no standard error, so standard errors estimated on few
    degrees of freedom cannot lend one study all the weight; pooled_interval_coverage measures what each interval
    covers. Needs k ≥ 2 (NaN bounds otherwise)."""
    check_probability(confidence, "confidence")
    y = np.asarray(estimates, dtype=float).ravel()
    if y.size == 0 or not np.all(np.isfinite(y)):
        raise ValueError("give at least one estimate, every one finite")
    k = int(y.size)
    estimate = float(y.mean())
    if k < 2:
        return {"estimate": estimate, "low": math.nan, "high": math.nan, "prediction_low": math.nan,
                "prediction_high": math.nan, "sd": math.nan, "k": k, "confidence": confidence,
                "method": EQUAL_WEIGHT_METHOD}
    sd = float(y.std(ddof=1))
    quantile = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1))
    half, predicted = quantile * sd / math.sqrt(k), quantile * sd * math.sqrt(1.0 + 1.0 / k)
    return {"estimate": estimate, "low": estimate - half, "high": estimate + half,
            "prediction_low": estimate - predicted, "prediction_high": estimate + predicted, "sd": sd, "k": k,
            "confidence": confidence, "method": EQUAL_WEIGHT_METHOD}


def random_effects_slope(estimates, standard_errors, covariate, confidence: float = 0.95) -> dict:
    """How the estimates move with a study-level covariate (e.g. log10 C): weighted least squares of yᵢ on xᵢ with the
    random-effects weights 1/(seᵢ² + τ²), τ² of the intercept-only DerSimonian–Laird fit (it still holds the
    variance the covariate explains, so the interval is conservative). Slope β̂ = [(XᵀWX)⁻¹XᵀWy]₁, SE =
    √[(XᵀWX)⁻¹]₁₁, normal CI. Needs ≥ 3 estimates at ≥ 2 distinct covariate values (NaN otherwise)."""
    check_probability(confidence, "confidence")
    y, se = _checked(estimates, standard_errors)
    x = np.asarray(covariate, dtype=float).ravel()
    if x.size != y.size or not np.all(np.isfinite(x)):
        raise ValueError(f"give one finite covariate value per estimate; got {x.size} for {y.size} estimates")
    nan = {"slope": math.nan, "low": math.nan, "high": math.nan, "standard_error": math.nan, "k": int(y.size)}
    if y.size < 3 or np.ptp(x) == 0:
        return nan
    tau2, _, weights, _ = _random_effects_mean(y, se)
    design = np.column_stack([np.ones_like(x), x])
    information = design.T @ (weights[:, None] * design)
    covariance = np.linalg.inv(information)
    slope = float((covariance @ design.T @ (weights * y))[1])
    standard_error = float(math.sqrt(covariance[1, 1]))
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    return {"slope": slope, "low": slope - z * standard_error, "high": slope + z * standard_error,
            "standard_error": standard_error, "k": int(y.size), "tau2": tau2}


def equal_weight_slope(estimates, covariate, confidence: float = 0.95) -> dict:
    """How the estimates move with a study-level covariate, every configuration weighted alike: ordinary least squares
    of yᵢ on xᵢ, the slope's SE from the residual spread (which holds τ² and each study's noise), t on k − 2 df.
    Needs ≥ 3 estimates at ≥ 2 distinct covariate values (NaN otherwise)."""
    check_probability(confidence, "confidence")
    y = np.asarray(estimates, dtype=float).ravel()
    x = np.asarray(covariate, dtype=float).ravel()
    if x.size != y.size or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError(f"give one finite covariate value per finite estimate; got {x.size} for {y.size} estimates")
    if y.size < 3 or np.ptp(x) == 0:
        return {"slope": math.nan, "low": math.nan, "high": math.nan, "standard_error": math.nan, "k": int(y.size)}
    fit = stats.linregress(x, y)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, y.size - 2)) * float(fit.stderr)
    return {"slope": float(fit.slope), "low": float(fit.slope) - half, "high": float(fit.slope) + half,
            "standard_error": float(fit.stderr), "k": int(y.size)}


def standard_error_from_interval(low: float, high: float, confidence: float = 0.95, df: float | None = None) -> float:
    """The standard error behind a symmetric interval estimate ± q·SE: (high − low) / (2q), with q the t quantile on
    `df` degrees of freedom, or the normal one where df is None or infinite. NaN where the interval is missing."""
    check_probability(confidence, "confidence")
    if not (np.isfinite(low) and np.isfinite(high)):
        return math.nan
    if df is not None and not (df > 0):
        return math.nan
    level = 0.5 + confidence / 2.0
    quantile = stats.norm.ppf(level) if df is None or math.isinf(df) else stats.t.ppf(level, df)
    return float((high - low) / (2.0 * quantile))
