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
from scipy.special import gammaln

from study.config import HYPERPARAMETER_FREE_LOSSES, AnalysisConfig
from study.losses import fixed_adacos_scale
from study.statistics import (
    check_probability,
    difference_ci,
    equivalence_test,
    finite_vector,
    holm_adjusted,
    mean_ci,
    minimum_detectable_difference,
    paired_difference,
    seeds_to_detect,
    seeds_to_show_equivalence,
)
from study.published import PublishedSetup
from study.results import is_tuned, tuned_method

# Curves are built by floating-point sums, so a curve that reaches its target exactly can
# land one rounding step below it; "reached" forgives that much and no more.
_REACH_RTOL = 1e-9
_REACH_ATOL = 1e-12


def _reaches(values: np.ndarray, target: float) -> np.ndarray:
    """Elementwise values ≥ target, forgiving floating-point rounding; NaN never reaches."""
    tolerance = _REACH_ATOL + _REACH_RTOL * abs(target)
    return values >= target - tolerance


def _order_statistic_weights(n_items: int, replacement: bool) -> np.ndarray:
    """Matrix W with W[n-1, i-1] = P(the best of n draws from N ranked items is the i-th lowest), n, i = 1…N.

    With replacement (Dodge et al., EMNLP 2019): (i/N)^n − ((i−1)/N)^n. Without replacement (Tang et al.,
    ACL 2020; unbiased for n ≤ N): [C(i, n) − C(i−1, n)] / C(N, n), in log space so that large N cannot overflow.
    """
    rank = np.arange(1, n_items + 1, dtype=float)
    draws = np.arange(1, n_items + 1, dtype=float)[:, None]
    if replacement:
        return (rank / n_items) ** draws - ((rank - 1) / n_items) ** draws

    def log_choose(k, n):
        with np.errstate(invalid="ignore"):
            value = gammaln(k + 1) - gammaln(n + 1) - gammaln(np.maximum(k - n, 0) + 1)
        return np.where(k >= n, value, -np.inf)  # C(k, n) = 0 for k < n

    total = log_choose(float(n_items), draws)
    return np.exp(log_choose(rank, draws) - total) - np.exp(log_choose(rank - 1, draws) - total)


def _paired_scores(selection_scores, reported_scores) -> tuple[np.ndarray, np.ndarray]:
    """Selection and reported scores as equal-length vectors; selection may hold −inf (a trial never selected)."""
    selection = np.asarray(selection_scores, dtype=float)
    reported = finite_vector(reported_scores, "reported_scores")
    if selection.shape != reported.shape:
        raise ValueError(f"selection_scores and reported_scores must have the same length, got "
                         f"{selection.shape} and {reported.shape}")
    if np.isnan(selection).any() or np.isposinf(selection).any():
        raise ValueError("selection_scores contains NaN or +inf; give a failed trial the metric's floor and a "
                         "trial that may never be selected −inf")
    return selection, reported


def _ranked_reported(selection: np.ndarray, reported: np.ndarray) -> np.ndarray:
    """Reported scores in ascending order of selection, each averaged over its tie group.

    A user whose best val score is tied picks one of the tied trials at random, so what they get
    in expectation is the tied trials' mean reported score.
    """
    order = np.argsort(selection, kind="stable")
    ranked_selection, ranked = selection[order], reported[order]
    _, group, counts = np.unique(ranked_selection, return_inverse=True, return_counts=True)
    return (np.bincount(group, weights=ranked) / counts)[group]


def expected_selected_after_n_trials(selection_scores, reported_scores, replacement: bool = False) -> np.ndarray:
    """E[reported score of the trial with the best selection score among n draws], n = 1…N: Σ_i t_(i)·w_n(i).

    t_(i) is the reported (e.g. test) score of the trial of selection (val) rank i, w_n the order-statistic
    weights of `_order_statistic_weights`. Assumes the N trials are independent draws of one distribution
    (random search); a selection score of −inf marks a trial that is drawn but never selected (pruned).
    """
    selection, reported = _paired_scores(selection_scores, reported_scores)
    return _order_statistic_weights(selection.size, replacement) @ _ranked_reported(selection, reported)


def expected_best_after_n_trials(scores, replacement: bool = False) -> np.ndarray:
    """E[max of n draws from the N scores], n = 1…N (Dodge et al.'s expected best; assumes independent draws).

    On val scores this includes the maximum of seed noise, so it overstates what tuning buys; see
    `expected_selected_after_n_trials` for what the selected trial scores on held-out data.
    """
    values = finite_vector(scores, "scores")
    return expected_selected_after_n_trials(values, values, replacement)


def bootstrap_selected_curves(selection_scores, reported_scores, replacement: bool = False,
                              n_bootstrap: int = 1000, seed: int = 0) -> np.ndarray:
    """(n_bootstrap, N) expected-selected curves, each of the N trials resampled with replacement as pairs."""
    selection, reported = _paired_scores(selection_scores, reported_scores)
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be at least 1, got {n_bootstrap}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, selection.size, size=(n_bootstrap, selection.size))
    weights = _order_statistic_weights(selection.size, replacement)
    return np.stack([weights @ _ranked_reported(selection[pick], reported[pick]) for pick in picks])


def percentile_band(samples: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile (lower, upper) bounds over the first axis of bootstrap samples."""
    check_probability(confidence, "confidence")
    tail = 100.0 * (1.0 - confidence) / 2.0
    lower, upper = np.percentile(np.asarray(samples, dtype=float), [tail, 100.0 - tail], axis=0)
    return lower, upper


def best_so_far_selected(selection_scores, reported_scores) -> np.ndarray:
    """The reported score of the best-by-selection trial among the first n trials in run order, n = 1…N.

    One realisation of a sequential search (e.g. TPE, whose trials are not independent draws). Ties keep
    the earlier trial, as Optuna's best trial does; −inf marks a trial that is never selected.
    """
    selection, reported = _paired_scores(selection_scores, reported_scores)
    best = np.zeros(selection.size, dtype=int)
    for index in range(1, selection.size):
        best[index] = index if selection[index] > selection[best[index - 1]] else best[index - 1]
    return reported[best]


def first_reaching(curves, targets) -> np.ndarray:
    """Per row of `curves`, the first n (1-based) whose value reaches that row's target; inf where none does."""
    curves = np.atleast_2d(np.asarray(curves, dtype=float))
    targets = np.broadcast_to(np.asarray(targets, dtype=float), curves.shape[:1])
    tolerance = _REACH_ATOL + _REACH_RTOL * np.abs(targets)
    reached = curves >= (targets - tolerance)[:, None]
    return np.where(reached.any(axis=1), np.argmax(reached, axis=1) + 1.0, np.inf)


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
    # loss, repeats, trials (finished), complete, pruned, failed, running, seconds, seconds_per_trial,
    # best_trial, best_value, best_s, best_m (the best of the first repeat: what the tuned runs retrain)
    search_summary: pd.DataFrame
    # method (a searched loss, or an untuned method as the budget-matched control), kind (search | control), n,
    # expected_test (test score of the trial val selects among n), low, high, expected_val (the expected best
    # val score, which includes the maximum of seed noise), seconds (n × one trial or run)
    tuning_curves: pd.DataFrame
    estimator: dict  # kind (pooled | repeats), exact, text: which tuning-curve estimator and why
    reference_bands: pd.DataFrame  # method, mean, low, high, seeds, seconds (mean final val score)
    break_even: pd.DataFrame  # BREAK_EVEN_COLUMNS: per searched loss and untuned reference
    final: pd.DataFrame  # method, metric, mean, std, n, higher_is_better
    costs: pd.DataFrame  # method, loss, runs, diverged, at_chance, tuning_trials, tuning_seconds, run_seconds
    run_scores: pd.DataFrame  # method, seed, status, val_score, test_<metric>...: one row per final run
    differences: pd.DataFrame  # DIFFERENCE_COLUMNS: method − Fixed AdaCos per test metric
    best_final_val: float  # the best method's mean final val score: what the absolute targets are fractions of
    best_final_method: str | None
    targets: dict[float, float]  # convergence fraction → val score (basis "best")
    convergence_runs: pd.DataFrame  # method, seed, basis, fraction, target, iteration (NaN: never reached)
    convergence: pd.DataFrame  # CONVERGENCE_COLUMNS: median iterations over seeds with a bootstrap interval
    convergence_speed: pd.DataFrame  # SPEED_COLUMNS: method − Fixed AdaCos in median iterations, and who is faster
    curves: pd.DataFrame  # method, iteration, mean, low, high, n
    angles: pd.DataFrame  # method, iteration, theta_med_deg, cos_nontarget_mean, s
    # CROSSING_COLUMNS and gap_low, gap_high, gap_significant (the final val gap tested across seeds)
    crossings: pd.DataFrame
    landscape: pd.DataFrame  # loss, repeat, trial, state, s, m, value, test_value, best
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
        # The best of the first repeat: the one search a user runs, whose values the tuned runs retrain.
        first = complete[complete["repeat"] == complete["repeat"].min()] if len(complete) else complete
        best = first.loc[first["value"].astype(float).idxmax()] if len(first) else None
        rows.append({
            "loss": loss, "repeats": int(group["repeat"].nunique()), "trials": len(finished),
            "complete": len(complete),
            "pruned": int((group["state"] == "PRUNED").sum()), "failed": int((group["state"] == "FAIL").sum()),
            "running": int((group["state"] == "RUNNING").sum()), "seconds": seconds,
            # Every finished trial is a draw the tuning curve counts, pruned and failed ones included.
            "seconds_per_trial": seconds / len(finished) if len(finished) else math.nan,
            "best_trial": int(best["trial"]) if best is not None else None,
            "best_value": float(best["value"]) if best is not None else math.nan,
            "best_s": float(best["s"]) if best is not None else math.nan,
            "best_m": float(best["m"]) if best is not None else math.nan,
        })
    return pd.DataFrame(rows, columns=["loss", "repeats", "trials", "complete", "pruned", "failed", "running", "seconds",
                                       "seconds_per_trial", "best_trial", "best_value", "best_s", "best_m"])


# Every objective is a score in [0, 1]: a diverged trial or run leaves a user nothing better than this.
METRIC_FLOOR = 0.0
# Samplers whose trials are independent draws (exactly for random search, approximately for QMC and grid):
# their trials are pooled and the order-statistic estimator applies; others are sequential (TPE).
INDEPENDENT_SAMPLERS = ("random", "qmc", "grid")
TUNING_CURVE_COLUMNS = ["method", "kind", "n", "expected_test", "low", "high", "expected_val", "seconds"]
BREAK_EVEN_COLUMNS = ["loss", "reference", "target", "trials", "trials_low", "trials_high", "seconds", "reached",
                      "max_trials", "gain", "gain_low", "gain_high", "old_target", "old_trials", "old_val_gain"]


def estimator_description(sampler: str, repeats: int, replacement: bool) -> dict:
    """Which tuning-cost estimator fits the sampler, whether it is exact, and why, as the report states it."""
    draws = "with replacement (Dodge et al., 2019; biased)" if replacement else \
        "without replacement (Tang et al., 2020; unbiased for n up to the trials run)"
    if sampler in INDEPENDENT_SAMPLERS:
        exact = sampler == "random"
        why = ("random search draws every trial independently, so the order-statistic estimator is exact"
               if exact else f"{sampler} trials are not independent draws, so the pooled estimator is an "
                             "approximation of what a user of that sampler would get")
        return {"kind": "pooled", "exact": exact, "text": f"order statistics of n trials drawn {draws} from all "
                f"{'finished trials' + (' of ' + str(repeats) + ' repeats' if repeats > 1 else '')}; {why}"}
    if repeats > 1:
        return {"kind": "repeats", "exact": True, "text": f"the mean over {repeats} independent {sampler} searches "
                "of the test score of the best-by-val trial so far; a sequential sampler's trials are not "
                "independent draws, so they are not pooled"}
    return {"kind": "repeats", "exact": False, "text": f"the test score of the best-by-val trial so far in one "
            f"{sampler} search: one realisation, not an expectation (set search.repeats to average over "
            "independent searches); a sequential sampler's trials are not independent draws, so they are not pooled"}


def _trial_draws(group: pd.DataFrame) -> pd.DataFrame:
    """A search's finished trials in run order with what selects them (val) and what a user gets (test).

    A failed (diverged) trial enters at the metric's floor on both; a pruned one is drawn and paid for
    but never selected (selection −inf) and leaves the floor.
    """
    finished = group[group["state"].isin(FINISHED_STATES)].sort_values(["repeat", "trial"], kind="stable")
    value = pd.to_numeric(finished["value"], errors="coerce")
    test = pd.to_numeric(finished["test_value"], errors="coerce")
    complete = (finished["state"] == "COMPLETE") & np.isfinite(value)
    selection = np.where(complete, value, np.where(finished["state"] == "PRUNED", -np.inf, METRIC_FLOOR))
    reported = np.where(complete & np.isfinite(test), test, METRIC_FLOOR)
    # `val` is what the val curve shows: the selection score, a pruned trial at the floor too.
    return pd.DataFrame({"repeat": finished["repeat"].to_numpy(), "selection": selection, "reported": reported,
                         "val": np.where(np.isfinite(selection), selection, METRIC_FLOOR),
                         "value": value.where(complete).to_numpy()})


def _run_draws(runs: pd.DataFrame, method: str, objective: str) -> pd.DataFrame:
    """A method's final runs as draws: val selects, test is what a user gets; a diverged run at the floor."""
    group = runs[runs["method"] == method]
    val = pd.to_numeric(group["val_score"], errors="coerce").to_numpy(dtype=float)
    test = pd.to_numeric(group.get(f"{TEST_PREFIX}{objective}", pd.Series(np.nan, index=group.index)),
                         errors="coerce").to_numpy(dtype=float)
    selection = np.where(np.isfinite(val), val, METRIC_FLOOR)
    return pd.DataFrame({"seed": group["seed"].to_numpy(), "selection": selection, "val": selection,
                         "reported": np.where(np.isfinite(test), test, METRIC_FLOOR)})


def _sequential_curves(draws: pd.DataFrame, column: str) -> np.ndarray:
    """(repeats, n) best-so-far curves of `column` per repeat, cut to the shortest repeat."""
    curves = [best_so_far_selected(repeat["selection"], repeat[column]) for _, repeat in draws.groupby("repeat")]
    length = min(curve.size for curve in curves)
    return np.stack([curve[:length] for curve in curves])


def _pooled_curves(draws: pd.DataFrame, replacement: bool, config: AnalysisConfig
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Independent draws (random-search trials, or an untuned method's seeds): the selected-test curve, the
    expected-best val curve, and bootstrap replicates of the former."""
    return (expected_selected_after_n_trials(draws["selection"], draws["reported"], replacement),
            expected_selected_after_n_trials(draws["selection"], draws["val"], replacement),
            bootstrap_selected_curves(draws["selection"], draws["reported"], replacement, config.n_bootstrap,
                                      config.seed))


def _sequential_search_curves(draws: pd.DataFrame, config: AnalysisConfig
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sequential sampler's repeats: the mean best-so-far test and val curves, and replicates over repeats."""
    tests, vals = _sequential_curves(draws, "reported"), _sequential_curves(draws, "val")
    picks = np.random.default_rng(config.seed).integers(0, tests.shape[0], size=(config.n_bootstrap, tests.shape[0]))
    return tests.mean(axis=0), vals.mean(axis=0), tests[picks].mean(axis=1)


def _tuning_budget(trials: pd.DataFrame, runs: pd.DataFrame, summary: pd.DataFrame, objective: str, sampler: str,
                   config: AnalysisConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Selection-aware tuning curves of each search and of the untuned controls, and the break-even with its interval.

    The curve is the expected test score of the trial that val selects among n; the break-even is the
    fewest n at which it reaches a reference's mean test score of one run (diverged runs at the floor),
    with a percentile-bootstrap interval over trials (or repeats) and the reference's seeds.
    """
    replacement = config.estimator == "with_replacement"
    repeats = int(trials["repeat"].nunique()) if len(trials) else 1
    estimator = estimator_description(sampler, repeats, replacement)
    rows, even = [], []
    rng = np.random.default_rng(config.seed + 1)
    references = {}
    for method in _untuned_methods(runs["method"]):
        if method not in HYPERPARAMETER_FREE_LOSSES:
            continue
        draws = _run_draws(runs, method, objective)
        if draws.empty:
            continue
        curve, val_curve, replicates = _pooled_curves(draws, replacement, config)
        low, high = percentile_band(replicates, config.confidence)
        n = np.arange(1, curve.size + 1)
        run_seconds = _mean_or_nan(runs.loc[runs["method"] == method, "seconds"])
        rows.append(pd.DataFrame({"method": method, "kind": "control", "n": n, "expected_test": curve, "low": low,
                                  "high": high, "expected_val": val_curve,
                                  "seconds": n * run_seconds}))
        if method not in ADACOS_METHODS:
            continue  # the break-even is against what AdaCos delivers with no tuning
        picks = rng.integers(0, len(draws), size=(config.n_bootstrap, len(draws)))
        references[method] = {"target": float(draws["reported"].mean()),
                              "replicates": draws["reported"].to_numpy()[picks].mean(axis=1),
                              "val_mean": _mean_or_nan(runs.loc[runs["method"] == method, "val_score"])}

    for row in summary.itertuples():
        draws = _trial_draws(trials[trials["loss"] == row.loss])
        if draws.empty:
            for reference in references:
                even.append({"loss": row.loss, "reference": reference, "reached": False, "max_trials": 0})
            continue
        curve, val_curve, replicates = (_pooled_curves(draws, replacement, config) if estimator["kind"] == "pooled"
                                        else _sequential_search_curves(draws, config))
        low, high = percentile_band(replicates, config.confidence)
        if estimator["kind"] == "repeats" and repeats < 2:
            low, high = np.full(curve.size, np.nan), np.full(curve.size, np.nan)  # one realisation: no band
        n = np.arange(1, curve.size + 1)
        per_trial = row.seconds_per_trial
        rows.append(pd.DataFrame({"method": row.loss, "kind": "search", "n": n, "expected_test": curve, "low": low,
                                  "high": high, "expected_val": val_curve,
                                  "seconds": n * per_trial}))
        # The classic quantity, for contrast: expected best val (with replacement, completed trials only)
        # against the reference's mean val. It includes the maximum of seed noise.
        completed = draws["value"].dropna().to_numpy()
        old_curve = expected_best_after_n_trials(completed, replacement=True) if completed.size else np.array([])
        for reference, target in references.items():
            found = first_reaching(curve, target["target"])[0]
            interval = first_reaching(replicates, target["replicates"])
            # Percentiles that pick observed values: a replicate that never breaks even is inf, not averaged in.
            tail = 50.0 * (1.0 - config.confidence)
            trials_low = np.percentile(interval, tail, method="lower")
            trials_high = np.percentile(interval, 100.0 - tail, method="higher")
            gain_low, gain_high = percentile_band(replicates[:, -1] - target["replicates"], config.confidence)
            old_found = first_reaching(old_curve, target["val_mean"])[0] if old_curve.size else np.inf
            even.append({
                "loss": row.loss, "reference": reference, "target": target["target"],
                "trials": count_or_none(found), "trials_low": count_or_none(trials_low),
                "trials_high": count_or_none(trials_high),
                "seconds": float(found * per_trial) if np.isfinite(found) and np.isfinite(per_trial) else None,
                "reached": bool(np.isfinite(found)), "max_trials": int(curve.size),
                "gain": float(curve[-1] - target["target"]), "gain_low": float(gain_low), "gain_high": float(gain_high),
                "old_target": target["val_mean"], "old_trials": count_or_none(old_found),
                "old_val_gain": float(old_curve[-1] - target["val_mean"]) if old_curve.size else math.nan})
    curves = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=TUNING_CURVE_COLUMNS)
    return curves[TUNING_CURVE_COLUMNS], pd.DataFrame(even, columns=BREAK_EVEN_COLUMNS), estimator


def count_or_none(value) -> int | None:
    """A trial count as a plain int, or None where it is not reached (inf) or unknown."""
    return int(value) if value is not None and not pd.isna(value) and np.isfinite(value) else None


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

    reference = runs[runs["method"] == REFERENCE_METHOD]
    frames = [_method_differences(runs[runs["method"] == method], reference, method, metrics, config)
              for method in methods if method != REFERENCE_METHOD and not reference.empty]
    differences = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    return final, costs, differences[DIFFERENCE_COLUMNS]


DIFFERENCE_COLUMNS = ["method", "metric", "test", "pairs", "difference", "low", "high", "p_value", "p_holm",
                      "significant", "welch_difference", "welch_low", "welch_high", "welch_p_value", "margin",
                      "tost_p_value", "equivalent", "detectable", "seeds_to_resolve", "higher_is_better"]
# Which equivalence margin (analysis.equivalence_margin) each test metric takes.
METRIC_KIND = {"accuracy": "accuracy", "knn_accuracy": "accuracy", "precision_at_1": "retrieval",
                "r_precision": "retrieval", "map_at_r": "retrieval", "roc_auc": "verification", "eer": "verification",
                "tar_at_far_1e-2": "verification", "tar_at_far_1e-3": "verification",
                "verification_accuracy": "verification"}


def equivalence_margin(metric: str, config: AnalysisConfig) -> float:
    """The equivalence margin of a test metric, by its kind (accuracy, retrieval or verification)."""
    kind = METRIC_KIND.get(metric.removeprefix(TEST_PREFIX))
    if kind is None:
        raise KeyError(f"metric {metric!r} has no kind; known: {', '.join(METRIC_KIND)}")
    return config.equivalence_margin[kind]


def _method_differences(group: pd.DataFrame, reference: pd.DataFrame, method: str, metrics: list[str],
                        config: AnalysisConfig) -> pd.DataFrame:
    """One method − Fixed AdaCos on every test metric: paired by seed where they pair, Welch beside it,
    Holm-corrected across the metric family, TOST against the metric's margin, and what the seeds can detect."""
    alpha = 1.0 - config.confidence
    rows = []
    for metric in metrics:
        pairs = group[["seed", metric]].merge(reference[["seed", metric]], on="seed", suffixes=("", "_reference"))
        pairs = pairs[np.isfinite(pairs[metric].astype(float)) & np.isfinite(pairs[f"{metric}_reference"].astype(float))]
        a, b = _finite(group[metric]), _finite(reference[metric])
        welch = difference_ci(a, b, config.confidence) if a.size and b.size else {}
        paired = len(pairs) >= 2
        if paired:
            result = paired_difference(pairs[metric].astype(float), pairs[f"{metric}_reference"].astype(float),
                                       config.confidence)
            standard_error, df, sd = result["standard_error"], result["df"], result["sd"]
        else:  # nothing pairs (e.g. different seeds): Welch alone
            result = welch or {"difference": math.nan, "low": math.nan, "high": math.nan, "p_value": math.nan,
                               "standard_error": math.nan, "df": math.nan}
            standard_error, df, sd = result["standard_error"], result["df"], math.nan
        margin = equivalence_margin(metric, config)
        tost = (equivalence_test(result["difference"], standard_error, df, margin, alpha)
                if np.isfinite(standard_error) else {"p_value": math.nan, "equivalent": False})
        n = len(pairs) if paired else min(a.size, b.size)
        detectable = minimum_detectable_difference(sd, n, alpha, config.power) if paired else math.nan
        to_detect = seeds_to_detect(result["difference"], sd, alpha, config.power) if paired and sd > 0 else None
        to_show = (seeds_to_show_equivalence(result["difference"], sd, margin, alpha, config.power)
                   if paired and sd > 0 else None)
        needed = [count for count in (to_detect, to_show) if count is not None]
        rows.append({"method": method, "metric": metric, "test": "paired" if paired else "Welch", "pairs": len(pairs),
                     "difference": result["difference"], "low": result["low"], "high": result["high"],
                     "p_value": result["p_value"],
                     "welch_difference": welch.get("difference", math.nan), "welch_low": welch.get("low", math.nan),
                     "welch_high": welch.get("high", math.nan), "welch_p_value": welch.get("p_value", math.nan),
                     "margin": margin, "tost_p_value": tost["p_value"], "equivalent": bool(tost["equivalent"]),
                     "detectable": detectable, "seeds_to_resolve": min(needed) if needed else None,
                     "higher_is_better": higher_is_better(metric)})
    frame = pd.DataFrame(rows, columns=[c for c in DIFFERENCE_COLUMNS if c not in ("p_holm", "significant")])
    # The metrics are one family of tests per method: Holm keeps its family-wise error at alpha.
    frame["p_holm"] = holm_adjusted(frame["p_value"].astype(float).to_numpy()) if len(frame) else []
    frame["significant"] = frame["p_holm"].astype(float) < alpha
    frame["seeds_to_resolve"] = frame["seeds_to_resolve"].astype("Int64")
    return frame


def runs_at_chance(runs: pd.DataFrame) -> int:
    """How many finished runs ended at chance on test (ROC AUC ≤ 0.5: their embeddings carry no identity at all)."""
    if CHANCE_METRIC not in runs:
        return 0
    return int((pd.to_numeric(runs[CHANCE_METRIC], errors="coerce") <= CHANCE_LEVEL + 1e-9).sum())


CONVERGENCE_COLUMNS = ["method", "basis", "fraction", "target", "median_iteration", "low", "high", "seeds_reached",
                       "seeds"]
SPEED_COLUMNS = ["method", "basis", "fraction", "difference", "low", "high", "faster"]


def _bootstrap_medians(iterations: np.ndarray, picks: np.ndarray) -> np.ndarray:
    """Median iterations of each bootstrap resample of seeds; a seed that never reached the target is inf."""
    return np.median(iterations[picks], axis=1)


def _convergence_tables(runs: pd.DataFrame, history: pd.DataFrame, objective: str, methods: list[str],
                        config: AnalysisConfig):
    """Iterations to targets per run and per method (median over seeds with a bootstrap interval), and which
    method converges faster than Fixed AdaCos where the interval of the difference of medians excludes zero.

    Two bases: `best`, fractions of the best method's mean final val score (absolute targets, the same for
    every method), and `own`, fractions of each method's own mean final val score (how fast a method gets
    near where it ends, whatever that level).
    """
    means = {method: _mean_or_nan(runs.loc[runs["method"] == method, "val_score"]) for method in methods}
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

    rng = np.random.default_rng(config.seed)
    method_rows, speed_rows = [], []
    for (method, basis, fraction), group in per_run.groupby(["method", "basis", "fraction"], sort=False):
        # A seed that never reached the target is slower than every seed that did; if that holds for
        # half the seeds or more, the median itself is "not reached".
        iterations = group["iteration"].fillna(np.inf).to_numpy(dtype=float)
        median = float(np.median(iterations))
        picks = rng.integers(0, iterations.size, size=(config.n_bootstrap, iterations.size))
        low, high = _percentile_pick(_bootstrap_medians(iterations, picks), config.confidence)
        method_rows.append({"method": method, "basis": basis, "fraction": fraction,
                            "target": float(group["target"].iloc[0]),
                            "median_iteration": median if np.isfinite(median) else math.nan,
                            "low": low if np.isfinite(low) else math.nan, "high": high if np.isfinite(high) else math.nan,
                            "seeds_reached": int(group["iteration"].notna().sum()), "seeds": int(iterations.size)})
        if method == REFERENCE_METHOD:
            continue
        reference = per_run[(per_run["method"] == REFERENCE_METHOD) & (per_run["basis"] == basis)
                            & (per_run["fraction"] == fraction)]
        both = group.merge(reference, on="seed", suffixes=("", "_reference"))
        if len(both) < 2:
            continue
        mine = both["iteration"].fillna(np.inf).to_numpy(dtype=float)
        theirs = both["iteration_reference"].fillna(np.inf).to_numpy(dtype=float)
        # Seeds are resampled jointly: runs at one seed share initialisation and data order.
        picks = rng.integers(0, len(both), size=(config.n_bootstrap, len(both)))
        with np.errstate(invalid="ignore"):
            differences = np.nan_to_num(_bootstrap_medians(mine, picks) - _bootstrap_medians(theirs, picks), nan=0.0,
                                        posinf=np.inf, neginf=-np.inf)
            observed = np.nan_to_num(np.median(mine) - np.median(theirs), nan=0.0, posinf=np.inf, neginf=-np.inf)
        low, high = _percentile_pick(differences, config.confidence)
        faster = method if high < 0 else REFERENCE_METHOD if low > 0 else None
        speed_rows.append({"method": method, "basis": basis, "fraction": fraction, "difference": float(observed),
                           "low": float(low), "high": float(high), "faster": faster})
    per_method = pd.DataFrame(method_rows, columns=CONVERGENCE_COLUMNS)
    speed = pd.DataFrame(speed_rows, columns=SPEED_COLUMNS)
    return best, best_method, targets, per_run, per_method, speed


def _percentile_pick(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval whose bounds are observed values (so inf, "not reached", stays inf, never averaged)."""
    tail = 50.0 * (1.0 - confidence)
    return (float(np.percentile(samples, tail, method="lower")),
            float(np.percentile(samples, 100.0 - tail, method="higher")))


def _final_gap_tests(runs: pd.DataFrame, crossings: pd.DataFrame, config: AnalysisConfig) -> pd.DataFrame:
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
            first, second = _finite(a["val_score"]), _finite(b["val_score"])
            result = (difference_ci(first, second, config.confidence) if first.size and second.size
                      else {"low": math.nan, "high": math.nan, "significant": False})
        rows.append({"gap_low": result["low"], "gap_high": result["high"], "gap_significant": bool(result["significant"])})
    return pd.concat([crossings.reset_index(drop=True),
                      pd.DataFrame(rows, columns=["gap_low", "gap_high", "gap_significant"])], axis=1)


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
    """Every finished trial's (s, m), state, val and test scores, with each loss's best trial flagged (the best
    of its first repeat, whose values the tuned runs retrain)."""
    finished = trials[trials["state"].isin(FINISHED_STATES)]
    frame = finished.reindex(columns=["loss", "repeat", "trial", "state", "s", "m", "value", "test_value"]
                             ).reset_index(drop=True)
    frame["best"] = False
    first_repeat = frame["repeat"] == frame.groupby("loss")["repeat"].transform("min")
    values = pd.to_numeric(frame["value"], errors="coerce").where((frame["state"] == "COMPLETE") & first_repeat)
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


FACT_KEYS = ("test", "pairs", "difference", "low", "high", "p_value", "p_holm", "significant", "welch_difference",
             "welch_low", "welch_high", "welch_p_value", "margin", "tost_p_value", "equivalent", "detectable",
             "seeds_to_resolve")
RECOMMENDATIONS = ("fixed_adacos", "dynamic_adacos", "softmax", "undecided")  # or "<loss>_tuned"


def _plain(value):
    """A table cell as plain JSON-ready data: None for missing, Python numbers and bools."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return value


def _difference_row(differences: pd.DataFrame, method: str | None, metric: str) -> dict | None:
    """One method − Fixed AdaCos comparison on one metric, as plain data, or None where it was not made."""
    row = differences[(differences["method"] == method) & (differences["metric"] == metric)]
    if row.empty or pd.isna(row["difference"].iloc[0]):
        return None
    row = row.iloc[0]
    facts = {key: _plain(row[key]) for key in FACT_KEYS}
    facts["favours_method"] = bool((row["difference"] > 0) == bool(row["higher_is_better"]))
    return facts


def _recommendation(tuned: str | None, comparison: dict | None, alternatives: list[str]) -> tuple[str, str]:
    """The recommendation and its reason, by the rule stated in SPEC: tune only for a significant expected gain;
    Fixed AdaCos when it is significantly better or equivalent within the margin (it costs no tuning);
    otherwise undecided. A hyperparameter-free method significantly better than Fixed AdaCos replaces it."""
    if comparison is None:
        choice, reason = "undecided", "no_tuned_comparison"
    elif comparison["significant"] and comparison["favours_method"]:
        return tuned, "tuning_significantly_better"
    elif comparison["significant"]:
        choice, reason = REFERENCE_METHOD, "adacos_significantly_better"
    elif comparison["equivalent"]:
        choice, reason = REFERENCE_METHOD, "equivalent"
    else:
        choice, reason = "undecided", "not_resolved"
    if alternatives and choice == REFERENCE_METHOD:
        return alternatives[0], "alternative_better_than_fixed_adacos"
    return choice, reason


def _verdict_facts(objective: str, searched_losses, final, costs, differences, break_even_table, summary,
                   tuning_curves, speed, estimator: dict, default_hyperparameters: dict, config: AnalysisConfig) -> dict:
    """The numbers the verdict states and the recommendation they imply, as plain data (None where absent)."""
    metric = f"{TEST_PREFIX}{objective}"
    loss = primary_loss(searched_losses)
    tuned = tuned_method(loss) if loss else None

    def test_mean(method):
        row = final[(final["method"] == method) & (final["metric"] == metric)]
        return _plain(row["mean"].iloc[0]) if len(row) else None

    def break_even_of(reference):
        row = break_even_table[(break_even_table["loss"] == loss) & (break_even_table["reference"] == reference)]
        if row.empty:
            return None
        facts = {key: _plain(value) for key, value in row.iloc[0].items()}
        return facts | {key: count_or_none(facts[key]) for key in ("trials", "trials_low", "trials_high", "old_trials")}

    def control_gain(method):
        curve = tuning_curves[(tuning_curves["method"] == method) & (tuning_curves["kind"] == "control")]
        if len(curve) < 2:
            return None
        return {"seeds": int(curve["n"].max()), "gain": float(curve["expected_test"].iloc[-1]
                                                              - curve["expected_test"].iloc[0])}

    comparison = _difference_row(differences, tuned, metric)
    alternatives = []
    for method in HYPERPARAMETER_FREE_LOSSES:
        row = _difference_row(differences, method, metric)
        if method != REFERENCE_METHOD and row and row["significant"] and row["favours_method"]:
            alternatives.append((test_mean(method) or -math.inf, method))
    alternatives = [method for _, method in sorted(alternatives, reverse=True)]
    recommendation, reason = _recommendation(tuned, comparison, alternatives)
    others = differences[(differences["method"] == tuned) & (differences["metric"] != metric)]
    significant_others = others[others["significant"].astype(bool)]
    favours_tuned = (significant_others["difference"] > 0) == significant_others["higher_is_better"]
    search = summary[summary["loss"] == loss]
    speed_row = speed[(speed["method"] == tuned) & (speed["basis"] == "own")
                      & (speed["fraction"] == min(config.convergence_targets))]
    return {
        "recommendation": recommendation, "reason": reason, "alternatives": alternatives,
        "objective": objective, "metric": metric, "confidence": config.confidence, "power": config.power,
        "estimator": estimator["text"], "estimator_kind": estimator["kind"], "estimator_exact": estimator["exact"],
        "reference": REFERENCE_METHOD, "reference_test_mean": test_mean(REFERENCE_METHOD),
        "tuned_loss": loss, "tuned_method": tuned, "tuned_present": bool(tuned and (costs["method"] == tuned).any()),
        "tuned_test_mean": test_mean(tuned), "tuned": comparison,
        "default_method": "arcface_default", "default_test_mean": test_mean("arcface_default"),
        "default_hyperparameters": default_hyperparameters,
        "default": _difference_row(differences, "arcface_default", metric),
        "default_diverged": int(costs.loc[costs["method"] == "arcface_default", "diverged"].sum()),
        "default_runs": int(costs.loc[costs["method"] == "arcface_default", "runs"].sum()),
        "tuned_better_metrics": significant_others.loc[favours_tuned, "metric"].tolist(),
        "tuned_worse_metrics": significant_others.loc[~favours_tuned, "metric"].tolist(),
        "other_metrics": int(len(others)),
        "break_even": break_even_of(REFERENCE_METHOD), "break_even_dynamic": break_even_of("dynamic_adacos"),
        "control": control_gain(REFERENCE_METHOD),
        "search_trials": int(search["trials"].iloc[0]) if len(search) else 0,
        "search_completed_trials": int(search["complete"].iloc[0]) if len(search) else 0,
        "search_repeats": int(search["repeats"].iloc[0]) if len(search) else 0,
        "search_seconds": _plain(search["seconds"].iloc[0]) if len(search) else None,
        "convergence": {key: _plain(value) for key, value in speed_row.iloc[0].items()} if len(speed_row) else None,
    }


def analyse_study(trials: pd.DataFrame, runs: pd.DataFrame, history: pd.DataFrame, objective: str,
                  config: AnalysisConfig = AnalysisConfig(), num_classes: int | None = None,
                  sampler: str = "random") -> StudyAnalysis:
    """Every table and number of the report from the search trials, the evaluated runs and their val curves.

    `num_classes` is the number of training classes C (manifest["splits"]["train"]["num_classes"]), for s_f;
    `sampler` is search.sampler, which decides the tuning-cost estimator. The convergence targets are
    fractions of the best final val score among all methods, where a method's final val score is the mean
    over its seeds (diverged seeds left out), and fractions of each method's own.
    """
    _require_columns(trials, ["loss", "repeat", "trial", "state", "s", "m", "value", "test_value", "seconds"],
                     "trials (a trials.csv without repeat or test_value was written by an older search: rerun "
                     "`dvc repro`)")
    _require_columns(runs, ["method", "seed", "val_score", "seconds"], "runs")
    _require_columns(history, ["method", "seed", "iteration", objective], "history")
    searched_losses = list(dict.fromkeys(trials["loss"]))
    methods = _method_order(runs, history, searched_losses)
    summary = _search_summary(trials)
    bands = _reference_bands(runs, config)
    tuning_curves, even, estimator = _tuning_budget(trials, runs, summary, objective, sampler, config)
    final, costs, differences = _final_tables(runs, methods, summary, config)
    best, best_method, targets, per_run, per_method, speed = _convergence_tables(runs, history, objective, methods,
                                                                                 config)
    curves = _curves(history, objective, methods, config)
    default = runs.loc[runs["method"] == "arcface_default"].reindex(columns=["s", "m"])
    default_hyperparameters = {key: float(value) for key, value in default.iloc[0].items()} if len(default) else {}
    facts = _verdict_facts(objective, searched_losses, final, costs, differences, even, summary, tuning_curves, speed,
                           estimator, default_hyperparameters, config)
    return StudyAnalysis(
        objective=objective, confidence=config.confidence, methods=methods, searched_losses=searched_losses,
        search_summary=summary, tuning_curves=tuning_curves, estimator=estimator, reference_bands=bands,
        break_even=even, final=final, costs=costs, run_scores=_run_scores(runs), differences=differences,
        best_final_val=best, best_final_method=best_method, targets=targets, convergence_runs=per_run,
        convergence=per_method, convergence_speed=speed, curves=curves, angles=_angles(history, methods),
        crossings=_final_gap_tests(runs, crossings_table(curves), config), landscape=_landscape(trials),
        num_classes=num_classes, s_f=fixed_scale_of(num_classes), verdict_facts=facts,
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
