"""The meta-verdict's numbers: per tunable loss, the random-effects pooled tuned − Fixed AdaCos difference over the
configurations, its prediction interval for a new data set, the cells' outcomes, the break-even and the slope on log C;
and the tuners compared at equal device-seconds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis import random_effects, random_effects_slope
from study.benchmark.cells import OUTCOME_ORDER

POOLED_COLUMNS = ["loss", "metric", "configurations", "pooled_configurations", "estimate", "low", "high",
                  "standard_error", "tau2", "i2", "prediction_low", "prediction_high", "margin",
                  *OUTCOME_ORDER, "break_even_reached", "break_even_trials_median", "break_even_seconds_median",
                  "search_seconds_median", "slope_per_decade", "slope_low", "slope_high", "slope_configurations",
                  "only_cell", "only_outcome"]
TUNER_COLUMNS = ["configuration", "cell", "tuner", "sampler", "repeats", "pruner", "trials", "pruned_trials",
                 "seconds_per_trial", "budget_seconds", "trials_in_budget", "expected_test_at_budget", "low_at_budget",
                 "high_at_budget", "reference_test_mean", "break_even_reached", "break_even_trials", "break_even_low",
                 "break_even_high", "max_trials", "valid_trials", "break_even_seconds", "difference", "low", "high",
                 "outcome"]


def poolable(rows: pd.DataFrame) -> pd.Series:
    """The cells that enter a pooled estimate: each configuration's primary cell, with a finite, positive SE."""
    return rows["primary"].astype(bool) & np.isfinite(rows["difference"]) & (rows["standard_error"] > 0)


def _median(values) -> float:
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else math.nan


def pooled_loss(rows: pd.DataFrame, confidence: float) -> dict:
    """One loss's meta-verdict numbers from its cells' rows (one per configuration's primary cell)."""
    primary = rows[rows["primary"].astype(bool)]
    pooled_rows = rows[poolable(rows)]
    outcome = {name: int((primary["outcome"] == name).sum()) for name in OUTCOME_ORDER}
    reached = primary[primary["break_even_reached"].astype(bool)]
    facts = {"loss": rows["loss"].iloc[0], "metric": rows["metric"].iloc[0], "configurations": len(primary),
             "pooled_configurations": len(pooled_rows), "margin": _median(primary["margin"]), **outcome,
             "break_even_reached": len(reached), "break_even_trials_median": _median(reached["break_even_trials"]),
             "break_even_seconds_median": _median(reached["break_even_seconds"]),
             "search_seconds_median": _median(primary["search_seconds"])}
    if len(pooled_rows) == 1:  # nothing to pool: the one study's own interval and verdict stand
        only = pooled_rows.iloc[0]
        facts.update({"estimate": only["difference"], "low": only["low"], "high": only["high"],
                      "standard_error": only["standard_error"], "only_cell": only["cell"],
                      "only_outcome": only["outcome"]})
    elif len(pooled_rows):
        pooled = random_effects(pooled_rows["difference"], pooled_rows["standard_error"], confidence)
        facts.update({key: pooled[key] for key in ("estimate", "low", "high", "standard_error", "tau2", "i2",
                                                   "prediction_low", "prediction_high")})
        slope = random_effects_slope(pooled_rows["difference"], pooled_rows["standard_error"],
                                     np.log10(pooled_rows["train_classes"].astype(float)), confidence)
        facts.update({"slope_per_decade": slope["slope"], "slope_low": slope["low"], "slope_high": slope["high"],
                      "slope_configurations": int(pooled_rows["train_classes"].nunique())})
    return facts


def pooled_table(rows: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """POOLED_COLUMNS, one row per searched loss (ArcFace first, then in the order the cells searched them)."""
    losses = list(dict.fromkeys(["arcface", *rows["loss"]]))
    table = [pooled_loss(rows[rows["loss"] == loss], confidence) for loss in losses if (rows["loss"] == loss).any()]
    return pd.DataFrame(table).reindex(columns=POOLED_COLUMNS)


def pooled_weights(rows: pd.DataFrame, confidence: float) -> pd.Series:
    """Each pooled cell's share of its loss's random-effects weight (NaN for the cells left out)."""
    weights = pd.Series(np.nan, index=rows.index)
    for _, group in rows[poolable(rows)].groupby("loss"):
        pooled = random_effects(group["difference"], group["standard_error"], confidence)
        weights.loc[group.index] = pooled["weights"]
    return weights


def value_at_seconds(curve: pd.DataFrame, budget: float, column: str) -> float:
    """A tuning curve's `column` at `budget` device-seconds, linear between trials (NaN beyond the curve, or where
    the column is missing at either neighbour)."""
    seconds = curve["seconds"].to_numpy(dtype=float)
    values = curve[column].to_numpy(dtype=float)
    if not len(seconds) or budget > seconds[-1] + 1e-9 or budget < seconds[0] - 1e-9:
        return math.nan
    after = int(np.searchsorted(seconds, budget - 1e-9))
    if after == 0 or abs(seconds[after] - budget) <= 1e-9:
        return float(values[after])
    before = after - 1
    share = (budget - seconds[before]) / (seconds[after] - seconds[before])
    return float(values[before] + share * (values[after] - values[before]))


def tuner_table(rows: pd.DataFrame, curves: dict[str, pd.DataFrame], loss: str = "arcface") -> pd.DataFrame:
    """Per configuration searched with several tuners: each tuner's selected-test curve at the largest budget of
    device-seconds (per search, i.e. per repeat) that every one of them reached, and its break-even."""
    searched = rows[rows["loss"] == loss]
    table = []
    for configuration, group in searched.groupby("configuration", sort=False):
        if group["tuner"].nunique() < 2:
            continue
        ends = [curves[cell]["seconds"].max() for cell in group["cell"] if cell in curves and len(curves[cell])]
        budget = float(min(ends)) if ends else math.nan
        for row in group.itertuples():
            curve = curves.get(row.cell, pd.DataFrame(columns=["n", "expected_test", "low", "high", "seconds"]))
            table.append({
                "configuration": configuration, "cell": row.cell, "tuner": row.tuner, "sampler": row.sampler,
                "repeats": row.repeats, "pruner": row.pruner, "trials": row.search_trials,
                "pruned_trials": row.pruned_trials, "seconds_per_trial": row.seconds_per_trial,
                "budget_seconds": budget, "trials_in_budget": budget / row.seconds_per_trial,
                **{f"{name}_at_budget": value_at_seconds(curve, budget, column)
                   for name, column in (("expected_test", "expected_test"), ("low", "low"), ("high", "high"))},
                "reference_test_mean": row.reference_test_mean, "break_even_reached": row.break_even_reached,
                "break_even_trials": row.break_even_trials, "break_even_low": row.break_even_low,
                "break_even_high": row.break_even_high, "max_trials": row.max_trials,
                "valid_trials": row.valid_trials, "break_even_seconds": row.break_even_seconds,
                "difference": row.difference, "low": row.low, "high": row.high, "outcome": row.outcome})
    return pd.DataFrame(table, columns=TUNER_COLUMNS)


def benchmark_seconds(rows: pd.DataFrame) -> dict:
    """Device-seconds the benchmark trained: every cell's searches and tuned runs, and the untuned methods' final runs
    once per configuration (the other tuners' cells restore those from DVC's run cache)."""
    cells = rows.drop_duplicates("cell")
    shared = cells.groupby("configuration")["shared_final_seconds"].max().sum()
    own = (cells["cell_seconds"] - cells["shared_final_seconds"]).sum()
    return {"cells": float(cells["cell_seconds"].sum()), "trained": float(own + shared)}
