"""Tests for study.analysis against brute force, closed forms and scipy's own statistics."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import (
    analyse_study,
    best_so_far_selected,
    bootstrap_selected_curves,
    convergence_targets,
    crossing_iteration,
    expected_best_after_n_trials,
    expected_selected_after_n_trials,
    first_reaching,
    fixed_scale_of,
    higher_is_better,
    iterations_to_target,
    percentile_band,
    reproduction_table,
    summarise_runs,
)
from study.config import AnalysisConfig
from study.published import SEED003_FACES, SEED003_MNIST
from study.report.formats import trials_interval


def brute_force_expected_max(scores, n_draws):
    """Mean of max over every one of the N^n equally likely ordered draws with replacement."""
    return float(np.mean([max(draw) for draw in itertools.product(scores, repeat=n_draws)]))


# --- expected best after n trials ------------------------------------------------------


@pytest.mark.parametrize(
    "scores",
    [
        [0.3, 0.9, 0.6],
        [0.71, 0.12, 0.55, 0.98],
        [0.2, 0.5, 0.5, 0.9],  # a tie in the middle
        [0.8, 0.8, 0.1, 0.8, 0.4],  # a tie at the maximum
        [0.4, 0.4, 0.4],  # all tied
        [-1.0, 2.5, 0.0, 7.25, 3.0],
    ],
)
def test_expected_best_matches_brute_force_enumeration(scores):
    curve = expected_best_after_n_trials(scores, replacement=True)
    assert curve.shape == (len(scores),)
    for n_draws in range(1, min(len(scores), 4) + 1):
        assert curve[n_draws - 1] == pytest.approx(brute_force_expected_max(scores, n_draws), abs=1e-12)


def test_expected_best_matches_brute_force_at_n_draws_four_for_three_scores():
    # The curve only runs to N, so check n > N against the closed form on a longer list.
    scores = [0.3, 0.9, 0.6]
    repeated = expected_best_after_n_trials(scores * 2, replacement=True)  # same distribution, N = 6
    assert repeated[3] == pytest.approx(brute_force_expected_max(scores, 4), abs=1e-12)


def test_expected_best_is_order_independent():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=20)
    np.testing.assert_allclose(expected_best_after_n_trials(scores), expected_best_after_n_trials(scores[::-1]))


def test_expected_best_first_point_is_the_mean_and_never_exceeds_the_max():
    rng = np.random.default_rng(2)
    scores = rng.uniform(0.5, 0.99, size=40)
    curve = expected_best_after_n_trials(scores)
    assert curve[0] == pytest.approx(scores.mean(), abs=1e-12)
    assert np.all(curve <= scores.max() + 1e-12)
    assert np.all(np.diff(curve) >= -1e-12)


def test_expected_best_approaches_the_max():
    scores = np.array([0.1, 0.4, 0.7, 0.95])
    # Beyond N the same formula with more draws; emulate by repeating the list (same distribution).
    long_curve = expected_best_after_n_trials(np.tile(scores, 100), replacement=True)
    assert long_curve[-1] == pytest.approx(scores.max(), abs=1e-9)
    assert long_curve[-1] <= scores.max() + 1e-12
    # The closed form gap to the max at n draws: Σ_i (v_max − v_(i))·P(max is the i-th).
    n_draws = 50
    gap = (0.95 - 0.7) * ((3 / 4) ** n_draws - (2 / 4) ** n_draws) + (0.95 - 0.4) * (
        (2 / 4) ** n_draws - (1 / 4) ** n_draws
    ) + (0.95 - 0.1) * (1 / 4) ** n_draws
    assert long_curve[n_draws - 1] == pytest.approx(0.95 - gap, abs=1e-12)


def test_expected_best_single_score():
    np.testing.assert_allclose(expected_best_after_n_trials([0.42]), [0.42])


@pytest.mark.parametrize("bad", [[], [0.5, np.nan], [np.inf, 0.2], [[0.1, 0.2]]])
def test_expected_best_rejects_empty_non_finite_or_non_vector(bad):
    with pytest.raises(ValueError):
        expected_best_after_n_trials(bad)


# --- bootstrap band --------------------------------------------------------------------


def expected_best_band(scores, n_bootstrap=1000, confidence=0.95, seed=0):
    """The percentile-bootstrap band of the expected-best curve, as the analysis builds its bands."""
    return percentile_band(bootstrap_selected_curves(scores, scores, n_bootstrap=n_bootstrap, seed=seed), confidence)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_band_contains_the_curve(seed):
    rng = np.random.default_rng(100 + seed)
    scores = rng.beta(8, 2, size=30)
    curve = expected_best_after_n_trials(scores)
    lower, upper = expected_best_band(scores, n_bootstrap=2000, seed=seed)
    assert lower.shape == upper.shape == curve.shape
    assert np.all(lower <= curve) and np.all(curve <= upper)
    assert np.all(lower <= upper)
    assert np.all(upper <= scores.max() + 1e-12) and np.all(lower >= scores.min() - 1e-12)


def test_band_at_first_point_matches_the_bootstrap_of_the_mean():
    # At n = 1 the curve is the mean, so the band is the percentile bootstrap of the mean.
    scores = np.array([0.61, 0.72, 0.55, 0.9, 0.83, 0.47, 0.69])
    lower, upper = expected_best_band(scores, n_bootstrap=4000, seed=5)
    rng = np.random.default_rng(5)
    means = rng.choice(scores, size=(4000, scores.size), replace=True).mean(axis=1)
    low_ref, high_ref = np.percentile(means, [2.5, 97.5])
    assert lower[0] == pytest.approx(low_ref, abs=1e-12)
    assert upper[0] == pytest.approx(high_ref, abs=1e-12)


def test_band_collapses_for_constant_scores():
    lower, upper = expected_best_band(np.full(12, 0.875), n_bootstrap=300)
    np.testing.assert_allclose(lower, 0.875, atol=1e-12)
    np.testing.assert_allclose(upper, 0.875, atol=1e-12)


def test_band_narrows_with_lower_confidence_and_is_seeded():
    scores = np.linspace(0.2, 0.9, 15)
    lower_95, upper_95 = expected_best_band(scores, confidence=0.95, seed=3)
    lower_50, upper_50 = expected_best_band(scores, confidence=0.5, seed=3)
    assert np.all(upper_50 - lower_50 <= upper_95 - lower_95 + 1e-12)
    again = expected_best_band(scores, confidence=0.95, seed=3)
    np.testing.assert_array_equal(again[0], lower_95)
    np.testing.assert_array_equal(again[1], upper_95)


@pytest.mark.parametrize("kwargs", [{"confidence": 1.0}, {"confidence": 0.0}, {"n_bootstrap": 0}])
def test_band_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        expected_best_band([0.1, 0.2, 0.3], **kwargs)


def test_band_rejects_non_finite_scores():
    with pytest.raises(ValueError):
        expected_best_band([0.1, np.nan])


# --- the selected trial's reported score ------------------------------------------------


def brute_force_selected(selection, reported, n_draws, replacement):
    """Mean, over every equally likely draw of n trials, of the reported score of the draw's best-by-selection
    trial (a tie broken uniformly at random, so the tied trials' mean reported score)."""
    indices = range(len(selection))
    draws = (itertools.product(indices, repeat=n_draws) if replacement
             else itertools.combinations(indices, n_draws))
    values = []
    for draw in draws:
        best = max(selection[i] for i in draw)
        values.append(np.mean([reported[i] for i in draw if selection[i] == best]))
    return float(np.mean(values))


SELECTION_CASES = [
    ([0.3, 0.9, 0.6], [0.2, 0.5, 0.8]),
    ([0.71, 0.12, 0.55, 0.98], [0.6, 0.3, 0.7, 0.4]),
    ([0.2, 0.5, 0.5, 0.9, 0.1], [0.1, 0.9, 0.3, 0.4, 0.2]),  # a tie in the middle
    ([0.8, 0.8, 0.1, 0.8, 0.4], [0.5, 0.7, 0.9, 0.2, 0.1]),  # a tie at the maximum
    ([0.0, -np.inf, 0.4, -np.inf], [0.0, 0.0, 0.6, 0.0]),  # pruned trials: drawn, never selected
]


@pytest.mark.parametrize("replacement", [True, False])
@pytest.mark.parametrize("selection, reported", SELECTION_CASES)
def test_expected_selected_matches_brute_force_enumeration(selection, reported, replacement):
    curve = expected_selected_after_n_trials(selection, reported, replacement=replacement)
    assert curve.shape == (len(selection),)
    for n_draws in range(1, len(selection) + 1):
        if replacement and n_draws > 4:
            continue  # N^n draws: enough checked
        expected = brute_force_selected(selection, reported, n_draws, replacement)
        assert curve[n_draws - 1] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("replacement", [True, False])
def test_expected_best_is_the_selected_curve_of_the_scores_themselves(replacement):
    scores = [0.2, 0.5, 0.5, 0.9, 0.1, 0.7]
    for n_draws in range(1, 5):
        expected = brute_force_selected(scores, scores, n_draws, replacement)
        assert expected_best_after_n_trials(scores, replacement=replacement)[n_draws - 1] == pytest.approx(expected)


def test_without_replacement_ends_at_the_selected_trial_and_with_replacement_does_not():
    selection, reported = [0.1, 0.3, 0.9, 0.5], [0.4, 0.2, 0.35, 0.8]
    # Drawing all N without replacement always includes the best-by-val trial: its reported score exactly.
    assert expected_selected_after_n_trials(selection, reported)[-1] == pytest.approx(0.35, abs=1e-12)
    assert expected_selected_after_n_trials(selection, reported, replacement=True)[-1] != pytest.approx(0.35)


@pytest.mark.parametrize("replacement", [True, False])
def test_selection_independent_of_the_reported_scores_gives_a_flat_curve_at_their_mean(replacement):
    # Averaged over every pairing of the reported scores with the selection scores (selection carries
    # no information about them), the selected trial's expected score is their mean at every n.
    selection = np.array([0.1, 0.4, 0.2, 0.8, 0.6])
    reported = np.array([0.31, 0.52, 0.47, 0.66, 0.25])
    curves = [expected_selected_after_n_trials(selection, reported[list(order)], replacement=replacement)
              for order in itertools.permutations(range(5))]
    np.testing.assert_allclose(np.mean(curves, axis=0), reported.mean(), atol=1e-12)


@pytest.mark.parametrize("bad", [
    ([0.1, 0.2], [0.1]),  # lengths differ
    ([0.1, np.nan], [0.1, 0.2]),  # NaN selection: a failed trial must get the floor
    ([0.1, np.inf], [0.1, 0.2]),
    ([0.1, 0.2], [0.1, np.nan]),
    ([], []),
])
def test_expected_selected_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        expected_selected_after_n_trials(*bad)


def test_without_replacement_weights_stay_finite_for_thousands_of_trials():
    rng = np.random.default_rng(7)
    scores = rng.uniform(size=3000)
    curve = expected_best_after_n_trials(scores)
    assert np.isfinite(curve).all() and curve[0] == pytest.approx(scores.mean()) and curve[-1] == pytest.approx(
        scores.max())


def test_best_so_far_follows_the_running_best_by_selection():
    selection = [0.5, 0.4, 0.7, 0.7, -np.inf, 0.9, 0.1]
    reported = [0.3, 0.9, 0.6, 0.1, 0.0, 0.2, 0.8]
    # Ties keep the earlier trial (Optuna's best trial); a pruned trial (−inf) is never the best.
    np.testing.assert_array_equal(best_so_far_selected(selection, reported), [0.3, 0.3, 0.6, 0.6, 0.6, 0.2, 0.2])
    np.testing.assert_array_equal(best_so_far_selected([-np.inf, 0.2], [0.0, 0.5]), [0.0, 0.5])


def test_bootstrap_curves_resample_trials_as_pairs():
    selection, reported = np.array([0.1, 0.5, 0.9]), np.array([0.3, 0.2, 0.7])
    curves = bootstrap_selected_curves(selection, reported, n_bootstrap=50, seed=2)
    rng = np.random.default_rng(2)
    picks = rng.integers(0, 3, size=(50, 3))
    for curve, pick in zip(curves, picks):
        np.testing.assert_allclose(curve, expected_selected_after_n_trials(selection[pick], reported[pick]))


# --- break-even ------------------------------------------------------------------------


def test_first_reaching_is_the_first_n_at_or_above_each_rows_target():
    curves = np.array([[0.80, 0.85, 0.88, 0.90], [0.5, 0.6, 0.65, 0.66], [0.9, 0.9, 0.9, 0.9]])
    np.testing.assert_array_equal(first_reaching(curves, [0.87, 0.7, 0.9]), [3, np.inf, 1])
    np.testing.assert_array_equal(first_reaching(curves[0], 0.85), [2])  # exact equality reaches


def test_first_reaching_forgives_only_rounding_at_equality():
    scores = [0.98] * 7
    target = float(np.mean([0.98, 0.98, 0.98]))
    assert first_reaching(expected_best_after_n_trials(scores), target)[0] == 1
    assert first_reaching([0.9799], 0.98)[0] == np.inf


def test_first_reaching_on_estimator_output_with_known_answer():
    # Scores 0, 1 (N = 2) with replacement: E[max_1] = 0.5, E[max_2] = 0.75.
    curve = expected_best_after_n_trials([0.0, 1.0], replacement=True)
    assert first_reaching(curve, 0.6)[0] == 2


# --- convergence -----------------------------------------------------------------------


def test_iterations_to_target_first_crossing():
    iterations = np.array([100, 200, 300, 400, 500])
    scores = np.array([0.2, 0.6, 0.95, 0.90, 0.97])
    assert iterations_to_target(iterations, scores, 0.9) == 300
    assert iterations_to_target(iterations, scores, 0.6) == 200  # exact equality
    assert iterations_to_target(iterations, scores, 0.1) == 100
    assert iterations_to_target(iterations, scores, 0.99) is None


def test_iterations_to_target_skips_nan_and_handles_empty():
    assert iterations_to_target([10, 20, 30], [np.nan, 0.4, 0.8], 0.5) == 30
    assert iterations_to_target([], [], 0.5) is None


def test_iterations_to_target_returns_python_int():
    result = iterations_to_target(np.array([5, 10], dtype=np.int64), [0.1, 0.9], 0.5)
    assert type(result) is int and result == 10


def test_iterations_to_target_rejects_misaligned_or_unsorted():
    with pytest.raises(ValueError):
        iterations_to_target([1, 2, 3], [0.1, 0.2], 0.1)
    with pytest.raises(ValueError):
        iterations_to_target([3, 2, 1], [0.1, 0.2, 0.3], 0.1)


def test_convergence_targets():
    targets = convergence_targets(0.8)
    assert list(targets) == [0.95, 0.99]
    assert targets[0.95] == pytest.approx(0.76)
    assert targets[0.99] == pytest.approx(0.792)
    assert convergence_targets(0.5, fractions=(0.5,)) == {0.5: 0.25}


@pytest.mark.parametrize("best, fractions", [(np.nan, (0.95,)), (-0.1, (0.95,)), (0.9, (0.0,)), (0.9, (1.5,))])
def test_convergence_targets_rejects_bad_arguments(best, fractions):
    with pytest.raises(ValueError):
        convergence_targets(best, fractions)


# --- crossing --------------------------------------------------------------------------


ITERATIONS = np.array([0, 100, 200, 300, 400, 500, 600])


def test_crossing_counts_only_the_lasting_overtake():
    curve_a = np.array([0.1, 0.5, 0.3, 0.4, 0.7, 0.8, 0.9])
    curve_b = np.array([0.2, 0.4, 0.5, 0.6, 0.65, 0.7, 0.75])
    # a leads at 100, falls back at 200–300, leads for good from 400.
    assert crossing_iteration(ITERATIONS, curve_a, curve_b) == 400


def test_crossing_never():
    curve_b = np.linspace(0.5, 0.9, ITERATIONS.size)
    assert crossing_iteration(ITERATIONS, curve_b - 0.01, curve_b) is None
    # Ahead for most of the run but behind at the end: no lasting overtake.
    curve_a = curve_b + 0.1
    curve_a[-1] = curve_b[-1] - 0.01
    assert crossing_iteration(ITERATIONS, curve_a, curve_b) is None


def test_crossing_from_the_start_and_ties():
    curve_b = np.linspace(0.5, 0.9, ITERATIONS.size)
    assert crossing_iteration(ITERATIONS, curve_b + 0.05, curve_b) == 0
    assert crossing_iteration(ITERATIONS, curve_b, curve_b) == 0  # ties are not behind


def test_crossing_nan_counts_as_behind_and_empty_is_none():
    curve_a = np.array([0.6, np.nan, 0.7])
    assert crossing_iteration([1, 2, 3], curve_a, [0.5, 0.5, 0.5]) == 3
    assert crossing_iteration([], [], []) is None


def test_crossing_rejects_misaligned():
    with pytest.raises(ValueError):
        crossing_iteration([1, 2, 3], [0.1, 0.2, 0.3], [0.1, 0.2])


# --- run summaries ---------------------------------------------------------------------


def test_summarise_runs_per_group_and_metric():
    runs = pd.DataFrame(
        {
            "method": ["fixed_adacos", "arcface", "fixed_adacos", "arcface", "fixed_adacos", "softmax"],
            "seed": [0, 0, 1, 1, 2, 0],
            "accuracy": [0.98, 0.96, 0.97, np.nan, 0.99, 0.95],
            "map_at_r": [0.80, 0.70, 0.82, 0.72, 0.84, 0.60],
        }
    )
    summary = summarise_runs(runs, ["accuracy", "map_at_r"])
    assert list(summary.columns) == ["method", "metric", "mean", "std", "n"]
    assert list(summary["method"]) == ["fixed_adacos"] * 2 + ["arcface"] * 2 + ["softmax"] * 2
    assert list(summary["metric"]) == ["accuracy", "map_at_r"] * 3
    row = summary.set_index(["method", "metric"])
    assert row.loc[("fixed_adacos", "accuracy"), "mean"] == pytest.approx(0.98)
    assert row.loc[("fixed_adacos", "accuracy"), "std"] == pytest.approx(np.std([0.98, 0.97, 0.99], ddof=1))
    assert row.loc[("fixed_adacos", "map_at_r"), "std"] == pytest.approx(np.std([0.80, 0.82, 0.84], ddof=1))
    assert row.loc[("fixed_adacos", "accuracy"), "n"] == 3
    # The diverged arcface run is left out of accuracy but still counts for map_at_r.
    assert row.loc[("arcface", "accuracy"), "n"] == 1
    assert np.isnan(row.loc[("arcface", "accuracy"), "std"])
    assert row.loc[("arcface", "map_at_r"), "n"] == 2
    assert row.loc[("arcface", "map_at_r"), "mean"] == pytest.approx(0.71)
    assert row.loc[("softmax", "map_at_r"), "n"] == 1


def test_summarise_runs_custom_group_and_missing_column():
    runs = pd.DataFrame({"loss": ["a", "b", "a"], "score": [1.0, 2.0, 3.0]})
    summary = summarise_runs(runs, ["score"], group="loss")
    assert list(summary["loss"]) == ["a", "b"]
    assert list(summary["mean"]) == [2.0, 2.0]
    with pytest.raises(KeyError):
        summarise_runs(runs, ["missing"], group="loss")


# =======================================================================================
# The whole study: analyse_study on hand-made frames whose answers are known
# =======================================================================================

STUDY_CONFIG = AnalysisConfig.from_dict({"n_bootstrap": 200, "convergence_targets": [0.95, 0.99],
                                         "equivalence_margin": {"accuracy": 0.005, "retrieval": 0.01,
                                                                "verification": 0.01}})
STEPS = [0, 10, 20, 30, 40]
# Val curves per (method, seed); the final val score of a run is its curve's last point.
CURVES = {
    ("fixed_adacos", 0): [0.1, 0.5, 0.96, 0.99, 0.99],  # 95% target (0.95) at 20, 99% (0.99) at 30
    ("fixed_adacos", 1): [0.1, 0.95, 0.97, 0.98, 0.98],  # at 10; never 0.99
    ("fixed_adacos", 2): [0.1, 0.6, 0.9, 0.96, 0.995],  # at 30; 0.99 at 40
    ("arcface_tuned", 0): [0.2, 0.7, 0.9, 0.99, 1.0],
    ("arcface_tuned", 1): [0.2, 0.7, 0.94, 0.99, 1.0],
    ("arcface_tuned", 2): [0.2, 0.6, 0.9, 0.97, 1.0],
    ("softmax", 0): [0.1, 0.3, 0.6, 0.8, 0.949],  # never reaches 0.95 …
    ("softmax", 1): [0.1, 0.3, 0.6, 0.9, 0.96],  # … except this seed, at 40
    ("softmax", 2): [0.1, 0.3, 0.6, 0.8, 0.9],
    ("arcface_default", 0): [0.1, 0.4, 0.7, 0.9, 0.93],
    ("arcface_default", 1): [0.1, 0.4, 0.7, np.nan, np.nan],  # diverged
}


def study_frames(trial_values=(0.90, 0.95, 0.97), tests=None, trial_tests=None):
    """Trials of one ArcFace search, evaluated runs and their val curves, built from the tables above."""
    trial_tests = trial_tests or [value - 0.05 for value in trial_values]
    trials = pd.DataFrame(
        {"loss": "arcface", "repeat": 0, "trial": range(len(trial_values) + 3),
         "state": ["COMPLETE"] * len(trial_values) + ["FAIL", "PRUNED", "RUNNING"],
         "s": [4.0 * (i + 1) for i in range(len(trial_values) + 3)],
         "m": [0.1 * (i + 1) for i in range(len(trial_values) + 3)],
         "value": [*trial_values, np.nan, np.nan, np.nan],
         "test_value": [*trial_tests, np.nan, np.nan, np.nan],
         "seconds": [10.0 * (i + 1) for i in range(len(trial_values))] + [5.0, 15.0, np.nan]})
    tests = tests or {}
    runs, history = [], []
    for (method, seed), curve in CURVES.items():
        diverged = bool(np.isnan(curve[-1]))
        test = tests.get((method, seed), np.nan if diverged else curve[-1] - 0.01)
        runs.append({"method": method, "loss": method.split("_")[0], "seed": seed, "val_score": curve[-1],
                     "status": "diverged" if diverged else "completed", "seconds": 100.0 + seed,
                     "s": 64.0 if method == "arcface_default" else np.nan,
                     "m": 0.5 if method == "arcface_default" else np.nan,
                     "test_accuracy": test, "test_eer": np.nan if diverged else 0.1 + 0.01 * seed})
        for step, score in zip(STEPS, curve):
            history.append({"method": method, "seed": seed, "iteration": step, "accuracy": score,
                            "theta_med_deg": 80.0 - step - seed, "cos_nontarget_mean": 0.01 * seed,
                            "s": 3.0 + seed if method == "fixed_adacos" else np.nan})
    return trials, pd.DataFrame(runs), pd.DataFrame(history)


def closed_form_expected_best(values, n):
    ordered = sorted(values)
    count = len(ordered)
    return sum(v * ((i / count) ** n - ((i - 1) / count) ** n) for i, v in enumerate(ordered, start=1))


def test_study_tuning_curve_is_the_test_score_of_the_trial_val_selects():
    # Completed trials (val, test): (0.90, 0.80), (0.95, 0.92), (0.97, 0.85); a failed trial enters at the floor
    # on both, a pruned one is drawn but never selected and leaves the floor; the RUNNING one is not a draw.
    trials, runs, history = study_frames(trial_tests=[0.80, 0.92, 0.85])
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    curve = analysis.tuning_curves.query("kind == 'search'")
    selection, reported = [0.90, 0.95, 0.97, 0.0, -np.inf], [0.80, 0.92, 0.85, 0.0, 0.0]
    for n in range(1, 6):
        row = curve[curve["n"] == n].iloc[0]
        assert row["expected_test"] == pytest.approx(brute_force_selected(selection, reported, n, False))
        if n == 1:  # five trials carry n = 1; beyond it the weights rest on fewer and no interval is valid
            assert row["low"] - 1e-12 <= row["expected_test"] <= row["high"] + 1e-12
        else:
            assert np.isnan(row["low"]) and np.isnan(row["high"])
    # The search spent 10 + 20 + 30 s on its completed trials and 5 + 15 s on the failed and the pruned one:
    # 80 s over 5 draws.
    np.testing.assert_allclose(curve["seconds"], 16.0 * np.arange(1, 6))
    assert analysis.estimator["kind"] == "pooled" and analysis.estimator["unbiased"]
    with_replacement = analyse_study(trials, runs, history, "accuracy",
                                     STUDY_CONFIG.replace(estimator="with_replacement"))
    row = with_replacement.tuning_curves.query("kind == 'search' and n == 3").iloc[0]
    assert row["expected_test"] == pytest.approx(brute_force_selected(selection, reported, 3, True))


def test_study_control_is_the_best_of_n_seeds_by_val_on_test():
    tests = {("fixed_adacos", 0): 0.70, ("fixed_adacos", 1): 0.90, ("fixed_adacos", 2): 0.80}
    trials, runs, history = study_frames(tests=tests)
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    control = analysis.tuning_curves.query("kind == 'control' and method == 'fixed_adacos'")
    vals, reported = [0.99, 0.98, 0.995], [0.70, 0.90, 0.80]
    for n in (1, 2, 3):
        assert control.loc[control["n"] == n, "expected_test"].item() == pytest.approx(
            brute_force_selected(vals, reported, n, False))
    # A diverged run is a draw at the floor: ArcFace at the defaults has one.
    default = analysis.tuning_curves.query("kind == 'control' and method == 'arcface_default'")
    assert default.empty  # fixed runs of a tunable loss are not hyperparameter-free controls
    assert analysis.verdict_facts["control"] == {"seeds": 3, "gain": pytest.approx(0.80 - np.mean(reported))}


def test_study_break_even_against_fixed_adacos_on_test_with_the_old_quantity_beside_it():
    tests = {("fixed_adacos", 0): 0.85, ("fixed_adacos", 1): 0.86, ("fixed_adacos", 2): 0.87}
    trials, runs, history = study_frames(trial_tests=[0.80, 0.92, 0.85], tests=tests)
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    row = analysis.break_even.query("reference == 'fixed_adacos'").iloc[0]
    selection, reported = [0.90, 0.95, 0.97, 0.0, -np.inf], [0.80, 0.92, 0.85, 0.0, 0.0]
    curve = [brute_force_selected(selection, reported, n, False) for n in range(1, 6)]
    first = next(n for n, value in enumerate(curve, start=1) if value >= 0.86 - 1e-12)
    assert first == 3  # curve 0.514, 0.776, 0.866, 0.864, 0.850: the last trial drawn is the 0.85-on-test one
    assert row["target"] == pytest.approx(0.86) and row["trials"] == first and row["reached"]
    assert row["seconds"] == pytest.approx(first * 16.0)
    assert row["trials_low"] <= first and (pd.isna(row["trials_high"]) or first <= row["trials_high"])
    assert row["gain"] == pytest.approx(curve[-1] - 0.86)
    assert row["gain_low"] <= row["gain"] <= row["gain_high"]
    # The classic quantity: the expected maximum of the completed val scores, with replacement, against
    # Fixed AdaCos's mean val score (0.98833).
    assert row["old_target"] == pytest.approx(np.mean([0.99, 0.98, 0.995]))
    # The classic curve by the same estimator as the figure (without replacement, every draw): at n = N, the best val.
    assert row["old_val_gain"] == pytest.approx(0.97 - row["old_target"])
    assert row["old_trials"] is None or pd.isna(row["old_trials"])


def test_break_even_interval_on_synthetic_trials_with_a_known_answer():
    runs_of = lambda scores: pd.DataFrame({"method": "fixed_adacos", "seed": range(len(scores)), "val_score": scores,
                                           "seconds": 1.0, "test_accuracy": scores, "status": "completed"})
    history = pd.DataFrame({"method": "fixed_adacos", "seed": [0], "iteration": [0], "accuracy": [0.5]})

    def trials_of(vals, tests):
        return pd.DataFrame({"loss": "arcface", "repeat": 0, "trial": range(len(vals)), "state": "COMPLETE",
                             "s": 1.0, "m": 0.1, "value": vals, "test_value": tests, "seconds": 2.0})

    # Every trial scores 0.9 on test and every AdaCos seed 0.8: break-even at once, in every replicate.
    analysis = analyse_study(trials_of(np.linspace(0.1, 0.9, 9), [0.9] * 9), runs_of([0.8] * 5), history,
                             "accuracy", STUDY_CONFIG)
    row = analysis.break_even.iloc[0]
    assert (row["trials"], row["trials_low"], row["trials_high"]) == (1, 1, 1)
    assert (row["gain"], row["gain_low"], row["gain_high"]) == (pytest.approx(0.1),) * 3
    # Below the target everywhere: never, in any replicate.
    row = analyse_study(trials_of(np.linspace(0.1, 0.9, 9), [0.7] * 9), runs_of([0.8] * 5), history, "accuracy",
                        STUDY_CONFIG).break_even.iloc[0]
    assert not row["reached"] and pd.isna(row["trials_low"]) and pd.isna(row["trials_high"])
    # Val predicts test exactly (grid 0.05…1.0, N = 20); target 0.95: the expected maximum of n draws without
    # replacement of a uniform grid is (N + 1)·n/(n + 1)·step, which first reaches 0.95 at n = 10 (0.9545;
    # 0.9450 at n = 9).
    grid = np.arange(1, 21) / 20
    closed_form = [(20 + 1) * n / (n + 1) / 20 for n in range(1, 21)]
    first = next(n for n, value in enumerate(closed_form, start=1) if value >= 0.95 - 1e-12)
    row = analyse_study(trials_of(grid, grid), runs_of([0.95] * 5), history, "accuracy",
                        STUDY_CONFIG).break_even.iloc[0]
    assert row["trials"] == first == 10
    # Replicates that drew the top trials several times break even sooner; those without them never.
    assert row["trials_low"] < 10 and pd.isna(row["trials_high"])


def test_study_with_a_sequential_sampler_averages_best_so_far_over_repeats():
    trials, runs, history = study_frames()
    rows = []
    for repeat, (vals, tests) in enumerate([([0.5, 0.7, 0.6], [0.4, 0.6, 0.9]), ([0.8, 0.6, 0.9], [0.7, 0.9, 0.5])]):
        rows += [{"loss": "arcface", "repeat": repeat, "trial": i, "state": "COMPLETE", "s": 1.0, "m": 0.1,
                  "value": v, "test_value": t, "seconds": 1.0} for i, (v, t) in enumerate(zip(vals, tests))]
    analysis = analyse_study(pd.DataFrame(rows), runs, history, "accuracy", STUDY_CONFIG, sampler="tpe")
    curve = analysis.tuning_curves.query("kind == 'search'")["expected_test"].to_numpy()
    # Best so far by val: repeat 0 → tests 0.4, 0.6, 0.6; repeat 1 → 0.7, 0.7, 0.5.
    np.testing.assert_allclose(curve, [(0.4 + 0.7) / 2, (0.6 + 0.7) / 2, (0.6 + 0.5) / 2])
    assert analysis.estimator["kind"] == "repeats" and "2 independent tpe searches" in analysis.estimator["text"]
    single = analyse_study(pd.DataFrame(rows[:3]), runs, history, "accuracy", STUDY_CONFIG, sampler="tpe")
    assert "one realisation" in single.estimator["text"] and not single.estimator["unbiased"]
    assert single.tuning_curves.query("kind == 'search'")["low"].isna().all()
    # One realisation carries no search variance, so neither the gain nor the break-even gets an interval (an
    # interval from Fixed AdaCos's seeds alone would claim a certainty the search does not have).
    even = single.break_even.iloc[0]
    assert even["valid_trials"] == 0 and pd.isna(even["gain_low"]) and pd.isna(even["gain_high"])
    assert pd.isna(even["trials_low"]) and pd.isna(even["trials_high"])
    assert trials_interval(even["trials_low"], even["trials_high"], even["max_trials"], 0) == "[no valid interval]"
    # The tuned runs retrain the first repeat's best trial, so that is the one the summary names.
    assert analysis.search_summary.iloc[0]["best_value"] == 0.7 and analysis.search_summary.iloc[0]["repeats"] == 2
    assert "approximation" in analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG,
                                            sampler="qmc").estimator["text"]


def test_study_search_summary_and_tuning_cost():
    trials, runs, history = study_frames()
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    search = analysis.search_summary.iloc[0]
    counts = (search["trials"], search["complete"], search["pruned"], search["failed"], search["running"])
    assert counts == (5, 3, 1, 1, 1)
    assert search["best_value"] == 0.97 and search["best_s"] == 12.0
    assert search["seconds_per_trial"] == pytest.approx(80.0 / 5)
    costs = analysis.costs.set_index("method")
    assert costs.loc["arcface_tuned", "tuning_trials"] == 5
    assert costs.loc["arcface_tuned", "tuning_seconds"] == pytest.approx(80.0)
    assert costs.loc["fixed_adacos", "tuning_trials"] == 0 and costs.loc["fixed_adacos", "tuning_seconds"] == 0
    assert costs.loc["arcface_default", "diverged"] == 1
    assert costs.loc["fixed_adacos", "run_seconds"] == pytest.approx(101.0)
    landscape = analysis.landscape
    assert set(landscape["state"]) == {"COMPLETE", "FAIL", "PRUNED"}  # the interrupted trial is left out
    assert landscape.loc[landscape["best"], "value"].tolist() == [0.97]


def test_the_search_summary_sums_cpu_seconds_only_where_every_finished_trial_recorded_them():
    trials, runs, history = study_frames()

    def cpu_seconds() -> float:
        return analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG).search_summary.iloc[0]["cpu_seconds"]

    assert math.isnan(cpu_seconds())
    trials["cpu_seconds"] = [8.0, 9.0, 10.0, 4.0, 12.0, np.nan]  # the running trial has none yet: not finished
    summary = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG).search_summary.iloc[0]
    assert summary["cpu_seconds"] == pytest.approx(43.0) and summary["seconds"] == pytest.approx(80.0)
    trials.loc[1, "cpu_seconds"] = np.nan  # a trial trained before CPU time was recorded
    assert math.isnan(cpu_seconds())


def test_study_reference_bands_are_t_intervals():
    trials, runs, history = study_frames()
    bands = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG).reference_bands.set_index("method")
    assert list(bands.index) == ["fixed_adacos", "softmax", "arcface_default"]  # baselines present, in order
    values = np.array([0.99, 0.98, 0.995])
    low, high = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    assert bands.loc["fixed_adacos", "mean"] == pytest.approx(values.mean())
    assert bands.loc["fixed_adacos", "low"] == pytest.approx(low)
    assert bands.loc["fixed_adacos", "high"] == pytest.approx(high)
    assert bands.loc["arcface_default", "seeds"] == 1  # the diverged seed is left out
    assert np.isnan(bands.loc["arcface_default", "low"])
    assert bands.loc["fixed_adacos", "seconds"] == pytest.approx(101.0)


def test_study_differences_pair_by_seed_with_welch_beside_holm_across_metrics_and_tost():
    tuned = {("arcface_tuned", 0): 0.991, ("arcface_tuned", 1): 0.979, ("arcface_tuned", 2): 0.987}
    trials, runs, history = study_frames(tests=tuned)
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    table = analysis.differences.set_index(["method", "metric"])
    row = table.loc[("arcface_tuned", "test_accuracy")]
    a = np.array(list(tuned.values()))
    b = np.array([0.99, 0.98, 0.995]) - 0.01  # Fixed AdaCos at seeds 0, 1, 2
    paired = stats.ttest_rel(a, b)
    interval = paired.confidence_interval(0.95)
    assert row["test"] == "paired" and row["pairs"] == 3
    assert row["difference"] == pytest.approx(a.mean() - b.mean())
    assert (row["low"], row["high"]) == (pytest.approx(interval.low), pytest.approx(interval.high))
    assert row["p_value"] == pytest.approx(paired.pvalue)
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert row["welch_p_value"] == pytest.approx(welch.pvalue)
    assert row["welch_low"] == pytest.approx(welch.confidence_interval(0.95).low)
    # Holm over the method's two test metrics (accuracy and EER), by hand.
    eer = table.loc[("arcface_tuned", "test_eer")]
    p = sorted([row["p_value"], eer["p_value"]])
    holm = {p[0]: min(1.0, 2 * p[0]), p[1]: min(1.0, max(2 * p[0], p[1]))}
    assert row["p_holm"] == pytest.approx(holm[row["p_value"]]) and eer["p_holm"] == pytest.approx(holm[eer["p_value"]])
    assert row["significant"] == (row["p_holm"] < 0.05)
    # TOST against the accuracy margin (0.005) on the paired differences, by two one-sided t-tests.
    differences = a - b
    lower = stats.ttest_1samp(differences, -0.005, alternative="greater").pvalue
    upper = stats.ttest_1samp(differences, 0.005, alternative="less").pvalue
    assert row["margin"] == 0.005 and row["tost_p_value"] == pytest.approx(max(lower, upper))
    assert row["equivalent"] == (max(lower, upper) < 0.05)
    assert row["detectable"] > abs(row["difference"])  # three seeds resolve little
    facts = analysis.verdict_facts
    assert facts["tuned"]["difference"] == pytest.approx(row["difference"])
    assert facts["recommendation"] == "fixed_adacos" and facts["reason"] == "not_resolved"


def verdict_for(tuned_tests, reference_tests=(0.90, 0.91, 0.92, 0.93, 0.94)):
    """The recommendation of a study whose five seeds score these test accuracies."""
    runs, history = [], []
    for method, scores in (("fixed_adacos", reference_tests), ("arcface_tuned", tuned_tests)):
        for seed, score in enumerate(scores):
            runs.append({"method": method, "seed": seed, "val_score": score, "seconds": 1.0, "status": "completed",
                         "test_accuracy": score})
            history.append({"method": method, "seed": seed, "iteration": 0, "accuracy": score})
    trials = pd.DataFrame({"loss": "arcface", "repeat": 0, "trial": [0, 1], "state": "COMPLETE", "s": 1.0, "m": 0.1,
                           "value": [0.9, 0.91], "test_value": [0.9, 0.91], "seconds": 1.0})
    return analyse_study(trials, pd.DataFrame(runs), pd.DataFrame(history), "accuracy", STUDY_CONFIG).verdict_facts


@pytest.mark.parametrize("shift, recommendation, reason", [
    (+0.02, "arcface_tuned", "tuning_better_beyond_margin"),
    (-0.02, "fixed_adacos", "adacos_significantly_better"),
    (0.0, "fixed_adacos", "equivalent"),
])
def test_the_recommendation_follows_significance_and_equivalence(shift, recommendation, reason):
    noise = np.array([0.0003, -0.0002, 0.0001, -0.0003, 0.0001])  # paired differences: small sd
    reference = np.array([0.90, 0.91, 0.92, 0.93, 0.94])
    facts = verdict_for(reference + shift + noise, reference)
    assert (facts["recommendation"], facts["reason"]) == (recommendation, reason)


def test_an_unresolved_difference_leaves_fixed_adacos_with_what_would_resolve_it():
    reference = np.array([0.90, 0.91, 0.92, 0.93, 0.94])
    facts = verdict_for(reference + np.array([0.02, -0.015, 0.01, -0.012, 0.004]), reference)
    assert (facts["recommendation"], facts["reason"]) == ("fixed_adacos", "not_resolved")
    row = facts["tuned"]
    assert row["detectable"] > abs(row["difference"]) and row["seeds_to_resolve"] > 5


def test_study_final_metrics_and_direction():
    trials, runs, history = study_frames()
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    final = analysis.final.set_index(["method", "metric"])
    assert final.loc[("arcface_default", "test_accuracy"), "n"] == 1  # the diverged run has no metrics
    assert final.loc[("softmax", "test_accuracy"), "mean"] == pytest.approx(np.mean([0.949, 0.96, 0.9]) - 0.01)
    assert final.loc[("softmax", "test_accuracy"), "std"] == pytest.approx(np.std([0.949, 0.96, 0.9], ddof=1))
    assert not final.loc[("softmax", "test_eer"), "higher_is_better"]
    assert final.loc[("softmax", "test_accuracy"), "higher_is_better"]
    assert not higher_is_better("eer") and higher_is_better("test_map_at_r")
    assert list(dict.fromkeys(analysis.final["method"])) == ["fixed_adacos", "softmax", "arcface_default",
                                                             "arcface_tuned"]
    assert "fixed_adacos" not in set(analysis.differences["method"])


def test_study_convergence_on_hand_made_curves():
    trials, runs, history = study_frames()
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    # Method means of the final val score: Fixed AdaCos 0.98833, tuned ArcFace 1.0 (the best), softmax 0.93633.
    assert analysis.best_final_method == "arcface_tuned" and analysis.best_final_val == pytest.approx(1.0)
    assert analysis.targets == {0.95: pytest.approx(0.95), 0.99: pytest.approx(0.99)}
    table = analysis.convergence.query("basis == 'best'").set_index(["method", "fraction"])
    assert table.loc[("fixed_adacos", 0.95), "median_iteration"] == 20  # median of 20, 10, 30
    assert table.loc[("fixed_adacos", 0.99), "median_iteration"] == 40  # 30, never, 40: never counts as slowest
    assert table.loc[("fixed_adacos", 0.99), "seeds_reached"] == 2
    assert table.loc[("arcface_tuned", 0.95), "median_iteration"] == 30
    # Softmax reaches 95% with one seed of three: the median is "not reached".
    assert np.isnan(table.loc[("softmax", 0.95), "median_iteration"])
    assert table.loc[("softmax", 0.95), "seeds_reached"] == 1 and table.loc[("softmax", 0.95), "seeds"] == 3
    runs_table = analysis.convergence_runs.query("basis == 'best'").set_index(["method", "seed", "fraction"])
    assert runs_table.loc[("softmax", 1, 0.95), "iteration"] == 40
    assert np.isnan(runs_table.loc[("softmax", 0, 0.95), "iteration"])  # 0.949 is not 0.95
    # Three seeds give no 95% interval for a median: even [min, max] covers it with probability 1 − 2·(1/2)³ = 75%.
    row = table.loc[("fixed_adacos", 0.95)]
    assert np.isnan(row["low"]) and np.isnan(row["high"]) and np.isnan(row["coverage"])
    # Own targets: 95% of each method's own mean final val; softmax's (0.93633) is 0.8895, reached at 40, 30, 40.
    own = analysis.convergence.query("basis == 'own'").set_index(["method", "fraction"])
    assert own.loc[("softmax", 0.95), "target"] == pytest.approx(0.95 * np.mean([0.949, 0.96, 0.9]))
    assert own.loc[("softmax", 0.95), "median_iteration"] == 40
    # Tuned ArcFace − Fixed AdaCos at 95% of the best: 30 − 20 in the median, a point estimate. Seed by seed
    # (30, 30, 30 against 20, 10, 30) tuned ArcFace is later twice and tied once: the sign test on the two that
    # differ gives p = 2·(1/2)² = 0.5, so neither is called faster.
    speed = analysis.convergence_speed.set_index(["method", "basis", "fraction"]).loc[("arcface_tuned", "best", 0.95)]
    assert speed["difference"] == 10 and speed["reached"] == "both" and pd.isna(speed["faster"])
    assert (speed["faster_seeds"], speed["slower_seeds"], speed["tied_seeds"]) == (0, 2, 1)
    assert speed["p_value"] == pytest.approx(0.5)


def test_study_convergence_best_is_the_best_mean_not_the_best_seed():
    trials, runs, history = study_frames()
    # One lucky seed (0.999) in a method whose mean is low must not set the targets.
    runs.loc[(runs["method"] == "softmax") & (runs["seed"] == 0), "val_score"] = 0.999
    runs.loc[runs["method"] == "arcface_tuned", "val_score"] = 0.97
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    means = runs.groupby("method")["val_score"].mean()
    assert analysis.best_final_method == means.idxmax() == "fixed_adacos"
    assert analysis.best_final_val == pytest.approx(means.max())


def test_study_curves_and_angles_over_seeds():
    trials, runs, history = study_frames()
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    curves = analysis.curves.set_index(["method", "iteration"])
    values = np.array([0.96, 0.97, 0.9])
    low, high = stats.t.interval(0.95, 2, loc=values.mean(), scale=stats.sem(values))
    row = curves.loc[("fixed_adacos", 20)]
    assert row["mean"] == pytest.approx(values.mean()) and row["n"] == 3
    assert (row["low"], row["high"]) == (pytest.approx(low), pytest.approx(high))
    # After the divergence only one ArcFace-default seed is left: its value, no interval.
    row = curves.loc[("arcface_default", 30)]
    assert row["mean"] == pytest.approx(0.9) and row["n"] == 1 and np.isnan(row["low"])
    angles = analysis.angles.set_index(["method", "iteration"])
    assert angles.loc[("fixed_adacos", 10), "theta_med_deg"] == pytest.approx(np.mean([70.0, 69.0, 68.0]))
    assert angles.loc[("fixed_adacos", 10), "s"] == pytest.approx(4.0)
    assert angles.loc[("softmax", 10), "cos_nontarget_mean"] == pytest.approx(0.01)
    assert np.isnan(angles.loc[("softmax", 10), "s"])


def test_fixed_scale_matches_the_loss_and_the_published_values():
    from study.losses import fixed_adacos_scale

    for classes, published in ((10, 3.107), (16, 3.829), (100, 6.499), (10_575, 13.10)):
        assert fixed_scale_of(classes) == pytest.approx(published, abs=1e-2)
        assert fixed_scale_of(classes) == pytest.approx(fixed_adacos_scale(classes))
    assert fixed_scale_of(2) is None and fixed_scale_of(None) is None
    trials, runs, history = study_frames()
    assert analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG, num_classes=100).s_f == pytest.approx(
        fixed_adacos_scale(100))


def test_study_without_a_search_or_tuned_runs():
    trials, runs, history = study_frames()
    runs = runs[runs["method"] != "arcface_tuned"]
    history = history[history["method"] != "arcface_tuned"]
    analysis = analyse_study(trials.iloc[0:0], runs, history, "accuracy", STUDY_CONFIG)
    assert analysis.tuning_curves.query("kind == 'search'").empty and analysis.break_even.empty
    assert analysis.landscape.empty
    assert analysis.searched_losses == []
    assert analysis.verdict_facts["tuned_present"] is False
    assert analysis.verdict_facts["recommendation"] == "fixed_adacos"  # nothing tuned: the option needing no tuning
    assert analysis.verdict_facts["reason"] == "no_tuned_comparison"
    assert analysis.best_final_method == "fixed_adacos"


def test_study_names_missing_columns():
    trials, runs, history = study_frames()
    with pytest.raises(KeyError, match="map_at_r"):
        analyse_study(trials, runs, history, "map_at_r", STUDY_CONFIG)


# --- the convergence claim: where AdaCos overtakes ArcFace for good, through analyse_study ---------

CROSSING_STEPS = [0, 100, 200, 300, 400, 500]
# Mean val curve per method; seed 0 runs 0.01 above it and seed 1 0.01 below, so the mean over seeds is the curve.
CROSSING_MEANS = {
    "fixed_adacos": [0.10, 0.40, 0.75, 0.70, 0.90, 0.95],
    "dynamic_adacos": [0.30, 0.60, 0.80, 0.90, 0.95, 0.995],
    "arcface_tuned": [0.20, 0.50, 0.70, 0.80, 0.85, 0.90],
    "arcface_default": [0.30, 0.70, 0.90, 0.95, 0.97, 0.99],
}


def crossing_frames(means=CROSSING_MEANS):
    """No search; two seeds per method whose val curves average to `means`."""
    trials = pd.DataFrame(columns=["loss", "repeat", "trial", "state", "s", "m", "value", "test_value", "seconds"])
    runs, history = [], []
    for method, curve in means.items():
        for seed, offset in ((0, 0.01), (1, -0.01)):
            runs.append({"method": method, "seed": seed, "val_score": curve[-1] + offset, "seconds": 1.0,
                         "status": "completed", "test_accuracy": curve[-1]})
            history += [{"method": method, "seed": seed, "iteration": step, "accuracy": score + offset}
                        for step, score in zip(CROSSING_STEPS, curve)]
    return trials, pd.DataFrame(runs), pd.DataFrame(history)


def lasting_overtake_by_hand(a, b):
    """Walk back from the end while a ≥ b: the start of that final stretch (index), or None if a is behind at the end."""
    start = None
    for index in range(len(a) - 1, -1, -1):
        if a[index] < b[index]:
            break
        start = index
    return start


def test_study_crossings_at_a_known_iteration_never_and_from_the_start():
    analysis = analyse_study(*crossing_frames(), "accuracy", STUDY_CONFIG)
    table = analysis.crossings.set_index(["adacos_method", "arcface_method"])
    assert list(table.index) == [("fixed_adacos", "arcface_tuned"), ("fixed_adacos", "arcface_default"),
                                 ("dynamic_adacos", "arcface_tuned"), ("dynamic_adacos", "arcface_default")]
    # Fixed AdaCos vs tuned ArcFace: behind at 0 and 100, ahead at 200, behind again at 300, ahead from 400 on.
    row = table.loc[("fixed_adacos", "arcface_tuned")]
    assert row["crossing_iteration"] == 400 and not row["ahead_from_start"]
    # Fixed AdaCos vs ArcFace default: behind everywhere, so never.
    row = table.loc[("fixed_adacos", "arcface_default")]
    assert pd.isna(row["crossing_iteration"]) and not row["ahead_from_start"]
    assert row["gap_at_end"] == pytest.approx(0.95 - 0.99)
    # Dynamic AdaCos vs tuned ArcFace: ahead at every evaluation.
    row = table.loc[("dynamic_adacos", "arcface_tuned")]
    assert row["crossing_iteration"] == 0 and row["ahead_from_start"]
    # Dynamic AdaCos vs ArcFace default: behind until the very last evaluation.
    assert table.loc[("dynamic_adacos", "arcface_default"), "crossing_iteration"] == 500
    assert (table["last_iteration"] == 500).all() and (table["first_iteration"] == 0).all()
    for (adacos, arcface), row in table.iterrows():
        start = lasting_overtake_by_hand(CROSSING_MEANS[adacos], CROSSING_MEANS[arcface])
        expected = None if start is None else CROSSING_STEPS[start]
        assert (None if pd.isna(row["crossing_iteration"]) else row["crossing_iteration"]) == expected
        assert row["ahead_from_start"] == (start == 0)
        assert row["gap_at_end"] == pytest.approx(CROSSING_MEANS[adacos][-1] - CROSSING_MEANS[arcface][-1])


def test_study_crossings_only_for_pairs_present_and_on_common_iterations():
    means = {"fixed_adacos": CROSSING_MEANS["fixed_adacos"], "arcface_default": CROSSING_MEANS["arcface_default"]}
    trials, runs, history = crossing_frames(means)
    # ArcFace default's seeds both diverge at 400 (NaN) and record nothing after: compared up to 400, where
    # a method without a score counts as behind AdaCos, so Fixed AdaCos leads for good from 400.
    default = history["method"] == "arcface_default"
    history.loc[default & (history["iteration"] == 400), "accuracy"] = np.nan
    history = history[~(default & (history["iteration"] == 500))]
    table = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG).crossings
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["adacos_method"], row["arcface_method"]) == ("fixed_adacos", "arcface_default")
    assert row["crossing_iteration"] == 400 and row["last_iteration"] == 400 and np.isnan(row["gap_at_end"])


def test_study_without_adacos_or_arcface_has_no_crossings():
    trials, runs, history = crossing_frames({"fixed_adacos": CROSSING_MEANS["fixed_adacos"],
                                             "softmax": CROSSING_MEANS["arcface_tuned"]})
    crossings = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG).crossings
    assert crossings.empty and list(crossings.columns)[:6] == [
        "adacos_method", "arcface_method", "crossing_iteration", "ahead_from_start", "arcface_ahead_from",
        "adacos_led_before"]


def arcface_final_lead_by_hand(a, b):
    """Walk back from the end while b > a strictly: (start index of b's final lead or None, a strictly led before)."""
    start = None
    for index in range(len(a) - 1, -1, -1):
        if not b[index] > a[index]:
            break
        start = index
    led = start is not None and any(a[index] > b[index] for index in range(start))
    return start, led


REVERSED_MEANS = {  # AdaCos learns fast and is overtaken; the tie at iteration 0 is not a lead
    "fixed_adacos": [0.10, 0.60, 0.80, 0.85, 0.86, 0.87],
    "arcface_tuned": [0.10, 0.40, 0.70, 0.86, 0.90, 0.92],  # ahead for good from 300, after trailing at 100, 200
    "arcface_default": [0.10, 0.30, 0.90, 0.80, 0.88, 0.90],  # ahead at 200, behind at 300, ahead for good from 400
    "dynamic_adacos": [0.10, 0.20, 0.30, 0.40, 0.50, 0.60],  # behind both from 100 on: it never led
}


def test_study_crossings_when_arcface_overtakes_adacos_for_good():
    analysis = analyse_study(*crossing_frames(REVERSED_MEANS), "accuracy", STUDY_CONFIG)
    table = analysis.crossings.set_index(["adacos_method", "arcface_method"])
    expected = {("fixed_adacos", "arcface_tuned"): (300, True), ("fixed_adacos", "arcface_default"): (400, True),
                ("dynamic_adacos", "arcface_tuned"): (100, False), ("dynamic_adacos", "arcface_default"): (100, False)}
    for pair, (start, led) in expected.items():
        row = table.loc[pair]
        assert pd.isna(row["crossing_iteration"]) and not row["ahead_from_start"]
        assert row["arcface_ahead_from"] == start and row["adacos_led_before"] == led
        index, led_by_hand = arcface_final_lead_by_hand(REVERSED_MEANS[pair[0]], REVERSED_MEANS[pair[1]])
        assert (CROSSING_STEPS[index], led_by_hand) == (start, led)
    # Where AdaCos ends at or above ArcFace, ArcFace has no final lead.
    ahead = analyse_study(*crossing_frames(), "accuracy", STUDY_CONFIG).crossings
    finished_ahead = ahead[ahead["crossing_iteration"].notna()]
    assert len(finished_ahead) == 3 and finished_ahead["arcface_ahead_from"].isna().all()
    assert not finished_ahead["adacos_led_before"].any()
    behind = ahead[ahead["crossing_iteration"].isna()].iloc[0]
    assert behind["arcface_ahead_from"] == 0 and not behind["adacos_led_before"]


# --- reproduction of a published setup ----------------------------------------------------------


def reproduction_runs(scores):
    """One row per run: method, seed, status and the two test metrics, as fractions (NaN: diverged)."""
    rows = []
    for method, (knn, argmax) in scores.items():
        for seed, (knn_value, argmax_value) in enumerate(zip(knn, argmax)):
            rows.append({"method": method, "seed": seed, "status": "diverged" if np.isnan(knn_value) else "completed",
                         "val_score": knn_value, "test_knn_accuracy": knn_value, "test_accuracy": argmax_value})
    return pd.DataFrame(rows)


REPRODUCTION_SCORES = {  # method: (test_knn_accuracy per seed, test_accuracy per seed)
    "seed003_arcface": ([0.970, 0.975, 0.980], [0.5, 0.5, 0.5]),  # 97.5 ± 0.5: 97.36 inside
    "seed003_simple_arcface": ([0.90, 0.91, 0.92], [0.5, 0.5, 0.5]),  # 91 ± 1: 95.78 far outside
    "fixed_adacos": ([0.980, np.nan, 0.982], [0.5, np.nan, 0.5]),  # one seed diverged: 98.1 ± 0.14, 98.09 inside
    "softmax": ([0.2, 0.2, 0.2], [0.99, 0.99, 0.99]),  # scored by argmax: 99 ± 0, 98.17 outside
}


def test_reproduction_table_against_numpy():
    table = reproduction_table(reproduction_runs(REPRODUCTION_SCORES), SEED003_MNIST).set_index("method")
    assert list(table.index) == ["seed003_arcface", "seed003_simple_arcface", "fixed_adacos", "softmax"]
    for result in SEED003_MNIST.results:
        knn, argmax = REPRODUCTION_SCORES[result.method]
        values = 100 * np.array(argmax if result.method == "softmax" else knn, dtype=float)
        values = values[np.isfinite(values)]
        mean, std = values.mean(), values.std(ddof=1)
        row = table.loc[result.method]
        assert row["metric"] == ("test_accuracy" if result.method == "softmax" else "test_knn_accuracy")
        assert row["published_percent"] == result.accuracy_percent
        assert row["mean_percent"] == pytest.approx(mean) and row["std_percent"] == pytest.approx(std)
        assert (row["min_percent"], row["max_percent"]) == (pytest.approx(values.min()), pytest.approx(values.max()))
        assert row["seeds"] == values.size and row["runs"] == 3
        assert row["difference_points"] == pytest.approx(mean - result.accuracy_percent)
        assert row["spread_low_percent"] == pytest.approx(mean - 2 * std)
        assert row["within_spread"] == bool(abs(result.accuracy_percent - mean) <= 2 * std)
    assert table["within_spread"].tolist() == [True, False, True, False]
    assert table.loc["fixed_adacos", "seeds"] == 2


def test_reproduction_table_without_runs_or_spread():
    scores = {"fixed_adacos": ([0.9], [0.9]), "softmax": ([0.8, 0.8], [0.85, 0.87])}
    table = reproduction_table(reproduction_runs(scores), SEED003_FACES).set_index("method")
    assert list(table.index) == ["seed003_arcface", "fixed_adacos", "softmax"]
    assert table.loc["seed003_arcface", "runs"] == 0 and np.isnan(table.loc["seed003_arcface", "mean_percent"])
    assert table.loc["seed003_arcface", "within_spread"] is None
    assert table.loc["fixed_adacos", "mean_percent"] == pytest.approx(90.0)
    assert table.loc["fixed_adacos", "within_spread"] is None  # one seed: no spread to judge by
    assert table.loc["softmax", "mean_percent"] == pytest.approx(86.0)
    assert table.loc["softmax", "within_spread"] == bool(abs(89.44 - 86.0) <= 2 * np.std([85.0, 87.0], ddof=1))



def test_reproduction_counts_seeds_at_chance():
    runs = reproduction_runs({"fixed_adacos": ([0.95, 0.96], [0.9, 0.9]), "softmax": ([0.1, 0.96], [0.1, 0.97])})
    runs["test_roc_auc"] = [0.99, 0.98, 0.5, 0.99]  # softmax's seed 0 collapsed
    table = reproduction_table(runs, SEED003_MNIST).set_index("method")
    assert table.loc["softmax", "at_chance"] == 1 and table.loc["fixed_adacos", "at_chance"] == 0
    assert table.loc["seed003_arcface", "at_chance"] == 0  # not run: nothing at chance


# =======================================================================================
# Break-even against the budget-matched control, seed luck, convergence that never reached
# =======================================================================================

SPLIT_TRIALS = [(0.50, 0.52), (0.60, 0.59), (0.70, 0.71), (0.80, 0.78)]  # (val, test) of each split's four trials
SPLIT_FIXED = [(0.70, 0.69), (0.72, 0.71)]  # (val, test) of Fixed AdaCos at seeds 0 and 1
SPLIT_TUNED = [0.770, 0.760]  # tuned ArcFace's test at seeds 0 and 1


def split_study(shifts=(0.0, 0.004, -0.003)):
    """Three class splits, each with its own four-trial search, two Fixed AdaCos and two tuned ArcFace seeds; split j
    moves every Fixed AdaCos test score by shifts[j] (the split-to-split spread of the gap)."""
    trials, runs, history = [], [], []
    for split, shift in enumerate(shifts):
        for trial, (val, test) in enumerate(SPLIT_TRIALS):
            trials.append({"loss": "arcface", "split": split, "repeat": 0, "trial": trial, "state": "COMPLETE",
                           "s": 10.0 + trial, "m": 0.1 * trial, "value": val, "test_value": test, "seconds": 2.0})
        for method, scores in (("fixed_adacos", [(v, t + shift) for v, t in SPLIT_FIXED]),
                               ("arcface_tuned", [(0.75, t) for t in SPLIT_TUNED])):
            for seed, (val, test) in enumerate(scores):
                runs.append({"method": method, "split": split, "seed": seed, "val_score": val, "seconds": 3.0,
                             "status": "completed", "test_accuracy": test})
                history += [{"method": method, "split": split, "seed": seed, "iteration": step,
                             "accuracy": val * step / 20} for step in (0, 10, 20)]
    return pd.DataFrame(trials), pd.DataFrame(runs), pd.DataFrame(history)


def selected_by_subsets(pairs, n):
    """Mean over every n-subset of (val, test) pairs of the test score of the subset's best val (no ties here)."""
    return float(np.mean([max(draw)[1] for draw in itertools.combinations(pairs, n)]))


def test_break_even_against_the_budget_matched_control_by_enumeration():
    shifts = (0.0, 0.004, -0.003)
    analysis = analyse_study(*split_study(shifts), "accuracy", STUDY_CONFIG)
    row = analysis.break_even.set_index("reference").loc["fixed_adacos"]
    gaps = np.array([[selected_by_subsets(SPLIT_TRIALS, n)
                      - selected_by_subsets([(v, t + shift) for v, t in SPLIT_FIXED], n) for n in (1, 2)]
                     for shift in shifts])  # splits × n
    mean = gaps.mean(axis=0)
    low, high = stats.t.interval(0.95, 2, loc=mean, scale=stats.sem(gaps, axis=0))
    assert mean[0] < 0 < low[1]  # the search trails one Fixed AdaCos seed at n = 1, beats the best of 2 at n = 2
    assert (row["control_n"], row["control_splits"]) == (2, 3)
    assert (row["control_gap"], row["control_low"], row["control_high"]) == (
        pytest.approx(mean[1]), pytest.approx(low[1]), pytest.approx(high[1]))
    # Reached at n = 2 and shown by the interval: its lower bound is first above zero there, its upper one at n = 1
    # only if it already reaches zero there.
    expected_low = 1 if high[0] >= 0 else 2
    assert (row["control_trials"], row["control_trials_high"], row["control_trials_low"]) == (2, 2, expected_low)
    assert row["control_seconds"] == pytest.approx(2 * 2.0)
    facts = analysis.verdict_facts["break_even"]
    assert facts["control_trials"] == 2 and facts["control_gap"] == pytest.approx(mean[1])


def test_one_split_gives_the_control_gap_without_an_interval():
    analysis = analyse_study(*split_study((0.0,)), "accuracy", STUDY_CONFIG)
    row = analysis.break_even.set_index("reference").loc["fixed_adacos"]
    assert row["control_splits"] == 1 and np.isnan(row["control_low"]) and np.isnan(row["control_high"])
    assert row["control_trials"] == 2 and pd.isna(row["control_trials_high"])  # reached, not shown


def test_seed_luck_is_the_selected_trials_test_score_against_its_retrained_seeds():
    from study.analysis import seed_luck
    from study.benchmark.cells import seed_luck as benchmark_seed_luck

    assert benchmark_seed_luck is seed_luck  # one implementation for the study and the benchmark
    shifts = (0.0, 0.004, -0.003)
    trials, runs, history = split_study(shifts)
    runs.loc[(runs["method"] == "arcface_tuned") & (runs["split"] == 1), "test_accuracy"] -= 0.01
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    # The best trial by val scored 0.78 on test in every split; its (s, m) retrained scored 0.765, 0.755, 0.765.
    luck = np.array([0.78 - 0.765, 0.78 - 0.755, 0.78 - 0.765])
    low, high = stats.t.interval(0.95, 2, loc=luck.mean(), scale=stats.sem(luck))
    summary = analysis.search_summary.set_index("loss").loc["arcface"]
    assert (summary["seed_luck"], summary["seed_luck_low"], summary["seed_luck_high"]) == (
        pytest.approx(luck.mean()), pytest.approx(low), pytest.approx(high))
    assert summary["seed_luck_splits"] == 3
    assert analysis.verdict_facts["seed_luck"]["seed_luck"] == pytest.approx(luck.mean())


def test_neither_reached_is_never_a_difference_of_zero():
    # The best method's mean final val is 0.9333 (tuned ArcFace: 1.0, 0.9, 0.9), so 99% of it is 0.924: two of its
    # three seeds and every Fixed AdaCos seed (0.92) miss it. Neither median reaches it.
    trials, runs, history = study_frames()
    keep = runs["method"].isin(["fixed_adacos", "arcface_tuned"])
    runs, history = runs[keep].copy(), history[history["method"].isin(["fixed_adacos", "arcface_tuned"])].copy()
    finals = {("arcface_tuned", 0): 1.0, ("arcface_tuned", 1): 0.9, ("arcface_tuned", 2): 0.9}
    for (method, seed), group in history.groupby(["method", "seed"]):
        top = finals.get((method, seed), 0.92)
        history.loc[group.index, "accuracy"] = np.linspace(0.1, top, len(group))
        runs.loc[(runs["method"] == method) & (runs["seed"] == seed), "val_score"] = top
    analysis = analyse_study(trials, runs, history, "accuracy", STUDY_CONFIG)
    speed = analysis.convergence_speed.set_index(["basis", "fraction"]).loc[("best", 0.99)]
    assert speed["reached"] == "neither" and np.isnan(speed["difference"]) and pd.isna(speed["faster"])
    # Seed 0 of tuned ArcFace reached it, no Fixed AdaCos seed did: sooner on 1, tied (neither) on 2.
    assert (speed["faster_seeds"], speed["slower_seeds"], speed["tied_seeds"]) == (1, 0, 2)
    from study.report.document import render_markdown
    from study.report.sections import convergence_section

    text = render_markdown("t", [convergence_section(analysis, {})])
    row = next(line for line in text.splitlines() if line.startswith("| ArcFace tuned |") and "neither" in line)
    cell = row.strip("|").split("|")[-1]  # − Fixed AdaCos at 99%
    assert cell.strip().startswith("neither reached; sooner on 1, later on 0 of 3 seeds") and "+0" not in cell


def coverage_by_enumeration(n, j):
    """P(x₍ⱼ₎ ≤ median ≤ x₍ₙ₊₁₋ⱼ₎) for n continuous draws: over all 2ⁿ equally likely below/above patterns, the share
    whose count below the median lies in [j, n − j]."""
    hits = sum(j <= sum(pattern) <= n - j for pattern in itertools.product((0, 1), repeat=n))
    return hits / 2 ** n


@pytest.mark.parametrize("n", range(1, 15))
def test_the_median_interval_is_the_narrowest_order_statistic_pair_with_its_coverage(n):
    from study.analysis.convergence import median_interval

    values = np.arange(1.0, n + 1.0)  # sorted: x₍ᵢ₎ = i
    low, high, coverage = median_interval(values[::-1], 0.95)
    valid = [j for j in range(1, n // 2 + 1) if coverage_by_enumeration(n, j) >= 0.95]
    if not valid:
        assert np.isnan(low) and np.isnan(high) and np.isnan(coverage) and n <= 5
        return
    j = max(valid)
    assert (low, high) == (j, n + 1 - j) and coverage == pytest.approx(coverage_by_enumeration(n, j))


def test_the_median_interval_covers_in_simulation_with_ties_and_runs_that_never_reached():
    from study.analysis.convergence import median_interval

    # Iterations on an evaluation grid of 10 (ties), a fifth of the runs never reaching (inf): the true median of
    # this distribution is the population's 50% quantile; the interval must cover it at least 95% of the time.
    rng = np.random.default_rng(7)
    population = np.where(rng.random(400_000) < 0.2, np.inf, 10 * np.ceil(rng.gamma(4.0, 6.0, 400_000)))
    truth = np.median(population)
    hits = []
    for _ in range(2000):
        low, high, _ = median_interval(rng.choice(population, 8), 0.95)
        hits.append(low <= truth <= high)
    assert np.mean(hits) >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 2000)


def test_the_sign_test_matches_enumeration():
    from study.analysis.convergence import paired_sign_test

    mine = np.array([10, 20, 30, 40, 50, np.inf, np.inf, 30])
    theirs = np.array([20, 30, 40, 30, 60, np.inf, 40, 30])  # sooner 4, later 2 (40 > 30, inf > 40), tied 2
    result = paired_sign_test(mine, theirs)
    assert (result["faster_seeds"], result["slower_seeds"], result["tied_seeds"]) == (4, 2, 2)
    # Two-sided: every pattern of 6 signs at least as far from 3 : 3 as 4 : 2.
    extreme = sum(abs(sum(signs) - 3) >= 1 for signs in itertools.product((0, 1), repeat=6)) / 2 ** 6
    assert result["p_value"] == pytest.approx(extreme)
