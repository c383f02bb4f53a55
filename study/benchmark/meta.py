"""The meta-verdict's numbers: per tunable loss, the random-effects pooled tuned − Fixed AdaCos difference over the
configurations, its prediction interval for a new data set, the cells' outcomes, the break-even and the slope on log C;
and the tuners compared at equal device-seconds."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from study.analysis import equal_weight_mean, equal_weight_slope, random_effects, random_effects_slope
from study.analysis.coverage import pooled_interval_coverage
from study.benchmark.cells import OUTCOME_ORDER

# An interval the verdict reads must hold the truth this often in simulated benchmarks of the same cells (SPEC: ≥ 93%
# at nominal 95%); the random-effects intervals are printed as specified either way, with what they covered.
MIN_COVERAGE = 0.93
COVERAGE_BENCHMARKS = 1000

POOLED_COLUMNS = ["loss", "metric", "configurations", "pooled_configurations", "estimate", "low", "high",
                  "standard_error", "tau2", "i2", "prediction_low", "prediction_high", "equal_estimate", "equal_low",
                  "equal_high", "equal_prediction_low", "equal_prediction_high", "dl_coverage", "equal_coverage",
                  "prediction_coverage", "equal_prediction_coverage", "judged_by", "judged_estimate", "judged_low",
                  "judged_high",
                  "predicted_by", "predicted_low", "predicted_high", "margin",
                  *OUTCOME_ORDER, "break_even_reached", "break_even_trials_median", "break_even_seconds_median",
                  "search_seconds_median", "slope_per_decade", "slope_low", "slope_high", "equal_slope", "equal_slope_low",
                  "equal_slope_high", "slope_coverage", "equal_slope_coverage", "slope_read_by", "slope_read",
                  "slope_read_low", "slope_read_high", "slope_configurations",
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


def pooling_coverage(pooled_rows: pd.DataFrame, confidence: float) -> pd.DataFrame | None:
    """The pooled intervals' coverage in simulated benchmarks of these cells (their standard errors, each estimated
    again on its own df); None below 3 cells."""
    if len(pooled_rows) < 3:
        return None
    return pooled_interval_coverage(pooled_rows["standard_error"], pooled_rows["df"], _log_classes(pooled_rows),
                                    benchmarks=COVERAGE_BENCHMARKS, confidence=confidence, seed=0)


def _log_classes(rows: pd.DataFrame) -> np.ndarray:
    return np.log10(rows["train_classes"].astype(float).to_numpy())


def _read_by(facts: dict, candidates: tuple[tuple[str, str, str, str, str], ...]) -> tuple[str, float, float, float]:
    """(name, estimate, low, high) of the first candidate (name and the keys of its estimate, low, high and worst
    simulated coverage) whose coverage reaches MIN_COVERAGE: ('', NaN, NaN, NaN) when none does."""
    for name, estimate, low, high, coverage in candidates:
        if facts.get(coverage, math.nan) >= MIN_COVERAGE and math.isfinite(facts.get(low, math.nan)):
            return name, facts[estimate], facts[low], facts[high]
    return "", math.nan, math.nan, math.nan


def pooled_loss(rows: pd.DataFrame, confidence: float) -> tuple[dict, pd.DataFrame | None, pd.Series]:
    """One loss's meta-verdict numbers from its cells' rows (one per configuration's primary cell), the simulated
    coverage of its pooled intervals, and each pooled cell's share of the random-effects weight."""
    primary = rows[rows["primary"].astype(bool)]
    pooled_rows = rows[poolable(rows)]
    outcome = {name: int((primary["outcome"] == name).sum()) for name in OUTCOME_ORDER}
    reached = primary[primary["break_even_reached"].astype(bool)]
    facts = {"loss": rows["loss"].iloc[0], "metric": rows["metric"].iloc[0], "configurations": len(primary),
             "pooled_configurations": len(pooled_rows), "margin": _median(primary["margin"]), **outcome,
             "break_even_reached": len(reached), "break_even_trials_median": _median(reached["break_even_trials"]),
             "break_even_seconds_median": _median(reached["break_even_seconds"]),
             "search_seconds_median": _median(primary["search_seconds"])}
    coverage = pooling_coverage(pooled_rows, confidence)
    weights = pd.Series(1.0, index=pooled_rows.index)
    if len(pooled_rows) == 1:  # nothing to pool: the one study's own interval and verdict stand
        only = pooled_rows.iloc[0]
        facts.update({"estimate": only["difference"], "low": only["low"], "high": only["high"],
                      "standard_error": only["standard_error"], "only_cell": only["cell"],
                      "only_outcome": only["outcome"]})
    elif len(pooled_rows):
        pooled = random_effects(pooled_rows["difference"], pooled_rows["standard_error"], confidence)
        facts.update({key: pooled[key] for key in ("estimate", "low", "high", "standard_error", "tau2", "i2",
                                                   "prediction_low", "prediction_high")})
        weights = pd.Series(pooled["weights"], index=pooled_rows.index)
        equal = equal_weight_mean(pooled_rows["difference"], confidence)
        facts.update({f"equal_{key}": equal[key] for key in ("estimate", "low", "high", "prediction_low",
                                                             "prediction_high")})
        if coverage is not None:
            facts.update({f"{name}_coverage": float(coverage[f"{name}_coverage"].min())
                          for name in ("dl", "equal", "prediction", "equal_prediction", "slope", "equal_slope")})
        facts["judged_by"], facts["judged_estimate"], facts["judged_low"], facts["judged_high"] = _read_by(facts, (
            ("random effects", "estimate", "low", "high", "dl_coverage"),
            ("equal weights", "equal_estimate", "equal_low", "equal_high", "equal_coverage")))
        facts["predicted_by"], _, facts["predicted_low"], facts["predicted_high"] = _read_by(facts, (
            ("random effects", "estimate", "prediction_low", "prediction_high", "prediction_coverage"),
            ("equal weights", "equal_estimate", "equal_prediction_low", "equal_prediction_high",
             "equal_prediction_coverage")))
        slope = random_effects_slope(pooled_rows["difference"], pooled_rows["standard_error"],
                                     _log_classes(pooled_rows), confidence)
        plain = equal_weight_slope(pooled_rows["difference"], _log_classes(pooled_rows), confidence)
        facts.update({"slope_per_decade": slope["slope"], "slope_low": slope["low"], "slope_high": slope["high"],
                      "equal_slope": plain["slope"], "equal_slope_low": plain["low"],
                      "equal_slope_high": plain["high"],
                      "slope_configurations": int(pooled_rows["train_classes"].nunique())})
        facts["slope_read_by"], facts["slope_read"], facts["slope_read_low"], facts["slope_read_high"] = _read_by(
            facts, (("random effects", "slope_per_decade", "slope_low", "slope_high", "slope_coverage"),
                    ("equal weights", "equal_slope", "equal_slope_low", "equal_slope_high", "equal_slope_coverage")))
    return facts, coverage, weights


class Pooled(NamedTuple):
    """pooled_table's result: POOLED_COLUMNS per loss, the pooled intervals' simulated coverage (a `loss` column
    beside pooled_interval_coverage's) and each row's share of its loss's random-effects weight (NaN where left out)."""

    table: pd.DataFrame
    coverage: pd.DataFrame
    weights: pd.Series


def pooled_table(rows: pd.DataFrame, confidence: float) -> Pooled:
    """One row per searched loss (ArcFace first, then in the order the cells searched them), with its coverage and
    weights."""
    losses = list(dict.fromkeys(["arcface", *rows["loss"]]))
    table, coverages, weights = [], [], pd.Series(np.nan, index=rows.index)
    for loss in losses:
        if not (rows["loss"] == loss).any():
            continue
        facts, coverage, shares = pooled_loss(rows[rows["loss"] == loss], confidence)
        table.append(facts)
        weights.loc[shares.index] = shares
        if coverage is not None:
            coverages.append(coverage.assign(loss=loss))
    coverage = pd.concat(coverages, ignore_index=True) if coverages else pd.DataFrame(columns=["loss"])
    return Pooled(pd.DataFrame(table).reindex(columns=POOLED_COLUMNS), coverage, weights)


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
