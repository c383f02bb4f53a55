"""The verdict: the numbers the report's verdict states, as plain data, and the recommendation they imply."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis.common import REFERENCE_METHOD, TEST_PREFIX, count_or_none, primary_loss
from study.config import HYPERPARAMETER_FREE_LOSSES, AnalysisConfig
from study.results import tuned_method

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


def verdict_facts(objective: str, searched_losses, final, costs, differences, break_even_table, summary,
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
