"""Where the variance a user meets comes from: the class split, the search, the training seed.

In the spirit of Bouthillier et al. (MLSys 2021): the tuned − Fixed AdaCos difference one user gets is one draw
of a split, one search and one seed. The seed's share is the within-split variance of the paired differences;
the search's is the variance, over searches of the trials run, of the selected trial's test score less one
training's seed noise (what retraining the selected values at fresh seeds does not average away); the split's is
what the between-split variance of the mean difference holds beyond those two. Each is a moment estimate,
truncated at zero, and a point estimate: no interval is given (with a few splits the split/seed ratio's interval
spans from 0 to beyond 1); with one split the split's share is not measured.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis.tuning import _order_statistic_weights, _paired_scores, _ranked_reported

VARIANCE_SOURCES = ("split", "search", "seed")


def selected_trial_variance(selection_scores, reported_scores) -> float:
    """Variance over searches of N trials (drawn with replacement from the N given) of the selected trial's
    reported score: Σ_i w(i)·t_(i)² − (Σ_i w(i)·t_(i))², w the with-replacement order-statistic weights at n = N."""
    selection, reported = _paired_scores(selection_scores, reported_scores)
    weights = _order_statistic_weights(selection.size, replacement=True)[-1]
    ranked = _ranked_reported(selection, reported)
    return float(weights @ ranked ** 2 - (weights @ ranked) ** 2)


def search_variance(selection_by_split, reported_by_split, retrained_seed_variance: float) -> float:
    """The search's share as a moment estimate: the selected trial's variance over searches, averaged over splits,
    less the seed noise of one training (the retrained runs' within-split variance). It can fall below zero;
    variance_sources truncates it and says so."""
    selected = np.mean([selected_trial_variance(s, r) for s, r in zip(selection_by_split, reported_by_split)])
    return float(selected - retrained_seed_variance) if np.isfinite(retrained_seed_variance) else math.nan


def variance_sources(pairs: pd.DataFrame, search: float = math.nan) -> dict:
    """Split, search and seed variance of one user's tuned − Fixed AdaCos difference, and the dominant source.

    `pairs` holds split, seed and difference per paired run (study.analysis.comparison); `search` is
    `search_variance`'s estimate, or NaN where the search's variance was not measured. Each share is a point estimate
    with no interval (moment estimates from a few splits: its coverage is not checked, and none is claimed); the
    split's and the search's are truncated at zero, and `truncated` names those whose estimate fell below it.
    """
    groups = pairs.groupby("split")["difference"]
    within = groups.var(ddof=1).dropna()
    seed = float(within.mean()) if len(within) else math.nan
    means, sizes = groups.mean(), groups.size()
    raw = {"search": search, "split": math.nan}
    search = max(0.0, search) if np.isfinite(search) else math.nan
    split = math.nan
    if len(means) > 1 and np.isfinite(seed):
        between = float(means.var(ddof=1)) - seed / float(np.mean(sizes))  # the split means' variance beyond seed noise
        raw["split"] = between - (search if np.isfinite(search) else 0.0)
        split = max(0.0, raw["split"])
    components = {"split": split, "search": search, "seed": seed}
    measured = {source: value for source, value in components.items() if np.isfinite(value)}
    total = sum(measured.values())
    return {**components, "total": total if measured else math.nan,
            "shares": {source: value / total if total > 0 else math.nan for source, value in measured.items()},
            "truncated": [source for source in VARIANCE_SOURCES if source in raw and raw[source] < 0],
            "dominant": max(measured, key=measured.get) if total > 0 else None,
            "splits": int(len(means)), "seeds": int(np.mean(sizes)) if len(sizes) else 0}
