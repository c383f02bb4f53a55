"""Iterations to a share of each run's own best val, pooled over data sources (study/benchmark/iterations.py),
checked against a brute-force threshold search and log ratios pooled by hand."""

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.benchmark.iterations import (equivalence, figure_iterations, iterations_sentence, iterations_to_own_best,
                                        pooled_iterations)

SCHEDULE = [0, 10, 20, 40, 80, 160, 320, 640]


def _step_run(method, split, seed, at_95, at_99):
    """A curve at 0.2 until `at_95`, 0.96 until `at_99`, then 1.0: own best 1.0, 95% first reached at `at_95`, 99% at
    `at_99`."""
    values = [0.2 if t < at_95 else 0.96 if t < at_99 else 1.0 for t in SCHEDULE]
    return pd.DataFrame({"method": method, "split": split, "seed": seed, "iteration": SCHEDULE, "val": values,
                         "test": values})


def test_iterations_match_a_brute_force_search_on_a_curve_that_peaks_and_falls():
    steps = np.unique(np.round(np.geomspace(1, 20000, 20))).astype(int)
    steps = np.concatenate([[0], steps])
    val = 0.8 * steps / (steps + 300.0) * np.exp(-steps / 8000.0)  # rises, peaks, falls (overfitting)
    curve = pd.DataFrame({"method": "m", "split": 0, "seed": 0, "iteration": steps, "val": val})
    found = iterations_to_own_best(curve).set_index("level")["iterations"]
    best = max(val)
    for level in (0.95, 0.99):
        brute = next(int(t) for t, v in zip(steps, val) if v >= level * best)
        assert found[level] == brute
    assert found[0.99] > found[0.95]


def test_each_run_reads_its_own_best_and_a_diverged_run_is_left_out():
    low = _step_run("m", 0, 0, 40, 160).assign(val=lambda f: f["val"] * 0.5)  # own best 0.5, not another run's 1.0
    high = _step_run("m", 0, 1, 20, 80)
    diverged = _step_run("m", 0, 2, 20, 80)
    diverged.loc[diverged.index[-1], "val"] = np.nan
    early = _step_run("m", 0, 3, 0, 0)  # already at its best at iteration 0: counted at the first evaluation, 10
    found = iterations_to_own_best(pd.concat([low, high, diverged, early]))
    table = found.pivot_table(index="seed", columns="level", values="iterations")
    assert table.loc[0].tolist() == [40, 160] and table.loc[1].tolist() == [20, 80]
    assert 2 not in table.index and table.loc[3].tolist() == [10, 10]


# (cell, source, converged, {(split, seed): (fixed 95%, fixed 99%, arcface 95%, arcface 99%)})
CELLS = [
    ("a1", "alpha", True, {(0, 0): (40, 80, 80, 160), (0, 1): (40, 80, 40, 160), (1, 0): (20, 80, 40, 80),
                           (1, 1): (40, 160, 80, 320)}),
    ("a2", "alpha", True, {(0, 0): (80, 160, 80, 160), (0, 1): (40, 80, 40, 160), (1, 0): (80, 160, 40, 160),
                           (1, 1): (80, 160, 80, 160)}),
    ("b1", "beta", True, {(0, 0): (160, 320, 80, 160), (0, 1): (80, 320, 80, 320), (1, 0): (160, 320, 80, 320),
                          (1, 1): (160, 640, 160, 320)}),
    ("c1", "gamma", True, {(0, 0): (20, 40, 40, 80), (0, 1): (20, 40, 20, 40), (1, 0): (10, 40, 20, 80),
                           (1, 1): (20, 40, 20, 80)}),
    # not converged: the headline leaves it out, and its extreme ratio must not reach the pool
    ("c2", "gamma", False, {(0, 0): (10, 10, 640, 640), (0, 1): (10, 10, 640, 640), (1, 0): (10, 10, 640, 640),
                            (1, 1): (10, 10, 640, 640)}),
]


def _benchmark(tmp_path, cells):
    """cells.csv rows the headline reads (one arcface_tuned row per cell) and each cell's learning_curves.csv."""
    rows = []
    for cell, source, converged, runs in cells:
        rows.append({"configuration": cell, "cell": cell, "source": source, "method": "arcface_tuned",
                     "primary": True, "regime": "short", "longer_of": np.nan, "rates": 1, "iterations": 640,
                     "relative": 0.0, "relative_se": 0.01, "converged": converged, "reference_converged": True})
        curves = pd.concat([_step_run(method, split, seed, *times[offset:offset + 2])
                            for (split, seed), times in runs.items()
                            for method, offset in (("fixed_adacos", 0), ("arcface_tuned", 2))])
        folder = tmp_path / cell / "reports" / "tables"
        folder.mkdir(parents=True)
        curves.to_csv(folder / "learning_curves.csv", index=False)
    return pd.DataFrame(rows)


def _by_hand(cells, index):
    """Per source, the mean over its cells of each cell's mean over splits of the paired log ratios."""
    per_source = {}
    for _, source, converged, runs in cells:
        if not converged:
            continue
        splits = {}
        for (split, _), times in runs.items():
            splits.setdefault(split, []).append(math.log(times[index + 2] / times[index]))
        per_source.setdefault(source, []).append(np.mean([np.mean(values) for values in splits.values()]))
    return np.array([np.mean(values) for values in per_source.values()])


def test_pooled_ratio_is_the_mean_over_sources_of_paired_log_ratios(tmp_path):
    table = pooled_iterations(_benchmark(tmp_path, CELLS), tmp_path, 0.9).set_index(["method", "level"])
    assert table.loc[("fixed_adacos", 0.95), "ratio"] == 1.0
    for index, level in enumerate((0.95, 0.99)):
        means = _by_hand(CELLS, index)
        k = means.size
        half = stats.t.ppf(0.95, k - 1) * means.std(ddof=1) / math.sqrt(k)
        row = table.loc[("arcface_tuned", level)]
        assert row["ratio"] == pytest.approx(math.exp(means.mean()))
        assert row["ratio_low"] == pytest.approx(math.exp(means.mean() - half))
        assert row["ratio_high"] == pytest.approx(math.exp(means.mean() + half))
        assert (row["sources"], row["cells"]) == (3, 4)
        assert row["prediction_low"] <= row["ratio_low"] and row["prediction_high"] >= row["ratio_high"]
    # median iterations: the median over the headline cells of each cell's median over runs
    assert table.loc[("fixed_adacos", 0.95), "median_iterations"] == pytest.approx(np.median([40, 80, 160, 20]))


def test_prediction_with_one_cell_per_source_is_the_closed_form(tmp_path):
    cells = [CELLS[0], CELLS[2], CELLS[3]]
    table = pooled_iterations(_benchmark(tmp_path, cells), tmp_path, 0.95).set_index(["method", "level"])
    means = _by_hand(cells, 0)
    k = means.size
    half = stats.t.ppf(0.975, k - 1) * means.std(ddof=1) * math.sqrt(1 + 1 / k)
    row = table.loc[("arcface_tuned", 0.95)]
    assert row["prediction_low"] == pytest.approx(math.exp(means.mean() - half))
    assert row["prediction_high"] == pytest.approx(math.exp(means.mean() + half))


def test_equivalence_reads_the_interval_against_the_band():
    assert equivalence(0.85, 1.2) == "within"
    assert equivalence(1.3, 2.0) == "more" and equivalence(0.5, 0.7) == "fewer"
    assert equivalence(1.1, 1.6) == "slightly more" and equivalence(0.6, 0.9) == "slightly fewer"
    assert equivalence(0.7, 1.4) == "undetermined" and equivalence(math.nan, 1.0) == "undetermined"


def test_sentence_states_fixed_adacos_against_tuned_arcface():
    table = pd.DataFrame([
        {"method": "arcface_tuned", "level": 0.95, "ratio": 1.25, "ratio_low": 1.05, "ratio_high": 2.0,
         "prediction_low": 0.5, "prediction_high": 4.0, "sources": 6, "cells": 9, "still_improving_cells": 0,
         "confidence": 0.95},
        {"method": "arcface_tuned", "level": 0.99, "ratio": 1.0, "ratio_low": 0.9, "ratio_high": 1.1,
         "prediction_low": 0.8, "prediction_high": 1.25, "sources": 6, "cells": 9, "still_improving_cells": 0,
         "confidence": 0.95}])
    sentence = iterations_sentence(table)
    assert "0.80× [0.50, 0.95]" in sentence and "[0.25, 2.00]" in sentence  # the reciprocal, bounds swapped
    assert "1.00× [0.91, 1.11]" in sentence and "6 data sources" in sentence
    assert "slightly fewer at 95%" in sentence and "within at 99%" in sentence
    assert sentence.endswith(".") and re.search(r"\.\s+[A-Z]", sentence) is None  # one sentence


def test_the_figure_draws_each_pooled_ratio_where_the_table_puts_it(tmp_path, monkeypatch):
    """One thick segment per method and level, from ratio_low to ratio_high on a log axis; Fixed AdaCos and a method
    without a pooled ratio are not drawn."""
    saved = []
    monkeypatch.setattr("study.benchmark.iterations.save_figure",
                        lambda figure, path, dpi: saved.append(figure) or path)
    table = pd.DataFrame([
        {"method": "fixed_adacos", "level": 0.95, "ratio": 1.0, "ratio_low": math.nan, "ratio_high": math.nan,
         "prediction_low": math.nan, "prediction_high": math.nan},
        {"method": "arcface_tuned", "level": 0.95, "ratio": 1.1, "ratio_low": 0.8, "ratio_high": 1.5,
         "prediction_low": 0.4, "prediction_high": 3.0},
        {"method": "arcface_tuned", "level": 0.99, "ratio": 1.2, "ratio_low": 0.9, "ratio_high": 1.6,
         "prediction_low": 0.5, "prediction_high": 2.9},
        {"method": "softmax", "level": 0.95, "ratio": math.nan, "ratio_low": math.nan, "ratio_high": math.nan,
         "prediction_low": math.nan, "prediction_high": math.nan}])
    figure_iterations(table, tmp_path / "convergence_iterations.png", 120)
    (ax,) = saved[0].axes
    drawn = {line.get_gid(): tuple(line.get_xdata()) for line in ax.lines if line.get_gid()}
    assert drawn == {"iterations:arcface_tuned:0.95": (0.8, 1.5), "iterations:arcface_tuned:0.99": (0.9, 1.6)}
    assert ax.get_xscale() == "log"
