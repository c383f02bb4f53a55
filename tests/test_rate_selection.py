"""The winner's-curse bound on an untuned method's reported score (study.analysis.rate_selection), checked against
closed forms and against the selection itself simulated with study.learning_rates.choose_rate."""

import math

import numpy as np
import pandas as pd
import pytest

from study.analysis.rate_selection import seed_covariance, selection_bias_bound
from study.learning_rates import choose_rate
from study.statistics import expected_maximum

RATES = (0.003, 0.009, 0.027)


@pytest.mark.parametrize("k, closed_form", [(1, 0.0), (2, 1 / math.sqrt(math.pi)), (3, 3 / (2 * math.sqrt(math.pi))),
                                            (4, 1.0293753730039641)])
def test_the_expected_maximum_of_k_normals_matches_its_closed_form(k, closed_form):
    assert expected_maximum(k) == pytest.approx(closed_form, abs=1e-9)


def test_no_draw_has_no_maximum():
    with pytest.raises(ValueError, match="at least one draw"):
        expected_maximum(0)


def _simulated_bias(means, seeds, sd_val, sd_test, rho, splits=20_000, seed=0):
    """The cell's selection simulated: per split, every rate's seeds with jointly normal seed noise on val and test,
    choose_rate on their val scores; the kept runs' test mean minus the chosen rate's true test score (what fresh
    seeds average to), its standard error, and the kept runs as a cell keeps them."""
    rng = np.random.default_rng(seed)
    noise_val = rng.standard_normal((splits, len(RATES), seeds))
    noise_test = rho * noise_val + math.sqrt(1 - rho ** 2) * rng.standard_normal(noise_val.shape)
    mean = np.asarray(means, dtype=float)[None, :, None]
    val, test = mean + sd_val * noise_val, mean + sd_test * noise_test
    chosen = np.array([RATES.index(choose_rate(dict(zip(RATES, split)), RATES[1])) for split in val.tolist()])
    picked = np.arange(splits)
    kept_val, kept_test = val[picked, chosen], test[picked, chosen]
    bias = kept_test.mean(axis=1) - np.asarray(means)[chosen]
    kept = pd.DataFrame({"split": np.repeat(picked, seeds), "seed": np.tile(np.arange(seeds), splits),
                         "val_score": kept_val.ravel(), "test_map_at_r": kept_test.ravel()})
    return float(bias.mean()), float(bias.std() / math.sqrt(splits)), kept


def test_at_tied_rates_the_bound_is_the_selection_bias_itself():
    bias, error, kept = _simulated_bias((0.6, 0.6, 0.6), seeds=2, sd_val=0.02, sd_test=0.03, rho=0.8)
    # the bound from the population's noise: ρ σ_test · E[max of 3] / √2
    assert bias == pytest.approx(0.8 * 0.03 * expected_maximum(3) / math.sqrt(2), abs=4 * error)
    # and as measured from the kept runs alone, as a cell measures it: val chose on the seeds' mean, and normal
    # deviations from a mean are independent of it, so the kept runs' within-split noise is the population's
    measured = selection_bias_bound(kept, "test_map_at_r", rates=3)
    assert measured == pytest.approx(bias, rel=0.15)


def test_where_val_separates_the_rates_the_bias_is_below_the_bound():
    bias, error, kept = _simulated_bias((0.55, 0.6, 0.62), seeds=2, sd_val=0.02, sd_test=0.03, rho=0.8)
    tie = 0.8 * 0.03 * expected_maximum(3) / math.sqrt(2)
    assert 0 < bias + 4 * error and bias < 0.8 * tie
    assert selection_bias_bound(kept, "test_map_at_r", rates=3) > bias + 4 * error


def test_uncorrelated_val_and_test_carry_no_bias_and_no_bound():
    bias, error, kept = _simulated_bias((0.6, 0.6, 0.6), seeds=2, sd_val=0.02, sd_test=0.03, rho=0.0)
    assert abs(bias) < 4 * error
    assert selection_bias_bound(kept, "test_map_at_r", rates=3) == pytest.approx(0.0, abs=0.002)


def test_the_seed_noise_is_pooled_within_splits_not_across_them():
    # splits far apart in score but identical seed noise: the between-split spread must not enter
    runs = pd.DataFrame({"split": [0, 0, 1, 1], "seed": [0, 1, 0, 1], "val_score": [0.1, 0.3, 0.8, 1.0],
                         "test_map_at_r": [0.2, 0.3, 0.9, 1.0]})
    noise = seed_covariance(runs, "test_map_at_r")
    # per split: val deviations ±0.1, test ±0.05 → covariance 2·(0.1·0.05)/1 = 0.01, val variance 0.02, 2 df
    assert noise == pytest.approx({"covariance": 0.01, "val_variance": 0.02, "df": 2})
    assert selection_bias_bound(runs, "test_map_at_r", rates=3) == pytest.approx(
        0.01 / math.sqrt(0.02) * expected_maximum(3) / math.sqrt(2))


def test_one_rate_chooses_nothing_and_one_run_per_split_measures_nothing():
    runs = pd.DataFrame({"split": [0, 1], "seed": [0, 0], "val_score": [0.5, 0.6], "test_map_at_r": [0.5, 0.6]})
    assert selection_bias_bound(runs, "test_map_at_r", rates=1) == 0.0
    assert math.isnan(selection_bias_bound(runs, "test_map_at_r", rates=3))
