"""One study's tuning cost and iterations in the benchmark's form (study.analysis.tuning_lead,
study.analysis.iteration_ratios, study.report.benchmark_form), checked against closed forms and hand arithmetic."""

import math

import numpy as np
import pandas as pd
import pytest

from study.analysis.iteration_ratios import study_iterations
from study.analysis.tuning_lead import crossings, study_tuning_cost
from study.report.benchmark_form import (iterations_shown, study_iterations_sentence, study_tuning_sentence,
                                         tuning_cost_shown)

STEP = 10
GRID = np.arange(0, 2001, STEP)
TAU = {"fixed_adacos": 100.0, "arcface_tuned": 200.0}


def _curves(noise=0.0, seed=0):
    """Val curves 1 − exp(−t/τ) on an even grid, 3 splits × 2 seeds, optionally with a per-run time stretch."""
    rng = np.random.default_rng(seed)
    rows = []
    for method, tau in TAU.items():
        for split in range(3):
            for run_seed in range(2):
                stretch = math.exp(noise * rng.standard_normal())
                rows += [{"method": method, "split": split, "seed": run_seed, "iteration": int(t),
                          "val": 1 - math.exp(-t / (tau * stretch))} for t in GRID]
    return pd.DataFrame(rows)


def _grid_crossing(tau: float, level: float) -> int:
    """Closed form: the first grid iteration at which 1 − exp(−t/τ) reaches level × its value at the grid's end."""
    best = 1 - math.exp(-GRID[-1] / tau)
    return int(math.ceil(-tau * math.log(1 - level * best) / STEP) * STEP)


@pytest.mark.parametrize("level", [0.95, 0.99])
def test_a_study_reads_its_iteration_ratio_with_the_schedules_step_in_its_interval(level):
    table = study_iterations(_curves(), {"arcface_tuned": False}, 0.95).set_index(["method", "level"])
    own, reference = _grid_crossing(200.0, level), _grid_crossing(100.0, level)
    row = table.loc[("arcface_tuned", level)]
    assert row["median_iterations"] == own
    assert row["ratio"] == pytest.approx(own / reference)
    # identical runs: no spread over splits, so the interval is the schedule's alone
    assert row["ratio_low"] == pytest.approx((own - STEP) / reference)
    assert row["ratio_high"] == pytest.approx(own / (reference - STEP))
    assert row["equivalence"] == "more"  # about 2×, wholly beyond 1.25×
    assert math.isnan(table.loc[("fixed_adacos", level), "ratio_low"])


def test_spread_over_splits_widens_the_interval_beyond_the_schedule():
    still = study_iterations(_curves(), {}, 0.95).set_index(["method", "level"]).loc[("arcface_tuned", 0.95)]
    noisy = study_iterations(_curves(noise=0.2), {}, 0.95).set_index(["method", "level"]).loc[("arcface_tuned", 0.95)]
    assert noisy["ratio_high"] / noisy["ratio_low"] > still["ratio_high"] / still["ratio_low"]
    assert noisy["ratio_low"] < noisy["ratio"] < noisy["ratio_high"]


def _tuning_curves():
    """A search of 6 trials (band from n = 1 to 3) and a control measured at n = 1, 2."""
    search = [{"method": "arcface", "kind": "search", "n": n, "expected_test": 0.50 + 0.01 * n,
               "low": 0.48 + 0.01 * n if n <= 3 else np.nan, "high": 0.53 + 0.01 * n if n <= 3 else np.nan}
              for n in range(1, 7)]
    control = [{"method": "fixed_adacos", "kind": "control", "n": n, "expected_test": value, "low": np.nan,
                "high": np.nan} for n, value in ((1, 0.50), (2, 0.51))]
    return pd.DataFrame(search + control)


def test_a_studys_tuning_cost_is_the_search_less_the_best_of_n_in_a_share_of_fixed_adacos():
    table = study_tuning_cost(_tuning_curves(), 0.5, 0.95)
    # measured control: lead = (search − control) / 0.5
    assert table.loc[0, "mean"] == pytest.approx((0.51 - 0.50) / 0.5)
    assert table.loc[1, "mean"] == pytest.approx((0.52 - 0.51) / 0.5)
    assert (table.loc[0, "low"], table.loc[0, "high"]) == pytest.approx(((0.49 - 0.50) / 0.5, (0.54 - 0.50) / 0.5))
    # beyond the 2 runs: c(n) = c(1) + (c(2) − c(1))·eₙ/e₂, e₃ = 3/(2√π), e₂ = 1/√π
    control_3 = 0.50 + 0.01 * (3 / (2 * math.sqrt(math.pi))) / (1 / math.sqrt(math.pi))
    assert table.loc[2, "mean"] == pytest.approx((0.53 - control_3) / 0.5)
    assert list(table["control_measured"]) == [True, True, False, False, False, False]
    assert table.loc[5, ["low", "high"]].isna().all()
    found = crossings(table, 0.02)
    assert found["zero"]["n"] == 1 and found["margin"]["n"] == 1  # +2% at n = 1 already
    assert found["zero"]["low"] == 1 and found["margin"]["high"] is None  # its lower end never reaches 2%


def test_the_study_form_reads_as_the_benchmarks_tables_and_says_what_they_show():
    table = study_tuning_cost(_tuning_curves(), 0.5, 0.95)
    shown = tuning_cost_shown(table, pooled=False)
    assert "a new source [95% prediction]" not in shown.columns
    assert shown.iloc[0, 1] == "+2.0% [-2.0%, +8.0%]" and shown.iloc[5, 1].endswith("[n/a]")
    sentence = study_tuning_sentence(table, 0.02)
    assert "crosses zero at n = 1 [1, not shown within 6] trials" in sentence and "Beyond n = 2 Fixed AdaCos's best of n is extrapolated" \
        in sentence
    iterations = study_iterations(_curves(), {"arcface_tuned": True}, 0.95)
    assert "still improving" in iterations_shown(iterations, pooled=False).columns
    said = study_iterations_sentence(iterations)
    own, reference = _grid_crossing(200.0, 0.95), _grid_crossing(100.0, 0.95)
    assert f"95% of its own best val in {reference / own:.2f}×" in said and "fewer at 95%" in said
    assert said.endswith("(ArcFace tuned still improving: counts of a run cut short).")
