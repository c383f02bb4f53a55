"""The verdict: the numbers the report's verdict states, as plain data, and the recommendation they imply."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis.common import REFERENCE_METHOD, TEST_PREFIX, count_or_none, mean_or_nan, primary_loss
from study.analysis.comparison import CHANCE_LEVEL, CHANCE_METRIC, differences_to_reference, paired_runs
from study.analysis.variance import variance_sources
from study.config import HYPERPARAMETER_FREE_LOSSES, AnalysisConfig, price_share
from study.statistics import mean_ci
from study.results import is_tuned, tuned_method

FACT_KEYS = ("test", "pairs", "splits", "unit", "difference", "low", "high", "p_value", "p_holm", "significant",
             "standard_error", "df", "se_from", "welch_difference", "welch_low", "welch_high", "welch_p_value",
             "margin", "seed_sd", "seed_sd_df", "margin_seed_sds", "margin_error_share", "margin_score_share", "tost_p_value",
             "tost_p_holm", "equivalent",
             "detectable", "not_detectable", "decision_alpha", "seeds_to_resolve")
# Or "<loss>_tuned". "undecided" only where no model learned anything: the data, not the losses, needs a look.
RECOMMENDATIONS = ("fixed_adacos", "dynamic_adacos", "softmax", "undecided")


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


def difference_row(differences: pd.DataFrame, method: str | None, metric: str) -> dict | None:
    """One method − Fixed AdaCos comparison on one metric, as plain data, or None where it was not made."""
    row = differences[(differences["method"] == method) & (differences["metric"] == metric)]
    if row.empty or pd.isna(row["difference"].iloc[0]):
        return None
    row = row.iloc[0]
    # A column added since a table was written (a committed benchmark cell's) reads as not recorded.
    facts = {key: _plain(row.get(key)) for key in FACT_KEYS}
    facts["favours_method"] = bool((row["difference"] > 0) == bool(row["higher_is_better"]))
    return facts


def counts(row: dict | None) -> bool:
    """Whether a difference counts: significant after Holm and at least the margin in size, so that it is both real
    and relevant (a difference that reaches the margin can never be shown equivalent within it)."""
    return bool(row and row["significant"] and row["margin"] is not None and abs(row["difference"]) >= row["margin"])


def recommendation_rule(tuned: str | None, comparison: dict | None, alternatives: list[str]) -> tuple[str, str]:
    """The recommendation and its reason, by the rule stated in SPEC: tune only for a gain that counts (significant
    and at least the margin); otherwise Fixed AdaCos, the option that costs no tuning, whatever the evidence (the
    reason says whether it is better, equivalent or the evidence open). A hyperparameter-free method replaces Fixed
    AdaCos by the same rule."""
    if comparison is None:
        choice, reason = REFERENCE_METHOD, "no_tuned_comparison"
    elif counts(comparison) and comparison["favours_method"]:
        return tuned, "tuning_better_beyond_margin"
    elif comparison["significant"] and not comparison["favours_method"]:
        choice, reason = REFERENCE_METHOD, "adacos_significantly_better"
    elif comparison["equivalent"]:
        choice, reason = REFERENCE_METHOD, "gain_within_margin" if comparison["significant"] else "equivalent"
    elif comparison["significant"]:
        choice, reason = REFERENCE_METHOD, "gain_not_shown_relevant"
    else:
        choice, reason = REFERENCE_METHOD, "not_resolved"
    if alternatives and choice == REFERENCE_METHOD:
        return alternatives[0], "alternative_better_than_fixed_adacos"
    return choice, reason


def recommend(run_scores: pd.DataFrame, objective: str, config: AnalysisConfig = AnalysisConfig(),
              tuning: dict | None = None, sample_sizes: bool = True) -> dict:
    """The verdict `reports/metrics.json` holds: the recommendation, its reason and the numbers behind it.

    `run_scores` is shaped like reports/tables/run_scores.csv (method, seed, status, val_score, test_<metric>, and
    split where the study ran several class splits); `objective` is train.objective. Every method is compared with
    Fixed AdaCos on every test metric (paired by split and seed; over splits when there are several, so the
    interval carries split and search variance), Holm-corrected per method, and judged against the metric's margin.
    `tuning`, when given, adds what tuning costs (the break-even of the searched loss, under "cost") and the
    search's variance (under "search_variance") to the variance decomposition. Without `sample_sizes` the
    detectable difference and the seeds to resolve are left out (faster, for simulations; no decision changes).
    """
    methods = list(dict.fromkeys(run_scores["method"]))
    return verdict_of(differences_to_reference(run_scores, methods, config, sample_sizes), run_scores, objective,
                      config, tuning)


def verdict_of(differences: pd.DataFrame, run_scores: pd.DataFrame, objective: str, config: AnalysisConfig,
               tuning: dict | None = None) -> dict:
    """`recommend`'s verdict from the differences to Fixed AdaCos already computed on `run_scores`
    (`differences_to_reference`): the report computes them once for its tables and its verdict."""
    metric = f"{TEST_PREFIX}{objective}"
    tuned_losses = [method.removesuffix("_tuned") for method in dict.fromkeys(run_scores["method"]) if is_tuned(method)]
    loss = primary_loss(tuned_losses)
    tuned = tuned_method(loss) if loss else None
    comparison = difference_row(differences, tuned, metric)

    def test_mean(method):
        return mean_or_nan(run_scores.loc[run_scores["method"] == method, metric]) if metric in run_scores else math.nan

    alternatives = []
    for method in HYPERPARAMETER_FREE_LOSSES:
        row = difference_row(differences, method, metric)
        if method != REFERENCE_METHOD and counts(row) and row["favours_method"]:
            alternatives.append((test_mean(method), method))
    alternatives = [method for _, method in sorted(alternatives, reverse=True)]
    recommendation, reason = recommendation_rule(tuned, comparison, alternatives)
    chance = learned_nothing(run_scores, [REFERENCE_METHOD] + ([tuned] if tuned else []), config.confidence)
    if chance:  # no loss can be told apart from another where none learned anything: say so, recommend nothing
        recommendation, reason, alternatives = "undecided", "nothing_learned", []
    others = differences[(differences["method"] == tuned) & (differences["metric"] != metric)]
    counting = [(other, row) for other, row in ((other, difference_row(others, tuned, other))
                                                for other in others["metric"]) if counts(row)]
    tuning = tuning or {}
    sources = None
    if tuned and metric in run_scores:
        pairs = paired_runs(run_scores[run_scores["method"] == tuned],
                            run_scores[run_scores["method"] == REFERENCE_METHOD], metric)
        if len(pairs):
            sources = _plain_dict(variance_sources(pairs, tuning.get("search_variance", math.nan)))
    return {
        "recommendation": recommendation, "reason": reason, "alternatives": alternatives,
        "objective": objective, "metric": metric, "confidence": config.confidence, "power": config.power,
        "reference": REFERENCE_METHOD, "reference_test_mean": _plain(test_mean(REFERENCE_METHOD)),
        "tuned_loss": loss, "tuned_method": tuned, "tuned_test_mean": _plain(test_mean(tuned)), "tuned": comparison,
        "tuned_better_metrics": [other for other, row in counting if row["favours_method"]],
        "tuned_worse_metrics": [other for other, row in counting if not row["favours_method"]],
        "other_metrics": int(len(others)), "variance_sources": sources, "cost": tuning.get("cost"),
        "at_chance": chance, "price_per_training": price_share(config.price_per_training),
    }


def learned_nothing(run_scores: pd.DataFrame, methods: list[str], confidence: float) -> dict | None:
    """Whether every one of `methods` is at chance on test: its mean ROC AUC over runs has a t interval that reaches
    down to 0.5 (embeddings that tell a pair of one identity from a pair of two no better than a coin). Per method
    its mean and interval; None where any method learned something, or ROC AUC was not scored."""
    found = {}
    for method in methods:
        values = pd.to_numeric(run_scores.loc[run_scores["method"] == method, CHANCE_METRIC], errors="coerce") \
            if CHANCE_METRIC in run_scores else pd.Series(dtype=float)
        values = values[np.isfinite(values)]
        if len(values) < 2:
            return None
        mean, low, high = mean_ci(values.to_numpy(dtype=float), confidence)
        if low > CHANCE_LEVEL:
            return None
        found[method] = {"mean": float(mean), "low": float(low), "high": float(high)}
    return found or None


def _plain_dict(values: dict) -> dict:
    return {key: _plain_dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list)
            else _plain(value) for key, value in values.items()}


def verdict_facts(objective: str, searched_losses, final, costs, differences, break_even_table, summary,
                  tuning_curves, speed, estimator: dict, default_hyperparameters: dict, config: AnalysisConfig,
                  run_scores: pd.DataFrame, search_variance: float = math.nan) -> dict:
    """The numbers the verdict states, as plain data (None where absent): `recommend`'s verdict, and beside it the
    search's break-even, the budget-matched control, ArcFace at its defaults and the convergence speed."""
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
        return facts | {key: count_or_none(facts[key]) for key in (
            "trials", "trials_low", "trials_high", "old_trials", "valid_trials", "gain_n", "control_n",
            "control_splits", "control_trials", "control_trials_low", "control_trials_high")}

    def control_gain(method):
        curve = tuning_curves[(tuning_curves["method"] == method) & (tuning_curves["kind"] == "control")]
        if len(curve) < 2:
            return None
        return {"seeds": int(curve["n"].max()), "gain": float(curve["expected_test"].iloc[-1]
                                                              - curve["expected_test"].iloc[0])}

    search = summary[summary["loss"] == loss]
    even = break_even_of(REFERENCE_METHOD)
    cost = None
    if even:
        cost = {key: even.get(key) for key in ("trials", "trials_low", "trials_high", "valid_trials", "seconds",
                                               "reached", "shown", "max_trials", "gain", "gain_n", "gain_at_n",
                                               "gain_low", "gain_high", "control_n", "control_splits",
                                               "control_trials", "control_trials_low", "control_trials_high",
                                               "control_seconds", "control_gap", "control_low", "control_high")}
        cost["search_seconds"] = _plain(search["seconds"].iloc[0]) if len(search) else None
        cost["search_trials"] = int(search["trials"].iloc[0]) if len(search) else None
    verdict = verdict_of(differences, run_scores, objective, config, {"cost": cost, "search_variance": search_variance})
    speed_row = speed[(speed["method"] == tuned) & (speed["basis"] == "own")
                      & (speed["fraction"] == min(config.convergence_targets))]
    return verdict | {
        "estimator": estimator["text"], "estimator_kind": estimator["kind"], "estimator_unbiased": estimator["unbiased"],
        "estimator_interval": estimator["interval"],
        "tuned_present": bool(tuned and (costs["method"] == tuned).any()),
        "default_method": "arcface_default", "default_test_mean": test_mean("arcface_default"),
        "default_hyperparameters": default_hyperparameters,
        "default": difference_row(differences, "arcface_default", metric),
        "default_diverged": int(costs.loc[costs["method"] == "arcface_default", "diverged"].sum()),
        "default_runs": int(costs.loc[costs["method"] == "arcface_default", "runs"].sum()),
        "break_even": even, "break_even_dynamic": break_even_of("dynamic_adacos"),
        "control": control_gain(REFERENCE_METHOD),
        "search_trials": int(search["trials"].iloc[0]) if len(search) else 0,
        "search_completed_trials": int(search["complete"].iloc[0]) if len(search) else 0,
        "search_repeats": int(search["repeats"].iloc[0]) if len(search) else 0,
        "search_seconds": _plain(search["seconds"].iloc[0]) if len(search) else None,
        "search_cpu_seconds": _plain(search["cpu_seconds"].iloc[0]) if len(search) else None,
        "seed_luck": ({key: _plain(search[key].iloc[0]) for key in ("seed_luck", "seed_luck_low", "seed_luck_high",
                                                                    "seed_luck_splits")}
                      if len(search) and "seed_luck" in search else None),
        "convergence": {key: _plain(value) for key, value in speed_row.iloc[0].items()} if len(speed_row) else None,
    }
