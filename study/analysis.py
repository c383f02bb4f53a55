"""The study's numbers: tuning-budget curves, break-even, convergence and confidence intervals.

Pure functions on numpy arrays and pandas frames: no file I/O, no plotting. Scores are
"higher is better" throughout (the study objective is accuracy or MAP@R).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from study.config import HYPERPARAMETER_FREE_LOSSES, AnalysisConfig
from study.losses import fixed_adacos_scale
from study.published import PublishedSetup
from study.results import is_tuned, tuned_method

# Curves are built by floating-point sums, so a curve that reaches its target exactly can
# land one rounding step below it; "reached" forgives that much and no more.
_REACH_RTOL = 1e-9
_REACH_ATOL = 1e-12


def _finite_vector(values, name: str) -> np.ndarray:
    """The values as a non-empty, finite, one-dimensional float array, or a ValueError."""
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or inf; pass completed, finite values only")
    return array


def _check_confidence(confidence: float) -> None:
    """Raise unless the confidence level lies strictly between 0 and 1."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def _reaches(values: np.ndarray, target: float) -> np.ndarray:
    """Elementwise values ≥ target, forgiving floating-point rounding; NaN never reaches."""
    tolerance = _REACH_ATOL + _REACH_RTOL * abs(target)
    return values >= target - tolerance


def _expected_max_weights(n_trials: int) -> np.ndarray:
    """Matrix W with W[n-1, i-1] = (i/N)^n − ((i−1)/N)^n: P(the max of n draws is the i-th smallest)."""
    rank = np.arange(1, n_trials + 1, dtype=float)
    draws = np.arange(1, n_trials + 1, dtype=float)[:, None]
    return (rank / n_trials) ** draws - ((rank - 1) / n_trials) ** draws


def expected_best_after_n_trials(scores) -> np.ndarray:
    """Dodge et al.'s expected best score after n = 1…N trials drawn with replacement from the N scores."""
    ordered = np.sort(_finite_vector(scores, "scores"))
    return _expected_max_weights(ordered.size) @ ordered


def expected_best_band(
    scores, n_bootstrap: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap (lower, upper) band of the expected-best curve, one value per n."""
    values = _finite_vector(scores, "scores")
    _check_confidence(confidence)
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be at least 1, got {n_bootstrap}")
    rng = np.random.default_rng(seed)
    resamples = np.sort(rng.choice(values, size=(n_bootstrap, values.size), replace=True), axis=1)
    curves = resamples @ _expected_max_weights(values.size).T  # (n_bootstrap, N)
    tail = 100.0 * (1.0 - confidence) / 2.0
    lower, upper = np.percentile(curves, [tail, 100.0 - tail], axis=0)
    return lower, upper


def break_even(expected_best, target: float, seconds_per_trial: float) -> dict:
    """The fewest trials (and device-seconds) after which the expected-best curve reaches target."""
    curve = np.asarray(expected_best, dtype=float)
    if curve.ndim != 1 or curve.size == 0:
        raise ValueError("expected_best must be a non-empty one-dimensional curve (n = 1…N)")
    if not np.isfinite(target):
        raise ValueError(f"target must be finite, got {target}")
    if not (np.isfinite(seconds_per_trial) and seconds_per_trial >= 0):
        raise ValueError(f"seconds_per_trial must be finite and non-negative, got {seconds_per_trial}")
    reached = _reaches(curve, target)
    if not reached.any():
        return {"trials": None, "seconds": None, "reached": False, "max_trials": int(curve.size)}
    trials = int(np.argmax(reached)) + 1
    return {
        "trials": trials,
        "seconds": float(trials * seconds_per_trial),
        "reached": True,
        "max_trials": int(curve.size),
    }


def _aligned_curve(iterations, name: str, *curves) -> tuple[np.ndarray, ...]:
    """Iterations and curves as equal-length 1-D arrays, iterations non-decreasing."""
    steps = np.asarray(iterations)
    arrays = [np.asarray(curve, dtype=float) for curve in curves]
    if steps.ndim != 1 or any(array.shape != steps.shape for array in arrays):
        raise ValueError(f"{name}: iterations and curves must be one-dimensional and of equal length")
    if np.any(np.diff(steps) < 0):
        raise ValueError(f"{name}: iterations must be in non-decreasing order")
    return (steps, *arrays)


def iterations_to_target(iterations, scores, target: float) -> int | None:
    """The first iteration whose score reaches target (≥), or None if the run never does."""
    steps, values = _aligned_curve(iterations, "iterations_to_target", scores)
    reached = _reaches(values, target)
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


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval (mean, low, high); the bounds are NaN for a single value."""
    sample = _finite_vector(values, "values")
    _check_confidence(confidence)
    mean = float(sample.mean())
    if sample.size < 2:
        return mean, float("nan"), float("nan")
    half_width = stats.t.ppf(0.5 + confidence / 2.0, sample.size - 1) * sample.std(ddof=1) / np.sqrt(sample.size)
    return mean, float(mean - half_width), float(mean + half_width)


def difference_ci(a, b, confidence: float = 0.95) -> dict:
    """Welch's t interval and two-sided p-value for mean(a) − mean(b).

    With fewer than two values in a group nothing about spread is known: the interval,
    p-value and df are NaN and the difference is not significant. With zero variance in
    both groups the interval collapses onto the observed difference (the limit of Welch's
    interval), which is significant exactly when it is non-zero.
    """
    first, second = _finite_vector(a, "a"), _finite_vector(b, "b")
    _check_confidence(confidence)
    difference = float(first.mean() - second.mean())
    nan = float("nan")
    if first.size < 2 or second.size < 2:
        return {"difference": difference, "low": nan, "high": nan, "p_value": nan, "significant": False, "df": nan}
    var_first = first.var(ddof=1) / first.size
    var_second = second.var(ddof=1) / second.size
    variance = var_first + var_second
    if variance == 0.0:
        return {
            "difference": difference,
            "low": difference,
            "high": difference,
            "p_value": 1.0 if difference == 0.0 else 0.0,
            "significant": difference != 0.0,
            "df": nan,
        }
    df = variance**2 / (var_first**2 / (first.size - 1) + var_second**2 / (second.size - 1))
    standard_error = np.sqrt(variance)
    half_width = stats.t.ppf(0.5 + confidence / 2.0, df) * standard_error
    low, high = difference - half_width, difference + half_width
    return {
        "difference": difference,
        "low": float(low),
        "high": float(high),
        "p_value": float(2.0 * stats.t.sf(abs(difference) / standard_error, df)),
        "significant": bool(low > 0.0 or high < 0.0),
        "df": float(df),
    }


def crossing_iteration(iterations, curve_a, curve_b) -> int | None:
    """The first iteration from which curve_a stays ≥ curve_b to the end of the run (a lasting overtake), or None.

    Only the lasting overtake counts: if a leads, falls behind and leads again, the answer
    is where the final lead begins. Ties count as not behind; NaN counts as behind. A curve
    that is ahead from the start gives the first iteration.
    """
    steps, first, second = _aligned_curve(iterations, "crossing_iteration", curve_a, curve_b)
    return _final_stretch_start(steps, first >= second)


def _final_stretch_start(steps: np.ndarray, holds: np.ndarray) -> int | None:
    """The first step of the run's final stretch in which `holds` is true throughout, or None if it fails at the end."""
    if steps.size == 0 or not holds[-1]:
        return None
    fails = np.flatnonzero(~holds)
    return int(steps[0 if fails.size == 0 else int(fails[-1]) + 1])


def summarise_runs(runs: pd.DataFrame, metric_columns: Sequence[str], group: str = "method") -> pd.DataFrame:
    """Mean, std (ddof=1) and count of each metric per group, one row per (group, metric).

    Missing values (a diverged run's metrics) are left out of that metric's mean, std and n;
    std is NaN where n < 2. Groups keep their order of first appearance, metrics their given order.
    """
    missing = [column for column in [group, *metric_columns] if column not in runs.columns]
    if missing:
        raise KeyError(f"columns not in runs: {missing}; available: {list(runs.columns)}")
    grouped = runs.groupby(group, sort=False)[list(metric_columns)]
    means, stds, counts = grouped.mean(), grouped.std(ddof=1), grouped.count()
    rows = [
        {
            group: name,
            "metric": metric,
            "mean": means.at[name, metric],
            "std": stds.at[name, metric],
            "n": int(counts.at[name, metric]),
        }
        for name in means.index
        for metric in metric_columns
    ]
    return pd.DataFrame(rows, columns=[group, "metric", "mean", "std", "n"])


# =======================================================================================
# The whole study: every table and number the report needs, from the stages' result tables
# (trials.csv of each search, evaluation/runs.csv and evaluation/history.csv; see
# study/results.py). Built only from the functions above. The test metrics are not all
# "higher is better": EER is an error rate, so every metric carries its direction.
# =======================================================================================

REFERENCE_METHOD = "fixed_adacos"
LOWER_IS_BETTER_METRICS = frozenset({"eer"})
TEST_PREFIX = "test_"
# Trials that ran to an end and spent their device time; RUNNING ones were interrupted and left no cost.
FINISHED_STATES = ("COMPLETE", "PRUNED", "FAIL")
ANGLE_COLUMNS = ("theta_med_deg", "cos_nontarget_mean", "s")
# The pairs of the convergence claim ("AdaCos overtakes ArcFace only late"), each compared where both are present.
ADACOS_METHODS = ("fixed_adacos", "dynamic_adacos")
ARCFACE_METHODS = ("arcface_tuned", "arcface_default")
CROSSING_COLUMNS = ["adacos_method", "arcface_method", "crossing_iteration", "ahead_from_start", "arcface_ahead_from",
                    "adacos_led_before", "last_iteration", "first_iteration", "gap_at_end"]
# A published number is "within our seed-to-seed spread" when it lies inside mean ± this many sample stds.
REPRODUCTION_SPREAD_STDS = 2.0
# A finished run whose test embeddings cannot tell genuine from impostor pairs at all (ROC AUC 0.5, the mark of a
# network collapsed to one output, e.g. by dead ReLUs) is counted and named, not hidden in a mean ± std.
CHANCE_METRIC, CHANCE_LEVEL = "test_roc_auc", 0.5


@dataclass
class StudyAnalysis:
    """Every table and number of the report: tidy frames (one row per observation) and a few scalars."""

    objective: str
    confidence: float
    methods: list[str]  # display order: the baselines, then each searched loss's tuned method, then any other
    searched_losses: list[str]
    # loss, trials (finished), complete, pruned, failed, running, seconds, seconds_per_completed_trial,
    # best_trial, best_value, best_s, best_m
    search_summary: pd.DataFrame
    # loss, n, expected_best, low, high, seconds (n × the device-seconds per completed trial, the pruned
    # and failed trials' cost shared out over the completed ones: what n completed trials really cost)
    expected_best: pd.DataFrame
    reference_bands: pd.DataFrame  # method, mean, low, high, seeds, seconds
    break_even: pd.DataFrame  # loss, target, trials, seconds, reached, max_trials
    final: pd.DataFrame  # method, metric, mean, std, n, higher_is_better
    costs: pd.DataFrame  # method, loss, runs, diverged, at_chance, tuning_trials, tuning_seconds, run_seconds
    run_scores: pd.DataFrame  # method, seed, status, val_score, test_<metric>...: one row per final run
    differences: pd.DataFrame  # method, metric, difference, low, high, p_value, significant, higher_is_better
    best_final_val: float  # the best method's mean final val score: what the convergence targets are fractions of
    best_final_method: str | None
    targets: dict[float, float]  # convergence fraction → val score
    convergence_runs: pd.DataFrame  # method, seed, fraction, target, iteration (NaN: never reached)
    convergence: pd.DataFrame  # method, fraction, target, median_iteration (NaN: not reached), seeds_reached, seeds
    curves: pd.DataFrame  # method, iteration, mean, low, high, n
    angles: pd.DataFrame  # method, iteration, theta_med_deg, cos_nontarget_mean, s
    # adacos_method, arcface_method, crossing_iteration (<NA>: no lasting overtake within the run),
    # ahead_from_start, last_iteration, first_iteration, gap_at_end (AdaCos − ArcFace mean val at the end)
    crossings: pd.DataFrame
    landscape: pd.DataFrame  # loss, trial, state, s, m, value, best
    num_classes: int | None
    s_f: float | None
    verdict_facts: dict


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of the metric (with or without the test_ prefix) is better; EER is not."""
    return metric.removeprefix(TEST_PREFIX) not in LOWER_IS_BETTER_METRICS


def fixed_scale_of(num_classes: int | None) -> float | None:
    """AdaCos's s_f for C training classes, or None where C is unknown or below 3."""
    if num_classes is None or num_classes < 3:
        return None
    return fixed_adacos_scale(num_classes)


def _finite(values) -> np.ndarray:
    """The finite entries of values as a float array (NaN marks a diverged run or an unfinished trial)."""
    array = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    return array[np.isfinite(array)]


def _mean_or_nan(values) -> float:
    finite = _finite(values)
    return float(finite.mean()) if finite.size else math.nan


def _require_columns(frame: pd.DataFrame, columns, name: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise KeyError(f"{name} lacks columns {missing}; it has {list(frame.columns)}")


def _method_order(runs: pd.DataFrame, history: pd.DataFrame, searched_losses: list[str]) -> list[str]:
    present = list(dict.fromkeys([*runs["method"], *history["method"]]))
    ordered = _untuned_methods(present)
    ordered += [tuned_method(loss) for loss in searched_losses if tuned_method(loss) in present]
    return ordered + [m for m in present if m not in ordered]


def _untuned_methods(methods) -> list[str]:
    """The methods that cost no search: hyperparameter-free losses first, then fixed runs as they appear."""
    methods = list(dict.fromkeys(methods))
    return ([m for m in HYPERPARAMETER_FREE_LOSSES if m in methods]
            + [m for m in methods if m not in HYPERPARAMETER_FREE_LOSSES and not is_tuned(m)])


def _search_summary(trials: pd.DataFrame) -> pd.DataFrame:
    """Per searched loss: trial counts by state, device-seconds spent, and the best completed trial."""
    rows = []
    for loss, group in trials.groupby("loss", sort=False):
        finished = group[group["state"].isin(FINISHED_STATES)]
        complete = group[(group["state"] == "COMPLETE") & np.isfinite(pd.to_numeric(group["value"], errors="coerce"))]
        seconds = float(_finite(finished["seconds"]).sum())
        best = complete.loc[complete["value"].astype(float).idxmax()] if len(complete) else None
        rows.append({
            "loss": loss, "trials": len(finished), "complete": len(complete),
            "pruned": int((group["state"] == "PRUNED").sum()), "failed": int((group["state"] == "FAIL").sum()),
            "running": int((group["state"] == "RUNNING").sum()), "seconds": seconds,
            # A completed trial costs its own time plus its share of the pruned and failed ones.
            "seconds_per_completed_trial": seconds / len(complete) if len(complete) else math.nan,
            "best_trial": int(best["trial"]) if best is not None else None,
            "best_value": float(best["value"]) if best is not None else math.nan,
            "best_s": float(best["s"]) if best is not None else math.nan,
            "best_m": float(best["m"]) if best is not None else math.nan,
        })
    return pd.DataFrame(rows, columns=["loss", "trials", "complete", "pruned", "failed", "running", "seconds",
                                       "seconds_per_completed_trial", "best_trial", "best_value", "best_s", "best_m"])


def _tuning_budget(trials: pd.DataFrame, summary: pd.DataFrame, target: float,
                   config: AnalysisConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Expected best val score after n completed trials (with band and device-seconds) and its break-even."""
    curves, even = [], []
    for row in summary.itertuples():
        scores = _finite(trials.loc[(trials["loss"] == row.loss) & (trials["state"] == "COMPLETE"), "value"])
        if scores.size == 0:
            even.append({"loss": row.loss, "target": target, "trials": None, "seconds": None, "reached": False,
                         "max_trials": 0})
            continue
        curve = expected_best_after_n_trials(scores)
        low, high = expected_best_band(scores, config.n_bootstrap, config.confidence, config.seed)
        per_trial = row.seconds_per_completed_trial
        n = np.arange(1, scores.size + 1)
        curves.append(pd.DataFrame({"loss": row.loss, "n": n, "expected_best": curve, "low": low, "high": high,
                                    "seconds": n * per_trial}))
        if np.isfinite(target):
            found = break_even(curve, target, per_trial if np.isfinite(per_trial) else 0.0)
            if not np.isfinite(per_trial):
                found["seconds"] = None
        else:  # no Fixed AdaCos run finished: nothing to break even with
            found = {"trials": None, "seconds": None, "reached": False, "max_trials": int(scores.size)}
        even.append({"loss": row.loss, "target": target, **found})
    columns = ["loss", "n", "expected_best", "low", "high", "seconds"]
    expected = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=columns)
    return expected[columns], pd.DataFrame(even, columns=["loss", "target", "trials", "seconds", "reached",
                                                          "max_trials"])


def _reference_bands(runs: pd.DataFrame, config: AnalysisConfig) -> pd.DataFrame:
    """Mean final val score with its CI over seeds, and the cost of one run, for each untuned baseline."""
    rows = []
    for method in _untuned_methods(runs["method"]):
        group = runs[runs["method"] == method]
        scores = _finite(group["val_score"])
        if scores.size == 0:
            continue
        mean, low, high = mean_ci(scores, config.confidence)
        rows.append({"method": method, "mean": mean, "low": low, "high": high, "seeds": int(scores.size),
                     "seconds": _mean_or_nan(group["seconds"])})
    return pd.DataFrame(rows, columns=["method", "mean", "low", "high", "seeds", "seconds"])


def _final_tables(runs: pd.DataFrame, methods: list[str], summary: pd.DataFrame,
                  config: AnalysisConfig) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Test metrics per method (mean, std, n), the cost of each method, and each method's difference to Fixed AdaCos."""
    metrics = [column for column in runs.columns if column.startswith(TEST_PREFIX)]
    final = summarise_runs(runs, metrics) if metrics else pd.DataFrame(columns=["method", "metric", "mean", "std", "n"])
    final["method"] = pd.Categorical(final["method"], categories=methods, ordered=True)
    final = final.sort_values("method", kind="stable").assign(method=lambda f: f["method"].astype(str))
    final["higher_is_better"] = [higher_is_better(metric) for metric in final["metric"]]
    final = final.reset_index(drop=True)

    searches = summary.set_index("loss")
    cost_rows = []
    for method in methods:
        group = runs[runs["method"] == method]
        loss = group["loss"].iloc[0] if len(group) and "loss" in group else None
        searched = method.endswith("_tuned") and method.removesuffix("_tuned") in searches.index
        if searched:
            search = searches.loc[method.removesuffix("_tuned")]
            trials, seconds = int(search["trials"]), float(search["seconds"])
        elif method.endswith("_tuned"):  # its search's trials are missing: the cost is unknown, not zero
            trials, seconds = math.nan, math.nan
        else:
            trials, seconds = 0, 0.0
        cost_rows.append({"method": method, "loss": loss, "runs": len(group),
                          "diverged": int((group["status"] == "diverged").sum()) if "status" in group else 0,
                          "at_chance": runs_at_chance(group),
                          "tuning_trials": trials, "tuning_seconds": seconds,
                          "run_seconds": _mean_or_nan(group["seconds"]) if "seconds" in group else math.nan})
    costs = pd.DataFrame(cost_rows, columns=["method", "loss", "runs", "diverged", "at_chance", "tuning_trials",
                                             "tuning_seconds", "run_seconds"])

    difference_rows = []
    reference = runs[runs["method"] == REFERENCE_METHOD]
    for method in methods:
        if method == REFERENCE_METHOD or reference.empty:
            continue
        group = runs[runs["method"] == method]
        for metric in metrics:
            a, b = _finite(group[metric]), _finite(reference[metric])
            if a.size and b.size:
                result = difference_ci(a, b, config.confidence)
            else:
                result = {"difference": math.nan, "low": math.nan, "high": math.nan, "p_value": math.nan,
                          "significant": False}
            difference_rows.append({"method": method, "metric": metric, "difference": result["difference"],
                                    "low": result["low"], "high": result["high"], "p_value": result["p_value"],
                                    "significant": bool(result["significant"]),
                                    "higher_is_better": higher_is_better(metric)})
    differences = pd.DataFrame(difference_rows, columns=["method", "metric", "difference", "low", "high", "p_value",
                                                         "significant", "higher_is_better"])
    return final, costs, differences


def runs_at_chance(runs: pd.DataFrame) -> int:
    """How many finished runs ended at chance on test (ROC AUC ≤ 0.5: their embeddings carry no identity at all)."""
    if CHANCE_METRIC not in runs:
        return 0
    return int((pd.to_numeric(runs[CHANCE_METRIC], errors="coerce") <= CHANCE_LEVEL + 1e-9).sum())


def _convergence_tables(runs: pd.DataFrame, history: pd.DataFrame, objective: str, methods: list[str],
                        config: AnalysisConfig) -> tuple[float, str | None, dict, pd.DataFrame, pd.DataFrame]:
    """Targets from the best method's mean final val score; per run and per method the iterations to reach each."""
    means = {method: _mean_or_nan(runs.loc[runs["method"] == method, "val_score"]) for method in methods}
    finite_means = {method: mean for method, mean in means.items() if np.isfinite(mean)}
    best_method = max(finite_means, key=finite_means.get) if finite_means else None
    best = finite_means[best_method] if best_method else math.nan
    targets = convergence_targets(best, config.convergence_targets) if best_method else {}

    run_rows = []
    for run in runs[["method", "seed"]].itertuples(index=False):
        curve = history[(history["method"] == run.method) & (history["seed"] == run.seed)].sort_values(
            "iteration", kind="stable")
        for fraction, target in targets.items():
            reached = iterations_to_target(curve["iteration"].to_numpy(), curve[objective].to_numpy(dtype=float),
                                           target)
            run_rows.append({"method": run.method, "seed": run.seed, "fraction": fraction, "target": target,
                             "iteration": math.nan if reached is None else reached})
    per_run = pd.DataFrame(run_rows, columns=["method", "seed", "fraction", "target", "iteration"])

    method_rows = []
    for method in methods:
        for fraction, target in targets.items():
            iterations = per_run.loc[(per_run["method"] == method) & (per_run["fraction"] == fraction), "iteration"]
            if iterations.empty:
                continue
            # A seed that never reached the target is slower than every seed that did; if that
            # holds for half the seeds or more, the median itself is "not reached".
            median = float(np.median(iterations.fillna(np.inf).to_numpy(dtype=float)))
            method_rows.append({"method": method, "fraction": fraction, "target": target,
                                "median_iteration": median if np.isfinite(median) else math.nan,
                                "seeds_reached": int(iterations.notna().sum()), "seeds": int(iterations.size)})
    per_method = pd.DataFrame(method_rows, columns=["method", "fraction", "target", "median_iteration",
                                                    "seeds_reached", "seeds"])
    return best, best_method, targets, per_run, per_method


def _curves(history: pd.DataFrame, objective: str, methods: list[str], config: AnalysisConfig) -> pd.DataFrame:
    """Mean val objective over seeds with its t interval, per method and iteration."""
    rows = []
    for method in methods:
        for iteration, values in history[history["method"] == method].groupby("iteration", sort=True)[objective]:
            finite = _finite(values)
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


def _angles(history: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Mean over seeds of the median target angle, the mean non-target cosine and s, per method and iteration."""
    frame = history.reindex(columns=["method", "iteration", *ANGLE_COLUMNS])
    frame[list(ANGLE_COLUMNS)] = frame[list(ANGLE_COLUMNS)].apply(pd.to_numeric, errors="coerce")
    means = frame[frame["method"].isin(methods)].groupby(["method", "iteration"], sort=True).mean().reset_index()
    means["method"] = pd.Categorical(means["method"], categories=methods, ordered=True)
    means = means.sort_values(["method", "iteration"], kind="stable")
    return means.assign(method=means["method"].astype(str)).reset_index(drop=True)


def _landscape(trials: pd.DataFrame) -> pd.DataFrame:
    """Every finished trial's (s, m), state and val score, with the best completed trial of each loss flagged."""
    finished = trials[trials["state"].isin(FINISHED_STATES)]
    frame = finished.reindex(columns=["loss", "trial", "state", "s", "m", "value"]).reset_index(drop=True)
    frame["best"] = False
    values = pd.to_numeric(frame["value"], errors="coerce").where(frame["state"] == "COMPLETE")
    for _, group in values.groupby(frame["loss"], sort=False):
        if group.notna().any():
            frame.loc[group.idxmax(), "best"] = True
    return frame


def _run_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """Each final run's status, val score and test metrics (NaN where it diverged), for per-seed plots."""
    columns = ["method", "seed", "status", "val_score"] + [c for c in runs.columns if c.startswith(TEST_PREFIX)]
    return runs.reindex(columns=columns).reset_index(drop=True)


def primary_loss(searched_losses: list[str]) -> str | None:
    """ArcFace when it was searched (the study's question is about it), else the first searched loss."""
    if "arcface" in searched_losses:
        return "arcface"
    return searched_losses[0] if searched_losses else None


def _difference_facts(differences: pd.DataFrame, method: str, metric: str, prefix: str) -> dict:
    row = differences[(differences["method"] == method) & (differences["metric"] == metric)]
    if row.empty:
        return {f"{prefix}_{key}": math.nan for key in ("difference", "low", "high", "p_value")} | {
            f"{prefix}_significant": False}
    row = row.iloc[0]
    return {f"{prefix}_difference": float(row["difference"]), f"{prefix}_low": float(row["low"]),
            f"{prefix}_high": float(row["high"]), f"{prefix}_p_value": float(row["p_value"]),
            f"{prefix}_significant": bool(row["significant"])}


def _verdict_facts(objective: str, searched_losses, final, costs, differences, break_even_table, summary,
                   convergence, targets, reference_bands, default_hyperparameters: dict) -> dict:
    """The numbers the verdict states, in one flat dict (NaN / None where a method or number is absent)."""
    metric = f"{TEST_PREFIX}{objective}"
    loss = primary_loss(searched_losses)
    tuned = tuned_method(loss) if loss else None

    def test_mean(method):
        row = final[(final["method"] == method) & (final["metric"] == metric)]
        return float(row["mean"].iloc[0]) if len(row) else math.nan

    def cost(method, column, absent):
        row = costs[costs["method"] == method]
        return row[column].iloc[0] if len(row) else absent

    def iterations(method):
        if not targets:
            return math.nan
        row = convergence[(convergence["method"] == method) & (convergence["fraction"] == min(targets))]
        return float(row["median_iteration"].iloc[0]) if len(row) else math.nan

    reference_val = reference_bands.loc[reference_bands["method"] == REFERENCE_METHOD, "mean"]
    facts = {
        "objective": objective, "metric": metric, "reference": REFERENCE_METHOD,
        "reference_val_mean": float(reference_val.iloc[0]) if len(reference_val) else math.nan,
        "reference_test_mean": test_mean(REFERENCE_METHOD),
        "seeds": int(final.loc[final["metric"] == metric, "n"].max()) if (final["metric"] == metric).any() else 0,
        "tuned_loss": loss, "tuned_method": tuned,
        "tuned_present": bool(tuned and (costs["method"] == tuned).any()),
        "tuned_test_mean": test_mean(tuned),
        **_difference_facts(differences, tuned, metric, "tuned"),
        "default_method": "arcface_default", "default_present": bool((costs["method"] == "arcface_default").any()),
        "default_s": default_hyperparameters.get("s", math.nan),
        "default_m": default_hyperparameters.get("m", math.nan),
        "default_test_mean": test_mean("arcface_default"),
        "default_runs": int(cost("arcface_default", "runs", 0)),
        "default_diverged": int(cost("arcface_default", "diverged", 0)),
        **_difference_facts(differences, "arcface_default", metric, "default"),
        "convergence_fraction": min(targets) if targets else math.nan,
        "reference_iterations": iterations(REFERENCE_METHOD),
        "tuned_iterations": iterations(tuned),
        "default_iterations": iterations("arcface_default"),
    }
    # The other test metrics on which tuned and Fixed AdaCos differ significantly, each by its own direction.
    others = differences[(differences["method"] == tuned) & (differences["metric"] != metric)
                         & differences["significant"]]
    favours_tuned = (others["difference"] > 0) == others["higher_is_better"]
    facts["tuned_better_metrics"] = others.loc[favours_tuned, "metric"].tolist()
    facts["tuned_worse_metrics"] = others.loc[~favours_tuned, "metric"].tolist()
    facts["other_metrics"] = int(((differences["method"] == tuned) & (differences["metric"] != metric)).sum())
    even = break_even_table[break_even_table["loss"] == loss]
    search = summary[summary["loss"] == loss]
    facts.update({
        "break_even_reached": bool(even["reached"].iloc[0]) if len(even) else False,
        "break_even_trials": even["trials"].iloc[0] if len(even) else None,
        "break_even_seconds": even["seconds"].iloc[0] if len(even) else None,
        "search_completed_trials": int(search["complete"].iloc[0]) if len(search) else 0,
        "search_trials": int(search["trials"].iloc[0]) if len(search) else 0,
        "search_seconds": float(search["seconds"].iloc[0]) if len(search) else math.nan,
        "tuned_run_seconds": float(cost(tuned, "run_seconds", math.nan)),
        "reference_run_seconds": float(cost(REFERENCE_METHOD, "run_seconds", math.nan)),
    })
    for key in ("break_even_trials", "break_even_seconds"):  # plain numbers or None, never numpy scalars or NaN
        value = facts[key]
        if value is None or pd.isna(value):
            facts[key] = None
        else:
            facts[key] = int(value) if key.endswith("trials") else float(value)
    return facts


def analyse_study(trials: pd.DataFrame, runs: pd.DataFrame, history: pd.DataFrame, objective: str,
                  config: AnalysisConfig = AnalysisConfig(), num_classes: int | None = None) -> StudyAnalysis:
    """Every table and number of the report from the search trials, the evaluated runs and their val curves.

    `num_classes` is the number of training classes C (manifest["splits"]["train"]["num_classes"]), for s_f.
    The convergence targets are fractions of the best final val score among all methods, where a method's
    final val score is the mean over its seeds (diverged seeds left out): the level the best method
    reliably reaches, not one lucky seed.
    """
    _require_columns(trials, ["loss", "trial", "state", "s", "m", "value", "seconds"], "trials")
    _require_columns(runs, ["method", "seed", "val_score", "seconds"], "runs")
    _require_columns(history, ["method", "seed", "iteration", objective], "history")
    searched_losses = list(dict.fromkeys(trials["loss"]))
    methods = _method_order(runs, history, searched_losses)
    summary = _search_summary(trials)
    bands = _reference_bands(runs, config)
    target = bands.loc[bands["method"] == REFERENCE_METHOD, "mean"]
    expected, even = _tuning_budget(trials, summary, float(target.iloc[0]) if len(target) else math.nan, config)
    final, costs, differences = _final_tables(runs, methods, summary, config)
    best, best_method, targets, per_run, per_method = _convergence_tables(runs, history, objective, methods, config)
    default_runs = runs[runs["method"] == "arcface_default"].reindex(columns=["s", "m"])
    default_hyperparameters = {key: float(value) for key, value in default_runs.iloc[0].items()} if len(
        default_runs) else {}
    curves = _curves(history, objective, methods, config)
    facts = _verdict_facts(objective, searched_losses, final, costs, differences, even, summary, per_method,
                           targets, bands, default_hyperparameters)
    return StudyAnalysis(
        objective=objective, confidence=config.confidence, methods=methods, searched_losses=searched_losses,
        search_summary=summary, expected_best=expected, reference_bands=bands, break_even=even, final=final,
        costs=costs, differences=differences, run_scores=_run_scores(runs), best_final_val=best,
        best_final_method=best_method, targets=targets,
        convergence_runs=per_run, convergence=per_method, curves=curves,
        angles=_angles(history, methods), crossings=crossings_table(curves), landscape=_landscape(trials),
        num_classes=num_classes,
        s_f=fixed_scale_of(num_classes), verdict_facts=facts,
    )


def reproduction_table(run_scores: pd.DataFrame, setup: PublishedSetup,
                       spread_stds: float = REPRODUCTION_SPREAD_STDS) -> pd.DataFrame:
    """Each published result of `setup` beside ours: mean, std, range over seeds, difference and whether it is in our spread.

    `run_scores` is `StudyAnalysis.run_scores` (one row per final run, test metrics as fractions). Ours is the
    test metric that scores the method the way the publication did (1-NN on embeddings, or argmax for
    cross-entropy), in percent like the published number, over the seeds that finished. The published number is
    within our seed-to-seed spread when it lies in mean ± `spread_stds` sample stds (ddof=1); with fewer than two
    finished seeds there is no spread and `within_spread` is None.
    """
    rows = []
    for result in setup.results:
        group = run_scores[run_scores["method"] == result.method]
        values = 100.0 * _finite(group[result.metric]) if result.metric in group else np.array([])
        mean = float(values.mean()) if values.size else math.nan
        std = float(values.std(ddof=1)) if values.size >= 2 else math.nan
        low, high = mean - spread_stds * std, mean + spread_stds * std
        rows.append({
            "setup": setup.name, "published_label": result.label, "method": result.method, "metric": result.metric,
            "evaluation": result.evaluation_text, "published_percent": result.accuracy_percent,
            "mean_percent": mean, "std_percent": std,
            "min_percent": float(values.min()) if values.size else math.nan,
            "max_percent": float(values.max()) if values.size else math.nan,
            "seeds": int(values.size), "runs": len(group), "at_chance": runs_at_chance(group),
            "difference_points": mean - result.accuracy_percent,
            "spread_low_percent": low, "spread_high_percent": high,
            "within_spread": bool(low <= result.accuracy_percent <= high) if values.size >= 2 else None,
        })
    return pd.DataFrame(rows, columns=["setup", "published_label", "method", "metric", "evaluation",
                                       "published_percent", "mean_percent", "std_percent", "min_percent",
                                       "max_percent", "seeds", "runs", "at_chance", "difference_points",
                                       "spread_low_percent",
                                       "spread_high_percent", "within_spread"])
