"""Tests for study.analysis.scale_bands: trials counted into their s / s_f band, stalled against their own split's
best, and the Wilson interval checked against its closed form."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis.scale_bands import BANDS, scale_bands, within_cell_correlation

COVERAGE_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scale_bands_coverage.py"


def wilson(stalled: int, count: int, confidence: float = 0.95) -> tuple[float, float]:
    z = stats.norm.ppf(0.5 + confidence / 2)
    p = stalled / count
    centre = (p + z * z / (2 * count)) / (1 + z * z / count)
    half = z * math.sqrt(p * (1 - p) / count + z * z / (4 * count * count)) / (1 + z * z / count)
    return centre - half, centre + half


def test_trials_fall_in_their_band_and_stall_against_their_own_splits_best():
    trials = pd.DataFrame([  # s_f = 2 in cell a, 4 in cell b; each split's best is its own
        ("a", 0, 1.0, 0.80, 2.0), ("a", 0, 3.0, 0.70, 2.0), ("a", 0, 10.0, 0.30, 2.0), ("a", 0, 12.0, 0.50, 2.0),
        ("a", 0, 40.0, 0.10, 2.0), ("a", 1, 11.0, 0.15, 2.0), ("a", 1, 3.5, 0.39, 2.0),
        ("b", 0, 20.0, 0.30, 4.0), ("b", 0, 4.0, 0.90, 4.0), ("b", 0, 0.5, float("nan"), 4.0),
    ], columns=["cell", "split", "s", "value", "s_f"])
    bands = scale_bands(trials).set_index("low")
    assert len(bands) == len(BANDS) - 1 and bands["trials"].sum() == 9  # the NaN trial is left out
    assert bands.loc[0.25, ["trials", "stalled"]].tolist() == [1, 0]  # a/0 at 0.5×
    assert bands.loc[0.5, ["trials", "stalled", "cells"]].tolist() == [1, 0, 1]  # b at 1×: a band holds its top
    assert bands.loc[1.0, ["trials", "stalled", "cells"]].tolist() == [2, 0, 1]  # a/0 1.5×, a/1 1.75× (its best)
    # a/0 5× (0.30 of 0.80: stalled), a/0 6× (0.625: not), a/1 5.5× (0.15 of 0.39: stalled), b 5× (0.33: stalled)
    assert bands.loc[4.0, ["trials", "stalled", "cells"]].tolist() == [4, 3, 2]
    assert bands.loc[16.0, ["trials", "stalled"]].tolist() == [1, 1]
    # cells a (3 trials, 2 stalled) and b (1, 1): no more spread than chance (ρ = 0), so Wilson's over the 4 trials,
    # widened to the t interval over the 2 cells with the cluster-robust standard error of the ratio
    half = stats.t.ppf(0.975, 1) * math.sqrt(2 * ((2 - 0.75 * 3) ** 2 + (1 - 0.75 * 1) ** 2) / 4 ** 2)
    low, high = wilson(3, 4)
    assert (bands.loc[4.0, "stalled_low"], bands.loc[4.0, "stalled_high"]) == pytest.approx(
        (max(0.0, min(low, 0.75 - half)), min(1.0, max(high, 0.75 + half))))
    assert bands.loc[4.0, "median_share_of_best"] == pytest.approx((0.3 / 0.8 + 0.15 / 0.39) / 2)
    assert bands.loc[8.0, "trials"] == 0 and math.isnan(bands.loc[8.0, "stalled_share"])


def test_stalls_that_cluster_in_cells_count_as_fewer_trials():
    assert within_cell_correlation([10, 10, 10, 10], [10, 0, 0, 0]) == pytest.approx((1.0, 10.0))  # one cell stalls
    assert within_cell_correlation([10, 10, 10, 10], [3, 2, 3, 2])[0] == 0.0  # as binomial noise alone spreads
    # wholly clustered: 40 trials of 4 cells are 4 effective trials, so the band's interval is Wilson's on 4 at least
    # cell0's 10 trials at 4 × s_f all stall against its best, a trial at 0.6 × (another band); the others' never
    trials = pd.DataFrame([(f"cell{cell}", 0, 4.0, 0.1 if cell == 0 else 1.0, 1.0) for cell in range(4)
                           for _ in range(10)] + [("cell0", 0, 0.6, 1.0, 1.0)],
                          columns=["cell", "split", "s", "value", "s_f"])
    band = scale_bands(trials).set_index("low").loc[2.0]
    low, high = wilson(1, 4)
    assert band["stalled_share"] == 0.25 and band["stalled_low"] <= low and band["stalled_high"] >= high


def test_the_coverage_simulations_worlds_count_every_stall_they_draw():
    """benchmarks/scale_bands_coverage.py's worlds, read by scale_bands: a cell whose band trials all stalled counts
    them all (against its split's best at another scale, as in a real search), so the simulated rate is the drawn
    one."""
    spec = importlib.util.spec_from_file_location("scale_bands_coverage", COVERAGE_SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    trials, stalled = np.array([5, 3, 4, 2]), np.array([5, 0, 1, 2])  # cells 0 and 3 stalled in every trial
    band = scale_bands(script.world_trials(trials, stalled)).set_index("low").loc[script.WORLD_BAND]
    assert (band["trials"], band["stalled"], band["cells"]) == (14, 8, 4)
