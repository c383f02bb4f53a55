"""Convergence: iterations to a target score, how fast each method gets there against Fixed AdaCos, the mean
val curves over seeds, where AdaCos overtakes ArcFace for good (and whether the final gap holds across seeds),
and the angle dynamics behind them. Scores are "higher is better" throughout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.common import (
    ADACOS_METHODS,
    ARCFACE_METHODS,
    REFERENCE_METHOD,
    finite_values,
    mean_or_nan,
    reaches,
)
from study.config import AnalysisConfig
from study.plateau import aligned_curve
from study.statistics import check_probability, difference_ci, mean_ci, paired_difference

ANGLE_COLUMNS = ("theta_med_deg", "cos_nontarget_mean", "s")
CROSSING_COLUMNS = ["adacos_method", "arcface_method", "crossing_iteration", "ahead_from_start", "arcface_ahead_from",
                    "adacos_led_before", "last_iteration", "first_iteration", "gap_at_end"]
# low/high: median_interval's distribution-free interval (NaN: not reached, or no interval at all: then coverage is
# NaN too); coverage: the interval's exact coverage.
CONVERGENCE_COLUMNS = ["method", "basis", "fraction", "target", "median_iteration", "low", "high", "coverage",
                       "seeds_reached", "seeds"]
# difference: method − Fixed AdaCos in median iterations, a point estimate (±inf where one median is not reached, NaN
# where neither is); reached: whose medians reached the target (both, method, reference, neither); faster_seeds,
# slower_seeds, tied_seeds: the paired seeds the method reached it sooner, later, at the same evaluation (or neither
# reached it); p_value: the exact two-sided sign test on them; faster: who, where p < 1 − confidence.
SPEED_COLUMNS = ["method", "basis", "fraction", "difference", "reached", "faster_seeds", "slower_seeds", "tied_seeds",
                 "p_value", "faster"]



def iterations_to_target(iterations, scores, target: float) -> int | None:
    """The first iteration whose score reaches target (≥), or None if the run never does."""
    steps, values = aligned_curve(iterations, "iterations_to_target", scores)
    reached = reaches(values, target)
    if not reached.any():
        return None
    return int(steps[np.argmax(reached)])


def convergence_targets(best_final_score: float, fractions: Sequence[float] = (0.95, 0.99)) -> dict[float, float]:
    """Convergence targets as fraction × the best final score among all methods, keyed by fraction."""
    if not np.isfinite(best_final_score) or best_final_score < 0:
        raise ValueError(
            f"best_final_score must be finite and non-negative (a higher-is-better score), got {best_final_score}"
        )
    for fraction in fractions:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fractions must lie in (0, 1], got {fraction}")
    return {float(fraction): float(fraction * best_final_score) for fraction in fractions}


def crossing_iteration(iterations, curve_a, curve_b) -> int | None:
    """The first iteration from which curve_a stays ≥ curve_b to the end of the run (a lasting overtake), or None.

    Only the lasting overtake counts: if a leads, falls behind and leads again, the answer
    is where the final lead begins. Ties count as not behind; NaN counts as behind. A curve
    that is ahead from the start gives the first iteration.
    """
    steps, first, second = aligned_curve(iterations, "crossing_iteration", curve_a, curve_b)
    return _final_stretch_start(steps, first >= second)


def _final_stretch_start(steps: np.ndarray, holds: np.ndarray) -> int | None:
    """The first step of the run's final stretch in which `holds` is true throughout, or None if it fails at the end."""
    if steps.size == 0 or not holds[-1]:
        return None
    fails = np.flatnonzero(~holds)
    return int(steps[0 if fails.size == 0 else int(fails[-1]) + 1])


def median_interval(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free interval for the median of n values from their order statistics: [x₍ⱼ₎, x₍ₙ₊₁₋ⱼ₎] with the
    largest j whose coverage 1 − 2·P(B ≤ j − 1), B ~ Binomial(n, ½), is at least `confidence` (exact for continuous
    values, conservative with ties; Hollander & Wolfe, ch. 3). It needs only order, so a seed that never reached a
    target enters as +inf. Returns (low, high, its coverage); all NaN where even [min, max] covers less (at 95%:
    n ≤ 5). A percentile bootstrap of a median over so few runs has no such guarantee."""
    check_probability(confidence, "confidence")
    ordered = np.sort(np.asarray(values, dtype=float))
    n = ordered.size
    found = None
    for j in range(1, (n + 1) // 2 + 1):
        coverage = 1.0 - 2.0 * float(stats.binom.cdf(j - 1, n, 0.5))
        if coverage < confidence:
            break
        found = j, coverage
    if found is None:
        return math.nan, math.nan, math.nan
    j, coverage = found
    return float(ordered[j - 1]), float(ordered[n - j]), coverage


def paired_sign_test(mine, theirs) -> dict:
    """Who reaches a target sooner, seed by seed: the exact two-sided sign test (binomial, p = ½) on the paired seeds
    that differ; a seed that never reached is later than every one that did, two that never did are tied."""
    mine, theirs = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
    tied = (mine == theirs) | (np.isinf(mine) & np.isinf(theirs))
    faster, slower = int(np.sum((mine < theirs) & ~tied)), int(np.sum((mine > theirs) & ~tied))
    p_value = float(stats.binomtest(faster, faster + slower, 0.5).pvalue) if faster + slower else 1.0
    return {"faster_seeds": faster, "slower_seeds": slower, "tied_seeds": int(tied.sum()), "p_value": p_value}


def _median_difference(mine: np.ndarray, theirs: np.ndarray) -> tuple[float, str]:
    """Difference of the medians (inf: not reached) and whose median reached: never "difference 0" for neither."""
    first, second = float(np.median(mine)), float(np.median(theirs))
    reached = {(True, True): "both", (True, False): "method", (False, True): "reference", (False, False): "neither"}
    which = reached[(math.isfinite(first), math.isfinite(second))]
    return (math.nan if which == "neither" else first - second), which


def convergence_tables(runs: pd.DataFrame, history: pd.DataFrame, objective: str, methods: list[str],
                       config: AnalysisConfig):
    """Iterations to targets per run and per method (median over seeds with median_interval's distribution-free
    interval), and which method converges faster than Fixed AdaCos: the difference of medians as a point estimate,
    decided by the exact sign test over paired seeds (paired_sign_test).

    Two bases: `best`, fractions of the best method's mean final val score (absolute targets, the same for
    every method), and `own`, fractions of each method's own mean final val score (how fast a method gets
    near where it ends, whatever that level).
    """
    means = {method: mean_or_nan(runs.loc[runs["method"] == method, "val_score"]) for method in methods}
    finite_means = {method: mean for method, mean in means.items() if np.isfinite(mean)}
    best_method = max(finite_means, key=finite_means.get) if finite_means else None
    best = finite_means[best_method] if best_method else math.nan
    targets = convergence_targets(best, config.convergence_targets) if best_method else {}

    run_rows = []
    for run in runs[["method", "seed"]].itertuples(index=False):
        curve = history[(history["method"] == run.method) & (history["seed"] == run.seed)].sort_values(
            "iteration", kind="stable")
        own = means.get(run.method, math.nan)
        for basis, level in (("best", best), ("own", own)):
            if not (best_method and np.isfinite(level)):
                continue
            for fraction, target in convergence_targets(max(level, 0.0), config.convergence_targets).items():
                reached = iterations_to_target(curve["iteration"].to_numpy(), curve[objective].to_numpy(dtype=float),
                                               target)
                run_rows.append({"method": run.method, "seed": run.seed, "basis": basis, "fraction": fraction,
                                 "target": target, "iteration": math.nan if reached is None else reached})
    per_run = pd.DataFrame(run_rows, columns=["method", "seed", "basis", "fraction", "target", "iteration"])

    method_rows, speed_rows = [], []
    for (method, basis, fraction), group in per_run.groupby(["method", "basis", "fraction"], sort=False):
        # A seed that never reached the target is slower than every seed that did; if that holds for
        # half the seeds or more, the median itself is "not reached".
        iterations = group["iteration"].fillna(np.inf).to_numpy(dtype=float)
        median = float(np.median(iterations))
        low, high, coverage = median_interval(iterations, config.confidence)
        method_rows.append({"method": method, "basis": basis, "fraction": fraction,
                            "target": float(group["target"].iloc[0]),
                            "median_iteration": median if np.isfinite(median) else math.nan,
                            "low": low if np.isfinite(low) else math.nan, "high": high if np.isfinite(high) else math.nan,
                            "coverage": coverage, "seeds_reached": int(group["iteration"].notna().sum()),
                            "seeds": int(iterations.size)})
        if method == REFERENCE_METHOD:
            continue
        reference = per_run[(per_run["method"] == REFERENCE_METHOD) & (per_run["basis"] == basis)
                            & (per_run["fraction"] == fraction)]
        both = group.merge(reference, on="seed", suffixes=("", "_reference"))
        if len(both) < 2:
            continue
        # Runs at one seed share initialisation and data order: the seeds pair.
        mine = both["iteration"].fillna(np.inf).to_numpy(dtype=float)
        theirs = both["iteration_reference"].fillna(np.inf).to_numpy(dtype=float)
        difference, reached = _median_difference(mine, theirs)
        test = paired_sign_test(mine, theirs)
        significant = test["p_value"] < 1.0 - config.confidence
        faster = (None if not significant else method if test["faster_seeds"] > test["slower_seeds"]
                  else REFERENCE_METHOD)
        speed_rows.append({"method": method, "basis": basis, "fraction": fraction, "difference": difference,
                           "reached": reached, **test, "faster": faster})
    per_method = pd.DataFrame(method_rows, columns=CONVERGENCE_COLUMNS)
    speed = pd.DataFrame(speed_rows, columns=SPEED_COLUMNS)
    return best, best_method, targets, per_run, per_method, speed


def final_gap_tests(runs: pd.DataFrame, crossings: pd.DataFrame, config: AnalysisConfig) -> pd.DataFrame:
    """Each crossing pair's final val gap (AdaCos − ArcFace) tested across seeds, paired where they pair.

    A lasting overtake is only claimed where this gap is significant: a mean curve that ends a hair
    above another says nothing about which method ends ahead.
    """
    rows = []
    for pair in crossings.itertuples():
        a = runs[runs["method"] == pair.adacos_method][["seed", "val_score"]]
        b = runs[runs["method"] == pair.arcface_method][["seed", "val_score"]]
        both = a.merge(b, on="seed", suffixes=("_adacos", "_arcface")).dropna()
        if len(both) >= 2:
            result = paired_difference(both["val_score_adacos"], both["val_score_arcface"], config.confidence)
        else:
            first, second = finite_values(a["val_score"]), finite_values(b["val_score"])
            result = (difference_ci(first, second, config.confidence) if first.size and second.size
                      else {"low": math.nan, "high": math.nan, "significant": False})
        rows.append({"gap_low": result["low"], "gap_high": result["high"], "gap_significant": bool(result["significant"])})
    return pd.concat([crossings.reset_index(drop=True),
                      pd.DataFrame(rows, columns=["gap_low", "gap_high", "gap_significant"])], axis=1)


def mean_curves(history: pd.DataFrame, objective: str, methods: list[str], config: AnalysisConfig) -> pd.DataFrame:
    """Mean val objective over seeds with its t interval, per method and iteration."""
    rows = []
    for method in methods:
        for iteration, values in history[history["method"] == method].groupby("iteration", sort=True)[objective]:
            finite = finite_values(values)
            mean, low, high = mean_ci(finite, config.confidence) if finite.size else (math.nan,) * 3
            rows.append({"method": method, "iteration": iteration, "mean": mean, "low": low, "high": high,
                         "n": int(finite.size)})
    return pd.DataFrame(rows, columns=["method", "iteration", "mean", "low", "high", "n"])


def crossings_table(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (AdaCos, ArcFace) pair with curves: where AdaCos's mean val curve overtakes ArcFace's for good, or the reverse.

    `curves` is `StudyAnalysis.curves` (method, iteration, mean, ...). The two curves are compared at the
    iterations both were evaluated at. An AdaCos mean that is NaN (every seed diverged there) counts as behind,
    an ArcFace one as AdaCos ahead. `crossing_iteration` is the start of the final stretch where AdaCos is at
    or above ArcFace (<NA> when AdaCos is behind at the end); `ahead_from_start` says that stretch is the whole run.
    When AdaCos is behind at the end, `arcface_ahead_from` is where ArcFace's final, strict lead begins, and
    `adacos_led_before` says whether AdaCos was strictly ahead at some evaluation before it: the paper's order
    (AdaCos overtaking late) turned round.
    """
    means = {method: curve.set_index("iteration")["mean"].astype(float)
             for method, curve in curves.groupby("method", sort=False)}
    rows = []
    for adacos in ADACOS_METHODS:
        for arcface in ARCFACE_METHODS:
            if adacos not in means or arcface not in means:
                continue
            both = pd.concat({"adacos": means[adacos], "arcface": means[arcface]}, axis=1, join="inner").sort_index()
            if both.empty:
                continue
            steps = both.index.to_numpy()
            adacos_curve, arcface_curve = both["adacos"].to_numpy(), both["arcface"].to_numpy()
            arcface_or_lowest = np.where(np.isnan(arcface_curve), -np.inf, arcface_curve)
            crossing = crossing_iteration(steps, adacos_curve, arcface_or_lowest)
            arcface_ahead = _final_stretch_start(steps, ~(adacos_curve >= arcface_or_lowest))
            led = (arcface_ahead is not None
                   and bool((adacos_curve > arcface_or_lowest)[steps < arcface_ahead].any()))
            rows.append({"adacos_method": adacos, "arcface_method": arcface,
                         "crossing_iteration": pd.NA if crossing is None else crossing,
                         "ahead_from_start": crossing is not None and crossing == steps[0],
                         "arcface_ahead_from": pd.NA if arcface_ahead is None else arcface_ahead,
                         "adacos_led_before": led,
                         "last_iteration": int(steps[-1]), "first_iteration": int(steps[0]),
                         "gap_at_end": float(adacos_curve[-1] - arcface_curve[-1])})
    table = pd.DataFrame(rows, columns=CROSSING_COLUMNS)
    return table.astype({"crossing_iteration": "Int64", "ahead_from_start": bool, "arcface_ahead_from": "Int64",
                         "adacos_led_before": bool, "last_iteration": "Int64", "first_iteration": "Int64",
                         "gap_at_end": float})


def angle_dynamics(history: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Mean over seeds of the median target angle, the mean non-target cosine and s, per method and iteration."""
    frame = history.reindex(columns=["method", "iteration", *ANGLE_COLUMNS])
    frame[list(ANGLE_COLUMNS)] = frame[list(ANGLE_COLUMNS)].apply(pd.to_numeric, errors="coerce")
    means = frame[frame["method"].isin(methods)].groupby(["method", "iteration"], sort=True).mean().reset_index()
    means["method"] = pd.Categorical(means["method"], categories=methods, ordered=True)
    means = means.sort_values(["method", "iteration"], kind="stable")
    return means.assign(method=means["method"].astype(str)).reset_index(drop=True)
