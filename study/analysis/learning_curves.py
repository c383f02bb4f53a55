"""Learning curves of the final runs: val and test objective against iterations, one row per run and evaluation, and
a method's difference to Fixed AdaCos along them with the interval a cell's final difference gets, and where that
difference changes sign for good (the crossover), bracketed by where each side is significantly ahead."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis.common import REFERENCE_METHOD
from study.analysis.cell_difference import standard_error_floor

LEARNING_CURVE_COLUMNS = ["method", "split", "seed", "iteration", "val", "test"]
DIFFERENCE_CURVE_COLUMNS = ["method", "iteration", "pairs", "difference", "low", "high", "df"]
# crossover: the first evaluation of the final stretch where the mean difference keeps the sign it ends with (NaN when
# it never changes sign); low: the last evaluation before it at which the other side was significantly ahead (the
# crossover lies after it); high: the first evaluation from which the side ending ahead is significantly ahead to the
# end (NaN: not significantly ahead at the end). ahead_at_end: "method", "reference" or "neither" (by the interval).
CROSSOVER_COLUMNS = ["method", "ahead_at_end", "crossover", "low", "high", "first_iteration", "last_iteration",
                     "difference_at_end", "low_at_end", "high_at_end"]


def learning_curves_table(history: pd.DataFrame, objective: str) -> pd.DataFrame:
    """The long-form learning curves (`method, split, seed, iteration, val, test`) of the final runs' histories: val
    is the objective the run selected on, test the same objective on the test split (NaN for runs recorded before
    the test curve was)."""
    test = f"test_{objective}"
    frame = history.assign(split=history["split"] if "split" in history else 0)
    curves = pd.DataFrame({"method": frame["method"], "split": frame["split"].astype(int),
                           "seed": frame["seed"].astype(int), "iteration": frame["iteration"].astype(int),
                           "val": pd.to_numeric(frame.get(objective), errors="coerce"),
                           "test": pd.to_numeric(frame[test], errors="coerce") if test in frame else math.nan})
    return curves.sort_values(["method", "split", "seed", "iteration"], kind="stable").reset_index(drop=True)


def difference_curve(curves: pd.DataFrame, method: str, score: str = "test", confidence: float = 0.95,
                     reference: str = REFERENCE_METHOD) -> pd.DataFrame:
    """`method` − `reference` on `score` at every iteration both were evaluated at, paired by split and seed, with
    `standard_error_floor`'s interval (the one a cell's final difference gets: over splits, never below the seed
    noise)."""
    pivot = curves.pivot_table(index=["iteration", "split", "seed"], columns="method", values=score)
    if method not in pivot or reference not in pivot:
        return pd.DataFrame(columns=DIFFERENCE_CURVE_COLUMNS)
    paired = (pivot[method] - pivot[reference]).dropna().rename("difference").reset_index()
    rows = []
    for iteration, pairs in paired.groupby("iteration", sort=True):
        result = standard_error_floor(pairs[["split", "seed", "difference"]], confidence)
        rows.append({"method": method, "iteration": int(iteration), "pairs": len(pairs),
                     "difference": result.estimate, "low": result.low, "high": result.high, "df": result.df})
    return pd.DataFrame(rows, columns=DIFFERENCE_CURVE_COLUMNS)


def crossover(difference: pd.DataFrame) -> dict:
    """Where `difference_curve`'s mean changes sign for good, bracketed by pointwise intervals: after the last
    evaluation where the side that ends behind was significantly ahead, and no later than the first evaluation from
    which the side that ends ahead is significantly ahead to the end. The bracket reads pointwise 95% intervals, one
    per evaluation: it says where the evidence turns, not a simultaneous band."""
    curve = difference.sort_values("iteration")
    steps = curve["iteration"].to_numpy(dtype=float)
    mean, low, high = (curve[c].to_numpy(dtype=float) for c in ("difference", "low", "high"))
    row = {"method": curve["method"].iloc[0] if len(curve) else None, "ahead_at_end": "neither",
           "crossover": math.nan, "low": math.nan, "high": math.nan,
           "first_iteration": steps[0] if steps.size else math.nan,
           "last_iteration": steps[-1] if steps.size else math.nan,
           "difference_at_end": mean[-1] if steps.size else math.nan,
           "low_at_end": low[-1] if steps.size else math.nan, "high_at_end": high[-1] if steps.size else math.nan}
    if not steps.size or not np.isfinite(mean[-1]) or mean[-1] == 0:
        return row
    sign = np.sign(mean[-1])
    keeps = np.sign(mean) == sign
    breaks = np.flatnonzero(~keeps)
    if breaks.size:  # the mean was on the other side before: a crossover
        row["crossover"] = steps[breaks[-1] + 1]
        other_side_significant = np.flatnonzero((high < 0) if sign > 0 else (low > 0))
        row["low"] = steps[other_side_significant[-1]] if other_side_significant.size else steps[0]
    significant = (low > 0) if sign > 0 else (high < 0)
    if significant[-1]:
        fails = np.flatnonzero(~significant)
        row["high"] = steps[fails[-1] + 1] if fails.size else steps[0]
        row["ahead_at_end"] = "method" if sign > 0 else "reference"
    return row


def crossover_table(curves: pd.DataFrame, adacos_methods, arcface_methods, score: str = "test",
                    confidence: float = 0.95) -> pd.DataFrame:
    """For every AdaCos × ArcFace pair with curves: `crossover` of ArcFace − AdaCos along training, and each one's
    mean score at the last evaluation (`adacos_at_end`, `arcface_at_end`)."""
    rows = []
    last = curves[curves["iteration"] == curves["iteration"].max()].groupby("method")[score].mean()
    for adacos in adacos_methods:
        for arcface in arcface_methods:
            curve = difference_curve(curves, arcface, score, confidence, reference=adacos)
            if len(curve):
                rows.append({"adacos": adacos, "arcface": arcface, **crossover(curve),
                             "adacos_at_end": last.get(adacos, math.nan), "arcface_at_end": last.get(arcface, math.nan)})
    return pd.DataFrame(rows, columns=["adacos", "arcface", *CROSSOVER_COLUMNS, "adacos_at_end", "arcface_at_end"])
