"""Pooling studies: the random-effects mean of one difference measured in several studies, what a new study should
expect (the prediction interval), and how the difference moves with a study-level covariate such as log C.

Each estimator is one function whose docstring states its formula. The classic ones (random_effects, hartung_knapp,
equal_weight_mean and the slopes) treat the estimates as independent, each with a known standard error (the usual
assumption of a meta-analysis: with few replicates per study it is an approximation). Configurations drawn from one
data source are not independent: pool_across_sources takes the source as a level, and slope_within_source estimates
a trend inside one source only. A cell's own estimate, kept above its seed noise, is in
study/analysis/cell_difference.py.
A new source's true effect, and the weighting's sway on the mean over sources, are in study/analysis/true_effect.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.common import ResultFields
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
    tau2, q = _dersimonian_laird_rows(y[None, :], se[None, :])
    return float(tau2[0]), float(q[0])


def _dersimonian_laird_rows(y: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(τ², Q) of every row of y and se (benchmarks × studies): one code path for a pool and for its simulation."""
    w = 1.0 / se ** 2
    fixed = np.sum(w * y, axis=-1) / np.sum(w, axis=-1)
    q = np.sum(w * (y - fixed[..., None]) ** 2, axis=-1)
    scaling = np.sum(w, axis=-1) - np.sum(w ** 2, axis=-1) / np.sum(w, axis=-1)
    if y.shape[-1] < 2:
        return np.zeros_like(q), q
    with np.errstate(divide="ignore", invalid="ignore"):
        tau2 = np.where(scaling > 0, np.maximum(0.0, (q - (y.shape[-1] - 1)) / scaling), 0.0)
    return tau2, q


def _random_effects_rows(y: np.ndarray, se: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(τ², Q, weights 1/(seᵢ² + τ²), weighted mean) of every row of y and se (benchmarks × studies)."""
    tau2, q = _dersimonian_laird_rows(y, se)
    weights = 1.0 / (se ** 2 + tau2[..., None])
    return tau2, q, weights, np.sum(weights * y, axis=-1) / np.sum(weights, axis=-1)


def _random_effects_mean(y: np.ndarray, se: np.ndarray) -> tuple[float, float, np.ndarray, float]:
    """(τ², Q, weights 1/(seᵢ² + τ²), weighted mean) of inputs already checked."""
    tau2, q, weights, mean = _random_effects_rows(y[None, :], se[None, :])
    return float(tau2[0]), float(q[0]), weights[0], float(mean[0])


# I² is read only where every standard error rests on at least this many degrees of freedom. A standard error estimated
# on d df inflates Q's expectation without heterogeneity by d/(d − 2) (infinite for d ≤ 2): at d = 20 by 11%, and
# I² ≥ 50% then turns up by chance in ≤ 10% of 7-study pools (6% with exact standard errors); at d = 2 in 46–60%.
MIN_I2_DF = 20


def i2_note(degrees_of_freedom) -> str:
    """'' where I² can be read, else why not: 'not read: standard errors on < 20 df (fewest 2)'. A df that is NaN or
    infinite marks a standard error taken as exact."""
    if degrees_of_freedom is None:
        return ""
    df = np.asarray(degrees_of_freedom, dtype=float).ravel()
    df = df[np.isfinite(df)]
    if df.size and df.min() < MIN_I2_DF:
        return f"not read: standard errors on < {MIN_I2_DF} df (fewest {df.min():g})"
    return ""


def random_effects(estimates, standard_errors, confidence: float = 0.95, degrees_of_freedom=None) -> dict:
    """The random-effects pooled mean of k estimates with its interval, heterogeneity and prediction interval.

    τ² by DerSimonian–Laird; weights wᵢ* = 1/(seᵢ² + τ²); μ = Σwᵢ*yᵢ / Σwᵢ*, SE(μ) = 1/√Σwᵢ*, and the normal CI
    μ ± z·SE(μ). I² = max(0, (Q − (k − 1))/Q) (Higgins & Thompson 2002; NaN for one estimate, 0 when Q = 0), and NaN
    with `i2_note` saying why where `degrees_of_freedom` (each standard error's) has one below MIN_I2_DF. The
    Higgins–Thompson–Spiegelhalter (2009) prediction interval for the difference in a new study,
    μ ± t_{k−2}·√(τ² + SE(μ)²), needs k ≥ 3 (NaN otherwise).
    """
    check_probability(confidence, "confidence")
    y, se = _checked(estimates, standard_errors)
    k = int(y.size)
    tau2, q, weights, estimate = _random_effects_mean(y, se)
    standard_error = float(1.0 / math.sqrt(np.sum(weights)))
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    if degrees_of_freedom is not None and np.size(degrees_of_freedom) != k:
        raise ValueError(f"give one df per standard error; got {np.size(degrees_of_freedom)} for {k}")
    note = i2_note(degrees_of_freedom)
    if k < 2 or note:
        i2 = math.nan
    else:
        i2 = max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    if k >= 3:
        half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 2)) * math.sqrt(tau2 + standard_error ** 2)
        prediction = (estimate - half, estimate + half)
    else:
        prediction = (math.nan, math.nan)
    return {"estimate": estimate, "low": estimate - z * standard_error, "high": estimate + z * standard_error,
            "standard_error": standard_error, "tau2": tau2, "i2": i2, "i2_note": note, "q": q, "k": k,
            "prediction_low": prediction[0], "prediction_high": prediction[1], "confidence": confidence,
            "weights": (weights / weights.sum()).tolist(), "method": RANDOM_EFFECTS_METHOD}


HARTUNG_KNAPP_METHOD = ("Hartung-Knapp-Sidik-Jonkman: the random-effects mean with variance max(1, q)/Σwᵢ* and t on "
                        "k − 1 df")


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


# --- the data source as a level -------------------------------------------------------------------------------------


SOURCES_METHOD = ("two-stage over data sources: the equal-weight mean of each source's configurations, their mean "
                  "over the k sources with t on k − 1 df; a new source's configuration predicted by "
                  "t_{k−1}·√(s²_sources·(1 + 1/k) + (1 − mean 1/nᵢ)·σ²_configurations)")


@dataclass(frozen=True)
class PooledAcrossSources(ResultFields):
    """pool_across_sources' result: the mean over sources with its CI, the prediction interval for a new
    configuration from a new source, and the pieces they are built from (fields also readable as result["mean"])."""

    mean: float
    low: float
    high: float
    prediction_low: float
    prediction_high: float
    standard_error: float
    prediction_standard_error: float
    df: int
    sources: int
    configurations: int
    between_source_variance: float
    configuration_variance: float
    within_source_df: int
    standard_error_df: float
    source_means: tuple
    confidence: float
    method: str


def estimates_and_errors(estimates, standard_errors, positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Estimates and their standard errors as vectors, checked: as many of each (at least one), every estimate
    finite, every standard error finite and ≥ 0 (> 0 with `positive`: a zero one would take all the weight)."""
    y = np.asarray(estimates, dtype=float).ravel()
    se = np.asarray(standard_errors, dtype=float).ravel()
    if y.size == 0 or y.size != se.size:
        raise ValueError(f"give one standard error per estimate, at least one of each; got {y.size} estimates and "
                         f"{se.size} standard errors")
    if not np.all(np.isfinite(y)):
        raise ValueError("every estimate must be finite; leave out the configurations that have none")
    if not np.all(np.isfinite(se)) or np.any(se <= 0 if positive else se < 0):
        raise ValueError("every standard error must be finite and positive: a source with a zero one would take all "
                         "the weight" if positive else "every standard error must be finite and ≥ 0")
    return y, se


def _source_labels(sources, count: int) -> list:
    """The sources as a list of `count` labels, each present (no None or NaN)."""
    if isinstance(sources, str):
        raise ValueError("give one source label per configuration, not one string")
    labels = list(sources.tolist() if hasattr(sources, "tolist") else sources)
    if len(labels) != count:
        raise ValueError(f"give one source per configuration; got {len(labels)} sources for {count} estimates")
    if any(label is None or (pd.api.types.is_scalar(label) and pd.isna(label)) for label in labels):
        raise ValueError("every configuration needs its data source; a missing label cannot be pooled")
    return labels


def source_membership(sources) -> tuple[tuple, np.ndarray]:
    """(the distinct sources in order of first appearance, the configurations × sources 0/1 membership matrix)."""
    labels = _source_labels(sources, len(sources))
    names = tuple(dict.fromkeys(labels))
    position = {name: index for index, name in enumerate(names)}
    membership = np.zeros((len(labels), len(names)))
    membership[np.arange(len(labels)), [position[label] for label in labels]] = 1.0
    return names, membership


def _across_sources_rows(y: np.ndarray, se: np.ndarray, membership: np.ndarray, confidence: float) -> dict:
    """pool_across_sources' numbers for every row of y and se (benchmarks × configurations), as arrays: the one code
    path behind the function and its coverage simulation."""
    counts = membership.sum(axis=0)
    k, n = counts.size, y.shape[-1]
    source_means = (y @ membership) / counts
    mean = source_means.mean(axis=-1)
    missing = np.full(mean.shape, math.nan)
    level = 0.5 + confidence / 2.0
    if k >= 2:
        between = source_means.var(axis=-1, ddof=1)
        standard_error = np.sqrt(between / k)
        half = float(stats.t.ppf(level, k - 1)) * standard_error
    else:
        between, standard_error, half = missing, missing, missing
    within_df = n - k
    if within_df > 0:
        residuals = y - source_means @ membership.T
        within = np.sum(residuals ** 2, axis=-1) / within_df
        # E[s²_within] = σ²_c + Σᵢ(1 − 1/nᵢ)Σⱼseᵢⱼ² / Σᵢ(nᵢ − 1): the configurations' own noise, removed here.
        noise_share = (membership @ (1.0 - 1.0 / counts)) / within_df
        configuration_variance = np.maximum(0.0, within - np.sum(se ** 2 * noise_share, axis=-1))
        averaged_away = (1.0 - float(np.mean(1.0 / counts))) * configuration_variance
    else:
        configuration_variance, averaged_away = missing, np.zeros(mean.shape)
    if k >= 3:
        prediction_standard_error = np.sqrt(between * (1.0 + 1.0 / k) + averaged_away)
        prediction_half = float(stats.t.ppf(level, k - 1)) * prediction_standard_error
    else:
        prediction_standard_error, prediction_half = missing, missing
    return {"mean": mean, "low": mean - half, "high": mean + half, "prediction_low": mean - prediction_half,
            "prediction_high": mean + prediction_half, "standard_error": standard_error,
            "prediction_standard_error": prediction_standard_error, "between_source_variance": between,
            "configuration_variance": configuration_variance, "source_means": source_means, "df": k - 1,
            "within_source_df": within_df}


def pool_across_sources(estimates, standard_errors, sources, confidence: float = 0.95,
                        degrees_of_freedom=None) -> PooledAcrossSources:
    """The mean of a difference over data sources and what a new configuration from a new source should expect,
    with the source as a level: configurations of one source share it and are not independent.

    Model: yᵢⱼ = μ + aᵢ + bᵢⱼ + eᵢⱼ for configuration j of source i (nᵢ of them, k sources), with a source effect
    aᵢ ~ (0, σ²_s), a configuration effect bᵢⱼ ~ (0, σ²_c) and the cell's own noise eᵢⱼ ~ (0, seᵢⱼ²), all
    independent. Two stages (a cluster-level analysis): ȳᵢ = the plain mean of source i's configurations (equal
    weights: standard errors on few degrees of freedom lend no configuration the weight), then
    μ̂ = (1/k)Σȳᵢ with the CI μ̂ ± t_{k−1}·s_sources/√k, s²_sources the sample variance of the ȳᵢ.
    Since Var(ȳᵢ) = σ²_s + (σ²_c + se̅ᵢ²)/nᵢ, E[s²_sources] = (1/k)ΣVar(ȳᵢ) = k·Var(μ̂): the CI needs no standard
    error and no estimate of σ²_s, only independent sources (its t on k − 1 df is exact for equal nᵢ and normal
    effects, approximate otherwise).

    A new configuration from a new source has the true difference θ = μ + a + b, and
    Var(θ − μ̂) = σ²_s + σ²_c + Var(μ̂) = E[s²_sources]·(1 + 1/k) + (1 − h)·σ²_c − h·se̅² with h = mean(1/nᵢ):
    the source means hold only the share h of σ²_c that averaging within sources leaves. σ²_c comes from the
    spread within sources, σ̂²_c = max(0, s²_within − Σᵢ(1 − 1/nᵢ)Σⱼseᵢⱼ²/Σᵢ(nᵢ − 1)), s²_within the pooled
    within-source variance on Σ(nᵢ − 1) df (the subtracted mean squared standard error is unbiased whatever its df);
    the last term is dropped (conservative by h·se̅²). Prediction μ̂ ± t_{k−1}·√(s²_sources·(1 + 1/k) +
    (1 − h)·σ̂²_c). With one configuration per source (h = 1) both intervals are equal_weight_mean's.

    Why this and not a three-level random-effects model: in simulated benchmarks with the real design (3 sources with
    1, 1 and 5 configurations, standard errors on 2–6 df; source sd from 0 to 4× the configuration sd; every method,
    absolute and relative; 4,000 benchmarks per world: benchmarks/coverage.py --only pooled,
    reports/benchmark/tables/pooled_coverage.csv) this CI covered 94.4–97.7% and the prediction interval 95.1–99.0%
    (in designs of 6 sources and 13 configurations 94.6–97.3% and 95.4–100%). A three-level REML fit with known
    sampling variances (--only three-level, 500 per world) covered 79–91% with its normal CI, and 95–99.6% only with
    the t on k − 1 df borrowed from this method, at the same widths; it needs an optimiser per fit and weights cells
    by standard errors on 2 df, so it buys nothing here. DerSimonian–Laird over configurations covered 35–89%.

    NaN where the design cannot give a number: the CI below 2 sources, the prediction below 3 (its between-source
    variance would rest on one df), σ̂²_c where no source has 2 configurations. `degrees_of_freedom` (each standard
    error's; NaN or inf for an exact one) is checked and its fewest kept as `standard_error_df`: the intervals do not
    depend on it. ValueError for invalid input: lengths that differ, no estimate, a non-finite estimate, a
    non-finite or negative standard error, a missing source, a non-positive df.
    """
    check_probability(confidence, "confidence")
    y, se = estimates_and_errors(estimates, standard_errors)
    labels = _source_labels(sources, y.size)
    df = np.full(y.size, math.inf) if degrees_of_freedom is None else np.asarray(degrees_of_freedom, float).ravel()
    if df.size != y.size:
        raise ValueError(f"give one df per standard error; got {df.size} for {y.size}")
    if np.any(df[~np.isnan(df)] <= 0):
        raise ValueError("degrees of freedom must be positive (NaN or inf for a standard error taken as exact)")
    names, membership = source_membership(labels)
    rows = _across_sources_rows(y[None, :], se[None, :], membership, confidence)
    counts = membership.sum(axis=0).astype(int)
    known = df[np.isfinite(df)]
    return PooledAcrossSources(
        **{key: float(rows[key][0]) for key in ("mean", "low", "high", "prediction_low", "prediction_high",
                                                "standard_error", "prediction_standard_error",
                                                "between_source_variance", "configuration_variance")},
        df=int(rows["df"]), sources=len(names), configurations=int(y.size),
        within_source_df=int(rows["within_source_df"]),
        standard_error_df=float(known.min()) if known.size else math.inf,
        source_means=tuple((name, float(value), int(count))
                           for name, value, count in zip(names, rows["source_means"][0], counts)),
        confidence=confidence, method=SOURCES_METHOD)


# --- a trend within one source --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WithinSourceSlope(ResultFields):
    """slope_within_source's result (fields also readable as result["slope"]); `reason` says why a NaN is one."""

    source: object
    slope: float
    low: float
    high: float
    standard_error: float
    df: int
    configurations: int
    covariate_values: int
    reason: str
    confidence: float


def slope_within_source(estimates, covariate, sources, source=None, confidence: float = 0.95) -> WithinSourceSlope:
    """How the estimates move with a covariate (e.g. log10 C) among the configurations of one data source only:
    ordinary least squares β̂ = Sxy/Sxx, SE = √(SSR/(n − 2)/Sxx), t on n − 2 df. Across sources the covariate moves
    with the source (real data at C = 10, synthetic glyphs at C ≥ 50), so a pooled slope is that contrast, not a
    trend. `source` None takes the source with the most distinct covariate values (then the most configurations, then
    the first named). NaN with its `reason` below 3 configurations or at one covariate value; ValueError for an unknown
    source or invalid input."""
    check_probability(confidence, "confidence")
    y = np.asarray(estimates, dtype=float).ravel()
    x = np.asarray(covariate, dtype=float).ravel()
    if y.size == 0 or x.size != y.size or not (np.all(np.isfinite(y)) and np.all(np.isfinite(x))):
        raise ValueError(f"give one finite covariate value per finite estimate, at least one; got {x.size} for "
                         f"{y.size} estimates")
    labels = np.array(_source_labels(sources, y.size), dtype=object)
    names = list(dict.fromkeys(labels))
    if source is None:
        source = max(names, key=lambda name: (np.unique(x[labels == name]).size, int(np.sum(labels == name)),
                                              -names.index(name)))
    elif source not in names:
        raise ValueError(f"no configuration of source {source!r}; the sources are {', '.join(map(str, names))}")
    inside = labels == source
    y, x = y[inside], x[inside]
    n, distinct = int(y.size), int(np.unique(x).size)
    reason = (f"fewer than 3 configurations in source {source!r} ({n})" if n < 3 else
              f"one covariate value in source {source!r}" if distinct < 2 else "")
    if reason:
        return WithinSourceSlope(source, math.nan, math.nan, math.nan, math.nan, max(n - 2, 0), n, distinct, reason,
                                 confidence)
    centred = x - x.mean()
    sxx = float(np.sum(centred ** 2))
    slope = float(np.sum(centred * (y - y.mean())) / sxx)
    residuals = y - y.mean() - slope * centred
    standard_error = math.sqrt(float(np.sum(residuals ** 2)) / (n - 2) / sxx)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 2)) * standard_error
    return WithinSourceSlope(source, slope, slope - half, slope + half, standard_error, n - 2, n, distinct, "",
                             confidence)


@dataclass(frozen=True)
class BesideThePool(ResultFields):
    """shrink_towards_pool's result: one study's estimate combined with what the pool predicts for a new source."""

    estimate: float
    low: float
    high: float
    weight_on_own: float
    own: float
    own_standard_error: float
    predicted: float
    prediction_standard_error: float
    confidence: float


def shrink_towards_pool(estimate: float, standard_error: float, predicted: float, prediction_standard_error: float,
                        confidence: float = 0.95) -> BesideThePool:
    """A user's own difference on their data, shrunk towards what the benchmark predicts for a new source (an
    empirical-Bayes normal-normal estimate): prior θ ~ N(μ̂, P²), P the prediction standard error of
    pool_across_sources (between sources and configurations, and μ̂'s own uncertainty); the user's estimate
    d ~ N(θ, s²). Posterior mean μ̂ + w·(d − μ̂) with w = P²/(P² + s²), variance w·s², normal interval. It assumes
    the user's data is one more source like the benchmark's, and its interval is approximate (P² is estimated on
    k − 1 df). NaN where either input is missing; the user's estimate alone where the pool has no prediction."""
    check_probability(confidence, "confidence")
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    own_ok = math.isfinite(estimate) and math.isfinite(standard_error) and standard_error > 0
    pool_ok = math.isfinite(predicted) and math.isfinite(prediction_standard_error) and prediction_standard_error > 0
    if not own_ok:
        nan = math.nan
        return BesideThePool(nan, nan, nan, nan, estimate, standard_error, predicted, prediction_standard_error,
                             confidence)
    if not pool_ok:
        return BesideThePool(estimate, estimate - z * standard_error, estimate + z * standard_error, 1.0, estimate,
                             standard_error, predicted, prediction_standard_error, confidence)
    weight = prediction_standard_error ** 2 / (prediction_standard_error ** 2 + standard_error ** 2)
    combined = predicted + weight * (estimate - predicted)
    half = z * math.sqrt(weight) * standard_error
    return BesideThePool(combined, combined - half, combined + half, weight, estimate, standard_error, predicted,
                         prediction_standard_error, confidence)
