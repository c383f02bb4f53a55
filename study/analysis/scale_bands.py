"""Where a margin loss's scale stalls training, read off searches that already ran: every trial of every cell, by its
s in units of AdaCos's s_f = √2·ln(C − 1) at the cell's training class count.

A trial has stalled when its val score ended below STALLED × the best val of its class split's search in its cell:
not merely worse than the best, but most of what the model learns at a good scale lost (a model stuck near chance
reads so). A band's share of stalled trials is a rate over the trials in it. Trials of one cell share a data set and
stall together, so its interval is the wider of two: Wilson's on the effective number of trials (the trials over
Kish's design effect 1 + (n₀ − 1)·ρ, ρ the within-cell correlation of stalls estimated from the band's own cells)
and the cluster-robust t interval over cells. In simulated benchmarks of the real cells' trial counts, with each cell's
stall rate drawn at the band's own ρ (0 to 0.84), at 0.2 or at 0, it held the rate in 93.5–98.1%
(benchmarks/results/scale_bands_coverage.csv; the 44–75% that simulation once reported at the bands' own ρ came from
its worlds, which read a cell whose band trials all stalled against their own best and so counted none of them).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

STALLED = 0.5  # of the best val of the trial's class split in its cell
BANDS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, math.inf)  # edges, in s / s_f
COLUMNS = ["low", "high", "trials", "cells", "stalled", "stalled_share", "stalled_low", "stalled_high",
           "median_share_of_best"]


def within_cell_correlation(trials: np.ndarray, stalled: np.ndarray) -> tuple[float, float]:
    """(ρ, n₀): the method-of-moments intraclass correlation of stalls within cells (0 where cells vary no more than
    chance allows, at most 1) and the cells' effective size n₀, from each cell's trials and stalled trials."""
    trials, stalled = np.asarray(trials, float), np.asarray(stalled, float)
    total, cells = trials.sum(), len(trials)
    share = stalled.sum() / total if total else 0.0
    if cells < 2 or share in (0.0, 1.0):
        return 0.0, 1.0
    n0 = (total - (trials ** 2).sum() / total) / (cells - 1)
    between = ((stalled - trials * share) ** 2 / trials).sum() / (cells - 1)  # ≈ p(1 − p)(1 + (n₀ − 1)ρ)
    return float(min(1.0, max(0.0, (between / (share * (1 - share)) - 1) / max(n0 - 1, 1e-9)))), float(n0)


def wilson(share: float, count: float, confidence: float) -> tuple[float, float]:
    """Wilson's interval for a share observed over `count` (possibly effective, not whole) trials."""
    z = stats.norm.ppf(0.5 + confidence / 2)
    centre = (share + z * z / (2 * count)) / (1 + z * z / count)
    half = z * math.sqrt(share * (1 - share) / count + z * z / (4 * count * count)) / (1 + z * z / count)
    return max(0.0, centre - half), min(1.0, centre + half)


def cell_robust(trials: np.ndarray, stalled: np.ndarray, confidence: float) -> tuple[float, float]:
    """The share's t interval over cells on C − 1 df with the cluster-robust (CR1) standard error of the ratio
    Σ stalled / Σ trials, clipped to [0, 1]: what holds where stalls cluster more than ρ estimated from few shows."""
    trials, stalled = np.asarray(trials, float), np.asarray(stalled, float)
    cells, total = len(trials), trials.sum()
    share = stalled.sum() / total
    if cells < 2:
        return share, share
    variance = cells / (cells - 1) * ((stalled - share * trials) ** 2).sum() / total ** 2
    half = stats.t.ppf(0.5 + confidence / 2, cells - 1) * math.sqrt(variance)
    return max(0.0, share - half), min(1.0, share + half)


def scale_bands(trials: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per band of s / s_f (BANDS): how many trials, of how many cells, and the share that stalled, with its Wilson
    interval, and the median val as a share of the split's best. `trials`: one row per finished trial, with `cell`,
    `split`, `s`, `s_f` (at the cell's training classes) and `value` (its val score)."""
    trials = trials[np.isfinite(trials["value"].astype(float)) & (trials["s_f"].astype(float) > 0)]
    best = trials.groupby(["cell", "split"])["value"].transform("max").astype(float)
    share = trials["value"].astype(float) / best
    ratio = trials["s"].astype(float) / trials["s_f"].astype(float)
    rows = []
    for low, high in zip(BANDS[:-1], BANDS[1:]):
        inside = (ratio > low) & (ratio <= high)
        count, stalled = int(inside.sum()), int((share[inside] < STALLED).sum())
        if count:
            per_cell = (share[inside] < STALLED).groupby(trials.loc[inside, "cell"]).agg(["size", "sum"])
            rho, n0 = within_cell_correlation(per_cell["size"], per_cell["sum"])
            effective = wilson(stalled / count, count / (1 + (n0 - 1) * rho), confidence)
            robust = cell_robust(per_cell["size"], per_cell["sum"], confidence)
            bounds = (min(effective[0], robust[0]), max(effective[1], robust[1]))
        else:
            bounds = (math.nan, math.nan)
        rows.append({"low": low, "high": high, "trials": count, "cells": int(trials.loc[inside, "cell"].nunique()),
                     "stalled": stalled, "stalled_share": stalled / count if count else math.nan,
                     "stalled_low": bounds[0], "stalled_high": bounds[1],
                     "median_share_of_best": float(share[inside].median()) if count else math.nan})
    return pd.DataFrame(rows, columns=COLUMNS)
