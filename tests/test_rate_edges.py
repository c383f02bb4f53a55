"""The learning-rate grid's edges (study/benchmark/rate_edges.py): the runs beyond an edge, val's choice between the
edge and beyond it, and the differences formed again, each against hand-computed tables; the converged headline
pooled again, against the committed aggregate."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import differences_to_fixed_adacos
from study.analysis.headline import headline_cells
from study.benchmark.meta import headline_with_differences
from study.benchmark.rate_edges import beyond_edges, rechoose

REPO = Path(__file__).resolve().parents[1]
GRID = [0.003, 0.009, 0.027]


def runs(chosen: dict, val: dict, test: dict) -> pd.DataFrame:
    """Two seeds per (method, split) at the chosen rate; val and test scores given per (method, split, seed)."""
    return pd.DataFrame([{"method": method, "split": split, "lr": lr, "seed": seed,
                          "val_score": val[method][split][seed], "test_map_at_r": test[method][split][seed]}
                         for method, rates in chosen.items() for split, lr in enumerate(rates) for seed in (0, 1)])


def test_the_runs_beyond_an_edge_take_the_grids_own_step_outwards():
    chosen = {"fixed_adacos": [0.027, 0.009, 0.027], "softmax": [0.003, 0.009, 0.009],
              "arcface_tuned": [0.0097, 0.0165, 0.027]}  # a searched rate can land on a grid value: still one edge
    table = pd.DataFrame([{"method": m, "split": k, "lr": lr, "seed": s}
                          for m, rates in chosen.items() for k, lr in enumerate(rates) for s in (0, 1)])
    edges = beyond_edges(table, GRID)
    assert list(edges.itertuples(index=False, name=None)) == [
        ("fixed_adacos", 0, 0.027, 0.081), ("fixed_adacos", 2, 0.027, 0.081), ("softmax", 0, 0.003, 0.001),
        ("arcface_tuned", 2, 0.027, 0.081)]
    assert beyond_edges(table, [0.003]).empty and beyond_edges(table, None).empty
    assert beyond_edges(table, [0.001, 0.01]).empty  # no method chose either end of that grid


def test_val_chooses_beyond_the_edge_only_with_a_better_mean_over_a_whole_set_of_seeds():
    chosen = {"fixed_adacos": [0.027, 0.027, 0.027], "arcface_tuned": [0.01, 0.02, 0.015]}
    val = {"fixed_adacos": [[0.50, 0.52], [0.60, 0.60], [0.40, 0.44]], "arcface_tuned": [[0.5, 0.5]] * 3}
    test = {"fixed_adacos": [[0.48, 0.50], [0.58, 0.62], [0.41, 0.43]],
            "arcface_tuned": [[0.53, 0.55], [0.60, 0.64], [0.45, 0.47]]}
    scores = runs(chosen, val, test).assign(test_roc_auc=0.9)  # a metric the runs beyond do not score
    beyond = pd.DataFrame([
        # split 0: mean val 0.53 > 0.51, chosen; split 1: 0.59 < 0.60, not; split 2: only seed 0 ran, so not compared
        {"method": "fixed_adacos", "split": 0, "lr": 0.081, "seed": 0, "val_score": 0.52, "test_map_at_r": 0.54},
        {"method": "fixed_adacos", "split": 0, "lr": 0.081, "seed": 1, "val_score": 0.54, "test_map_at_r": 0.56},
        {"method": "fixed_adacos", "split": 1, "lr": 0.081, "seed": 0, "val_score": 0.62, "test_map_at_r": 0.70},
        {"method": "fixed_adacos", "split": 1, "lr": 0.081, "seed": 1, "val_score": 0.56, "test_map_at_r": 0.70},
        {"method": "fixed_adacos", "split": 2, "lr": 0.081, "seed": 0, "val_score": 0.90, "test_map_at_r": 0.90}])
    adjusted, choices = rechoose(scores, beyond, centre=0.003)
    assert choices["chose_beyond"].tolist() == [True, False, False]
    assert choices["beyond_val"].iloc[0] == pytest.approx(0.53) and math.isnan(choices["beyond_val"].iloc[2])
    fixed = adjusted[adjusted["method"] == "fixed_adacos"].sort_values(["split", "seed"])
    assert fixed["test_map_at_r"].tolist() == [0.54, 0.56, 0.58, 0.62, 0.41, 0.43]
    assert fixed["lr"].tolist() == [0.081, 0.081, 0.027, 0.027, 0.027, 0.027]
    assert fixed["test_roc_auc"].isna().tolist() == [True, True, False, False, False, False]
    # A diverged run beyond the edge (NaN val) leaves that rate incomplete: the edge stays, whatever the other seed.
    diverged = beyond.assign(val_score=[np.nan, 0.99, 0.62, 0.56, 0.90])
    assert not rechoose(scores, diverged, centre=0.003)[1]["chose_beyond"].iloc[0]

    # The differences formed again: per split the mean over seeds of tuned − fixed, then the mean over splits.
    per_split = [np.mean([0.53 - 0.54, 0.55 - 0.56]), np.mean([0.60 - 0.58, 0.64 - 0.62]),
                 np.mean([0.45 - 0.41, 0.47 - 0.43])]
    row = differences_to_fixed_adacos(adjusted, "test_map_at_r", 0.95).set_index("method").loc["arcface_tuned"]
    assert row["difference"] == pytest.approx(np.mean(per_split))
    reference = np.mean([0.54, 0.56, 0.58, 0.62, 0.41, 0.43])
    assert row["reference_test_mean"] == pytest.approx(reference)
    assert row["relative"] == pytest.approx(np.mean(per_split) / reference)
    t = np.std(per_split, ddof=1) / np.sqrt(3)  # the splits' own SE; the seeds' noise within splits is smaller here
    assert row["standard_error"] >= t - 1e-12


def test_the_headline_pooled_again_without_a_change_is_the_aggregates_own():
    """With every checked cell's own differences unchanged, the pool is the committed report's converged headline,
    also where it reads a method's longer runs (their difference and standard error kept)."""
    cells = pd.read_csv(REPO / "reports" / "benchmark" / "tables" / "cells.csv")
    pooled = pd.read_csv(REPO / "reports" / "benchmark" / "tables" / "pooled.csv").set_index("method")
    lr_cells = cells[cells["rates"] > 1]
    assert (lr_cells["length_factor"] > 1).any() and (lr_cells["own_relative"] != lr_cells["relative"]).any()
    # The longer runs keep their own standard error, whatever a reading of the cell's runs gives.
    unchanged = lr_cells.assign(relative_after=lr_cells["own_relative"],
                                relative_se_after=lr_cells["relative_se"].where(lr_cells["length_factor"] == 1, 0.5))
    table, used = headline_with_differences(cells, unchanged)
    assert used and set(used) <= set(lr_cells["cell"])
    for row in table.itertuples():
        if not math.isnan(pooled.loc[row.method, "mean"]):
            assert (row.mean, row.prediction_low, row.prediction_high) == pytest.approx(
                (pooled.loc[row.method, "mean"], pooled.loc[row.method, "prediction_low"],
                 pooled.loc[row.method, "prediction_high"]))
            assert (row.mean_after, row.prediction_high_after) == pytest.approx((row.mean, row.prediction_high))
    # The own difference of a source's one headline cell moved by +10 points moves the mean over sources by 10 points
    # / sources, whether the headline reads the method's own runs (tuned ArcFace) or its longer ones (ArcFace at its
    # defaults).
    headline = headline_cells(cells)
    for method, factor in (("arcface_tuned", 1), ("arcface_default", 2)):
        alone = headline[headline["method"] == method].groupby("source").filter(lambda source: len(source) == 1)
        cell = alone.loc[alone["length_factor"] == factor, "cell"].iloc[0]
        shifted = unchanged.assign(relative_after=unchanged["relative_after"] + 0.10 * (
            (unchanged["cell"] == cell) & (unchanged["method"] == method)))
        row = headline_with_differences(cells, shifted)[0].set_index("method").loc[method]
        assert row["mean_after"] - row["mean"] == pytest.approx(0.10 / row["sources"])


def test_the_differences_formed_again_are_the_aggregates_for_an_unchanged_cell():
    """A second reading of a committed cell, by hand from its run_scores.csv: each method − Fixed AdaCos paired by
    split and seed, a split's mean, their mean over splits, and its t interval on the larger of the splits' standard
    error (k − 1 df) and the seed floor (Σ(nᵢ − 1) df); the rate-edge check's reading and the aggregate's cells.csv
    both equal it (for a method the aggregate reads trained on to convergence, its `own_relative`)."""
    cells = pd.read_csv(REPO / "reports" / "benchmark" / "tables" / "cells.csv")
    cell = "glyphs-open-c100-conv-lr"
    scores = pd.read_csv(REPO / "benchmarks" / "cells" / cell / "reports" / "tables" / "run_scores.csv")
    wide = scores.pivot_table(index=["split", "seed"], columns="method", values="test_map_at_r")
    reference = scores.loc[scores["method"] == "fixed_adacos", "test_map_at_r"].mean()
    mine = differences_to_fixed_adacos(scores, "test_map_at_r", 0.95).set_index("method")
    theirs = cells[cells["cell"] == cell].set_index("method")
    assert set(mine.index) == set(theirs.index) == set(wide.columns) - {"fixed_adacos"}
    for method in mine.index:
        pairs = (wide[method] - wide["fixed_adacos"]).dropna()
        by_split = [values.to_numpy() for _, values in pairs.groupby(level="split")]
        means = np.array([values.mean() for values in by_split])
        k, within_df = len(by_split), sum(values.size - 1 for values in by_split)
        within = sum(((values - values.mean()) ** 2).sum() for values in by_split) / within_df
        se_splits = means.std(ddof=1) / math.sqrt(k)
        se_floor = math.sqrt(within * sum(1 / values.size for values in by_split)) / k
        se, df = (se_splits, k - 1) if se_splits >= se_floor else (se_floor, within_df)
        half = stats.t.ppf(0.975, df) * se
        by_hand = (means.mean(), means.mean() - half, means.mean() + half, means.mean() / reference, se / reference)
        columns = ["difference", "low", "high", "relative", "relative_se"]
        assert tuple(mine.loc[method, columns]) == pytest.approx(by_hand)
        if theirs.loc[method, "length_factor"] == 1:
            assert tuple(theirs.loc[method, columns]) == pytest.approx(by_hand)
        else:  # trained on to convergence: the aggregate reads the longer runs, the cell's own difference beside them
            assert theirs.loc[method, "own_relative"] == pytest.approx(by_hand[3])