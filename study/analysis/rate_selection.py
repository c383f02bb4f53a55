"""How far an untuned method's reported score is flattered by the learning rate val chose among its own runs.

A hyperparameter-free method trains its seeds at every rate of train.learning_rates and reports the very runs whose
mean val score chose the rate (study.learning_rates.choose_rate); a tuned loss's selected (s, m) is retrained at
fresh seeds. Seed noise that lifted a rate's val lifts its test too where the two are correlated, so the untuned
side carries a winner's-curse bias the tuned side does not. Its size, per class split, is

    E[reported test mean − the chosen rate's test at fresh seeds] = β · E[val noise of the chosen rate's mean]

with β = cov(test, val) / var(val) over seeds (the seed noise taken as jointly normal). The chosen rate's val noise
is largest when every rate ties on val, where it is E[max of K standard normals] · σ_val / √n for K rates and n
seeds, so

    bias ≤ cov(test, val) / σ_val · E[max of K] / √n,

measured from the runs a cell keeps (the chosen rate's n seeds per split) and zero where the covariance is not
positive. It is an upper bound: where val separated the rates, less noise rode on the choice.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.statistics import expected_maximum

VAL_SCORE = "val_score"


def seed_covariance(runs: pd.DataFrame, metric: str) -> dict:
    """One method's seed noise from its runs (split, seed, val_score, `metric`): the within-split covariance of test
    with val, val's variance and its degrees of freedom, pooled over the splits with two or more finite runs."""
    finite = runs[np.isfinite(runs[VAL_SCORE].astype(float)) & np.isfinite(runs[metric].astype(float))]
    val = finite[VAL_SCORE].astype(float)
    test = finite[metric].astype(float)
    split = finite["split"] if "split" in finite else pd.Series(0, index=finite.index)
    runs_in_split = split.map(split.value_counts())
    measured = runs_in_split >= 2  # a split with one run measures no noise
    val_deviation = (val - val.groupby(split).transform("mean"))[measured].to_numpy()
    test_deviation = (test - test.groupby(split).transform("mean"))[measured].to_numpy()
    cross = float(np.sum(val_deviation * test_deviation))
    squares = float(np.sum(val_deviation ** 2))
    df = int(measured.sum() - split[measured].nunique())
    if df == 0:
        return {"covariance": math.nan, "val_variance": math.nan, "df": 0}
    return {"covariance": cross / df, "val_variance": squares / df, "df": df}


def selection_bias_bound(runs: pd.DataFrame, metric: str, rates: int) -> float:
    """The most by which one untuned method's reported mean `metric` exceeds its chosen rates' score at fresh seeds,
    in the metric's units (see the module's docstring): 0 where val chose among one rate or the seed noise of test
    does not rise with val's; NaN where no split has two runs to measure the noise from."""
    if rates <= 1:
        return 0.0
    noise = seed_covariance(runs, metric)
    if noise["df"] == 0:
        return math.nan
    if noise["covariance"] <= 0 or noise["val_variance"] <= 0:
        return 0.0
    seeds = int(runs.groupby("split").size().median()) if "split" in runs else len(runs)
    return noise["covariance"] / math.sqrt(noise["val_variance"]) * expected_maximum(rates) / math.sqrt(seeds)
