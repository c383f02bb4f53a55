"""Seed-level statistics: paired comparisons, multiple testing, equivalence and sample size.

Pure functions on numpy arrays: no file I/O, no pandas. Scores are "higher is better"
unless said. "Paired" means a[i] and b[i] come from the same seed of two methods, so the
per-seed differences a[i] − b[i] are the sample every test here works on.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy import integrate, optimize, special, stats


def finite_vector(values, name: str) -> np.ndarray:
    """The values as a non-empty, finite, one-dimensional float array, or a ValueError."""
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or inf; pass completed, finite values only")
    return array


def check_probability(value: float, name: str) -> None:
    """Raise unless 0 < value < 1 (NaN fails too)."""
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1, got {value}")


def _check_test_levels(alpha: float, power: float) -> None:
    """Raise unless alpha and power are probabilities with power > alpha (else nothing is to be found)."""
    check_probability(alpha, "alpha")
    check_probability(power, "power")
    if power <= alpha:
        raise ValueError(f"power must exceed alpha ({alpha}), got {power}")


def _check_max_seeds(max_seeds: int) -> None:
    """Raise unless max_seeds allows at least one testable sample size (n ≥ 2)."""
    if max_seeds < 2:
        raise ValueError(f"max_seeds must be at least 2, got {max_seeds}")


def _smallest_n(satisfied, max_seeds: int) -> int | None:
    """The smallest n in [2, max_seeds] with satisfied(n), for a predicate monotone in n; None if none."""
    if not satisfied(max_seeds):
        return None
    low, high = 2, max_seeds  # invariant: satisfied(high), and nothing below low is
    while low < high:
        middle = (low + high) // 2
        if satisfied(middle):
            high = middle
        else:
            low = middle + 1
    return high


def _without_spread(difference: float) -> dict:
    """A difference measured without any spread: the interval collapses onto it (the limit of the t interval
    as the standard error goes to 0), significant exactly when it is non-zero."""
    return {"difference": difference, "low": difference, "high": difference,
            "p_value": 1.0 if difference == 0.0 else 0.0, "significant": difference != 0.0, "standard_error": 0.0}


def _t_test(test, *samples, **options):
    """scipy's t-test `test` on `samples`, without its warning about nearly identical values.

    A constant group is a valid sample here (e.g. every seed at the same score) and its test is still exact;
    the cases with no spread at all are answered before any test is called.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        return test(*samples, **options)


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval (mean, low, high); the bounds are NaN for a single value."""
    sample = finite_vector(values, "values")
    check_probability(confidence, "confidence")
    mean = float(sample.mean())
    if sample.size < 2:
        return mean, float("nan"), float("nan")
    interval = _t_test(stats.ttest_1samp, sample, 0.0).confidence_interval(confidence)
    return mean, float(interval.low), float(interval.high)


def difference_ci(a, b, confidence: float = 0.95) -> dict:
    """Welch's t interval, two-sided p-value and standard error for mean(a) − mean(b) of two unpaired samples.

    scipy.stats.ttest_ind(equal_var=False) and its confidence_interval. With fewer than two
    values in a group nothing about spread is known: the interval, p-value and df are NaN and
    the difference is not significant. With zero variance in both groups the interval
    collapses onto the observed difference (the limit of Welch's interval), which is
    significant exactly when it is non-zero.
    """
    first, second = finite_vector(a, "a"), finite_vector(b, "b")
    check_probability(confidence, "confidence")
    difference = float(first.mean() - second.mean())
    nan = float("nan")
    if first.size < 2 or second.size < 2:
        return {"difference": difference, "low": nan, "high": nan, "p_value": nan, "significant": False, "df": nan,
                "standard_error": nan}
    # The standard error travels on to the equivalence test, which needs it beside the interval.
    variance = first.var(ddof=1) / first.size + second.var(ddof=1) / second.size
    if variance == 0.0:
        return _without_spread(difference) | {"df": nan}
    welch = _t_test(stats.ttest_ind, first, second, equal_var=False)
    interval = welch.confidence_interval(confidence)
    return {
        "difference": difference,
        "low": float(interval.low),
        "high": float(interval.high),
        "p_value": float(welch.pvalue),
        "significant": bool(interval.low > 0.0 or interval.high < 0.0),
        "df": float(welch.df),
        "standard_error": float(np.sqrt(variance)),
    }


def paired_difference(a, b, confidence: float = 0.95) -> dict:
    """Paired t interval and two-sided p-value for mean(a − b): t = mean(d)/(sd(d)/√n), df = n − 1.

    scipy.stats.ttest_rel and its confidence_interval. With one pair nothing about spread is
    known: interval, p-value, df, sd and standard error are NaN, not significant. When every
    difference is the same (zero variance) the interval collapses onto it, which is
    significant exactly when it is non-zero (the limit of the t interval as sd → 0).
    """
    first, second = finite_vector(a, "a"), finite_vector(b, "b")
    if first.size != second.size:
        raise ValueError(
            f"a and b must have equal length (one value per seed), got {first.size} and {second.size}"
        )
    check_probability(confidence, "confidence")
    differences = first - second
    n = int(differences.size)
    difference = float(differences.mean())
    nan = float("nan")
    if n < 2:
        return {
            "difference": difference,
            "low": nan,
            "high": nan,
            "p_value": nan,
            "significant": False,
            "df": nan,
            "n": n,
            "sd": nan,
            "standard_error": nan,
        }
    # Test identical values directly: the mean of equal floats can round away from them,
    # which would leave a spurious ~1e-17 sd and a meaningless huge t statistic.
    if np.all(differences == differences[0]):
        return _without_spread(difference) | {"df": float(n - 1), "n": n, "sd": 0.0}
    paired = _t_test(stats.ttest_rel, first, second)
    interval = paired.confidence_interval(confidence)
    sd = float(differences.std(ddof=1))
    return {
        "difference": difference,
        "low": float(interval.low),
        "high": float(interval.high),
        "p_value": float(paired.pvalue),
        "significant": bool(interval.low > 0.0 or interval.high < 0.0),
        "df": float(paired.df),
        "n": n,
        "sd": sd,
        "standard_error": sd / math.sqrt(n),
    }


def holm_adjusted(p_values) -> np.ndarray:
    """Holm step-down adjusted p-values: sorted ascending, adj_(k) = max_{j≤k} min(1, (m − j + 1)·p_(j)).

    Returned in the given order. NaN entries (tests that could not be run) stay NaN and do
    not count towards the family size m. A test is significant after correction when its
    adjusted p-value is below alpha, which reproduces Holm's sequential rejections.
    """
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"p_values must be one-dimensional, got shape {p.shape}")
    present = ~np.isnan(p)
    if np.any(present & ~((p >= 0.0) & (p <= 1.0))):
        raise ValueError("p_values must lie in [0, 1] (NaN allowed for missing tests)")
    adjusted = np.full(p.shape, np.nan)
    finite = p[present]
    m = finite.size
    if m == 0:
        return adjusted
    order = np.argsort(finite, kind="stable")
    multipliers = m - np.arange(m)  # m − j + 1 for j = 1…m
    stepped = np.minimum(1.0, multipliers * finite[order])
    # The running maximum keeps adjusted values monotone, so a test is never rejected
    # after a smaller p-value was retained (Holm stops at the first retained hypothesis).
    stepped = np.maximum.accumulate(stepped)
    in_given_order = np.empty(m)
    in_given_order[order] = stepped
    adjusted[present] = in_given_order
    return adjusted


def equivalence_test(
    difference: float, standard_error: float, df: float, margin: float, alpha: float = 0.05
) -> dict:
    """TOST for |δ| < margin: p = max(P(T_df ≥ (d + margin)/se), P(T_df ≤ (d − margin)/se)).

    Equivalent when p < alpha, which happens exactly when the (1 − 2·alpha) interval
    d ± t_{1−alpha, df}·se lies inside (−margin, margin). With se == 0 the interval is the
    point d (whatever df is, since the t quantile is multiplied by 0): equivalent iff
    |d| < margin, p 0.0 or 1.0. Otherwise a NaN difference, se or df gives NaN p-values and
    a NaN interval, not equivalent.
    """
    if not margin > 0.0:
        raise ValueError(f"margin must be > 0, got {margin}")
    check_probability(alpha, "alpha")
    if alpha >= 0.5:
        raise ValueError(f"alpha must be below 0.5 for the (1 − 2·alpha) interval to exist, got {alpha}")
    if standard_error < 0.0:
        raise ValueError(f"standard_error must be ≥ 0, got {standard_error}")
    if not df > 0.0 and not math.isnan(df):
        raise ValueError(f"df must be > 0, got {df}")
    difference, standard_error, df = float(difference), float(standard_error), float(df)
    nan = float("nan")
    if math.isnan(difference) or math.isnan(standard_error) or (math.isnan(df) and standard_error != 0.0):
        return {"p_value": nan, "equivalent": False, "low": nan, "high": nan, "p_lower": nan, "p_upper": nan}
    if standard_error == 0.0:
        # A known difference: each one-sided test is certain one way or the other.
        p_lower = 0.0 if difference > -margin else 1.0
        p_upper = 0.0 if difference < margin else 1.0
        p_value = max(p_lower, p_upper)
        return {
            "p_value": p_value,
            "equivalent": p_value < alpha,
            "low": difference,
            "high": difference,
            "p_lower": p_lower,
            "p_upper": p_upper,
        }
    # H0: δ ≤ −margin against δ > −margin, and H0: δ ≥ margin against δ < margin.
    p_lower = float(stats.t.sf((difference + margin) / standard_error, df))
    p_upper = float(stats.t.cdf((difference - margin) / standard_error, df))
    p_value = max(p_lower, p_upper)
    half_width = float(stats.t.ppf(1.0 - alpha, df)) * standard_error
    return {
        "p_value": p_value,
        "equivalent": bool(p_value < alpha),
        "low": difference - half_width,
        "high": difference + half_width,
        "p_lower": p_lower,
        "p_upper": p_upper,
    }


def _paired_t_power(effect_size: float, n: int, alpha: float) -> float:
    """Power of the two-sided one-sample t-test: P(|T'| > t_{1−α/2, n−1}), T' ~ nct(n − 1, effect·√n)."""
    df = n - 1
    critical = stats.t.ppf(1.0 - alpha / 2.0, df)
    noncentrality = effect_size * math.sqrt(n)
    # The lower tail P(T' < −c) is written as sf(c) at −noncentrality (symmetry of the
    # noncentral t): scipy's nct.cdf returns NaN there for some large noncentralities.
    return float(stats.nct.sf(critical, df, noncentrality) + stats.nct.sf(critical, df, -noncentrality))


def minimum_detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean difference δ that a two-sided paired t-test on n pairs detects with that power.

    Exact: solves P(|T'| > t_{1−α/2, n−1}) = power for T' ~ noncentral t(n − 1, δ√n/sd)
    with brentq, in units of sd. n < 2 or non-finite sd: NaN; sd == 0: 0.0.
    """
    _check_test_levels(alpha, power)
    if n < 2 or not math.isfinite(sd):
        return float("nan")
    if sd < 0.0:
        raise ValueError(f"sd must be ≥ 0, got {sd}")
    if sd == 0.0:
        return 0.0
    return float(_detectable_effect_size(int(n), float(alpha), float(power)) * sd)


@functools.lru_cache(maxsize=4096)
def _detectable_effect_size(n: int, alpha: float, power: float) -> float:
    """The detectable difference in units of sd (it scales with sd, so simulations and searches over n reuse it)."""
    def shortfall(effect_size: float) -> float:
        return _paired_t_power(effect_size, n, alpha) - power

    # Power rises from alpha (< power) at effect 0; double until it passes the target.
    upper = 1.0
    while shortfall(upper) < 0.0:
        upper *= 2.0
    return float(optimize.brentq(shortfall, 0.0, upper, xtol=1e-12, rtol=1e-12))


def seeds_to_detect(
    difference: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_seeds: int = 100_000
) -> int | None:
    """Smallest n ≥ 2 with minimum_detectable_difference(sd, n) ≤ |difference| (MDD falls with n).

    None when the difference is 0 (nothing to detect) or more than max_seeds are needed.
    """
    _check_test_levels(alpha, power)
    _check_max_seeds(max_seeds)
    if not (math.isfinite(difference) and math.isfinite(sd)):
        raise ValueError(f"difference and sd must be finite, got {difference} and {sd}")
    if sd < 0.0:
        raise ValueError(f"sd must be ≥ 0, got {sd}")
    target = abs(difference)
    if target == 0.0:
        return None
    return _smallest_n(lambda n: minimum_detectable_difference(sd, n, alpha, power) <= target, max_seeds)


def seeds_to_show_equivalence(
    difference: float,
    sd: float,
    margin: float,
    alpha: float = 0.05,
    power: float = 0.8,
    max_seeds: int = 100_000,
) -> int | None:
    """Smallest n ≥ 2 with (t_{1−α,n−1} + t_{1−β',n−1})·sd/√n ≤ margin − |difference| (TOST sample size).

    The usual approximate sample-size formula for TOST on paired differences (Chow, Shao &
    Wang, Sample Size Calculations in Clinical Research, one-sample equivalence), with
    β = 1 − power: β' = β when difference ≠ 0, where only the nearer margin's one-sided test
    is treated as at risk, and β' = β/2 when difference == 0, where both are equally at risk.
    It uses central t quantiles in place of the noncentral t, so the achieved power is close
    to, not exactly, the target: conservative at difference 0, and somewhat short of it for a
    small non-zero difference, where the far margin's test still fails now and then (about
    0.74 instead of 0.80 at difference = margin/10). None when |difference| ≥ margin or more
    than max_seeds are needed.
    """
    _check_test_levels(alpha, power)
    _check_max_seeds(max_seeds)
    if not margin > 0.0:
        raise ValueError(f"margin must be > 0, got {margin}")
    if not (math.isfinite(difference) and math.isfinite(sd)):
        raise ValueError(f"difference and sd must be finite, got {difference} and {sd}")
    if sd < 0.0:
        raise ValueError(f"sd must be ≥ 0, got {sd}")
    room = margin - abs(difference)
    if room <= 0.0:
        return None
    beta = 1.0 - power
    beta_prime = beta if difference != 0.0 else beta / 2.0

    def enough(n: int) -> bool:
        df = n - 1
        quantiles = stats.t.ppf(1.0 - alpha, df) + stats.t.ppf(1.0 - beta_prime, df)
        return quantiles * sd / math.sqrt(n) <= room

    return _smallest_n(enough, max_seeds)


def replicates_to_resolve(difference: float, sd: float, margin: float, decision_alpha: float, alpha: float = 0.05,
                          power: float = 0.8) -> int | None:
    """The fewest replicates (seeds, or class splits) of sd `sd` that resolve a difference of this size either way:
    detect it at `decision_alpha` (Holm's strictest step) or show it equivalent within ±margin at `alpha`, with that
    power; None where neither comes within max_seeds (or the margin is not finite)."""
    needed = [seeds_to_detect(difference, sd, decision_alpha, power)]
    if math.isfinite(margin):
        needed.append(seeds_to_show_equivalence(difference, sd, margin, alpha, power))
    needed = [count for count in needed if count is not None]
    return min(needed) if needed else None


NORMAL_DENSITY_CONSTANT = np.sqrt(2 * np.pi)  # scipy.stats.norm's own


def normal_density(z):
    """The standard normal density at z, as scipy.stats.norm.pdf computes it (the same floats), without its per-call
    checks, which cost 30x the arithmetic where it is called a scalar at a time or inside a root finder's loop."""
    return np.exp(-z ** 2 / 2.0) / NORMAL_DENSITY_CONSTANT


@functools.cache
def expected_maximum(n: int) -> float:
    """E[max of n independent standard normal draws]: 0 for n = 1, 1/√π for 2, 3/(2√π) for 3. What picking the best
    of n by a noisy score adds, in units of that noise (the search's seed luck, the control's best of n seeds, the
    rate val chooses)."""
    if n < 1:
        raise ValueError(f"expected_maximum needs at least one draw, got n = {n}")
    if n == 1:
        return 0.0
    # ndtr is scipy.stats.norm.cdf's own function: quad's thousand scalar evaluations skip its per-call checks.
    return float(integrate.quad(lambda x: x * n * normal_density(x) * special.ndtr(x) ** (n - 1),
                                -np.inf, np.inf)[0])
