"""Iterations to converge, run by run and against Fixed AdaCos: per run, the iterations to 95% and 99% of that run's
own best val score (from its learning curve, so no run is censored: every run reaches a share of its own best); per
study or benchmark cell, each method's mean log ratio to Fixed AdaCos paired by split and seed, with its standard
error; and what a ratio's interval says against the band of "as many iterations". The benchmark pools the log ratios
over data sources (study.benchmark.iterations); a study reads its own (`study_iterations`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.cell_difference import standard_error_floor
from study.analysis.common import REFERENCE_METHOD
from study.analysis.convergence import iterations_to_target

LEVELS = (0.95, 0.99)
# Equivalence band on the ratio of iterations, symmetric on the log scale the pooling works on: a method needing
# between 0.8× and 1.25× Fixed AdaCos's iterations needs "as many" (the usual bioequivalence band).
EQUIVALENCE_BAND = (0.8, 1.25)
# A table of ratios, one row per method and level, as the benchmark pools it and a study reads its own.
COLUMNS = ["method", "level", "median_iterations", "ratio", "ratio_low", "ratio_high", "prediction_low",
           "prediction_high", "sources", "cells", "equivalence", "still_improving_cells", "confidence"]


def iterations_to_own_best(curves: pd.DataFrame, levels=LEVELS) -> pd.DataFrame:
    """Per run of long-form learning curves (`method, split, seed, iteration, val`) and level, the first evaluated
    iteration whose val reaches level × the run's best val. A diverged run (no finite val at its end: plateau_table's
    rule) is left out. A run already there at iteration 0 is counted at the first positive evaluation, so that its
    log is defined (an upper bound, coarse like every reading on the log-spaced schedule). `previous`: the evaluation
    before it (no earlier than the first positive one), so the run got there somewhere in (previous, iterations]."""
    rows = []
    first_positive = curves.loc[curves["iteration"] > 0, "iteration"].min()
    for (method, split, seed), run in curves.groupby(["method", "split", "seed"], sort=False):
        run = run.sort_values("iteration", kind="stable")
        steps, values = run["iteration"].to_numpy(), run["val"].to_numpy(dtype=float)
        if not np.isfinite(values[-1]) or not np.nanmax(values) > 0:
            continue
        for level in levels:
            reached = float(max(iterations_to_target(steps, values, level * float(np.nanmax(values))),
                                first_positive))
            before = steps[steps < reached]
            rows.append({"method": method, "split": split, "seed": seed, "level": float(level), "iterations": reached,
                         "previous": float(max(before.max(), first_positive)) if before.size else reached})
    return pd.DataFrame(rows, columns=["method", "split", "seed", "level", "iterations", "previous"])


def cell_log_ratios(curves: pd.DataFrame, levels=LEVELS, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One cell's numbers per method and level: the median iterations over its runs, and log(method's iterations /
    Fixed AdaCos's) paired by split and seed with standard_error_floor's standard error and df (over splits, never
    below the seed noise); NaN log ratio for Fixed AdaCos itself or without a pair."""
    runs = iterations_to_own_best(curves, levels) if runs is None else runs  # `runs`: already counted
    rows = []
    for (method, level), group in runs.groupby(["method", "level"], sort=False):
        reference = runs[(runs["method"] == REFERENCE_METHOD) & (runs["level"] == level)]
        paired = group.merge(reference, on=["split", "seed"], suffixes=("", "_reference"))
        pooled = None
        if method != REFERENCE_METHOD and len(paired):
            logs = np.log(paired["iterations"]) - np.log(paired["iterations_reference"])
            pooled = standard_error_floor(paired[["split", "seed"]].assign(difference=logs))
        rows.append({"method": method, "level": level, "median_iterations": float(group["iterations"].median()),
                     "log_ratio": pooled.estimate if pooled else math.nan,
                     "standard_error": pooled.standard_error if pooled else math.nan,
                     "df": pooled.df if pooled else math.nan, "pairs": len(paired)})
    return pd.DataFrame(rows, columns=["method", "level", "median_iterations", "log_ratio", "standard_error", "df",
                                       "pairs"])


def equivalence(low: float, high: float, band=EQUIVALENCE_BAND) -> str:
    """What a ratio's interval says against the band, as meta.judgement reads a difference against its margin:
    'within' (inside the band), 'more' / 'fewer' (wholly beyond an edge), 'slightly more' / 'slightly fewer'
    (excludes 1, not the band), 'undetermined' (covers 1 and reaches beyond an edge, or no interval)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "undetermined"
    if band[0] <= low and high <= band[1]:
        return "within"
    if low > band[1] or high < band[0]:
        return "more" if low > band[1] else "fewer"
    return "slightly more" if low > 1 else "slightly fewer" if high < 1 else "undetermined"


def study_iterations(curves: pd.DataFrame, still_improving: dict[str, bool], confidence: float,
                     levels=LEVELS) -> pd.DataFrame:
    """One study's iterations in the benchmark's form (COLUMNS): per method and level, the median iterations over
    its runs and its ratio to Fixed AdaCos's (exp of the mean log ratio paired by split and seed), with an interval
    that holds both the class splits' spread and the evaluation schedule's coarseness: the t interval over splits of
    the smallest ratio the schedule allows (the method at its previous evaluation, Fixed AdaCos at its reached one)
    to that of the largest. No new-source prediction (one source). `still_improving`: per method, whether the
    plateau rule found it still improving (counted as the study's one cell)."""
    runs = iterations_to_own_best(curves, levels)
    rows = []
    for row in cell_log_ratios(curves, levels, runs).itertuples():
        low = high = math.nan
        if row.method != REFERENCE_METHOD:
            own = runs[(runs["method"] == row.method) & (runs["level"] == row.level)]
            reference = runs[(runs["method"] == REFERENCE_METHOD) & (runs["level"] == row.level)]
            paired = own.merge(reference, on=["split", "seed"], suffixes=("", "_reference"))
            if len(paired):
                low = _bound(paired, np.log(paired["previous"]) - np.log(paired["iterations_reference"]),
                             confidence, -1)
                high = _bound(paired, np.log(paired["iterations"]) - np.log(paired["previous_reference"]),
                              confidence, +1)
        rows.append({"method": row.method, "level": row.level, "median_iterations": row.median_iterations,
                     "ratio": 1.0 if row.method == REFERENCE_METHOD else math.exp(row.log_ratio),
                     "ratio_low": low, "ratio_high": high, "prediction_low": math.nan, "prediction_high": math.nan,
                     "sources": 1, "cells": 1, "equivalence": "reference" if row.method == REFERENCE_METHOD else
                     equivalence(low, high), "still_improving_cells": int(bool(still_improving.get(row.method))),
                     "confidence": confidence})
    return pd.DataFrame(rows, columns=COLUMNS)


def _bound(paired: pd.DataFrame, logs: pd.Series, confidence: float, side: int) -> float:
    """One end of a ratio's interval: the t interval over splits (standard_error_floor) of paired log ratios."""
    estimate = standard_error_floor(paired[["split", "seed"]].assign(difference=logs))
    if not (np.isfinite(estimate.df) and np.isfinite(estimate.standard_error)):
        return math.nan
    return math.exp(estimate.estimate + side * float(stats.t.ppf(0.5 + confidence / 2, estimate.df))
                    * estimate.standard_error)
