"""The tuning intervals: the jackknife variance against brute force, the valid range, search_gain, the break-even's
test inversion, and their coverage in a small simulated world with a known truth (the full one is
benchmarks/coverage.py)."""

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import (
    MIN_EFFECTIVE_TRIALS,
    effective_trials,
    jackknife_selected_variance,
    search_gain,
    selected_curve_with_variance,
)
from study.analysis.coverage import calibrated_worlds, coverage_table, true_selected_curve

WORLD = Path(__file__).parent / "data" / "coverage_world.csv"


def brute_force_curve(selection, reported, n):
    """Mean over every subset of n trials of the best-by-selection trial's reported score (no ties here)."""
    values = [reported[max(draw, key=lambda i: selection[i])] for draw in itertools.combinations(range(len(selection)), n)]
    return float(np.mean(values))


def brute_force_jackknife(selection, reported, n):
    """(N−1)/N · Σ (θ̂_(−i) − mean)², each leave-one-out curve by enumeration."""
    size = len(selection)
    leave_out = [brute_force_curve(np.delete(selection, i), np.delete(reported, i), n) for i in range(size)]
    return (size - 1) / size * float(np.sum((np.array(leave_out) - np.mean(leave_out)) ** 2))


def test_jackknife_variance_matches_leave_one_out_by_enumeration():
    rng = np.random.default_rng(3)
    selection, reported = rng.normal(size=9), rng.normal(size=9)
    variance = jackknife_selected_variance(selection, reported)
    for n in range(1, 9):
        assert variance[n - 1] == pytest.approx(brute_force_jackknife(selection, reported, n), rel=1e-10)
    assert np.isnan(variance[-1])  # at n = N no trial can be left out
    # At n = 1 the curve is the mean of the reported scores, whose jackknife variance is s²/N.
    assert variance[0] == pytest.approx(reported.var(ddof=1) / reported.size)


def test_effective_trials_run_from_all_trials_to_one():
    effective = effective_trials(12)
    assert effective[0] == pytest.approx(12.0) and effective[-1] == pytest.approx(1.0)
    assert np.all(np.diff(effective) < 0)
    # n = 2 of 3: weights 0, 1/3, 2/3 on the ranks, so 1 / (1/9 + 4/9) = 9/5.
    assert effective_trials(3)[1] == pytest.approx(9 / 5)


def test_the_curve_has_an_interval_only_where_enough_trials_carry_it():
    rng = np.random.default_rng(0)
    curve, variance, df = selected_curve_with_variance(rng.normal(size=32), rng.normal(size=32))
    valid = np.isfinite(variance)
    assert valid[0] and not valid[-1]
    assert np.array_equal(valid, effective_trials(32) >= MIN_EFFECTIVE_TRIALS)
    assert np.all(np.diff(valid.astype(int)) <= 0)  # one valid range from n = 1
    np.testing.assert_allclose(df, effective_trials(32) - 1.0)


def test_search_gain_is_the_curve_minus_the_reference_mean_with_a_welch_interval():
    rng = np.random.default_rng(1)
    selection, reported, reference = rng.normal(size=10), rng.normal(size=10), rng.normal(1.0, 0.5, size=6)
    for n in (1, 2):
        estimate, low, high = search_gain(selection, reported, reference, n)
        assert estimate == pytest.approx(brute_force_curve(selection, reported, n) - reference.mean())
        curve_variance = brute_force_jackknife(selection, reported, n)
        reference_variance = reference.var(ddof=1) / reference.size
        curve_df = 1.0 / np.sum(_weights(10, n) ** 2) - 1.0
        df = (curve_variance + reference_variance) ** 2 / (curve_variance ** 2 / curve_df + reference_variance ** 2 / 5)
        half = stats.t.ppf(0.975, min(df, 10.0)) * np.sqrt(curve_variance + reference_variance)  # df capped at 10
        assert (low, high) == (pytest.approx(estimate - half), pytest.approx(estimate + half))
    # Beyond the valid range: the estimate, but no interval.
    estimate, low, high = search_gain(selection, reported, reference, 10)
    assert estimate == pytest.approx(reported[np.argmax(selection)] - reference.mean())
    assert np.isnan(low) and np.isnan(high)
    with pytest.raises(ValueError, match="n must lie in 1…10"):
        search_gain(selection, reported, reference, 11)


def _weights(size, n):
    """Without-replacement order-statistic weights by counting subsets: P(rank i is the best of n)."""
    from math import comb
    return np.array([(comb(i, n) - comb(i - 1, n)) / comb(size, n) for i in range(1, size + 1)])


def test_true_curve_of_a_known_population():
    # Val and test equal, uniform on [0, 1]: the best of n has mean n / (n + 1).
    values = np.linspace(0, 1, 200_001)
    np.testing.assert_allclose(true_selected_curve(values, values, 5), [n / (n + 1) for n in range(1, 6)], atol=1e-5)


def test_the_worlds_break_even_early_late_and_never():
    world = pd.read_csv(WORLD)
    trials, reference = world[world["kind"] == "trial"], world[world["kind"] == "fixed_adacos"]
    pays, late, never = calibrated_worlds(trials["val"], trials["test"], reference["test"], 24, pool=100_000)
    assert pays.break_even() == 2 and late.break_even() == round(0.6 * 24) and never.break_even() == np.inf


@pytest.mark.slow
def test_intervals_cover_in_a_small_simulated_world():
    # 150 studies per world (Monte Carlo error about 0.018 at 95%): every interval the report shows must cover
    # at the nominal level within three Monte Carlo errors, and be at most 1.5× as wide as it needs to be.
    world = pd.read_csv(WORLD)
    trials, reference = world[world["kind"] == "trial"], world[world["kind"] == "fixed_adacos"]
    table = coverage_table(trials["val"], trials["test"], reference["test"], n_trials=24, n_references=10,
                           studies=150, seed=5, with_bootstrap=True)
    shown = table[table["method"] != "percentile bootstrap (earlier)"]
    assert set(shown["interval"]) == {"curve", "search gain", "break-even"}
    assert set(shown["world"]) == {"pays", "late", "never"}
    assert (shown["coverage"] >= 0.95 - 3 * 0.018).all(), shown[shown["coverage"] < 0.896]
    assert (shown["width_ratio"].dropna() <= 1.5).all()
    # The earlier percentile bootstrap of the whole search's curve (n = N) falls short where this one holds.
    earlier = table[(table["method"] == "percentile bootstrap (earlier)") & (table["n"] == 24)]
    assert earlier["coverage"].mean() < shown[shown["interval"] == "curve"]["coverage"].min()


def test_the_budget_matched_interval_covers_in_a_world_with_split_effects():
    # Four class splits, each its own search of 12 random-search trials and 2 Fixed AdaCos seeds, as the default
    # study. A trial's (s, m) sets its true score (skewed: a few settings train badly); a training seed moves val
    # and test together, evaluation noise apart; each split moves the search's level against Fixed AdaCos's. The
    # truth is E[the val-selected of n trials] − E[the best of n seeds by val], from a large pool of each.
    from study.analysis import break_even_against_control, expected_selected_after_n_trials

    rng = np.random.default_rng(11)
    seed_sd, evaluation_sd, split_gap_sd = 0.02, 0.01, 0.006

    def trials(count, rng):
        quality = 0.40 - 0.06 * rng.exponential(1.0, count)
        seed = rng.normal(0.0, seed_sd, count)
        return quality + seed + rng.normal(0, evaluation_sd, count), quality + seed + rng.normal(0, evaluation_sd, count)

    def fixed_runs(count, rng):
        seed = rng.normal(0.0, seed_sd, count)
        return 0.37 + seed + rng.normal(0, evaluation_sd, count), 0.37 + seed + rng.normal(0, evaluation_sd, count)

    pool = 400_000
    truth = (true_selected_curve(*trials(pool, rng), 2) - true_selected_curve(*fixed_runs(pool, rng), 2))[-1]
    hits, widths, estimates = [], [], []
    for _ in range(1500):
        search, control = {}, {}
        for split in range(4):
            shift = rng.normal(0.0, split_gap_sd)
            val, test = trials(12, rng)
            search[split] = expected_selected_after_n_trials(val, test + shift)
            val, test = fixed_runs(2, rng)
            control[split] = expected_selected_after_n_trials(val, test)
        facts = break_even_against_control(search, control, 0.95)
        hits.append(facts["control_low"] <= truth <= facts["control_high"])
        widths.append(facts["control_high"] - facts["control_low"])
        estimates.append(facts["control_gap"])
    coverage = np.mean(hits)
    assert coverage >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / len(hits)), coverage
    # A t interval on 3 df is wider than the estimate's real spread needs (t₃ / z ≈ 1.6): measured, not hidden.
    assert np.mean(widths) / (2 * 1.96 * np.std(estimates)) < 1.8
