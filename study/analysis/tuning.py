"""Selection-aware tuning budgets: what n trials of a search buy, and how many it takes to break even.

The curve is the expected test score of the trial that val selects among n (order statistics of
independent draws, or best-so-far over repeats of a sequential search); the break-even is the fewest
n at which it reaches what an untuned reference delivers: the best of as many of its runs picked by val (the
budget-matched control, the same number of trainings), and beside it one run. The selected trial's seed luck
(its search score against its values retrained at fresh seeds) lives here too. Scores are "higher is better"
throughout.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import gammaln

from study.analysis.common import (
    ADACOS_METHODS,
    FINISHED_STATES,
    TEST_PREFIX,
    count_or_none,
    finite_values,
    mean_or_nan,
    reaches,
    split_of,
    untuned_methods,
    within_range,
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


# The studentised interval of the selected-test curve is shown only where the order-statistic weights spread over
# at least this many trials: there its t quantile (df = effective trials − 1) is at most 1.45× the normal one, and
# the interval covers at ≥ 93% in the simulated worlds of `study.analysis.coverage` (benchmarks/coverage.py).
# Nearer n = N the estimate rests on the top two or three trials and no interval of this kind is valid.
MIN_EFFECTIVE_TRIALS = 5.0


def effective_trials(n_items: int, replacement: bool = False) -> np.ndarray:
    """1 / Σ_i w_n(i)², n = 1…N: over how many trials the selection weights spread (N at n = 1, 1 at n = N)."""
    weights = _order_statistic_weights(n_items, replacement)
    return 1.0 / (weights ** 2).sum(axis=1)


def jackknife_selected_variance(selection_scores, reported_scores, replacement: bool = False) -> np.ndarray:
    """Jackknife variance of `expected_selected_after_n_trials` at n = 1…N: (N−1)/N · Σ_i (θ̂_(−i) − θ̂_(·))².

    The curve at fixed n is a U-statistic of degree n (without replacement; a V-statistic with), whose jackknife
    variance is consistent for n ≪ N and conservative as n nears N/2 (Efron & Stein, 1981). NaN at n = N, where
    no trial can be left out, and everywhere for fewer than two trials.
    """
    selection, reported = _paired_scores(selection_scores, reported_scores)
    size = selection.size
    if size < 2:
        return np.full(size, np.nan)
    leave_one_out = np.stack([expected_selected_after_n_trials(np.delete(selection, i), np.delete(reported, i),
                                                                replacement) for i in range(size)])
    spread = ((leave_one_out - leave_one_out.mean(axis=0)) ** 2).sum(axis=0)
    return np.append((size - 1) / size * spread, np.nan)


def _welch_df(variances: np.ndarray, dfs: np.ndarray) -> np.ndarray:
    """Welch–Satterthwaite degrees of freedom of a sum of independent variance estimates (along the first axis)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return variances.sum(axis=0) ** 2 / (variances ** 2 / dfs).sum(axis=0)


# The trials' scores are skewed (a few (s, m) train badly), so the studentised curve has heavier tails than t on all
# its trials' degrees of freedom: capped at this many, its intervals cover at small n too (benchmarks/coverage.py).
MAX_STUDENTISED_DF = 10.0


def _t_bounds(estimate, variance, df, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """estimate ± t_{(1+confidence)/2, min(df, MAX_STUDENTISED_DF)} · √variance (NaN where either is not finite)."""
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(0.5 + confidence / 2.0, np.minimum(df, MAX_STUDENTISED_DF)) * np.sqrt(variance)
    return estimate - half, estimate + half


def selected_curve_with_variance(selection_scores, reported_scores, replacement: bool = False
                                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The selected-test curve, its jackknife variance and degrees of freedom (effective trials − 1), n = 1…N; the
    variance is NaN where fewer than MIN_EFFECTIVE_TRIALS carry the estimate (no valid interval there)."""
    curve = expected_selected_after_n_trials(selection_scores, reported_scores, replacement)
    variance = jackknife_selected_variance(selection_scores, reported_scores, replacement)
    effective = effective_trials(curve.size, replacement)
    variance = np.where(effective >= MIN_EFFECTIVE_TRIALS - 1e-9, variance, np.nan)
    return curve, variance, effective - 1.0


def _reference_moments(reference_scores) -> tuple[float, float, float]:
    """Mean of the reference runs, the variance of that mean and its degrees of freedom (NaN for one run)."""
    reference = finite_vector(reference_scores, "reference_scores")
    if reference.size < 2:
        return float(reference.mean()), math.nan, math.nan
    return float(reference.mean()), float(reference.var(ddof=1) / reference.size), float(reference.size - 1)


def search_gain(selection_scores, reported_scores, reference_scores, n: int, confidence: float = 0.95,
                n_bootstrap: int = 1000, seed: int = 0) -> tuple[float, float, float]:
    """What a search of n trials buys: E[test score of the trial val selects among n] − mean(reference_scores).

    The expectation is the without-replacement order-statistic estimate over the trials (unbiased for random
    search); `reference_scores` are the test scores of one untuned method's runs (Fixed AdaCos), so the
    estimate is the gain over one such run. The interval is studentised: the curve's jackknife variance plus the
    reference mean's, with t on Welch–Satterthwaite degrees of freedom (the curve's are its effective trials − 1),
    at most MAX_STUDENTISED_DF.
    It is valid only where the selection weights spread over at least MIN_EFFECTIVE_TRIALS trials (about n ≤ N/3);
    beyond, the bounds are NaN. Its coverage is measured in `study.analysis.coverage`. `n_bootstrap` and `seed`
    are kept for callers of the earlier bootstrap interval; this interval needs no resampling.
    """
    check_probability(confidence, "confidence")
    selection, reported = _paired_scores(selection_scores, reported_scores)
    if not 1 <= n <= selection.size:
        raise ValueError(f"n must lie in 1…{selection.size} (the trials given), got {n}")
    curve, variance, df = selected_curve_with_variance(selection, reported)
    mean, reference_variance, reference_df = _reference_moments(reference_scores)
    estimate = float(curve[n - 1] - mean)
    variances, dfs = np.array([variance[n - 1], reference_variance]), np.array([df[n - 1], reference_df])
    low, high = _t_bounds(estimate, variances.sum(), _welch_df(variances, dfs), confidence)
    return estimate, float(low), float(high)


# Every objective is a score in [0, 1]: a diverged trial or run leaves a user nothing better than this.
METRIC_FLOOR = 0.0
# Samplers whose trials are independent draws (exactly for random search, approximately for QMC and grid):
# their trials are pooled and the order-statistic estimator applies; others are sequential (TPE).
INDEPENDENT_SAMPLERS = ("random", "qmc", "grid")
# low/high: the studentised interval, NaN beyond the n where one is valid (see MIN_EFFECTIVE_TRIALS).
TUNING_CURVE_COLUMNS = ["method", "kind", "n", "expected_test", "low", "high", "expected_val", "seconds"]
# trials_low/trials_high: the break-even's interval within the first valid_trials trials (None: beyond them);
# reached: its point estimate reaches the target, shown: its interval does (trials_high is a number);
# gain: the whole search's (n = max_trials) gain, gain_n/gain_low/gain_high: at the largest n with a valid interval;
# control_*: against the budget-matched control, the best of n reference runs by val, for n ≤ control_n (see
# break_even_against_control).
BREAK_EVEN_COLUMNS = ["loss", "reference", "target", "trials", "trials_low", "trials_high", "valid_trials", "seconds",
                      "reached", "shown", "max_trials", "gain", "gain_n", "gain_at_n", "gain_low", "gain_high",
                      "control_n", "control_splits", "control_trials", "control_trials_low", "control_trials_high",
                      "control_seconds", "control_gap", "control_low", "control_high", "old_target", "old_trials",
                      "old_val_gain"]


def estimator_description(sampler: str, repeats: int, replacement: bool, splits: int = 1) -> dict:
    """Which tuning-cost estimator fits the sampler, whether it is unbiased, what its intervals cover, and why."""
    draws = "with replacement (Dodge et al., 2019; biased)" if replacement else \
        "without replacement (Tang et al., 2020; unbiased for n up to the trials run)"
    over_splits = f", averaged over {splits} class splits" if splits > 1 else ""
    if sampler in INDEPENDENT_SAMPLERS:
        unbiased = sampler == "random" and not replacement
        why = ("random search draws every trial independently, so the order-statistic estimator applies"
               if sampler == "random" else f"{sampler} trials are not independent draws, so the pooled estimator is "
                                           "an approximation of what a user of that sampler would get")
        interval = ("studentised: the curve's jackknife variance with t on its effective trials − 1 (plus the "
                    "reference's mean), shown only where the selection weights spread over at least "
                    f"{MIN_EFFECTIVE_TRIALS:g} trials; it covers the expected score of a new search of n trials on "
                    "these splits, not the split-to-split variance")
        return {"kind": "pooled", "unbiased": unbiased, "interval": interval,
                "text": f"order statistics of n trials drawn {draws} from all "
                        f"{'finished trials' + (' of ' + str(repeats) + ' repeats' if repeats > 1 else '')}"
                        f"{over_splits}; {why}"}
    if repeats > 1:
        return {"kind": "repeats", "unbiased": True, "interval": f"t over the {repeats} independent searches",
                "text": f"the mean over {repeats} independent {sampler} searches of the test score of the "
                        f"best-by-val trial so far{over_splits}; a sequential sampler's trials are not independent "
                        "draws, so they are not pooled"}
    return {"kind": "repeats", "unbiased": False, "interval": "none: one search is one realisation",
            "text": f"the test score of the best-by-val trial so far in one {sampler} search{over_splits}: one "
                    "realisation, not an expectation, with no interval (set search.repeats to average over "
                    "independent searches); a sequential sampler's trials are not independent draws, so they are "
                    "not pooled"}


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


def _run_draws(runs: pd.DataFrame, objective: str) -> pd.DataFrame:
    """One method's final runs as draws: val selects, test is what a user gets; a diverged run at the floor."""
    val = pd.to_numeric(runs["val_score"], errors="coerce").to_numpy(dtype=float)
    test = pd.to_numeric(runs.get(f"{TEST_PREFIX}{objective}", pd.Series(np.nan, index=runs.index)),
                         errors="coerce").to_numpy(dtype=float)
    selection = np.where(np.isfinite(val), val, METRIC_FLOOR)
    return pd.DataFrame({"seed": runs["seed"].to_numpy(), "selection": selection, "val": selection,
                         "reported": np.where(np.isfinite(test), test, METRIC_FLOOR)})


def _sequential_curves(draws: pd.DataFrame, column: str) -> np.ndarray:
    """(repeats, n) best-so-far curves of `column` per repeat, cut to the shortest repeat."""
    curves = [best_so_far_selected(repeat["selection"], repeat[column]) for _, repeat in draws.groupby("repeat")]
    length = min(curve.size for curve in curves)
    return np.stack([curve[:length] for curve in curves])


def _pooled_split(draws: pd.DataFrame, replacement: bool) -> dict:
    """Independent draws of one split (random-search trials, or an untuned method's seeds): the selected-test curve
    with its variance and degrees of freedom, and the expected-best val curve."""
    curve, variance, df = selected_curve_with_variance(draws["selection"], draws["reported"], replacement)
    return {"curve": curve, "variance": variance, "df": df,
            "val": expected_selected_after_n_trials(draws["selection"], draws["val"], replacement)}


def _sequential_split(draws: pd.DataFrame) -> dict:
    """A sequential sampler's repeats on one split: the mean best-so-far test and val curves, t over repeats."""
    tests, vals = _sequential_curves(draws, "reported"), _sequential_curves(draws, "val")
    repeats = tests.shape[0]
    variance = tests.var(axis=0, ddof=1) / repeats if repeats > 1 else np.full(tests.shape[1], np.nan)
    return {"curve": tests.mean(axis=0), "variance": variance, "df": np.full(tests.shape[1], repeats - 1.0),
            "val": vals.mean(axis=0)}


def _over_splits(per_split: list[dict]) -> dict:
    """The curves of several splits averaged (cut to the shortest), with the variance of the mean and Welch df."""
    length = min(part["curve"].size for part in per_split)
    stacked = {key: np.stack([part[key][:length] for part in per_split]) for key in ("curve", "variance", "df", "val")}
    splits = len(per_split)
    return {"curve": stacked["curve"].mean(axis=0), "val": stacked["val"].mean(axis=0),
            "variance": stacked["variance"].sum(axis=0) / splits ** 2,
            "df": _welch_df(stacked["variance"], stacked["df"]) if splits > 1 else stacked["df"][0],
            "split_variances": stacked["variance"] / splits ** 2, "split_dfs": stacked["df"]}


def _reference_over_splits(draws_by_split: list[pd.DataFrame]) -> dict:
    """An untuned reference's mean test score of one run, averaged over splits, with the variance of that mean."""
    moments = [_reference_moments(draws["reported"]) for draws in draws_by_split]
    splits = len(moments)
    return {"target": float(np.mean([mean for mean, _, _ in moments])),
            "variances": np.array([variance for _, variance, _ in moments]) / splits ** 2,
            "dfs": np.array([df for _, _, df in moments])}


def break_even_with_interval(search: dict, reference: dict, confidence: float) -> dict:
    """The fewest trials whose selected-test curve reaches the reference's mean, with an interval by test inversion.

    At each n with a valid interval the gain (curve − reference mean) gets a studentised interval; the break-even's
    lower bound is the first such n whose upper gain bound reaches 0 (None: beyond the valid n), its upper bound the
    first n whose lower gain bound does (None: not shown to be reached within the valid n). The whole search's gain
    is stated at the largest valid n.
    """
    curve, target = search["curve"], reference["target"]
    gain = curve - target
    variances = np.vstack([search["split_variances"], np.repeat(reference["variances"][:, None], curve.size, axis=1)])
    dfs = np.vstack([search["split_dfs"], np.repeat(reference["dfs"][:, None], curve.size, axis=1)])
    low, high = within_range(_t_bounds(gain, variances.sum(axis=0), _welch_df(variances, dfs), confidence))
    valid = np.isfinite(low) & np.isfinite(high)
    valid_trials = int(np.flatnonzero(valid).max() + 1) if valid.any() else 0
    found = first_reaching(curve, target)[0]
    # Bounds beyond the valid range are NaN and never reach, so the first valid n that reaches is found.
    trials_low = first_reaching(np.where(valid, high, np.nan), 0.0)[0]
    trials_high = first_reaching(np.where(valid, low, np.nan), 0.0)[0]
    at = valid_trials - 1
    return {"target": target, "trials": count_or_none(found), "trials_low": count_or_none(trials_low),
            "trials_high": count_or_none(trials_high), "valid_trials": valid_trials,
            "reached": bool(np.isfinite(found)), "shown": bool(np.isfinite(trials_high)),
            "max_trials": int(curve.size), "gain": float(gain[-1]),
            "gain_n": valid_trials or None, "gain_at_n": float(gain[at]) if valid_trials else math.nan,
            "gain_low": float(low[at]) if valid_trials else math.nan,
            "gain_high": float(high[at]) if valid_trials else math.nan}


def gap_to_control(search_curves: dict, control_curves: dict, confidence: float) -> pd.DataFrame:
    """The search's selected-test curve minus the budget-matched control's, n = 1 … the shorter of the two: per
    split gᵢ(n) = searchᵢ(n) − controlᵢ(n), their mean over the k splits with the t interval ḡ ± t_{k−1}·s_g/√k
    (each split ran its own search and seeds: independent draws, so the interval carries search, seeds and split;
    NaN bounds with one split). Columns n, search, control, gap, low, high, splits."""
    splits = [split for split in search_curves if split in control_curves]
    if not splits:
        return pd.DataFrame(columns=["n", "search", "control", "gap", "low", "high", "splits"])
    longest = min(min(len(search_curves[split]), len(control_curves[split])) for split in splits)
    search = np.stack([np.asarray(search_curves[split][:longest], float) for split in splits])
    control = np.stack([np.asarray(control_curves[split][:longest], float) for split in splits])
    gaps = search - control
    gap, k = gaps.mean(axis=0), len(splits)
    if k > 1:
        half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1)) * gaps.std(axis=0, ddof=1) / math.sqrt(k)
        low, high = within_range(gap - half), within_range(gap + half)
    else:
        low = high = np.full(longest, np.nan)
    return pd.DataFrame({"n": np.arange(1, longest + 1), "search": search.mean(axis=0), "control": control.mean(axis=0),
                         "gap": gap, "low": low, "high": high, "splits": k})


def break_even_against_control(search_curves: dict, control_curves: dict, confidence: float) -> dict:
    """The fewest trials n whose val-selected test score reaches the budget-matched control at the same n: the best
    of n runs of the untuned reference picked by val, the same number of trainings (SPEC, "Break-even").

    `search_curves` and `control_curves` map each class split to its selected-test curve (n = 1, 2, …). The control
    is measured for n up to its runs per split (control_n): beyond, nothing is compared. Per split the gap
    gᵢ(n) = searchᵢ(n) − controlᵢ(n); its mean over the k splits has the t interval ḡ ± t_{k−1}·s_g/√k (each split
    ran its own search and seeds, so the splits are independent draws and the interval carries the search, the
    seeds and the split). The break-even's interval inverts it as break_even_with_interval does: its lower end is
    the first n whose upper bound reaches 0, its upper end the first n whose lower bound does (None: not shown
    within control_n). One split gives the point estimate and no interval.
    """
    gaps = gap_to_control(search_curves, control_curves, confidence)
    if gaps.empty:
        return {"control_n": 0, "control_splits": 0, "control_trials": None, "control_trials_low": None,
                "control_trials_high": None, "control_gap": math.nan, "control_low": math.nan,
                "control_high": math.nan}
    longest, k = len(gaps), int(gaps["splits"].iloc[0])
    gap, low, high = (gaps[column].to_numpy(dtype=float) for column in ("gap", "low", "high"))
    return {"control_n": int(longest), "control_splits": k, "control_trials": count_or_none(first_reaching(gap, 0.0)[0]),
            "control_trials_low": count_or_none(first_reaching(high, 0.0)[0]),
            "control_trials_high": count_or_none(first_reaching(low, 0.0)[0]),
            "control_gap": float(gap[-1]), "control_low": float(low[-1]), "control_high": float(high[-1])}


def seed_luck(landscape: pd.DataFrame, run_scores: pd.DataFrame, loss: str, metric: str) -> pd.Series:
    """Per class split: the selected trial's test score in the search minus its (s, m) retrained at fresh seeds (the
    tuned runs' mean test score): how much of what the search reported was that trial's seed."""
    best = landscape[(landscape["loss"] == loss) & landscape["best"].astype(bool)]
    tuned = run_scores[run_scores["method"] == f"{loss}_tuned"]
    if best.empty or tuned.empty or metric not in tuned:
        return pd.Series(dtype=float)
    retrained = tuned.assign(split=tuned.get("split", 0)).groupby("split")[metric].mean()
    selected = best.assign(split=best["split"].fillna(0).astype(int)).set_index("split")["test_value"].astype(float)
    return (selected - retrained).dropna()


def seed_luck_over_splits(landscape: pd.DataFrame, run_scores: pd.DataFrame, loss: str, metric: str,
                          confidence: float) -> dict:
    """seed_luck's mean over class splits with its t interval over them (each split its own search and retrained
    seeds: independent draws); NaN bounds for one split, NaN throughout without a tuned run."""
    luck = finite_values(seed_luck(landscape, run_scores, loss, metric))
    if not luck.size:
        return {"seed_luck": math.nan, "seed_luck_low": math.nan, "seed_luck_high": math.nan, "seed_luck_splits": 0}
    mean, low, high = mean_ci(luck, confidence)
    return {"seed_luck": mean, "seed_luck_low": float(within_range(low)), "seed_luck_high": float(within_range(high)),
            "seed_luck_splits": int(luck.size)}


def _curve_rows(method: str, kind: str, combined: dict, seconds_each: float, confidence: float) -> pd.DataFrame:
    low, high = within_range(_t_bounds(combined["curve"], combined["variance"], combined["df"], confidence),
                             difference=False)
    n = np.arange(1, combined["curve"].size + 1)
    return pd.DataFrame({"method": method, "kind": kind, "n": n, "expected_test": combined["curve"], "low": low,
                         "high": high, "expected_val": combined["val"], "seconds": n * seconds_each})


def _seconds(trials: int | None, per_trial: float) -> float | None:
    """The device-seconds of a search of `trials` trials (None where it was not reached or is unknown)."""
    return float(trials * per_trial) if trials and np.isfinite(per_trial) else None


def tuning_budget(trials: pd.DataFrame, runs: pd.DataFrame, summary: pd.DataFrame, objective: str, sampler: str,
                  config: AnalysisConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Selection-aware tuning curves of each search and of the untuned controls, and the break-even with its interval.

    The curve is the expected test score of the trial that val selects among n, averaged over the class splits
    (each split's search selects among its own trials); the break-even is the fewest n at which it reaches a
    reference's mean test score of one run (diverged runs at the floor), its intervals studentised (see
    `search_gain`) and conditional on the splits run; beside it, the break-even against the budget-matched control,
    the best of n reference runs by val (`break_even_against_control`, an interval over splits).
    """
    replacement = config.estimator == "with_replacement"
    repeats = int(trials["repeat"].nunique()) if len(trials) else 1
    splits = sorted(set(split_of(runs)) | set(split_of(trials)))
    estimator = estimator_description(sampler, repeats, replacement, len(splits))
    rows, even, references = [], [], {}
    for method in untuned_methods(runs["method"]):
        if method not in HYPERPARAMETER_FREE_LOSSES:
            continue
        group = runs[runs["method"] == method]
        by_split = {split: _run_draws(part, objective) for split, part in group.groupby(split_of(group), sort=True)}
        if not by_split:
            continue
        per_split = {split: _pooled_split(draws, replacement) for split, draws in by_split.items()}
        combined = _over_splits(list(per_split.values()))
        rows.append(_curve_rows(method, "control", combined, mean_or_nan(group["seconds"]), config.confidence))
        if method in ADACOS_METHODS:  # the break-even is against what AdaCos delivers with no tuning
            references[method] = _reference_over_splits(list(by_split.values())) | {
                "val_mean": mean_or_nan(group["val_score"]),
                "control_curves": {split: part["curve"] for split, part in per_split.items()}}

    for row in summary.itertuples():
        group = trials[trials["loss"] == row.loss]
        by_split = {split: _trial_draws(part) for split, part in group.groupby(split_of(group), sort=True)}
        by_split = {split: draws for split, draws in by_split.items() if not draws.empty}
        if not by_split:
            even += [{"loss": row.loss, "reference": reference, "reached": False, "shown": False, "max_trials": 0}
                     for reference in references]
            continue
        per_split = {split: _pooled_split(draws, replacement) if estimator["kind"] == "pooled"
                     else _sequential_split(draws) for split, draws in by_split.items()}
        combined = _over_splits(list(per_split.values()))
        per_trial = row.seconds_per_trial
        rows.append(_curve_rows(row.loss, "search", combined, per_trial, config.confidence))
        # The classic quantity, for contrast: expected best val against the reference's mean val, by the same
        # estimator as the curves. It includes the maximum of seed noise.
        old_curve = combined["val"]
        for reference, moments in references.items():
            facts = break_even_with_interval(combined, moments, config.confidence)
            control = break_even_against_control({split: part["curve"] for split, part in per_split.items()},
                                                 moments["control_curves"], config.confidence)
            old_found = first_reaching(old_curve, moments["val_mean"])[0]
            even.append({"loss": row.loss, "reference": reference, **facts, **control,
                         "seconds": _seconds(facts["trials"], per_trial),
                         "control_seconds": _seconds(control["control_trials"], per_trial),
                         "old_target": moments["val_mean"], "old_trials": count_or_none(old_found),
                         "old_val_gain": float(old_curve[-1] - moments["val_mean"])})
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
