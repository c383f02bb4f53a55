"""Comparison of the final runs: test metrics per method, what each method cost, each method − Fixed AdaCos with
its interval, Holm correction and equivalence test, the runs that ended at chance, and our runs beside the
published numbers. The test metrics are not all "higher is better": EER is an error rate, so every metric
carries its direction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import special, stats

from study.analysis.common import (METRIC_RANGE, REFERENCE_METHOD, TEST_PREFIX, finite_values, higher_is_better,
                                   mean_or_nan, split_of, within_range)
from study.analysis.cell_difference import standard_error_floor
from study.config import METRIC_KIND, AnalysisConfig, relative_margin  # noqa: F401 (METRIC_KIND read from here too)
from study.published import PublishedSetup
from study.statistics import (
    difference_ci,
    equivalence_test,
    holm_adjusted,
    minimum_detectable_difference,
    paired_difference,
    replicates_to_resolve,
)

# A published number is "within our seed-to-seed spread" when it lies inside mean ± this many sample stds.
REPRODUCTION_SPREAD_STDS = 2.0
# A finished run whose test embeddings cannot tell genuine from impostor pairs at all (ROC AUC 0.5, the mark of a
# network collapsed to one output, e.g. by dead ReLUs) is counted and named, not hidden in a mean ± std.
CHANCE_METRIC, CHANCE_LEVEL = "test_roc_auc", 0.5

# test: paired (by seed, one split), split (paired by split and seed, over splits) or Welch; unit: what
# seeds_to_resolve counts (seeds, or splits of as many seeds); standard_error and df: what the interval, p and TOST
# rest on, se_from where it came from (splits, seed floor, seeds or Welch); seed_sd and seed_sd_df: Fixed AdaCos's
# seed-to-seed sd within a split, pooled over splits; margin_seed_sds and margin_error_share: the margin in those
# sds and as a share of its remaining error; decision_alpha: the level detectable uses; not_detectable: no
# difference inside the metric's range is detected with the study's power (detectable is then NaN).
DIFFERENCE_COLUMNS = ["method", "metric", "test", "pairs", "splits", "unit", "difference", "low", "high", "p_value",
                      "p_holm", "significant", "standard_error", "df", "se_from", "welch_difference", "welch_low",
                      "welch_high", "welch_p_value", "margin", "seed_sd", "seed_sd_df", "margin_seed_sds",
                      "margin_error_share", "margin_score_share", "tost_p_value", "tost_p_holm", "equivalent",
                      "detectable", "not_detectable", "decision_alpha", "seeds_to_resolve", "higher_is_better"]


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


# The retrieval metrics papers lead with (Musgrave et al. 2020, PML's tables): what a reader compares first.
ABSOLUTE_METRICS = ("precision_at_1", "r_precision", "map_at_r")


# Scores are clipped to [ε, 1 − ε] before the logit: a split's mean of exactly 0 or 1 (every query right) would
# otherwise have an infinite logit. ε = 1e-4 lies below the resolution of every test set here (a split's score moves
# in steps of 1/queries, at most a few thousand queries), so it changes no score that can occur short of 0 or 1.
LOGIT_EPSILON = 1e-4


def logit_t_interval(values, confidence: float, epsilon: float = LOGIT_EPSILON) -> tuple[np.ndarray, np.ndarray]:
    """A t interval for the mean of scores in [0, 1] built on the logit scale, along the last axis: with
    zᵢ = logit(clip(xᵢ, ε, 1 − ε)), z̄ ± t_{(1+c)/2, n−1} · sd(z) / √n, back-transformed by the logistic function,
    so both bounds lie in (0, 1). Assumes the n values are independent draws (one per class split) whose logits are
    roughly normal; it covers the mean of the scores where the logit's curvature over their spread is small (the
    back-transformed centre is the median of a logit-normal, not its mean; benchmarks/absolute_coverage.py measures
    the difference). Fewer than 2 values give NaN bounds; values all equal give the value itself as both bounds."""
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    if n < 2:
        nan = np.full(values.shape[:-1], math.nan)
        return nan, nan.copy()
    logits = special.logit(np.clip(values, epsilon, 1 - epsilon))
    centre = logits.mean(axis=-1)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * logits.std(axis=-1, ddof=1) / math.sqrt(n)
    low, high = special.expit(centre - half), special.expit(centre + half)
    constant = np.ptp(values, axis=-1) == 0  # clipping would move a constant 1.0 to 1 − ε: keep the value itself
    return np.where(constant, values[..., 0], low), np.where(constant, values[..., 0], high)


def absolute_scores(runs: pd.DataFrame, methods: Sequence[str], confidence: float,
                    metrics: Sequence[str] = ABSOLUTE_METRICS) -> pd.DataFrame:
    """Each method's mean test score and its interval, one row per (method, metric): over class splits (each split's
    seeds averaged first) where there are several, else over seeds. The mean is the plain mean of those units; the
    interval is `logit_t_interval` over them, so it stays inside [0, 1] (a t interval on the raw scale ran above 1
    near the top). Diverged runs are left out."""
    rows = []
    for method in methods:
        group = runs[runs["method"] == method]
        for metric in metrics:
            column = f"{TEST_PREFIX}{metric}"
            if column not in group or group[column].notna().sum() == 0:
                continue
            scores = group.dropna(subset=[column])
            units = (scores.groupby("split")[column].mean() if "split" in scores and scores["split"].nunique() > 1
                     else scores[column]).to_numpy(dtype=float)
            low, high = logit_t_interval(units, confidence)
            rows.append({"method": method, "metric": metric, "mean": float(units.mean()), "low": float(low),
                         "high": float(high), "over": "splits" if units.size != len(scores) else "seeds",
                         "n": int(units.size)})
    return pd.DataFrame(rows, columns=["method", "metric", "mean", "low", "high", "over", "n"])


def _remaining_error(mean: float, higher_better: bool) -> float:
    """How far a bounded [0, 1] metric's mean is from perfect: 1 − mean, or the mean itself for an error rate."""
    return 1.0 - mean if higher_better else mean


def seed_sd(scores, splits=None) -> tuple[float, int]:
    """The seed-to-seed sd within a class split, pooled over splits, and its degrees of freedom:
    √(Σᵢ Σⱼ (xᵢⱼ − x̄ᵢ)² / Σᵢ(nᵢ − 1)) on Σᵢ(nᵢ − 1) df (the sample sd on n − 1 df for one split). The sd over the
    runs of several splits would also hold the split-to-split spread, which no seed can remove. NaN on 0 df."""
    values = pd.to_numeric(pd.Series(list(scores)), errors="coerce").astype(float)
    labels = pd.Series(np.zeros(len(values), dtype=int) if splits is None else list(splits))
    finite = np.isfinite(values.to_numpy(dtype=float))
    values, labels = values[finite].reset_index(drop=True), labels[finite].reset_index(drop=True)
    groups = values.groupby(labels)
    df = int((groups.size() - 1).sum())
    if df < 1:
        return math.nan, df
    return float(math.sqrt(((values - groups.transform("mean")) ** 2).sum() / df)), df


def equivalence_margin(metric: str, config: AnalysisConfig, reference_scores=None, splits=None) -> float:
    """The equivalence margin of a test metric, by its kind: absolute, or relative to the reference's (Fixed
    AdaCos's) seed-to-seed sd within a split ("0.5sd", `seed_sd` over `splits`), to its remaining error ("5%": of
    1 − mean, or of the mean for EER) or to its mean score ("2% of score")."""
    kind = METRIC_KIND.get(metric.removeprefix(TEST_PREFIX))
    if kind is None:
        raise KeyError(f"metric {metric!r} has no kind; known: {', '.join(METRIC_KIND)}")
    margin = config.equivalence_margin[kind]
    if not isinstance(margin, str):
        return float(margin)
    value, unit = relative_margin(margin)
    reference = finite_values(reference_scores if reference_scores is not None else [])
    if unit == "sd":
        relative = value * seed_sd(reference_scores, splits)[0] if reference.size >= 2 else math.nan
    elif unit == "% of score":
        relative = value / 100.0 * abs(float(reference.mean())) if reference.size else math.nan
    else:
        relative = (value / 100.0 * _remaining_error(float(reference.mean()), higher_is_better(metric))
                    if reference.size else math.nan)
    # A share of nothing (a reference scoring 0, e.g. TAR at FAR 1e-3 of a model that learned little; no seed spread;
    # no error left) is no margin: nothing can be shown within it, so no equivalence test is made.
    return relative if relative > 0 else math.nan


def margin_meaning(margin: float, metric: str, reference_scores, splits=None) -> dict:
    """A margin in the metric's own terms: what share of the reference's mean score, how many of its seed sds within
    a split (`seed_sd`, with its df), what share of its remaining error."""
    reference = finite_values(reference_scores)
    sd, df = seed_sd(reference_scores, splits) if reference.size >= 2 else (math.nan, 0)
    remaining = _remaining_error(float(reference.mean()), higher_is_better(metric)) if reference.size else math.nan
    mean = abs(float(reference.mean())) if reference.size else math.nan
    return {"seed_sd": sd, "seed_sd_df": df, "margin_seed_sds": margin / sd if sd > 0 else math.nan,
            "margin_error_share": margin / remaining if remaining > 0 else math.nan,
            "margin_score_share": margin / mean if mean > 0 else math.nan}


def paired_runs(group: pd.DataFrame, reference: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The runs of a method and of the reference that share a class split and a seed, both finite on `metric`."""
    keys = ["split", "seed"]
    left = group.assign(split=split_of(group))[[*keys, metric]]
    right = reference.assign(split=split_of(reference))[[*keys, metric]]
    pairs = left.merge(right, on=keys, suffixes=("", "_reference"))
    finite = np.isfinite(pairs[metric].astype(float)) & np.isfinite(pairs[f"{metric}_reference"].astype(float))
    return pairs[finite].assign(difference=lambda f: f[metric].astype(float) - f[f"{metric}_reference"].astype(float))


def _over_splits_and_seeds(pairs: pd.DataFrame, confidence: float) -> dict:
    """The mean paired difference over class splits, each split's seeds averaged first (a one-way random-effects
    model, balanced or not): its t interval carries the split-to-split variance and, with it, the search-to-search
    variance of each split's own search, besides the seeds'. Its standard error is standard_error_floor's: the
    splits' own (on splits − 1 df), never below what the within-split seed noise implies (on its pooled df)."""
    floored = standard_error_floor(pairs[["split", "seed", "difference"]], confidence)
    estimate, standard_error, df = floored.estimate, floored.standard_error, floored.df
    p_value = (float(2.0 * stats.t.sf(abs(estimate) / standard_error, df)) if standard_error > 0
               else float(estimate == 0.0) if standard_error == 0 else math.nan)
    # The sd of one split's mean that this standard error implies: what the sample-size formulas take per split.
    return {"difference": estimate, "low": floored.low, "high": floored.high, "p_value": p_value,
            "standard_error": standard_error, "df": df, "sd": standard_error * math.sqrt(floored.splits),
            "se_from": floored.se_from}


def _method_differences(group: pd.DataFrame, reference: pd.DataFrame, method: str, metrics: list[str],
                        config: AnalysisConfig, sample_sizes: bool = True) -> pd.DataFrame:
    """One method − Fixed AdaCos on every test metric: paired by split and seed where they pair (over splits when
    there are several), Welch beside it, Holm-corrected across the metric family, TOST against the metric's margin,
    and what the study can detect at the level the decision uses (Bonferroni's α/m, Holm's strictest step)."""
    alpha = 1.0 - config.confidence
    decision_alpha = alpha / max(1, len(metrics))
    rows = []
    for metric in metrics:
        pairs = paired_runs(group, reference, metric)
        splits = int(pairs["split"].nunique())
        a, b = finite_values(group[metric]), finite_values(reference[metric])
        welch = difference_ci(a, b, config.confidence) if a.size and b.size else {}
        unit = "splits" if splits > 1 else "seeds"
        if splits > 1:
            result = _over_splits_and_seeds(pairs, config.confidence)
            test, replicates = "split", splits
        elif len(pairs) >= 2:
            result = paired_difference(pairs[metric].astype(float), pairs[f"{metric}_reference"].astype(float),
                                       config.confidence) | {"se_from": "seeds"}
            test, replicates = "paired", len(pairs)
        else:  # nothing pairs (e.g. different seeds): Welch alone
            result = welch or {"difference": math.nan, "low": math.nan, "high": math.nan, "p_value": math.nan,
                               "standard_error": math.nan, "df": math.nan}
            result = {**result, "sd": math.nan, "se_from": "Welch"}
            test, replicates = "Welch", min(a.size, b.size)
        standard_error, df, sd = result["standard_error"], result["df"], result["sd"]
        reference_splits = split_of(reference)
        margin = equivalence_margin(metric, config, reference[metric], reference_splits)
        tost = (equivalence_test(result["difference"], standard_error, df, margin, alpha)
                if np.isfinite(standard_error) and np.isfinite(margin) else {"p_value": math.nan, "equivalent": False})
        resolvable = sample_sizes and test != "Welch" and np.isfinite(sd) and sd > 0
        detectable = minimum_detectable_difference(sd, replicates, decision_alpha, config.power) if resolvable \
            else math.nan
        not_detectable = bool(detectable > METRIC_RANGE)
        detectable = math.nan if not_detectable else detectable
        to_resolve = (replicates_to_resolve(result["difference"], sd, margin, decision_alpha, alpha, config.power)
                      if resolvable else None)
        rows.append({"method": method, "metric": metric, "test": test, "pairs": len(pairs), "splits": splits,
                     "unit": unit, "difference": result["difference"], "low": float(within_range(result["low"])),
                     "high": float(within_range(result["high"])),
                     "p_value": result["p_value"], "standard_error": standard_error, "df": df,
                     "se_from": result["se_from"],
                     "welch_difference": welch.get("difference", math.nan),
                     "welch_low": float(within_range(welch.get("low", math.nan))),
                     "welch_high": float(within_range(welch.get("high", math.nan))),
                     "welch_p_value": welch.get("p_value", math.nan),
                     "margin": margin, **margin_meaning(margin, metric, reference[metric], reference_splits),
                     "tost_p_value": tost["p_value"], "equivalent": bool(tost["equivalent"]),
                     "detectable": detectable, "not_detectable": not_detectable, "decision_alpha": decision_alpha,
                     "seeds_to_resolve": to_resolve,
                     "higher_is_better": higher_is_better(metric)})
    frame = pd.DataFrame(rows, columns=[c for c in DIFFERENCE_COLUMNS if c not in ("p_holm", "significant",
                                                                                    "tost_p_holm")])
    # The metrics are one family of tests per method: Holm keeps its family-wise error at alpha, for superiority and
    # for equivalence alike (one multiplicity rule for both claims).
    frame["p_holm"] = holm_adjusted(frame["p_value"].astype(float).to_numpy()) if len(frame) else []
    frame["significant"] = frame["p_holm"].astype(float) < alpha
    frame["tost_p_holm"] = holm_adjusted(frame["tost_p_value"].astype(float).to_numpy()) if len(frame) else []
    frame["equivalent"] = frame["tost_p_holm"].astype(float) < alpha
    frame["seeds_to_resolve"] = frame["seeds_to_resolve"].astype("Int64")
    return frame[DIFFERENCE_COLUMNS]


def differences_to_reference(runs: pd.DataFrame, methods: list[str], config: AnalysisConfig,
                             sample_sizes: bool = True) -> pd.DataFrame:
    """Every method − Fixed AdaCos on every test metric of `runs` (DIFFERENCE_COLUMNS), in the order of `methods`;
    without `sample_sizes`, the detectable difference and the seeds to resolve are left out (NaN), which is
    faster and changes no decision."""
    metrics = [column for column in runs.columns if column.startswith(TEST_PREFIX)]
    reference = runs[runs["method"] == REFERENCE_METHOD]
    frames = [_method_differences(runs[runs["method"] == method], reference, method, metrics, config, sample_sizes)
              for method in methods if method != REFERENCE_METHOD and not reference.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DIFFERENCE_COLUMNS)


def runs_at_chance(runs: pd.DataFrame) -> int:
    """How many finished runs ended at chance on test (ROC AUC ≤ 0.5: their embeddings carry no identity at all)."""
    if CHANCE_METRIC not in runs:
        return 0
    return int((pd.to_numeric(runs[CHANCE_METRIC], errors="coerce") <= CHANCE_LEVEL + 1e-9).sum())


def final_tables(runs: pd.DataFrame, methods: list[str], summary: pd.DataFrame,
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
                          "run_seconds": mean_or_nan(group["seconds"]) if "seconds" in group else math.nan})
    costs = pd.DataFrame(cost_rows, columns=["method", "loss", "runs", "diverged", "at_chance", "tuning_trials",
                                             "tuning_seconds", "run_seconds"])

    return final, costs, differences_to_reference(runs, methods, config)


def run_score_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Each final run's class split (where there are splits), its learning rate (where recorded: val chooses it per
    split with train.learning_rates), status, val score and test metrics (NaN where it diverged): `recommend`'s
    input, and per-seed plots'."""
    splits = ["split"] if "split" in runs else []
    rate = ["lr"] if "lr" in runs else []
    columns = (["method", *splits, *rate, "seed", "status", "val_score"]
               + [c for c in runs.columns if c.startswith(TEST_PREFIX)])
    return runs.reindex(columns=columns).reset_index(drop=True)


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
        values = 100.0 * finite_values(group[result.metric]) if result.metric in group else np.array([])
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
