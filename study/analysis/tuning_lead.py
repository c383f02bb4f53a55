"""The lead of a search over as many trainings of Fixed AdaCos (SPEC, "Tuning cost"), from one study's or benchmark
cell's tuning curves (tables/tuning_curves.csv): at n, the val-selected ArcFace trial's expected test score among n
trials minus the best of n Fixed AdaCos runs picked by val (the budget-matched control), in a share of Fixed
AdaCos's test mean; and the n at which a lead crosses zero and a margin, read with the interval its band gives. The
benchmark pools the cells' leads over data sources (study.benchmark.tuning_cost); a study reads its own
(`study_tuning_cost`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from study.analysis.pooling import standard_error_from_interval
from study.analysis.tuning import MAX_STUDENTISED_DF, first_reaching
from study.statistics import expected_maximum

LOSS, REFERENCE = "arcface", "fixed_adacos"
COLUMNS = ["n", "mean", "low", "high", "prediction_low", "prediction_high", "sources", "cells", "control_measured"]
# How the control is read beyond the runs a cell trained per split (R): "normal" takes (val, test) bivariate normal
# over seeds, so that the best of n by val is μ + ρσ·eₙ (eₙ the expected maximum of n standard normals) and the
# measured rise c(R) − c(1) fixes ρσ; "flat" holds c(R), which can only flatter the search.
BEYOND_SEEDS = ("normal", "flat")


def expected_maximum_of_normals(count: int) -> np.ndarray:
    """eₙ = E[max of n independent N(0, 1)] for n = 1…count (e₂ = 1/√π)."""
    return np.array([expected_maximum(n) for n in range(1, count + 1)])


def control_curve(measured, length: int, beyond_seeds: str = "normal") -> np.ndarray:
    """The best of n Fixed AdaCos runs by val, n = 1…length: the cell's measured curve up to its R runs, beyond them
    c(n) = c(1) + (c(R) − c(1))·eₙ/e_R ("normal", exact for bivariate-normal seed scores) or c(R) ("flat")."""
    if beyond_seeds not in BEYOND_SEEDS:
        raise ValueError(f"beyond_seeds must be one of {BEYOND_SEEDS}, got {beyond_seeds!r}")
    measured = np.asarray(measured, dtype=float)
    runs = measured.size
    if runs >= length:
        return measured[:length]
    e = expected_maximum_of_normals(length)
    rise = measured[-1] - measured[0] if beyond_seeds == "normal" and runs > 1 else 0.0
    beyond = measured[-1] + rise * (e[runs:] - e[runs - 1]) / (e[runs - 1] if runs > 1 else 1.0)
    return np.concatenate([measured, beyond])


def curves_lead(curves: pd.DataFrame, reference_mean: float, confidence: float, beyond_seeds: str = "normal",
                where: str = "tuning_curves.csv") -> pd.DataFrame:
    """The lead at n = 1…the trials per split of tuning curves (`method, kind, n, expected_test, low, high`), in a
    share of Fixed AdaCos's test mean (`reference_mean`), with its standard error where the curves hold a band on the
    search (the band's t on at most MAX_STUDENTISED_DF df, the control's seed noise not in it) and 0 where they hold
    none; the band's own ends less the control (`low`, `high`); and whether the control was measured at n."""
    search = curves[(curves["method"] == LOSS) & (curves["kind"] == "search")].sort_values("n")
    control = curves[(curves["method"] == REFERENCE) & (curves["kind"] == "control")].sort_values("n")
    if search.empty or control.empty:
        raise ValueError(f"{where} holds no {LOSS} search or {REFERENCE} control curve")
    length = len(search)
    best_of_n = control_curve(control["expected_test"], length, beyond_seeds)
    lead = search["expected_test"].to_numpy(float) - best_of_n
    se = [standard_error_from_interval(low, high, confidence, MAX_STUDENTISED_DF)
          for low, high in zip(search["low"].astype(float), search["high"].astype(float))]
    return pd.DataFrame({"n": np.arange(1, length + 1), "lead": lead / reference_mean,
                         "se": np.nan_to_num(np.asarray(se, float) / reference_mean, nan=0.0),
                         "low": (search["low"].to_numpy(float) - best_of_n) / reference_mean,
                         "high": (search["high"].to_numpy(float) - best_of_n) / reference_mean,
                         "measured": np.arange(1, length + 1) <= len(control)})


def study_tuning_cost(curves: pd.DataFrame, reference_mean: float, confidence: float) -> pd.DataFrame:
    """One study's tuning cost in the benchmark's form (COLUMNS): per n, the lead with its band (the search curve's
    interval less the control; open where the curve has none), no new-source prediction (one source)."""
    lead = curves_lead(curves, reference_mean, confidence)
    return pd.DataFrame({"n": lead["n"], "mean": lead["lead"], "low": lead["low"], "high": lead["high"],
                         "prediction_low": np.nan, "prediction_high": np.nan, "sources": 1, "cells": 1,
                         "control_measured": lead["measured"]}, columns=COLUMNS)


def _first(values: np.ndarray, target: float) -> int | None:
    found = first_reaching(values, target)[0]
    return int(found) if np.isfinite(found) else None


def crossings(table: pd.DataFrame, margin: float) -> dict:
    """The first n where the (pooled) mean reaches zero and the margin, each with an interval by inverting the CI:
    from the first n whose upper bound reaches it to the first whose lower bound does (None: not within N)."""
    facts = {"trials": int(table["n"].max()) if len(table) else 0, "margin_value": float(margin)}
    for name, target in (("zero", 0.0), ("margin", float(margin))):
        facts[name] = {key: _first(table[column].to_numpy(float), target) if len(table) else None
                       for key, column in (("n", "mean"), ("low", "high"), ("high", "low"))}
    return facts
