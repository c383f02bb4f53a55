"""The learning-rate check's computation (study/benchmark/learning_rate.py) on hand-computed tables: ranks at each
learning rate, a ranking that changes and one that does not, a reversal within noise and one beyond it, and the
learning rate val chooses."""

import math

import numpy as np
import pandas as pd
import pytest

from study.benchmark.learning_rate import (LR_FACTORS, RUN_COLUMNS, chosen_learning_rates, factor_label,
                                           learning_rate_sections, ranking_changes, ranking_order, selected_values,
                                           summary_table, swap_table, verdict_sentence)
from study.report.document import render_markdown

LR = 3e-3


def runs_of(scores: dict, configuration: str = "cell", val: dict | None = None, status: dict | None = None):
    """A run table from {(method, factor): [test score per split]}; val scores default to the test scores."""
    rows = []
    for (method, factor), tests in scores.items():
        vals = (val or {}).get((method, factor), tests)
        for split, (test, val_score) in enumerate(zip(tests, vals)):
            rows.append({"configuration": configuration, "method": method, "lr": LR * factor, "lr_factor": factor,
                         "split": split, "status": (status or {}).get((method, factor, split), "completed"),
                         "val_score": val_score, "test_score": test, "plateau_rise": math.nan})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


THIRD, ONE, THREE = LR_FACTORS

# A and B each reverse between lr and 3·lr, by 0.05 with a split-to-split spread of 0.001 (beyond noise); C stays last.
BEYOND = {("a", ONE): [0.60, 0.70, 0.80], ("b", ONE): [0.55, 0.651, 0.749], ("c", ONE): [0.2, 0.3, 0.4],
          ("a", THREE): [0.55, 0.65, 0.75], ("b", THREE): [0.60, 0.701, 0.799], ("c", THREE): [0.2, 0.3, 0.4]}
# The same order reversed by means of 0.01, while the paired differences swing by ±0.1 between splits (within noise).
WITHIN = {("a", ONE): [0.60, 0.80, 0.70], ("b", ONE): [0.69, 0.61, 0.77], ("c", ONE): [0.2, 0.3, 0.4],
          ("a", THREE): [0.69, 0.61, 0.77], ("b", THREE): [0.60, 0.80, 0.70], ("c", THREE): [0.2, 0.3, 0.4]}


def test_factor_labels():
    assert [factor_label(f) for f in LR_FACTORS] == ["lr/3", "lr", "3·lr"]


def test_summary_means_interval_and_rank_by_hand():
    summary = summary_table(runs_of(BEYOND)).set_index(["method", "lr_factor"])
    a = summary.loc[("a", ONE)]
    assert a["splits"] == 3 and a["lr"] == pytest.approx(LR)
    assert a["test_mean"] == pytest.approx(0.70) and a["val_mean"] == pytest.approx(0.70)
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(0.975, 2) × sd 0.1 / √3
    assert (a["test_low"], a["test_high"]) == pytest.approx((0.70 - half, 0.70 + half))
    assert [summary.loc[(m, ONE), "rank"] for m in "abc"] == [1, 2, 3]
    assert [summary.loc[(m, THREE), "rank"] for m in "abc"] == [2, 1, 3]
    assert summary.loc[("b", THREE), "lr"] == pytest.approx(9e-3)


def test_a_ranking_that_does_not_change():
    runs = runs_of({("a", f): [0.7, 0.8] for f in LR_FACTORS} | {("b", f): [0.5 * f / 3, 0.6 * f / 3]
                                                                   for f in LR_FACTORS})
    swaps = swap_table(runs)
    assert swaps.empty and ranking_changes(swaps, "cell") == "none"
    assert "the single learning rate stands" in verdict_sentence(swaps, "cell")


def test_a_reversal_beyond_noise():
    swaps = swap_table(runs_of(BEYOND))
    assert len(swaps) == 1
    swap = swaps.iloc[0]
    assert (swap["factor_a"], swap["factor_b"], swap["ahead"], swap["behind"]) == (ONE, THREE, "a", "b")
    # a − b per split: +0.05, +0.049, +0.051 at lr; −0.05, −0.051, −0.049 at 3·lr
    assert swap["difference_a"] == pytest.approx(0.05) and swap["difference_b"] == pytest.approx(-0.05)
    assert swap["low_a"] > 0 and swap["high_b"] < 0 and swap["beyond_noise"]
    assert ranking_changes(swaps, "cell") == "beyond noise"
    assert "becomes part of the protocol" in verdict_sentence(swaps, "cell")


def test_a_reversal_within_noise():
    swaps = swap_table(runs_of(WITHIN))
    assert len(swaps) == 1
    swap = swaps.iloc[0]
    assert (swap["ahead"], swap["behind"]) == ("a", "b")
    # a − b per split: −0.09, +0.19, −0.07 at lr (mean +0.01); the negatives at 3·lr
    assert swap["difference_a"] == pytest.approx(0.01) and swap["difference_b"] == pytest.approx(-0.01)
    assert swap["low_a"] < 0 < swap["high_a"] and not swap["beyond_noise"]
    assert ranking_changes(swaps, "cell") == "within noise"
    assert "only within noise" in verdict_sentence(swaps, "cell")


def test_a_reversal_between_lr_over_3_and_3_lr_alone_is_found():
    # At lr a and b tie exactly (no order, so no reversal against lr); from lr/3 to 3·lr their order reverses.
    runs = runs_of({("a", THIRD): [0.7, 0.8], ("b", THIRD): [0.6, 0.7], ("a", ONE): [0.6, 0.7],
                    ("b", ONE): [0.6, 0.7], ("a", THREE): [0.6, 0.7], ("b", THREE): [0.7, 0.8]})
    swaps = swap_table(runs)
    assert list(zip(swaps["factor_a"], swaps["factor_b"])) == [(THIRD, THREE)]
    assert swaps.iloc[0]["beyond_noise"]  # +0.1 on both splits, then −0.1 on both: no spread at all


def test_val_chooses_the_best_mean_val_among_complete_learning_rates():
    tests = {(m, f): [0.5, 0.6] for m in ("a", "b") for f in LR_FACTORS}
    val = {("a", THIRD): [0.40, 0.50], ("a", ONE): [0.45, 0.55], ("a", THREE): [0.50, 0.60],
           ("b", THIRD): [0.70, 0.70], ("b", ONE): [0.50, 0.60], ("b", THREE): [0.90, 0.95]}
    # b diverged at 3·lr on split 1: its best val mean there (over split 0 alone) must not be chosen.
    runs = runs_of(tests, val=val, status={("b", THREE, 1): "diverged"})
    chosen = chosen_learning_rates(runs).set_index("method")
    assert chosen.loc["a", "lr_factor"] == THREE and chosen.loc["a", "val_mean"] == pytest.approx(0.55)
    assert chosen.loc["b", "lr_factor"] == THIRD and chosen.loc["b", "lr"] == pytest.approx(1e-3)
    summary = summary_table(runs).set_index(["method", "lr_factor"])
    assert summary.loc[("b", THREE), "splits"] == 1  # the diverged run is left out of the mean


def test_val_prefers_lr_on_a_tie_and_chooses_nothing_without_a_complete_learning_rate():
    runs = runs_of({("a", f): [0.5, 0.6] for f in LR_FACTORS} | {("b", ONE): [0.5, 0.6]},
                   status={("b", ONE, 0): "diverged"})
    chosen = chosen_learning_rates(runs).set_index("method")
    assert chosen.loc["a", "lr_factor"] == ONE
    assert np.isnan(chosen.loc["b", "lr_factor"])


def test_selected_values_reads_the_one_best_trial_per_split():
    landscape = pd.DataFrame({"loss": ["arcface"] * 3 + ["normface"], "split": [0, 0, 1, 0],
                              "s": [8.0, 16.0, 32.0, 4.0], "m": [0.1, 0.2, 0.3, math.nan],
                              "best": [False, True, True, True]})
    assert selected_values(landscape, "arcface", 0) == {"s": 16.0, "m": 0.2}
    assert selected_values(landscape, "normface", 0) == {"s": 4.0}
    with pytest.raises(ValueError, match="0 selected arcface trials for class split 2"):
        selected_values(landscape, "arcface", 2)


def test_the_summary_says_each_configuration_s_answer():
    runs = pd.concat([runs_of(BEYOND, "first"), runs_of(WITHIN, "second")], ignore_index=True)
    summary = summary_table(runs)
    assert ranking_order(summary, "first", THREE) == ["b", "a", "c"]
    swaps, chosen = swap_table(runs, summary), chosen_learning_rates(runs)
    text = render_markdown("t", learning_rate_sections(runs, summary, swaps, chosen, {"first": "map_at_r"}))
    first, second = text.split("## second")
    assert "changes beyond noise" in first and "a and b swap (beyond noise" in first
    assert "test MAP@R" in first and "3·lr (0.009) for b" in first
    assert "only within noise" in second and "| lr and 3·lr | a − b | +0.0100 [" in second and "| no |" in second
