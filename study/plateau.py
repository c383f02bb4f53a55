"""The plateau rule of docs/analysis.md, declared before the runs it judges: whether a learning curve (val score
against iteration) has stopped improving, per run and per method. The report reads it to say whether the answer
compares converged models; the runs stage reads it to train a method's final runs longer until they do
(runs.plateau_cap).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# The plateau rule of docs/analysis.md, declared before the runs it judges: a run has converged when its best val
# score so far rose by less than this share over the second half of training.
PLATEAU_RISE = 0.01
# best_at_half, best_at_end: the best val score so far at half-way and at the end, mean over the method's runs;
# rise: (best_at_end − best_at_half) / |best_at_half|; converged: rise < PLATEAU_RISE; runs_converged: the runs that
# meet the rule each on their own; selected_iteration: the median iteration val selected (early stopping).
PLATEAU_COLUMNS = ["method", "runs", "runs_converged", "diverged", "half_iteration", "last_iteration", "best_at_half",
                   "best_at_end", "rise", "converged", "selected_iteration"]
# Per final run, what stopping at the plateau would have given: its last and stopping iterations, and the test score
# of the checkpoint val selects over the whole curve (what the run reported) and over the curve up to the stop.
STOPPED_COLUMNS = ["method", "split", "seed", "last_iteration", "stop_iteration", "test", "test_stopped"]


def aligned_curve(iterations, name: str, *curves) -> tuple[np.ndarray, ...]:
    """Iterations and curves as equal-length 1-D arrays, iterations non-decreasing."""
    steps = np.asarray(iterations)
    arrays = [np.asarray(curve, dtype=float) for curve in curves]
    if steps.ndim != 1 or any(array.shape != steps.shape for array in arrays):
        raise ValueError(f"{name}: iterations and curves must be one-dimensional and of equal length")
    if np.any(np.diff(steps) < 0):
        raise ValueError(f"{name}: iterations must be in non-decreasing order")
    return (steps, *arrays)


def best_so_far_at(iterations, scores, iteration: float) -> float:
    """The best score among the evaluations at or before `iteration` (NaN scores skipped; NaN when there are none)."""
    steps, values = aligned_curve(iterations, "best_so_far_at", scores)
    seen = values[(steps <= iteration) & np.isfinite(values)]
    return float(seen.max()) if seen.size else math.nan


def plateau_rise(iterations, scores) -> float:
    """The plateau rule's statistic for one learning curve: (best so far at the end − best so far at half of its
    last iteration) / |best so far at half-way|. Under PLATEAU_RISE the run has converged, whether val still rose
    a little or peaked and fell (overfitting: early stopping keeps the peak)."""
    steps, values = aligned_curve(iterations, "plateau_rise", scores)
    if steps.size == 0:
        return math.nan
    half, end = best_so_far_at(steps, values, steps[-1] / 2), best_so_far_at(steps, values, steps[-1])
    return (end - half) / abs(half) if math.isfinite(half) and half != 0 else math.nan


def plateau_table(curves: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Per method, the plateau rule on its learning curves (`method, split, seed, iteration, val`): applied to the
    mean over runs of the best val so far at half-way and at the end (one noisy run does not decide it), with how many
    runs meet it on their own. A run that diverged (no finite val at its end) is counted, never averaged."""
    rows = []
    for method in methods:
        runs = curves[curves["method"] == method]
        halves, ends, rises, selected, last, diverged = [], [], [], [], [], 0
        for _, run in runs.groupby(["split", "seed"], sort=True):
            run = run.sort_values("iteration", kind="stable")
            steps, values = run["iteration"].to_numpy(dtype=float), run["val"].to_numpy(dtype=float)
            if not np.isfinite(values[-1]):
                diverged += 1
                continue
            halves.append(best_so_far_at(steps, values, steps[-1] / 2))
            ends.append(best_so_far_at(steps, values, steps[-1]))
            rises.append(plateau_rise(steps, values))
            selected.append(steps[np.nanargmax(values)])
            last.append(steps[-1])
        if not ends:
            continue
        half, end = float(np.mean(halves)), float(np.mean(ends))
        rise = (end - half) / abs(half) if half else math.nan
        rows.append({"method": method, "runs": len(ends) + diverged,
                     "runs_converged": int(np.sum(np.asarray(rises) < PLATEAU_RISE)), "diverged": diverged,
                     "half_iteration": float(np.median(last)) / 2, "last_iteration": float(np.median(last)),
                     "best_at_half": half, "best_at_end": end, "rise": rise, "converged": bool(rise < PLATEAU_RISE),
                     "selected_iteration": float(np.median(selected))})
    return pd.DataFrame(rows, columns=PLATEAU_COLUMNS)


def plateau_stop(iterations, scores, earliest: float = 0.0) -> int:
    """Where a run would stop had it read the plateau rule as it trained: the index of the first evaluation, at or
    after iteration `earliest`, at which plateau_rise on the curve so far is under PLATEAU_RISE; the last evaluation
    where none is. The rule reads only what was evaluated by then, so the stop never looks ahead."""
    steps, values = aligned_curve(iterations, "plateau_stop", scores)
    for index in range(1, steps.size):
        if steps[index] >= earliest and plateau_rise(steps[:index + 1], values[:index + 1]) < PLATEAU_RISE:
            return index
    return steps.size - 1


def stopped_runs(curves: pd.DataFrame, earliest_share: float) -> pd.DataFrame:
    """Every final run of a cell's learning curves (`method, split, seed, iteration, val, test`) stopped by
    plateau_stop, never before `earliest_share` of its last iteration: the iterations it would have trained and the
    test score of the checkpoint val selects among the evaluations up to the stop, beside the whole curve's."""
    if not 0 <= earliest_share <= 1:
        raise ValueError(f"earliest_share must lie in [0, 1], got {earliest_share}")
    rows = []
    for (method, split, seed), run in curves.groupby(["method", "split", "seed"], sort=False):
        run = run.sort_values("iteration", kind="stable")
        steps, values = run["iteration"].to_numpy(dtype=float), run["val"].to_numpy(dtype=float)
        tests = run["test"].to_numpy(dtype=float)
        if not np.isfinite(values).any():
            continue  # a run that never scored: nothing to select, diverged runs are counted by plateau_table
        stop = plateau_stop(steps, values, earliest_share * steps[-1])
        rows.append({"method": method, "split": split, "seed": seed, "last_iteration": steps[-1],
                     "stop_iteration": steps[stop], "test": tests[np.nanargmax(values)],
                     "test_stopped": tests[np.nanargmax(values[:stop + 1])]})
    return pd.DataFrame(rows, columns=STOPPED_COLUMNS)


def longer_factors(cap: int) -> list[int]:
    """The lengths, as multiples of the declared one, that runs missing the plateau rule train again at: 2, 4, ...
    up to `cap` (runs.plateau_cap)."""
    return [2 ** power for power in range(1, cap.bit_length()) if 2 ** power <= cap]
