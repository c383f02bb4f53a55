"""Selection-aware tuning budgets: what n trials of a search buy, and how many it takes to break even.

The curve is the expected test score of the trial that val selects among n (order statistics of
independent draws, or best-so-far over repeats of a sequential search); the break-even is the fewest
n at which it reaches what an untuned reference delivers. Scores are "higher is better" throughout.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.special import gammaln

from study.analysis.common import (
    ADACOS_METHODS,
    FINISHED_STATES,
    TEST_PREFIX,
    count_or_none,
    finite_values,
    mean_or_nan,
    percentile_pick,
    reaches,
    untuned_methods,
)
from study.config import HYPERPARAMETER_FREE_LOSSES, AnalysisConfig
from study.statistics import check_probability, finite_vector, mean_ci


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
    reached = reaches(curves, targets[:, None])
    return np.where(reached.any(axis=1), np.argmax(reached, axis=1) + 1.0, np.inf)


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


def tuning_budget(trials: pd.DataFrame, runs: pd.DataFrame, summary: pd.DataFrame, objective: str, sampler: str,
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
    for method in untuned_methods(runs["method"]):
        if method not in HYPERPARAMETER_FREE_LOSSES:
            continue
        draws = _run_draws(runs, method, objective)
        if draws.empty:
            continue
        curve, val_curve, replicates = _pooled_curves(draws, replacement, config)
        low, high = percentile_band(replicates, config.confidence)
        n = np.arange(1, curve.size + 1)
        run_seconds = mean_or_nan(runs.loc[runs["method"] == method, "seconds"])
        rows.append(pd.DataFrame({"method": method, "kind": "control", "n": n, "expected_test": curve, "low": low,
                                  "high": high, "expected_val": val_curve,
                                  "seconds": n * run_seconds}))
        if method not in ADACOS_METHODS:
            continue  # the break-even is against what AdaCos delivers with no tuning
        picks = rng.integers(0, len(draws), size=(config.n_bootstrap, len(draws)))
        references[method] = {"target": float(draws["reported"].mean()),
                              "replicates": draws["reported"].to_numpy()[picks].mean(axis=1),
                              "val_mean": mean_or_nan(runs.loc[runs["method"] == method, "val_score"])}

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
            trials_low, trials_high = percentile_pick(interval, config.confidence)
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


def reference_bands(runs: pd.DataFrame, config: AnalysisConfig) -> pd.DataFrame:
    """Mean final val score with its CI over seeds, and the cost of one run, for each untuned baseline."""
    rows = []
    for method in untuned_methods(runs["method"]):
        group = runs[runs["method"] == method]
        scores = finite_values(group["val_score"])
        if scores.size == 0:
            continue
        mean, low, high = mean_ci(scores, config.confidence)
        rows.append({"method": method, "mean": mean, "low": low, "high": high, "seeds": int(scores.size),
                     "seconds": mean_or_nan(group["seconds"])})
    return pd.DataFrame(rows, columns=["method", "mean", "low", "high", "seeds", "seconds"])
