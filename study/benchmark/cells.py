"""One finished cell read from its committed files: per searched loss, tuned − Fixed AdaCos on the objective with its
standard error, the study's own outcome for it, the break-even in trials and device-seconds, and what the cell cost."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from study.analysis import REFERENCE_METHOD, TEST_PREFIX, count_or_none, standard_error_from_interval
from study.analysis.verdict import difference_row, recommendation_rule
from study.results import REPORT_DIR, read_csv, read_json, tuned_method
from study.statistics import difference_ci
from study.sweep.pipelines import DIFFERENCES_FILE, METRICS_FILE

TABLES = REPORT_DIR / "tables"
# How each of the study's reasons reads across cells: did tuning pay, was it equivalent, was AdaCos better, or open?
OUTCOMES = {"tuning_better_beyond_margin": "paid", "equivalent": "equivalent", "gain_within_margin": "equivalent",
            "adacos_significantly_better": "adacos_better", "gain_not_shown_relevant": "undecided",
            "not_resolved": "undecided", "no_tuned_comparison": "undecided"}
OUTCOME_ORDER = ("paid", "equivalent", "adacos_better", "undecided")


def _number(value) -> float:
    return math.nan if value is None or (not isinstance(value, str) and pd.isna(value)) else float(value)


def comparison_outcome(differences: pd.DataFrame, loss: str, metric: str) -> tuple[str, dict | None]:
    """The study's own rule (study.analysis.verdict) applied to one searched loss against Fixed AdaCos alone: its
    reason and the comparison it read. The study's verdict applies it to its primary loss, and may then name Dynamic
    AdaCos or softmax instead of Fixed AdaCos; here the question is only tuning against Fixed AdaCos."""
    comparison = difference_row(differences, tuned_method(loss), metric)
    _, reason = recommendation_rule(tuned_method(loss), comparison, [])
    return reason, comparison


def difference_standard_error(row: pd.Series, run_scores: pd.DataFrame, method: str, metric: str,
                              confidence: float) -> tuple[float, float]:
    """(SE, df) of a cell's tuned − Fixed AdaCos difference: its own standard_error column where the table has one;
    else from its interval, whose quantile the test names: over class splits, t on splits − 1 df; paired by seed, t on
    pairs − 1; Welch, recomputed from the run scores (its df is not in the table)."""
    if "standard_error" in row and np.isfinite(_number(row["standard_error"])):
        return _number(row["standard_error"]), _number(row.get("df"))
    test = row["test"]
    if test == "Welch":
        tuned = run_scores.loc[run_scores["method"] == method, metric]
        reference = run_scores.loc[run_scores["method"] == REFERENCE_METHOD, metric]
        welch = difference_ci(tuned.dropna(), reference.dropna(), confidence)
        return _number(welch["standard_error"]), _number(welch["df"])
    df = float(row["splits"]) - 1 if test == "split" else float(row["pairs"]) - 1
    return standard_error_from_interval(_number(row["low"]), _number(row["high"]), confidence, df), df


def cell_device_seconds(search: pd.DataFrame, final: pd.DataFrame, run_scores: pd.DataFrame) -> dict:
    """What a cell's study trained, in device-seconds: every search trial, and every final run (its method's mean
    seconds × its runs), per untuned method apart so that runs shared between cells can be counted once."""
    runs = run_scores.groupby("method").size()
    per_method = final.drop_duplicates("method").set_index("method")["run_seconds"]
    finals = {method: float(per_method.get(method, math.nan)) * int(count) for method, count in runs.items()}
    return {"search": float(search["seconds"].sum()), "finals": finals,
            "total": float(search["seconds"].sum()) + float(np.nansum(list(finals.values())))}


def cell_rows(facts: dict, directory: str | Path) -> list[dict]:
    """One row per searched loss of a finished cell, read from its reports/ (metrics.json and tables/)."""
    directory = Path(directory)
    metrics = read_json(directory / METRICS_FILE, "report")
    verdict = metrics["verdict"]
    confidence = float(verdict.get("confidence", 0.95))
    metric = verdict.get("metric") or f"{TEST_PREFIX}{verdict['objective']}"
    differences = read_csv(directory / DIFFERENCES_FILE, "report")
    search = read_csv(directory / TABLES / "search.csv", "report")
    final = read_csv(directory / TABLES / "final_test.csv", "report")
    run_scores = read_csv(directory / TABLES / "run_scores.csv", "report")
    even = read_csv(directory / TABLES / "break_even.csv", "report")
    cost = cell_device_seconds(search, final, run_scores)
    rows = []
    for loss in facts["losses"]:
        method = tuned_method(loss)
        reason, comparison = comparison_outcome(differences, loss, metric)
        table = differences[(differences["method"] == method) & (differences["metric"] == metric)]
        row = table.iloc[0] if len(table) else pd.Series(dtype=object)
        standard_error, df = (difference_standard_error(row, run_scores, method, metric, confidence) if len(table)
                              else (math.nan, math.nan))
        searched = search[search["loss"] == loss]
        searched = searched.iloc[0] if len(searched) else pd.Series(dtype=object)
        per_trial = _number(searched.get("seconds_per_trial"))
        reached = even[(even["loss"] == loss) & (even["reference"] == REFERENCE_METHOD)]
        reached = reached.iloc[0] if len(reached) else pd.Series(dtype=object)
        trials_low = _number(count_or_none(reached.get("trials_low")))
        trials_high = _number(count_or_none(reached.get("trials_high")))
        comparison = comparison or {}
        rows.append({
            **{key: facts[key] for key in ("configuration", "tuner", "primary", "source", "protocol",
                                           "train_classes", "sampler", "repeats", "pruner", "n_trials")},
            "cell": facts["name"], "loss": loss, "metric": metric, "confidence": confidence,
            "splits": len(facts["splits"]),
            "seeds": len(facts["seeds"]),
            "test": row.get("test"), "df": df, "difference": _number(row.get("difference")),
            "low": _number(row.get("low")), "high": _number(row.get("high")), "standard_error": standard_error,
            "p_holm": _number(row.get("p_holm")), "significant": bool(comparison.get("significant", False)),
            "equivalent": bool(comparison.get("equivalent", False)), "margin": _number(row.get("margin")),
            "detectable": _number(row.get("detectable")), "reason": reason,
            "outcome": OUTCOMES.get(reason, "undecided"),
            "recommendation": verdict["recommendation"] if loss == verdict.get("tuned_loss") else None,
            "break_even_reached": bool(reached.get("reached", False)),
            "break_even_trials": _number(count_or_none(reached.get("trials"))),
            "break_even_low": trials_low, "break_even_high": trials_high,
            "valid_trials": _number(reached.get("valid_trials")), "max_trials": _number(reached.get("max_trials")),
            "seconds_per_trial": per_trial,
            "break_even_seconds": _number(reached.get("seconds")),
            "break_even_seconds_low": trials_low * per_trial, "break_even_seconds_high": trials_high * per_trial,
            "search_gain": _number(reached.get("gain_at_n")), "search_gain_low": _number(reached.get("gain_low")),
            "search_gain_high": _number(reached.get("gain_high")),
            "search_seconds": _number(searched.get("seconds")), "search_trials": _number(searched.get("trials")),
            "pruned_trials": _number(searched.get("pruned")),
            "tuned_test_mean": _number(metrics.get(method, {}).get(metric, {}).get("mean")),
            "reference_test_mean": _number(verdict.get("reference_test_mean")),
            "cell_seconds": cost["total"], "cell_search_seconds": cost["search"],
            "cell_final_seconds": float(np.nansum(list(cost["finals"].values()))),
            "shared_final_seconds": float(np.nansum([seconds for method, seconds in cost["finals"].items()
                                                     if not method.endswith("_tuned")])),
        })
    return rows


def tuning_curve(directory: str | Path, loss: str) -> pd.DataFrame:
    """A cell's selection-aware tuning curve of one searched loss: n, expected test, its band, device-seconds."""
    curves = read_csv(Path(directory) / TABLES / "tuning_curves.csv", "report")
    curve = curves[(curves["method"] == loss) & (curves["kind"] == "search")]
    return curve[["n", "expected_test", "low", "high", "seconds"]].reset_index(drop=True)
