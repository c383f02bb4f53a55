"""The true effect of tuned ArcFace − Fixed AdaCos in a new data source, beside pool_across_sources' prediction for a
new source's configuration (which also carries that cell's own sampling noise): a Bayesian normal–normal model over
the sources' means with the between-source spread integrated out (bayesian_true_effect) and Hartung–Knapp with the
Higgins–Thompson–Spiegelhalter interval (hartung_knapp_true_effect); and how the mean over sources moves with the
weighting (weighting_sensitivity). Each estimator's formula, paper and assumption are in its docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from study.analysis.common import ResultFields
from study.analysis.pooling import (_dersimonian_laird_rows, _source_labels, estimates_and_errors,
                                   pool_across_sources, source_membership)
from study.statistics import check_probability, normal_density

# The half-normal prior's scale on τ, the sd of the true effects between data sources, on the relative scale the
# verdict reads (a share of Fixed AdaCos's score), set from the largest plausible spread: a between-source sd of 10%
# of the score (five times the 2% margin: tuned ArcFace some 20% ahead of Fixed AdaCos on some data sets and 20%
# behind on others) would be extreme, and a half-normal leaves 4.6% of its mass beyond twice its scale (in the spirit
# of HN(0.5) for log odds ratios in Röver et al. 2021, where τ > 1 counts as fairly extreme heterogeneity after
# Spiegelhalter, Abrams & Myles 2004). A scale tied to the margin itself (0.02) makes a spread of twice the margin
# already rare: where the configurations differ as much as the real cells do it covered 77–92% (0.05: 93.8–95.8%;
# benchmarks/results/true_effect_coverage.csv). On another scale pass its own: 5% of the score in its units.
SOURCE_SPREAD_PRIOR_SCALE = 0.05
TAU_GRID_POINTS = 1000


def _positive_standard_errors(estimates, standard_errors, sources) -> tuple[np.ndarray, np.ndarray, list]:
    """Estimates, standard errors (every one finite and positive) and source labels, checked for one another."""
    y, se = estimates_and_errors(estimates, standard_errors, positive=True)
    return y, se, _source_labels(sources, y.size)


def _source_means_rows(y: np.ndarray, se: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ȳᵢ, sᵢ) of every row: each source's plain mean of its configurations and its standard error
    √(Σⱼseᵢⱼ²)/nᵢ (the configurations' own noise only)."""
    counts = membership.sum(axis=0)
    return (y @ membership) / counts, np.sqrt(se ** 2 @ membership) / counts


def _source_level(estimates, standard_errors, sources):
    """(source names, configuration counts, ȳᵢ, sᵢ) of checked inputs."""
    y, se, labels = _positive_standard_errors(estimates, standard_errors, sources)
    names, membership = source_membership(labels)
    means, errors = _source_means_rows(y[None, :], se[None, :], membership)
    return names, membership.sum(axis=0).astype(int), means[0], errors[0]


def _mixture_quantiles(probabilities: np.ndarray, centres: np.ndarray, spreads: np.ndarray,
                       levels: tuple[float, ...]) -> list[np.ndarray]:
    """Quantiles of every row's normal mixture Σ_g p_g·N(centre_g, spread_g²): Newton's method on its CDF from the
    normal with the mixture's mean and variance, kept inside a bracket (±12 spreads around every component, narrowed
    at each step) and bisecting where a step would leave it; each row stops once a step moves it less than 1e-15 of
    its bracket (4-7 steps; 60 halvings of the bracket, as first written, reach the same quantiles to 1e-15)."""
    low = np.min(centres - 12.0 * spreads, axis=-1)
    high = np.max(centres + 12.0 * spreads, axis=-1)
    tolerance = 1e-15 * (high - low)
    mean = np.sum(probabilities * centres, axis=-1)
    sd = np.sqrt(np.maximum(np.sum(probabilities * (spreads ** 2 + centres ** 2), axis=-1) - mean ** 2, 0.0))
    density_weights = probabilities / spreads
    results = []
    for level in levels:
        below, above = low.copy(), high.copy()
        x = np.clip(mean + special.ndtri(level) * sd, below, above)
        going = np.arange(x.size)  # the rows still moving
        for _ in range(200):
            z = (x[going, None] - centres[going]) / spreads[going]
            cdf = np.sum(probabilities[going] * special.ndtr(z), axis=-1)
            density = np.sum(density_weights[going] * normal_density(z), axis=-1)
            short = cdf < level
            below[going] = np.where(short, x[going], below[going])
            above[going] = np.where(short, above[going], x[going])
            with np.errstate(divide="ignore", invalid="ignore"):  # a density of 0 far out: bisect instead
                step = x[going] - (cdf - level) / density
            inside = (step >= below[going]) & (step <= above[going])
            step = np.where(inside, step, 0.5 * (below[going] + above[going]))
            moved = np.abs(step - x[going])
            x[going] = step
            going = going[moved > tolerance[going]]
            if going.size == 0:
                break
        results.append(x)
    return results


def _tau_posterior(means: np.ndarray, errors: np.ndarray, prior_scale: float, grid_points: int = TAU_GRID_POINTS
                   ) -> tuple[np.ndarray, ...]:
    """τ's posterior on a grid for every row of source means and their standard errors (benchmarks × sources):
    (τ grid, its density up to a constant, the points' probabilities, μ̂_τ, Σwᵢ), each with rows first."""
    rows = means.shape[0]
    smallest = np.minimum(prior_scale, errors.min(axis=-1)) * 1e-3
    # τ on a log-spaced grid from far below the smallest standard error to 8 prior scales (prior mass beyond: 1e-15),
    # with τ = 0 itself: the posterior density is finite at 0, so the trapezoid needs no special end.
    log_grid = np.linspace(np.log(smallest), math.log(8.0 * prior_scale), grid_points - 1, axis=-1)
    tau = np.concatenate([np.zeros((rows, 1)), np.exp(log_grid)], axis=-1)
    variance = errors[:, None, :] ** 2 + tau[:, :, None] ** 2
    weights = 1.0 / variance
    total = weights.sum(axis=-1)
    centre = np.sum(weights * means[:, None, :], axis=-1) / total
    # log p(τ | y), μ integrated out under its flat prior: log HN(τ) − ½Σlog(sᵢ² + τ²) − ½log Σwᵢ − ½Σwᵢ(ȳᵢ − μ̂_τ)².
    log_posterior = (-0.5 * (tau / prior_scale) ** 2 - 0.5 * np.sum(np.log(variance), axis=-1) - 0.5 * np.log(total)
                     - 0.5 * np.sum(weights * (means[:, None, :] - centre[..., None]) ** 2, axis=-1))
    density = np.exp(log_posterior - log_posterior.max(axis=-1, keepdims=True))
    steps = np.diff(tau, axis=-1)
    mass = np.zeros_like(tau)  # trapezoid weights: each point carries half of each interval beside it
    mass[:, :-1] += 0.5 * steps
    mass[:, 1:] += 0.5 * steps
    probabilities = density * mass
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    return tau, density, probabilities, centre, total


def _bayesian_rows(means: np.ndarray, errors: np.ndarray, prior_scale: float, confidence: float,
                   grid_points: int = TAU_GRID_POINTS) -> dict:
    """bayesian_true_effect's numbers for every row of source means and their standard errors (benchmarks × sources):
    the one code path behind the function and its coverage simulation."""
    rows = means.shape[0]
    tau, density, probabilities, centre, total = _tau_posterior(means, errors, prior_scale, grid_points)
    steps = np.diff(tau, axis=-1)
    lower, upper = 0.5 - confidence / 2.0, 0.5 + confidence / 2.0
    mean_low, mean_median, mean_high = _mixture_quantiles(probabilities, centre, np.sqrt(1.0 / total),
                                                          (lower, 0.5, upper))
    prediction_low, prediction_high = _mixture_quantiles(probabilities, centre, np.sqrt(1.0 / total + tau ** 2),
                                                         (lower, upper))
    cumulative = np.cumsum(0.5 * (density[:, 1:] + density[:, :-1]) * steps, axis=-1)
    cumulative = np.concatenate([np.zeros((rows, 1)), cumulative / cumulative[:, -1:]], axis=-1)
    tau_quantiles = [np.array([np.interp(level, row_cdf, row_tau) for row_cdf, row_tau in zip(cumulative, tau)])
                     for level in (lower, 0.5, upper)]
    return {"mean": mean_median, "low": mean_low, "high": mean_high, "prediction_low": prediction_low,
            "prediction_high": prediction_high, "tau_low": tau_quantiles[0], "tau": tau_quantiles[1],
            "tau_high": tau_quantiles[2]}


BAYESIAN_METHOD = ("Bayesian normal-normal random effects over the sources' means: flat prior on μ, half-normal prior "
                   "on τ, τ integrated out on a grid; central posterior predictive interval of a new source's true "
                   "effect θ_new")


@dataclass(frozen=True)
class BayesianTrueEffect(ResultFields):
    """bayesian_true_effect's result (fields also readable as result["prediction_low"]): the mean over sources with
    its credible interval, the predictive interval of a new source's true effect, and τ's posterior."""

    mean: float
    low: float
    high: float
    prediction_low: float
    prediction_high: float
    tau: float
    tau_low: float
    tau_high: float
    prior_scale: float
    sources: int
    configurations: int
    source_means: tuple
    confidence: float
    method: str


def bayesian_true_effect(estimates, standard_errors, sources, prior_scale: float = SOURCE_SPREAD_PRIOR_SCALE,
                         confidence: float = 0.95) -> BayesianTrueEffect:
    """Where the true difference in a new data source lies: the posterior predictive interval of θ_new in a Bayesian
    normal–normal random-effects model over the sources' means (as R's bayesmeta computes it; Röver 2020, J. Stat.
    Softw. 93(6); the half-normal prior on τ as Röver, Bender, Dias et al. 2021, Res. Synth. Methods 12, advise).

    Each source i gives ȳᵢ, the plain mean of its configurations, with sᵢ = √(Σⱼseᵢⱼ²)/nᵢ. Model ȳᵢ ~ N(θᵢ, sᵢ²),
    θᵢ ~ N(μ, τ²), flat prior on μ, τ ~ half-normal(prior_scale). Given τ, μ | y ~ N(μ̂_τ, V_τ) with wᵢ = 1/(sᵢ² + τ²),
    μ̂_τ = Σwᵢȳᵢ/Σwᵢ, V_τ = 1/Σwᵢ, and p(τ | y) ∝ HN(τ)·V_τ^½·Πᵢ(sᵢ² + τ²)^−½·exp(−½Σwᵢ(ȳᵢ − μ̂_τ)²). The predictive
    θ_new | y = ∫ N(μ̂_τ, V_τ + τ²) p(τ | y) dτ, integrated on a grid of τ; its central interval holds the true
    effect, not a new cell's estimate (no sᵢ of a new cell in it). `mean`, `low`, `high`: μ's posterior median and
    central credible interval; `tau`, `tau_low`, `tau_high`: τ's. The grid is fixed (τ = 0 and TAU_GRID_POINTS − 1
    log-spaced points up to 8 prior scales, trapezoid weights) where bayesmeta adapts its own; intervals are central
    where bayesmeta's default is the shortest.

    Assumptions: the sources exchangeable and their true effects normal around μ; each sᵢ known (they rest on few
    degrees of freedom here: the coverage simulation redraws them); θᵢ the mean of source i's configurations, so
    with one or two configurations per source τ carries the spread between configurations too. The posterior is
    proper for any number of sources, but with one or two it mostly restates the prior. ValueError for invalid
    input, a non-positive standard error or prior scale included.
    """
    check_probability(confidence, "confidence")
    if not (math.isfinite(prior_scale) and prior_scale > 0):
        raise ValueError(f"the prior scale must be finite and positive; got {prior_scale}")
    names, counts, means, errors = _source_level(estimates, standard_errors, sources)
    rows = _bayesian_rows(means[None, :], errors[None, :], prior_scale, confidence)
    return BayesianTrueEffect(
        **{key: float(value[0]) for key, value in rows.items()}, prior_scale=float(prior_scale),
        sources=len(names), configurations=int(counts.sum()),
        source_means=tuple((name, float(mean), float(error), int(count))
                           for name, mean, error, count in zip(names, means, errors, counts)),
        confidence=confidence, method=BAYESIAN_METHOD)


def new_source_mixture(estimates, standard_errors, sources, prior_scale: float = SOURCE_SPREAD_PRIOR_SCALE
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bayesian_true_effect's predictive distribution of a new source's true effect θ_new, as the normal mixture
    Σ_g p_g·N(centre_g, spread_g²) over its τ grid (τ integrated out, not plugged in): (p, centres, spreads)."""
    _, _, means, errors = _source_level(estimates, standard_errors, sources)
    tau, _, probabilities, centre, total = _tau_posterior(means[None, :], errors[None, :], prior_scale)
    return probabilities[0], centre[0], np.sqrt(1.0 / total[0] + tau[0] ** 2)


def _hartung_knapp_rows(means: np.ndarray, errors: np.ndarray, confidence: float, tau2=None) -> dict:
    """hartung_knapp_true_effect's numbers for every row (benchmarks × sources); τ² by DerSimonian–Laird unless
    given (one per row)."""
    k = means.shape[-1]
    if tau2 is None:
        tau2, _ = _dersimonian_laird_rows(means, errors)
    tau2 = np.asarray(tau2, dtype=float).reshape(means.shape[0])
    weights = 1.0 / (errors ** 2 + tau2[:, None])
    total = weights.sum(axis=-1)
    mean = np.sum(weights * means, axis=-1) / total
    level = 0.5 + confidence / 2.0
    missing = np.full(mean.shape, math.nan)
    if k >= 2:
        spread = np.sum(weights * (means - mean[:, None]) ** 2, axis=-1) / (k - 1)
        standard_error = np.sqrt(np.maximum(1.0, spread) / total)
        half = float(stats.t.ppf(level, k - 1)) * standard_error
    else:
        spread, standard_error, half = missing, missing, missing
    predicted = float(stats.t.ppf(level, k - 2)) * np.sqrt(tau2 + standard_error ** 2) if k >= 3 else missing
    return {"mean": mean, "low": mean - half, "high": mean + half, "prediction_low": mean - predicted,
            "prediction_high": mean + predicted, "standard_error": standard_error, "tau2": tau2, "q": spread,
            "weights": weights / total[:, None]}


HARTUNG_KNAPP_SOURCES_METHOD = ("over the sources' means: DerSimonian-Laird τ², weights 1/(sᵢ² + τ²), "
                                "Hartung-Knapp-Sidik-Jonkman CI (t on k − 1 df, q floored at 1), Higgins-Thompson-"
                                "Spiegelhalter prediction interval of a new source's true effect (t on k − 2 df)")


@dataclass(frozen=True)
class HartungKnappTrueEffect(ResultFields):
    """hartung_knapp_true_effect's result (fields also readable as result["prediction_low"])."""

    mean: float
    low: float
    high: float
    prediction_low: float
    prediction_high: float
    standard_error: float
    tau2: float
    q: float
    df: int
    prediction_df: int
    sources: int
    configurations: int
    source_means: tuple
    weights: tuple
    confidence: float
    method: str


def hartung_knapp_true_effect(estimates, standard_errors, sources, confidence: float = 0.95) -> HartungKnappTrueEffect:
    """The random-effects mean over the sources' means with the Hartung–Knapp–Sidik–Jonkman interval (Hartung &
    Knapp 2001; Sidik & Jonkman 2002) and the Higgins–Thompson–Spiegelhalter (2009, JRSS A 172) prediction interval
    for a new source's true effect.

    Each source i gives ȳᵢ (the plain mean of its configurations) with sᵢ = √(Σⱼseᵢⱼ²)/nᵢ; τ² by DerSimonian–Laird
    over the k sources, wᵢ = 1/(sᵢ² + τ²), μ̂ = Σwᵢȳᵢ/Σwᵢ, q = Σwᵢ(ȳᵢ − μ̂)²/(k − 1) and
    SE = √(max(1, q)/Σwᵢ) (the floor of Röver, Knapp & Friede 2015), CI μ̂ ± t_{k−1}·SE. Prediction
    μ̂ ± t_{k−2}·√(τ̂² + SE²): the true effect θ_new of a new source, with τ̂² a point estimate whose own uncertainty
    only the t on k − 2 df stands for, and the Hartung–Knapp SE in place of the normal-theory one (never narrower).

    Assumptions: the sources independent, their true effects normal, each sᵢ known; θᵢ is the mean of source i's
    configurations. NaN where the design cannot give a number: the CI below 2 sources, the prediction below 3.
    ValueError for invalid input.
    """
    check_probability(confidence, "confidence")
    names, counts, means, errors = _source_level(estimates, standard_errors, sources)
    rows = _hartung_knapp_rows(means[None, :], errors[None, :], confidence)
    k = len(names)
    return HartungKnappTrueEffect(
        **{key: float(rows[key][0]) for key in ("mean", "low", "high", "prediction_low", "prediction_high",
                                                "standard_error", "tau2", "q")},
        df=k - 1, prediction_df=k - 2, sources=k, configurations=int(counts.sum()),
        source_means=tuple((name, float(mean), float(error), int(count))
                           for name, mean, error, count in zip(names, means, errors, counts)),
        weights=tuple((name, float(weight)) for name, weight in zip(names, rows["weights"][0])),
        confidence=confidence, method=HARTUNG_KNAPP_SOURCES_METHOD)


WEIGHTING_METHOD = ("the mean over sources weighted two ways: equal weights (pool_across_sources: t on k − 1 df over "
                    "the sources' means) and inverse-variance weights 1/(sᵢ² + τ²) (hartung_knapp_true_effect)")


@dataclass(frozen=True)
class WeightingSensitivity(ResultFields):
    """weighting_sensitivity's result: the mean over sources with equal and with inverse-variance weights, each with
    its interval, and how far the weighting moves it (fields also readable as result["shift"])."""

    equal_mean: float
    equal_low: float
    equal_high: float
    inverse_variance_mean: float
    inverse_variance_low: float
    inverse_variance_high: float
    shift: float
    tau2: float
    equal_weights: tuple
    inverse_variance_weights: tuple
    sources: int
    configurations: int
    confidence: float
    method: str


def weighting_sensitivity(estimates, standard_errors, sources, confidence: float = 0.95) -> WeightingSensitivity:
    """How much the mean over sources depends on how the sources are weighted.

    Equal weights: μ̂_eq = (1/k)Σȳᵢ with pool_across_sources' interval (t on k − 1 df over the sources' spread, no
    standard error used). Inverse-variance: μ̂_iv = Σwᵢȳᵢ/Σwᵢ, wᵢ = 1/(sᵢ² + τ̂²) with sᵢ = √(Σⱼseᵢⱼ²)/nᵢ and τ̂² by
    DerSimonian–Laird, with the Hartung–Knapp interval (hartung_knapp_true_effect). shift = μ̂_iv − μ̂_eq. They
    estimate the same μ where a source's effect is unrelated to its precision; a large shift says it is not (here:
    whether the sources measured precisely differ from the noisy ones), and that the answer rests on a weighting
    choice. Inverse-variance weights trust each sᵢ (often on 2 df); equal weights trust none. NaN intervals below 2
    sources; ValueError for invalid input.
    """
    check_probability(confidence, "confidence")
    y, se, labels = _positive_standard_errors(estimates, standard_errors, sources)
    equal = pool_across_sources(y, se, labels, confidence)
    weighted = hartung_knapp_true_effect(y, se, labels, confidence)
    return WeightingSensitivity(
        equal_mean=equal.mean, equal_low=equal.low, equal_high=equal.high,
        inverse_variance_mean=weighted.mean, inverse_variance_low=weighted.low,
        inverse_variance_high=weighted.high, shift=weighted.mean - equal.mean, tau2=weighted.tau2,
        equal_weights=tuple((name, 1.0 / equal.sources) for name, _, _ in equal.source_means),
        inverse_variance_weights=weighted.weights, sources=equal.sources, configurations=equal.configurations,
        confidence=confidence, method=WEIGHTING_METHOD)
