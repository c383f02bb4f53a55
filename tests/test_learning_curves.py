"""Learning curves and convergence: the log-spaced evaluation schedule, early stopping at the checkpoint val selects,
the test curve of a run, the plateau rule, each method − Fixed AdaCos along training and its crossover, and the
relative margin shared with the benchmark."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from study.analysis.comparison import equivalence_margin
from study.plateau import PLATEAU_RISE, best_so_far_at, plateau_rise, plateau_stop, plateau_table, stopped_runs
from study.analysis.learning_curves import crossover, difference_curve, learning_curves_table
from study.benchmark.long_cell import write_long_cell_report
from study.benchmark.meta import RELATIVE_MARGIN
from study.config import AnalysisConfig, ModelConfig, TrainConfig, load_params, relative_margin
from study.sources import load_dataset
from study.splits import split_dataset
from study.training import evaluate, evaluation_schedule, train


def test_log_schedule_has_half_way_the_end_and_even_ratios():
    schedule = sorted(evaluation_schedule(20_000, TrainConfig(eval_points=20)))
    assert schedule[0] == 10 and schedule[-1] == 20_000 and 10_000 in schedule
    assert 20 <= len(schedule) <= 22
    ratios = np.diff(np.log([s for s in schedule if s != 10_000]))
    assert np.allclose(ratios, math.log(2_000) / 19, atol=0.05)  # geometric from 10 to 20,000 in 19 steps


def test_every_schedule_is_unchanged_without_eval_points():
    assert sorted(evaluation_schedule(95, TrainConfig(eval_every=10, eval_points=None))) == [10, 20, 30, 40, 50, 60, 70,
                                                                                          80, 90, 95]
    assert sorted(evaluation_schedule(5, TrainConfig(eval_points=20))) == [2, 5]  # half-way and the end


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)


@pytest.mark.slow
def test_best_val_keeps_the_weights_val_scored_best_and_records_the_test_curve(digits):
    # A learning rate high enough that val falls back after its peak: the kept weights are the peak's, not the last.
    config = TrainConfig(epochs=30, batch_size=64, lr=0.05, eval_points=12, checkpoint="best_val", device="cpu",
                         objective="map_at_r")
    result = train(digits, loss_name="arcface", hyperparameters={"s": 30.0, "m": 0.5},
                   model_config=ModelConfig(name="mlp", embedding_size=16), config=config, progress=False,
                   curve_splits=("test",))
    scores = [row["map_at_r"] for row in result.history]
    best = int(np.nanargmax(scores))
    assert result.selected_iteration == result.history[best]["iteration"]
    assert result.final["map_at_r"] == max(scores)
    again = evaluate(result.model, result.loss, digits, "val", config, torch.device("cpu"))["map_at_r"]
    assert again == pytest.approx(max(scores), abs=1e-6)  # the model returned is that checkpoint
    test_again = evaluate(result.model, result.loss, digits, "test", config, torch.device("cpu"))["map_at_r"]
    assert test_again == pytest.approx(result.history[best]["test_map_at_r"], abs=1e-6)
    assert all(row["eval_seconds"] <= row["seconds"] for row in result.history)


def test_plateau_rule_on_closed_forms():
    steps = np.array([10, 100, 1_000, 5_000, 10_000])
    assert best_so_far_at(steps, [0.1, 0.5, 0.4, 0.6, 0.55], 5_000) == 0.6
    # Rising 5% over the second half: not converged.
    assert plateau_rise(steps, [0.1, 0.5, 0.8, 0.80, 0.84]) == pytest.approx(0.05)
    # Peaked before half-way and fell (overfitting): best so far did not rise, so it converged.
    assert plateau_rise(steps, [0.1, 0.5, 0.8, 0.82, 0.75]) == 0.0
    assert plateau_rise(steps, [0.1, 0.5, 0.8, 0.80, 0.805]) == pytest.approx(0.00625)
    assert 0.00625 < PLATEAU_RISE


def _curves(rows):
    return pd.DataFrame(rows, columns=["method", "split", "seed", "iteration", "val", "test"])


def test_plateau_table_averages_best_so_far_over_runs_and_counts_diverged():
    rows = []
    for seed, (half, end) in enumerate([(0.80, 0.80), (0.80, 0.82)]):  # one flat run, one still rising 2.5%
        rows += [("fixed_adacos", 0, seed, 50, half, 0.0), ("fixed_adacos", 0, seed, 100, end, 0.0)]
    rows += [("fixed_adacos", 0, 2, 50, 0.5, 0.0), ("fixed_adacos", 0, 2, 100, math.nan, math.nan)]  # diverged
    table = plateau_table(_curves(rows), ["fixed_adacos"]).iloc[0]
    assert table["runs"] == 3 and table["diverged"] == 1 and table["runs_converged"] == 1
    assert table["best_at_end"] == pytest.approx(0.81) and table["rise"] == pytest.approx(0.0125)
    assert not table["converged"]


def test_a_run_stops_where_the_plateau_rule_first_holds_on_its_curve_so_far():
    steps = np.array([0, 10, 20, 40, 80, 160])
    val = [0.1, 0.1, 0.3, 0.5, 0.502, 0.6]
    # At iteration 10 val has not moved from its start: with no floor the rule holds at once.
    assert plateau_stop(steps, val) == 1
    # From 30 on: at 40 best so far rose from 0.3 (at 20) to 0.5; at 80 from 0.5 to 0.502, 0.4% < 1%.
    assert plateau_stop(steps, val, earliest=30) == 4
    # A curve that never levels off runs to its end.
    assert plateau_stop(steps, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], earliest=30) == 5


def test_a_stopped_run_reports_the_test_score_val_selects_up_to_its_stop():
    rows = [("fixed_adacos", 0, 0, step, value, test) for step, value, test in
            zip([0, 10, 20, 40, 80, 160], [0.1, 0.1, 0.3, 0.5, 0.502, 0.6], [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])]
    rows += [("softmax", 0, 0, 0, math.nan, math.nan), ("softmax", 0, 0, 10, math.nan, math.nan)]  # never scored
    runs = stopped_runs(_curves(rows), earliest_share=0.2)  # not before iteration 32
    assert runs[["method", "last_iteration", "stop_iteration", "test", "test_stopped"]].values.tolist() == [
        ["fixed_adacos", 160.0, 80.0, 0.5, 0.4]]
    with pytest.raises(ValueError, match="earliest_share"):
        stopped_runs(_curves(rows), earliest_share=1.5)


def test_difference_curve_pairs_by_split_and_seed():
    rows = []
    for split in (0, 1):
        for seed in (0, 1, 2):
            for iteration, gap in ((10, -0.05), (100, 0.02)):
                base = 0.5 + 0.1 * split + 0.01 * seed
                rows += [("fixed_adacos", split, seed, iteration, 0.0, base),
                         ("arcface_tuned", split, seed, iteration, 0.0, base + gap + 0.001 * seed)]
    curve = difference_curve(_curves(rows), "arcface_tuned")
    assert list(curve["iteration"]) == [10, 100] and list(curve["pairs"]) == [6, 6]
    assert curve["difference"].tolist() == pytest.approx([-0.049, 0.021])  # mean gap + mean of 0.001·seed
    assert (curve["low"] < curve["difference"]).all() and (curve["difference"] < curve["high"]).all()


def test_crossover_is_bracketed_by_where_each_side_is_significant():
    difference = pd.DataFrame({"method": "m", "iteration": [10, 100, 1_000, 10_000, 20_000],
                               "difference": [-0.05, -0.01, 0.01, 0.03, 0.04],
                               "low": [-0.07, -0.02, -0.01, 0.01, 0.02], "high": [-0.03, 0.0 - 1e-9, 0.03, 0.05, 0.06]})
    found = crossover(difference)
    assert (found["crossover"], found["low"], found["high"], found["ahead_at_end"]) == (1_000, 100, 10_000, "method")
    never = crossover(difference.assign(difference=0.01, low=-0.01, high=0.03))
    assert math.isnan(never["crossover"]) and never["ahead_at_end"] == "neither"


def test_learning_curves_table_is_long_form_with_val_and_test():
    history = pd.DataFrame({"method": ["softmax"] * 2, "split": [1, 1], "seed": [0, 0], "iteration": [0, 10],
                            "map_at_r": [0.1, 0.2], "test_map_at_r": [0.15, 0.25], "s": [1.0, 1.0]})
    table = learning_curves_table(history, "map_at_r")
    assert list(table.columns) == ["method", "split", "seed", "iteration", "val", "test"]
    assert table["test"].tolist() == [0.15, 0.25]


def test_one_margin_share_of_the_score_for_the_study_and_the_benchmark():
    assert relative_margin("2% of score") == (2.0, "% of score")
    with pytest.raises(ValueError):
        relative_margin("2sd of score")
    config = AnalysisConfig.from_dict({"equivalence_margin": {"accuracy": 0.005, "retrieval": "2% of score",
                                                              "verification": "5%"}})
    assert equivalence_margin("test_map_at_r", config, [0.4, 0.5, 0.6]) == pytest.approx(0.01)
    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    assert params.analysis.score_share("retrieval") == RELATIVE_MARGIN == 0.02  # the shipped study's, the benchmark's


def test_long_cell_report_says_when_adacos_overtakes(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    iterations = [10, 100, 1_000, 10_000, 20_000]
    for method, gap in (("fixed_adacos", 0.0), ("arcface_tuned", None)):
        for split in (0, 1):
            for seed in (0, 1, 2):
                noise = 0.002 * (seed - 1) + 0.001 * split
                # Tuned ArcFace leads early, Fixed AdaCos from iteration 10,000 on.
                gaps = [0.1, 0.05, 0.01, -0.02, -0.03] if gap is None else [0.0] * 5
                val = [0.5 + 0.02 * i + g + noise for i, g in enumerate(gaps)]
                pd.DataFrame({"method": method, "split": split, "seed": seed, "iteration": iterations,
                              "map_at_r": val, "test_map_at_r": val, "seconds": [1, 2, 3, 4, 5],
                              "eval_seconds": [0.5] * 5}).to_csv(runs / f"{method}_split{split}_seed{seed}.csv",
                                                                  index=False)
                (runs / f"{method}_split{split}_seed{seed}.json").write_text(json.dumps(
                    {"method": method, "loss": method, "s": math.nan, "m": math.nan, "split": split, "seed": seed,
                     "status": "completed", "reason": "", "iterations": 20_000, "selected_iteration": 20_000,
                     "seconds": 5.0, "eval_seconds": 0.5, "device": "cpu", "val_score": val[-1],
                     "test_score": val[-1]}))
    write_long_cell_report(tmp_path, planned_runs=12)
    report = (tmp_path / "reports" / "report.md").read_text()
    assert "Fixed AdaCos overtakes ArcFace tuned at iteration 10,000" in report
    curves = pd.read_csv(tmp_path / "reports" / "tables" / "learning_curves.csv")
    assert list(curves.columns) == ["method", "split", "seed", "iteration", "val", "test"] and len(curves) == 60
    assert (tmp_path / "reports" / "figures" / "learning_curves.png").stat().st_size > 10_000
