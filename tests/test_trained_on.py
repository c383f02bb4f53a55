"""Tests for study.benchmark.trained_on: the length the declared rule takes for a method trained on to convergence,
and a cell's row read from those runs (the difference checked against a hand computation)."""

import json

import numpy as np
import pandas as pd
import pytest

from study.benchmark.trained_on import run_path, taken_length, with_longer_runs

CELL, METHOD, METRIC = "toy-cell", "arcface_default", "test_map_at_r"
SPLITS, SEEDS = (0, 1, 2), (0, 1)


def curve(rise: float) -> list[dict]:
    """A learning curve over 1,000 iterations whose best val rises by `rise` (relative) over its second half."""
    return [{"iteration": 250, "val": 0.3, "test": 0.3}, {"iteration": 500, "val": 0.5, "test": 0.5},
            {"iteration": 1000, "val": 0.5 * (1 + rise), "test": 0.5}]


def write_runs(results, factor: int, rise: float, test: dict, count: int | None = None) -> None:
    keys = [(split, seed) for split in SPLITS for seed in SEEDS][:count]
    for split, seed in keys:
        run = {"configuration": CELL, "method": METHOD, "factor": factor, "split": split, "lr": 0.027, "seed": seed,
               "status": "completed", "val_score": 0.5, METRIC: test[split, seed], "curve": curve(rise)}
        path = run_path(results, CELL, METHOD, factor, split, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run))


def own_scores() -> pd.DataFrame:
    rows = [{"method": method, "split": split, "lr": 0.009, "seed": seed, "status": "completed", "val_score": 0.5,
             METRIC: (0.60 + 0.01 * split + 0.002 * seed) if method == "fixed_adacos" else 0.50}
            for method in ("fixed_adacos", METHOD) for split in SPLITS for seed in SEEDS]
    return pd.DataFrame(rows)


LONGER = {(split, seed): 0.55 + 0.02 * split - 0.004 * seed for split in SPLITS for seed in SEEDS}


def test_the_shortest_whole_converged_length_is_taken(tmp_path):
    write_runs(tmp_path, 2, 0.0, LONGER)
    factor, runs, rise = taken_length(tmp_path, CELL, METHOD, planned=6)
    assert factor == 2 and len(runs) == 6 and rise == pytest.approx(0.0)


@pytest.mark.parametrize("written_at_4", [0, 5])
def test_nothing_is_taken_until_a_length_is_whole(tmp_path, written_at_4):
    write_runs(tmp_path, 2, 0.0, LONGER, count=5)
    assert taken_length(tmp_path, CELL, METHOD, planned=6) is None
    write_runs(tmp_path, 2, 0.10, LONGER)  # whole, and still improving: 4× next
    write_runs(tmp_path, 4, 0.10, LONGER, count=written_at_4)
    assert taken_length(tmp_path, CELL, METHOD, planned=6) is None


def test_the_cap_is_taken_still_improving(tmp_path):
    write_runs(tmp_path, 2, 0.10, LONGER)
    write_runs(tmp_path, 4, 0.05, LONGER)
    factor, _, rise = taken_length(tmp_path, CELL, METHOD, planned=6)
    assert factor == 4 and rise == pytest.approx(0.05)


def test_a_cells_row_reads_the_longer_runs_paired_with_its_own_fixed_adacos(tmp_path):
    cells, results = tmp_path / "cells", tmp_path / "results"
    tables = cells / CELL / "reports" / "tables"
    tables.mkdir(parents=True)
    own_scores().to_csv(tables / "run_scores.csv", index=False)
    write_runs(results, 2, 0.0, LONGER)
    rows = pd.DataFrame([{"cell": CELL, "method": METHOD, "metric": METRIC, "confidence": 0.95, "relative": -0.17,
                          "reference_converged": True, "converged": False, "method_rise": 0.04},
                         {"cell": "other", "method": METHOD, "metric": METRIC, "confidence": 0.95, "relative": 0.01,
                          "reference_converged": True, "converged": True, "method_rise": 0.0}])
    read = with_longer_runs(rows, cells, results)
    mine, other = read.iloc[0], read.iloc[1]
    reference = np.mean([0.60 + 0.01 * split + 0.002 * seed for split in SPLITS for seed in SEEDS])
    paired = [np.mean([LONGER[split, seed] - (0.60 + 0.01 * split + 0.002 * seed) for seed in SEEDS])
              for split in SPLITS]
    assert mine["relative"] == pytest.approx(np.mean(paired) / reference)
    assert mine["difference"] == pytest.approx(np.mean(paired))
    assert mine["method_test_mean"] == pytest.approx(np.mean(list(LONGER.values())))
    assert mine["length_factor"] == 2 and bool(mine["converged"]) and mine["own_relative"] == -0.17
    assert other["length_factor"] == 1 and other["relative"] == 0.01  # a cell without longer runs reads its own


def test_without_the_folder_every_row_reads_its_own_runs(tmp_path):
    rows = pd.DataFrame([{"cell": CELL, "method": METHOD, "relative": 0.02}])
    read = with_longer_runs(rows, tmp_path, tmp_path / "results")
    assert read["length_factor"].tolist() == [1] and read["own_relative"].tolist() == [0.02]


def test_the_details_show_both_lengths_of_a_method_trained_on(tmp_path):
    from study.benchmark.shown import trained_on_shown

    cells, results = tmp_path / "cells", tmp_path / "results"
    (cells / CELL / "reports" / "tables").mkdir(parents=True)
    own_scores().to_csv(cells / CELL / "reports" / "tables" / "run_scores.csv", index=False)
    write_runs(results, 2, 0.0, LONGER)
    rows = pd.DataFrame([{"cell": CELL, "method": METHOD, "metric": METRIC, "confidence": 0.95, "relative": -0.17,
                          "iterations": 3720, "reference_test_mean": 0.61, "reference_converged": True,
                          "converged": False, "method_rise": 0.04}])
    shown = trained_on_shown(with_longer_runs(rows, cells, results))
    assert len(shown) == 1 and shown["trained on to"].iloc[0] == "7,440 (2×)"
    assert shown["− Fixed AdaCos there"].iloc[0] == "-17.0%" and shown["rise there"].iloc[0] == "+4.00%"
    assert shown["converged (< 1%)"].iloc[0] == "yes"
    assert trained_on_shown(rows).empty  # no length_factor column: nothing trained on
