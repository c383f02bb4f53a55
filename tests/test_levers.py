"""benchmarks/levers.py sets a cell rerun with the levers beside its committed twin: checked on two hand-made twins
whose choices, iterations and differences are counted here by hand."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "levers.py"
CELL = "twin"


@pytest.fixture(scope="module")
def levers():
    spec = importlib.util.spec_from_file_location("levers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_cell(root: Path, trials: list[tuple], rates: list[tuple], costs: list[tuple], differences: list[tuple]):
    """A cell's tables as the stages and the aggregate write them, in `root`'s cells/ and tables/."""
    tables = root / "cells" / CELL / "reports" / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame(trials, columns=["split", "trial", "state", "iterations", "best"]).assign(loss="arcface").to_csv(
        tables / "landscape.csv", index=False)
    scores = [(method, split, lr, seed) for method, split, lr in rates for seed in (0, 1)]
    scores += [("arcface_tuned", split, 0.0123, seed) for split in (0, 1) for seed in (0, 1)]
    pd.DataFrame(scores, columns=["method", "split", "lr", "seed"]).to_csv(tables / "run_scores.csv", index=False)
    (root / "tables").mkdir()
    pd.DataFrame(costs, columns=["cell", "iterations_trained", "seconds", "search_seconds", "headline"]).to_csv(
        root / "tables" / "costs.csv", index=False)
    pd.DataFrame([(CELL, method, difference, low, high, 0.5) for method, difference, low, high in differences],
                 columns=["cell", "method", "difference", "low", "high", "reference_test_mean"]).to_csv(
        root / "tables" / "cells.csv", index=False)
    return root / "cells", root / "tables"


@pytest.fixture
def twins(levers, tmp_path, monkeypatch):
    # At the end: 2 splits × 3 trials of 100 iterations; val selects trial 1 on split 0 and trial 2 on split 1.
    committed = write_cell(
        tmp_path / "end",
        [(0, 0, "COMPLETE", 100, False), (0, 1, "COMPLETE", 100, True), (0, 2, "COMPLETE", 100, False),
         (1, 0, "COMPLETE", 100, False), (1, 1, "COMPLETE", 100, False), (1, 2, "COMPLETE", 100, True)],
        [("fixed_adacos", 0, 0.01), ("fixed_adacos", 1, 0.01)],
        [(CELL, 1600, 160.0, 60.0, False), ("other", 10_000, 1000.0, 400.0, True)],
        [("arcface_tuned", 0.02, -0.01, 0.05), ("dynamic_adacos", -0.01, -0.03, 0.01)])
    # Early: halving stops four trials (at 30 and at 90 iterations) and selects trial 0 on split 1; Fixed AdaCos's
    # rate moves on split 1.
    rerun = write_cell(
        tmp_path / "early",
        [(0, 0, "PRUNED", 30, False), (0, 1, "COMPLETE", 100, True), (0, 2, "PRUNED", 30, False),
         (1, 0, "COMPLETE", 100, True), (1, 1, "PRUNED", 30, False), (1, 2, "PRUNED", 90, False)],
        [("fixed_adacos", 0, 0.01), ("fixed_adacos", 1, 0.03)],
        [(CELL, 1000, 90.0, 40.0, False)],
        [("arcface_tuned", 0.04, 0.0, 0.08), ("dynamic_adacos", 0.02, 0.0, 0.04)])
    monkeypatch.setattr(levers, "COMMITTED", committed)
    monkeypatch.setattr(levers, "RERUN", rerun)
    return levers


def test_the_choices_are_the_selected_trial_per_split_and_each_untuned_methods_rate(twins):
    chosen = twins.choices(CELL).set_index(["choice", "split"])
    assert chosen.loc[("search trial", 0), ["at_end", "early", "same"]].tolist() == [1, 1, True]
    assert chosen.loc[("search trial", 1), ["at_end", "early", "same"]].tolist() == [2, 0, False]
    assert chosen.loc[("learning rate", 0), "same"] and not chosen.loc[("learning rate", 1), "same"]
    assert len(chosen) == 4  # tuned ArcFace's rate is its trial's, not a choice among the grid


def test_the_cost_splits_the_search_from_the_runs_in_iterations(twins):
    row = twins.cost(CELL)
    # Search: 600 iterations at the end; 30 + 100 + 30 + 100 + 30 + 90 = 380 early. Finals: 1600 - 600, 1000 - 380.
    assert (row["search_iterations_end"], row["search_iterations_early"]) == (600, 380)
    assert row["search_ratio"] == pytest.approx(380 / 600) and row["finals_ratio"] == pytest.approx(620 / 1000)
    assert row["cell_ratio"] == pytest.approx(1000 / 1600) and row["seconds_ratio"] == pytest.approx(90 / 160)
    assert (row["pruned_end"], row["pruned_early"], row["trials"]) == (0, 4, 6)


def test_a_difference_is_inside_when_the_rerun_lies_in_the_committed_interval(twins):
    moved = twins.differences(CELL).set_index("method")
    # In % of Fixed AdaCos's score (0.5): tuned ArcFace +4% [-2%, +10%] → +8%; Dynamic AdaCos -2% [-6%, +2%] → +4%.
    assert moved.loc["arcface_tuned", ["relative_end", "low_end", "high_end", "relative_early"]].tolist() == \
        pytest.approx([0.04, -0.02, 0.10, 0.08])
    assert moved.loc["arcface_tuned", "inside"] and not moved.loc["dynamic_adacos", "inside"]


def test_the_projection_applies_the_ratios_to_each_headline_cells_search_and_rest(twins):
    projected = twins.projection(pd.DataFrame([twins.cost(CELL)]))
    # The one headline cell: 400 s of search at 380/600, 600 s of the rest at 0.62.
    expected = (400 * 380 / 600 + 600 * 0.62) / 3600
    assert projected["cells"] == 1 and projected["committed_hours"] == pytest.approx(1000 / 3600)
    assert projected["projected_low_hours"] == pytest.approx(expected) == projected["projected_high_hours"]


def test_the_summary_says_how_many_choices_held_and_where_the_answer_lies(twins, tmp_path):
    twins.write_summary([CELL], tmp_path)
    text = (tmp_path / "levers.md").read_text()
    assert "selected the trial it selected at the end on 1 of 2 class splits" in text
    assert "on 1 of 2 (method, class split) pairs" in text
    assert "twin 0.62× the iterations (its search 0.63×, 4 of 6 trials stopped early" in text
    assert "In seconds, twin 90 s against 160 s: not comparable" in text
    assert "| twin | search trial | ArcFace tuned | 1 | 2 | 0 | no |" in text
    assert "+4.0% [-2.0%, +10.0%] → +8.0% [+0.0%, +16.0%], inside the committed interval" in text
