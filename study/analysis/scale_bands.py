"""Where a margin loss's scale stalls training, read off searches that already ran: every trial of every cell, by its
s in units of AdaCos's s_f = √2·ln(C − 1) at the cell's training class count.

A trial has stalled when its val score ended below STALLED × the best val of its class split's search in its cell:
not merely worse than the best, but most of what the model learns at a good scale lost (a model stuck near chance
reads so). A band's share of stalled trials is a rate over the trials in it, with its Wilson interval; trials of one
cell share a data set, so the interval is a guide, not a test.
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
            interval = stats.binomtest(stalled, count).proportion_ci(confidence, method="wilson")
            bounds = (float(interval.low), float(interval.high))
        else:
            bounds = (math.nan, math.nan)
        rows.append({"low": low, "high": high, "trials": count, "cells": int(trials.loc[inside, "cell"].nunique()),
                     "stalled": stalled, "stalled_share": stalled / count if count else math.nan,
                     "stalled_low": bounds[0], "stalled_high": bounds[1],
                     "median_share_of_best": float(share[inside].median()) if count else math.nan})
    return pd.DataFrame(rows, columns=COLUMNS)
