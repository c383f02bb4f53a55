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

from study.analysis.common import REFERENCE_METHOD, TEST_PREFIX, finite_values, higher_is_better, mean_or_nan
from study.config import AnalysisConfig
from study.published import PublishedSetup
from study.statistics import (
    difference_ci,
    equivalence_test,
    holm_adjusted,
    minimum_detectable_difference,
    paired_difference,
    seeds_to_detect,
    seeds_to_show_equivalence,
)

# A published number is "within our seed-to-seed spread" when it lies inside mean ± this many sample stds.
REPRODUCTION_SPREAD_STDS = 2.0
# A finished run whose test embeddings cannot tell genuine from impostor pairs at all (ROC AUC 0.5, the mark of a
# network collapsed to one output, e.g. by dead ReLUs) is counted and named, not hidden in a mean ± std.
CHANCE_METRIC, CHANCE_LEVEL = "test_roc_auc", 0.5

DIFFERENCE_COLUMNS = ["method", "metric", "test", "pairs", "difference", "low", "high", "p_value", "p_holm",
                      "significant", "welch_difference", "welch_low", "welch_high", "welch_p_value", "margin",
                      "tost_p_value", "equivalent", "detectable", "seeds_to_resolve", "higher_is_better"]
# Which equivalence margin (see equivalence_margin) each test metric takes.
METRIC_KIND = {"accuracy": "accuracy", "knn_accuracy": "accuracy", "precision_at_1": "retrieval",
                "r_precision": "retrieval", "map_at_r": "retrieval", "roc_auc": "verification", "eer": "verification",
                "tar_at_far_1e-2": "verification", "tar_at_far_1e-3": "verification",
                "verification_accuracy": "verification"}


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
        a, b = finite_values(group[metric]), finite_values(reference[metric])
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

    reference = runs[runs["method"] == REFERENCE_METHOD]
    frames = [_method_differences(runs[runs["method"] == method], reference, method, metrics, config)
              for method in methods if method != REFERENCE_METHOD and not reference.empty]
    differences = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    return final, costs, differences[DIFFERENCE_COLUMNS]


def run_score_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Each final run's status, val score and test metrics (NaN where it diverged), for per-seed plots."""
    columns = ["method", "seed", "status", "val_score"] + [c for c in runs.columns if c.startswith(TEST_PREFIX)]
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
