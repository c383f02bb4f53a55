"""Bands over the whole tuning curve: every n at once, not only where the jackknife interval is valid.

`study.analysis.tuning` draws its studentised interval on the expected test score of the trial val selects only
where the selection weights spread over at least five trials (about n ≤ N/3). This module puts a *simultaneous*
band on that curve at every n = 1…N, and carries Lourie, Cho and He's bands ("Show Your Work with Confidence:
Confidence Bands for Tuning Curves", NAACL 2024; the `opda` package) over to compare:

- `order_statistic_band`: with probability `confidence`, every uniform order statistic U_(i) = F(v_(i)) lies in its
  [low_i, high_i] at once (opda's equal-tailed Learned-Miller–DeStefano band, its level found here by an exact
  recursion instead of opda's Monte Carlo; or the DKW band). Distribution-free for independent draws of a
  continuous score.
- `expected_best_band`: opda's band on the expected best **val** of n draws, from the CDF band's two edges. Exact and
  distribution-free, but it needs the support's bounds, and its upper end reaches the upper bound as n grows.
- `whole_curve_band` (adopted for the curve): estimate ± c·√variance at every n, the variance the larger of the
  jackknife variance (where valid) and a floor from the test scores' successive differences in val order, c
  simultaneous over n. Not distribution-free.
- `val_cdf_selected_band`: opda's construction carried over to the selected trial's test score (the val CDF band
  bounds the selection weights at every n), plus a test-noise margin. Compared, not adopted: 1.2–3.6 times as wide,
  and where the adopted band fails (a long upper tail of scores) it fails too, if less (88–91%).

What each band covers, and what the simulation measured, is in benchmarks/results/tuning_bands.md
(`benchmarks/tuning_bands.py`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.tuning import (MAX_STUDENTISED_DF, _order_statistic_weights, _paired_scores, _ranked_reported,
                                   selected_curve_with_variance)
from study.statistics import check_probability, finite_vector

BAND_METHODS = ("ld", "dkw")
# Draws of pure noise behind the simultaneous critical value (a fixed seed: a band is a function of the data alone).
_NOISE_DRAWS = 20_000


def _all_in_bounds_probability(low: np.ndarray, high: np.ndarray) -> float:
    """P(low_i ≤ U_(i) ≤ high_i for every i) for the order statistics of len(low) independent uniforms, exactly.

    The count process C(x) = #{U ≤ x} must satisfy C(low_i) ≤ i − 1 and C(high_i) ≥ i; between consecutive bounds,
    given C(x) = k, the next interval holds Binomial(N − k, its share of (x, 1]) points (Noé's recursion, 1972).
    """
    size = low.size
    points = np.unique(np.concatenate([[0.0, 1.0], low, high]))
    ranks = np.arange(1, size + 1)
    counts = np.arange(size + 1)
    state = np.zeros(size + 1)
    state[0] = 1.0
    for start, end in zip(points[:-1], points[1:]):
        share = min(1.0, (end - start) / (1.0 - start)) if start < 1.0 else 1.0
        moved = stats.binom.pmf(counts[None, :] - counts[:, None], (size - counts)[:, None], share)
        state = state @ np.nan_to_num(moved)
        at_least = int((high <= end + 1e-15).sum())  # C(end) ≥ every i whose high_i ≤ end
        above = ranks[low >= end - 1e-15]
        at_most = int(above.min() - 1) if above.size else size  # C(end) ≤ i − 1 for the first i with low_i ≥ end
        state[:at_least] = 0.0
        state[at_most + 1:] = 0.0
    return float(state[size])


@functools.lru_cache(maxsize=64)
def _order_statistic_band(n_trials: int, confidence: float, method: str) -> tuple[np.ndarray, np.ndarray]:
    ranks = np.arange(1, n_trials + 1)
    if method == "dkw":  # Massart's constant: P(sup |F_N − F| > ε) ≤ 2·exp(−2Nε²)
        epsilon = math.sqrt(math.log(2.0 / (1.0 - confidence)) / (2.0 * n_trials))
        return (np.clip(ranks / n_trials - epsilon, 0.0, 1.0),
                np.clip((ranks - 1) / n_trials + epsilon, 0.0, 1.0))
    beta = stats.beta(ranks, n_trials + 1 - ranks)

    def bounds(level):
        return beta.ppf((1.0 - level) / 2.0), beta.ppf((1.0 + level) / 2.0)

    lower, upper = confidence, 1.0 - 1e-12  # the pointwise level whose intervals hold together with `confidence`
    for _ in range(60):
        middle = (lower + upper) / 2.0
        if _all_in_bounds_probability(*bounds(middle)) >= confidence:
            upper = middle
        else:
            lower = middle
    return bounds(upper)


def order_statistic_band(n_trials: int, confidence: float = 0.95,
                         method: str = "ld") -> tuple[np.ndarray, np.ndarray]:
    """(low, high) with P(low_i ≤ U_(i) ≤ high_i for every i = 1…N) ≥ confidence, U_(i) uniform order statistics.

    `ld`: equal-tailed Beta(i, N + 1 − i) intervals widened until they hold simultaneously (Learned-Miller &
    DeStefano, 2008; opda's `ld_equal_tailed`, which finds the level by Monte Carlo), here with the exact
    probability, so the band is exact. `dkw`: the Dvoretzky–Kiefer–Wolfowitz band with Massart's constant
    (conservative). For a continuous distribution F, U_(i) = F(x_(i)): a simultaneous band on F at the sample.
    """
    check_probability(confidence, "confidence")
    if method not in BAND_METHODS:
        raise ValueError(f"method must be one of {BAND_METHODS}, got {method!r}")
    if n_trials < 1:
        raise ValueError(f"n_trials must be at least 1, got {n_trials}")
    low, high = _order_statistic_band(int(n_trials), float(confidence), method)
    return low.copy(), high.copy()


def _draws(max_n: int | None, n_trials: int) -> np.ndarray:
    max_n = n_trials if max_n is None else int(max_n)
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, got {max_n}")
    return np.arange(1, max_n + 1)


def expected_best_band(scores, confidence: float = 0.95, bounds: tuple[float, float] = (0.0, 1.0),
                       max_n: int | None = None, method: str = "ld") -> pd.DataFrame:
    """Simultaneous band on E[max of n draws] of the scores' distribution, n = 1…max_n (Lourie et al., 2024).

    The scores are independent draws (random search) of a continuous distribution supported in `bounds`. The upper
    end takes the CDF at the band's lower edge, its missing mass at bounds[1]; the lower end the CDF at the upper
    edge, its missing mass at bounds[0] (opda's `average_tuning_curve` of its `confidence_bands`). `estimate` is the
    without-replacement estimate (NaN beyond N).
    """
    values = np.sort(finite_vector(scores, "scores"))
    floor, ceiling = float(bounds[0]), float(bounds[1])
    if not floor <= values[0] <= values[-1] <= ceiling:
        raise ValueError(f"scores must lie within bounds {bounds}")
    low, high = order_statistic_band(values.size, confidence, method)
    draws = _draws(max_n, values.size)
    points = np.concatenate([[floor], values, [ceiling]])

    def expected_max(cdf):  # cdf at floor (below the sample), the sample, and the ceiling
        power = cdf[None, :] ** draws[:, None]
        return (np.diff(power, axis=1, prepend=0.0) * points[None, :]).sum(axis=1)

    # The lower CDF edge puts mass 1 − low_N at the ceiling; the upper edge puts high_1 at the floor.
    upper = expected_max(np.concatenate([[0.0], low, [1.0]]))
    lower = expected_max(np.concatenate([high, [1.0, 1.0]]))
    estimate = np.full(draws.size, np.nan)
    inside = draws <= values.size
    estimate[inside] = (_order_statistic_weights(values.size, False) @ values)[draws[inside] - 1]
    return pd.DataFrame({"n": draws, "estimate": estimate, "low": lower, "high": upper})


def _extreme_mean(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> float:
    """max Σ_{i=1}^{K+1} values_i·(G_i − G_{i−1}) over nondecreasing G, G_0 = 0, G_{K+1} = 1, low_i ≤ G_i ≤ high_i.

    The largest mean of `values` (one per interval between consecutive sample points) over the CDFs in the band.
    The constraints are totally unimodular, so an optimum takes every G_i among the bound values: a dynamic
    programme over that grid, O(K²).
    """
    grid = np.unique(np.concatenate([low, high]))
    # Σ values_i (G_i − G_{i−1}) = values_{K+1} − Σ_{i=1}^{K} G_i (values_{i+1} − values_i)
    slopes = values[1:] - values[:-1]
    best = np.zeros(grid.size)  # the least Σ G_j·slope_j so far with G_i at each grid value
    for i in range(low.size):
        allowed = (grid >= low[i] - 1e-15) & (grid <= high[i] + 1e-15)
        best = np.where(allowed, np.minimum.accumulate(best) + grid * slopes[i], np.inf)
    return float(values[-1] - best.min())


@functools.lru_cache(maxsize=64)
def _noise_critical_value(n_trials: int, confidence: float) -> float:
    """The `confidence` quantile of max over n = 1…N of |Σ_i w_n(i)·e_i| / (σ̂·‖w_n‖), e independent normal and σ̂
    their successive-difference sd: a critical value simultaneous over the curve when its error is test noise."""
    weights = _order_statistic_weights(n_trials, False)
    norms = np.sqrt((weights ** 2).sum(axis=1))
    noise = np.random.default_rng(20240611).standard_normal((_NOISE_DRAWS, n_trials))
    scale = np.sqrt((np.diff(noise, axis=1) ** 2).sum(axis=1) / (2.0 * (n_trials - 1)))
    statistic = np.abs(noise @ weights.T / norms).max(axis=1) / scale
    return float(np.quantile(statistic, confidence))


def simultaneous_critical_value(n_trials: int, confidence: float = 0.95) -> float:
    """The multiplier of `whole_curve_band`: the sup-over-n critical value of the curve's studentised error under
    normal test noise (Monte Carlo, fixed seed), moved to a t distribution on MAX_STUDENTISED_DF degrees of freedom
    for the skewed scores of real searches, as `study.analysis.tuning` caps its own."""
    check_probability(confidence, "confidence")
    if n_trials < 2:
        raise ValueError(f"n_trials must be at least 2, got {n_trials}")
    normal = _noise_critical_value(int(n_trials), float(confidence))
    return float(stats.t.isf(stats.norm.sf(normal), MAX_STUDENTISED_DF))


def successive_difference_sd(selection_scores, reported_scores) -> float:
    """√(Σ (t_[i] − t_[i−1])² / (2(N − 1))), t_[i] the reported score of the trial of selection rank i (von
    Neumann, 1941): the sd of one trial's test score around the val-to-test trend, inflated by how fast that trend
    moves between neighbouring trials. NaN for fewer than two trials."""
    selection, reported = _paired_scores(selection_scores, reported_scores)
    ranked = _ranked_reported(selection, reported)
    if ranked.size < 2:
        return math.nan
    return float(math.sqrt((np.diff(ranked) ** 2).sum() / (2.0 * (ranked.size - 1))))


def whole_curve_band(val, test, confidence: float = 0.95,
                     bounds: tuple[float, float] | None = None) -> pd.DataFrame:
    """Simultaneous band on E[test score of the trial val selects among n] at every n = 1…N: a frame with columns
    n, estimate (`expected_selected_after_n_trials`, without replacement), low, high and variance.

    At each n the band is estimate ± c·√variance. The variance is the larger of two estimates: the curve's jackknife
    variance where the selection weights spread over at least MIN_EFFECTIVE_TRIALS trials (the interval
    `study.analysis.tuning` draws, valid for n ≪ N), and σ̂²·Σ_i w_n(i)², the variance of the weighted test scores
    when each varies by σ̂, the successive-difference sd of the test scores in val order — one trial's test noise
    plus the val-to-test trend between neighbours, which is what the estimate at n = N (one trial's test score)
    varies by. c is simultaneous over n (`simultaneous_critical_value`). Assumes independent draws (random search);
    a val of −inf is a trial never selected. Coverage measured in benchmarks/tuning_bands.py
    (benchmarks/results/tuning_bands.md): it fails where the scores have a long upper tail (rare trials far above the rest), which N trials rarely show.
    `bounds`, when given, clip the band to the metric's range. Fewer than three trials give no band (NaN).
    """
    check_probability(confidence, "confidence")
    selection, reported = _paired_scores(val, test)
    size = selection.size
    curve, jackknife, _ = selected_curve_with_variance(selection, reported)
    draws = np.arange(1, size + 1)
    if size < 3:  # one successive difference cannot carry a simultaneous band
        return pd.DataFrame({"n": draws, "estimate": curve, "low": np.nan, "high": np.nan, "variance": np.nan})
    norms2 = (_order_statistic_weights(size, False) ** 2).sum(axis=1)
    variance = np.fmax(jackknife, successive_difference_sd(selection, reported) ** 2 * norms2)
    half = simultaneous_critical_value(size, confidence) * np.sqrt(variance)
    low, high = curve - half, curve + half
    if bounds is not None:
        low, high = np.clip(low, *bounds), np.clip(high, *bounds)
    return pd.DataFrame({"n": draws, "estimate": curve, "low": low, "high": high, "variance": variance})


def val_cdf_selected_band(val, test, confidence: float = 0.95, bounds: tuple[float, float] | None = None,
                          method: str = "ld") -> pd.DataFrame:
    """opda's construction carried over to the test score of the val-selected trial, n = 1…N (compared in
    benchmarks/results/tuning_bands.md, not what the report draws): a frame with columns n, estimate, low, high.

    Half the error rate goes to an exact simultaneous band on the val CDF (`order_statistic_band`), which bounds
    the mass the best of n puts below each val score by low_i^n ≤ F(v_(i))^n ≤ high_i^n at every n at once; the ends
    are the extremes, over those CDFs, of Σ (mass)·(test score of the trial at that val score), the mass above the
    best val score at the best trial's test score (below the worst at the worst's), or at `bounds` when given. The
    other half goes to the test noise of the trials: ± c·σ̂·‖w_n‖ (σ̂ `successive_difference_sd`, c simultaneous
    over n under normal noise). Distribution-free in the val order, not in the test scores.
    """
    check_probability(confidence, "confidence")
    selection, reported = _paired_scores(val, test)
    if not np.all(np.isfinite(selection)):
        raise ValueError("val must be finite (a failed trial enters at the metric's floor)")
    size = selection.size
    ranked = _ranked_reported(selection, reported)
    weights = _order_statistic_weights(size, False)
    draws = np.arange(1, size + 1)
    estimate = weights @ ranked
    if size < 3:
        return pd.DataFrame({"n": draws, "estimate": estimate, "low": np.nan, "high": np.nan})
    error = 1.0 - confidence
    low_cdf, high_cdf = order_statistic_band(size, 1.0 - error / 2.0, method)
    below_value, above_value = (ranked[0], ranked[-1]) if bounds is None else map(float, bounds)
    upper_values, lower_values = np.append(ranked, above_value), np.concatenate([[below_value], ranked])
    margins = (_noise_critical_value(size, 1.0 - error / 2.0) * successive_difference_sd(selection, reported)
               * np.sqrt((weights ** 2).sum(axis=1)))
    low, high = np.empty(size), np.empty(size)
    for index, n in enumerate(draws):
        # Upper end: the mass between v_(i−1) and v_(i) at t_[i]; lower end: at t_[i−1] (the CDF edges' atoms).
        high[index] = _extreme_mean(upper_values, low_cdf ** n, high_cdf ** n) + margins[index]
        low[index] = -_extreme_mean(-lower_values, low_cdf ** n, high_cdf ** n) - margins[index]
    return pd.DataFrame({"n": draws, "estimate": estimate, "low": low, "high": high})
