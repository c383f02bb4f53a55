"""Pooling with the data source as a level, a cell's standard error floored at its seed noise, and a trend within one
source: hand-computed cases, closed forms, numpy's own least squares, and a coverage simulation that could fail."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import (MIN_I2_DF, equal_weight_mean, pool_across_sources, random_effects, slope_within_source,
                            standard_error_floor)
from study.analysis.coverage import source_pooling_coverage
from study.analysis.pooling import _across_sources_rows, _random_effects_rows, source_membership

T2 = 4.302652729749464  # t_{2, 0.975}

# The committed benchmark's design for tuned ArcFace − Fixed AdaCos: 3 sources with 1, 1 and 5 configurations, each
# standard error floored at its seed noise (2 df over splits, 6 df where the floor binds).
OLD_SOURCES = ["digits", "mnist5k"] + ["glyphs"] * 5
OLD_SE = [0.00311, 0.00232, 0.00154, 0.00321, 0.00561, 0.00086, 0.00109]
OLD_DF = [2, 2, 6, 6, 2, 6, 6]


# --- pool_across_sources --------------------------------------------------------------------------------------------


def test_two_stage_by_hand():
    # Sources A: (1, 3), B: (2), C: (6). Source means 2, 2, 6: μ̂ = 10/3; s²_sources = (16/9 + 16/9 + 64/9)/2 = 16/3,
    # SE = √(16/3 / 3) = 4/3, CI 10/3 ± t₂·4/3. Within A: residuals ∓1, s²_within = 2 on 4 − 3 = 1 df; its noise
    # (1 − 1/2)·(0.25 + 0.25)/1 = 0.25, so σ̂²_c = 1.75; h = (1/2 + 1 + 1)/3 = 5/6, 1 − h = 1/6.
    # Prediction variance 16/3·(1 + 1/3) + 1.75/6 = 64/9 + 7/24 = 533/72.
    pooled = pool_across_sources([1.0, 3.0, 2.0, 6.0], [0.5] * 4, ["A", "A", "B", "C"])
    assert pooled.mean == pytest.approx(10 / 3)
    assert pooled.standard_error == pytest.approx(4 / 3) and pooled.df == 2
    assert (pooled.low, pooled.high) == pytest.approx((10 / 3 - T2 * 4 / 3, 10 / 3 + T2 * 4 / 3))
    assert pooled.between_source_variance == pytest.approx(16 / 3)
    assert pooled.configuration_variance == pytest.approx(1.75) and pooled.within_source_df == 1
    assert pooled.prediction_standard_error == pytest.approx(math.sqrt(533 / 72))
    half = T2 * math.sqrt(533 / 72)
    assert (pooled.prediction_low, pooled.prediction_high) == pytest.approx((10 / 3 - half, 10 / 3 + half))
    assert (pooled.sources, pooled.configurations) == (3, 4)
    assert pooled.source_means == (("A", 2.0, 2), ("B", 2.0, 1), ("C", 6.0, 1))


def test_the_configurations_own_noise_is_not_counted_as_configuration_variance():
    # Within A the spread (s²_within = 2) is all noise when its standard errors say so: σ̂²_c truncates at 0, and the
    # prediction is the between-source part alone, √(16/3·4/3) = 8/3.
    pooled = pool_across_sources([1.0, 3.0, 2.0, 6.0], [2.0, 2.0, 0.1, 0.1], ["A", "A", "B", "C"])
    assert pooled.configuration_variance == 0.0
    assert pooled.prediction_high - pooled.mean == pytest.approx(T2 * 8 / 3)


def test_one_configuration_per_source_is_the_equal_weight_t_interval():
    y = np.array([0.012, -0.004, 0.003, 0.009, 0.001])
    pooled = pool_across_sources(y, [0.002] * 5, ["a", "b", "c", "d", "e"], confidence=0.9)
    equal = equal_weight_mean(y, confidence=0.9)
    quantile = stats.t.ppf(0.95, 4)
    assert (pooled.low, pooled.high) == pytest.approx((equal["low"], equal["high"]))
    assert (pooled.prediction_low, pooled.prediction_high) == pytest.approx(
        (equal["prediction_low"], equal["prediction_high"]))
    assert pooled.high - pooled.mean == pytest.approx(quantile * y.std(ddof=1) / math.sqrt(5))
    assert math.isnan(pooled.configuration_variance)  # no source has two configurations to estimate it from


def test_the_committed_benchmark_reads_as_the_issue_measured():
    # Issue 26: digits +0.0104, mnist5k +0.0064, glyphs +0.0008; over sources +0.0059, 95% CI [−0.0062, +0.0179].
    y = [0.01043, 0.00643, 0.00334, 0.00539, -0.00739, 0.0011, 0.00141]
    pooled = pool_across_sources(y, OLD_SE, OLD_SOURCES, degrees_of_freedom=OLD_DF)
    assert [round(mean, 4) for _, mean, _ in pooled.source_means] == [0.0104, 0.0064, 0.0008]
    assert (round(pooled.mean, 4), round(pooled.low, 4), round(pooled.high, 4)) == (0.0059, -0.0062, 0.0179)
    assert pooled.prediction_low < pooled.low and pooled.prediction_high > pooled.high
    assert pooled.standard_error_df == 2


def test_mapping_access_and_a_frozen_result():
    pooled = pool_across_sources([0.1, 0.2, 0.4], [0.01] * 3, ["x", "y", "z"])
    assert pooled["mean"] == pooled.mean and pooled["prediction_high"] == pooled.prediction_high
    assert dict(pooled)["sources"] == 3 and pooled.as_dict()["configurations"] == 3
    assert "source" in pooled.method
    with pytest.raises(KeyError, match="fields are"):
        pooled["estimate"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        pooled.mean = 0.0


def test_nan_where_the_design_cannot_give_an_interval_never_an_error():
    one = pool_across_sources([0.1, 0.3], [0.01, 0.02], ["s", "s"])
    assert one.mean == pytest.approx(0.2) and one.sources == 1
    assert all(math.isnan(one[key]) for key in ("low", "high", "prediction_low", "prediction_high"))
    two = pool_across_sources([0.1, 0.3, 0.2], [0.01, 0.02, 0.0], ["s", "s", "t"])  # a zero SE is valid here
    assert math.isfinite(two.low) and math.isfinite(two.high)
    assert math.isnan(two.prediction_low) and math.isnan(two.prediction_high)  # 2 sources: no prediction
    identical = pool_across_sources([0.1] * 3, [0.01] * 3, ["a", "b", "c"])
    assert (identical.low, identical.high) == pytest.approx((0.1, 0.1))


@pytest.mark.parametrize("arguments, message", [
    (([0.1, 0.2], [0.01], ["a", "b"]), "one standard error per estimate"),
    (([], [], []), "one standard error per estimate"),
    (([0.1, math.nan], [0.01, 0.01], ["a", "b"]), "estimate must be finite"),
    (([0.1, 0.2], [0.01, math.inf], ["a", "b"]), "finite and ≥ 0"),
    (([0.1, 0.2], [0.01, -0.01], ["a", "b"]), "finite and ≥ 0"),
    (([0.1, 0.2], [0.01, 0.01], ["a"]), "one source per configuration"),
    (([0.1, 0.2], [0.01, 0.01], ["a", None]), "needs its data source"),
    (([0.1, 0.2], [0.01, 0.01], ["a", math.nan]), "needs its data source"),
    (([0.1, 0.2], [0.01, 0.01], "ab"), "not one string"),
])
def test_invalid_input_is_refused_with_a_clear_message(arguments, message):
    with pytest.raises(ValueError, match=message):
        pool_across_sources(*arguments)


def test_invalid_degrees_of_freedom_are_refused():
    with pytest.raises(ValueError, match="positive"):
        pool_across_sources([0.1, 0.2], [0.01, 0.01], ["a", "b"], degrees_of_freedom=[2, 0])
    with pytest.raises(ValueError, match="one df per standard error"):
        pool_across_sources([0.1, 0.2], [0.01, 0.01], ["a", "b"], degrees_of_freedom=[2])
    exact = pool_across_sources([0.1, 0.2], [0.01, 0.01], ["a", "b"], degrees_of_freedom=[math.nan, math.inf])
    assert exact.standard_error_df == math.inf


def test_the_simulation_runs_the_same_numbers_as_the_functions():
    rng = np.random.default_rng(5)
    names, membership = source_membership(OLD_SOURCES)
    y = rng.normal(0.0, 0.004, (6, 7))
    se = np.abs(rng.normal(0.003, 0.001, (6, 7)))
    rows = _across_sources_rows(y, se, membership, 0.95)
    tau2, _, _, mean = _random_effects_rows(y, se)
    for index in range(6):
        one = pool_across_sources(y[index], se[index], OLD_SOURCES)
        assert (one.low, one.prediction_high) == pytest.approx((rows["low"][index], rows["prediction_high"][index]))
        classic = random_effects(y[index], se[index])
        assert (classic["tau2"], classic["estimate"]) == pytest.approx((tau2[index], mean[index]))


def test_coverage_holds_where_the_source_effect_dominates_and_dersimonian_laird_does_not():
    # Source sd = 2 × configuration sd with the committed design: 5 of 7 configurations share one source, so pooling
    # them as independent studies understates the spread. pool_across_sources keeps ≥ 93% for the mean and for a
    # new source; DerSimonian–Laird (about 52%) and equal weights over configurations (about 68%) do not.
    table = source_pooling_coverage(OLD_SE, OLD_DF, OLD_SOURCES, 0.0038, source_ratios=(2.0,), benchmarks=3000,
                                    seed=11)
    coverage = table.set_index(["pooling", "interval"])["coverage"]
    assert coverage["pool_across_sources", "mean"] >= 0.93
    assert coverage["pool_across_sources", "prediction"] >= 0.93
    assert coverage["dersimonian_laird", "mean"] < 0.8 and coverage["dersimonian_laird", "prediction"] < 0.9
    assert coverage["equal_weights", "mean"] < 0.85
    assert table.loc[table["read"], "pooling"].unique().tolist() == ["pool_across_sources"]


def test_the_simulation_sees_a_correct_interval_as_correct():
    # With exact standard errors, no source effect and one configuration per source, the equal-weight t interval is
    # exact: the simulation must find 95% within Monte Carlo error (else it would be measuring itself).
    table = source_pooling_coverage([0.01] * 6, [math.inf] * 6, list("abcdef"), 0.01, source_ratios=(0.0,),
                                    benchmarks=4000, seed=3)
    row = table[(table["pooling"] == "equal_weights") & (table["interval"] == "mean")].iloc[0]
    assert abs(row["coverage"] - 0.95) < 3 * row["mc_error"]


# --- the I² rule ----------------------------------------------------------------------------------------------------


def test_i2_is_not_read_on_few_degree_of_freedom_standard_errors():
    y, se = [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]  # I² = 2/3 when read (test_pooling's hand case)
    assert random_effects(y, se)["i2"] == pytest.approx(2 / 3)
    assert random_effects(y, se, degrees_of_freedom=[MIN_I2_DF] * 3)["i2"] == pytest.approx(2 / 3)
    few = random_effects(y, se, degrees_of_freedom=[2, 6, MIN_I2_DF])
    assert math.isnan(few["i2"]) and few["i2_note"] == f"not read: standard errors on < {MIN_I2_DF} df (fewest 2)"
    assert few["tau2"] == pytest.approx(2.0)  # everything else is still computed
    with pytest.raises(ValueError, match="one df per standard error"):
        random_effects(y, se, degrees_of_freedom=[2, 2])


# --- standard_error_floor -------------------------------------------------------------------------------------------


def _pairs(values: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"split": split, "seed": seed, "difference": value}
                         for split, row in values.items() for seed, value in enumerate(row)])


def _within_by_least_squares(table: pd.DataFrame) -> tuple[float, int]:
    """The pooled within-split variance as the residual variance of y on split indicators (a second route)."""
    design = pd.get_dummies(table["split"]).to_numpy(dtype=float)
    y = table["difference"].to_numpy(dtype=float)
    fitted = design @ np.linalg.lstsq(design, y, rcond=None)[0]
    df = y.size - design.shape[1]
    return float(np.sum((y - fitted) ** 2) / df), df


def test_the_floor_binds_where_the_split_means_agree_by_chance():
    table = _pairs({0: [0.010, 0.000, 0.005], 1: [0.004, 0.008, 0.003], 2: [0.001, 0.009, 0.005]})
    floored = standard_error_floor(table)
    within, within_df = _within_by_least_squares(table)
    split_means = table.groupby("split")["difference"].mean()
    assert floored.estimate == pytest.approx(table["difference"].mean())  # balanced: mean of means = grand mean
    assert floored.se_splits == pytest.approx(stats.sem(split_means))
    assert floored.within_variance == pytest.approx(within) and floored.within_df == within_df == 6
    assert floored.se_floor == pytest.approx(math.sqrt(within / 9))
    assert floored.se_floor > floored.se_splits
    assert (floored.standard_error, floored.df, floored.se_from) == (pytest.approx(floored.se_floor), 6.0,
                                                                    "seed floor")
    half = stats.t.ppf(0.975, 6) * floored.se_floor
    assert (floored.low, floored.high) == pytest.approx((floored.estimate - half, floored.estimate + half))


def test_the_splits_standard_error_stands_where_the_splits_differ():
    table = _pairs({0: [0.010, 0.011], 1: [0.030, 0.031], 2: [0.050, 0.052]})
    floored = standard_error_floor(table, confidence=0.9)
    split_means = table.groupby("split")["difference"].mean()
    assert floored.standard_error == pytest.approx(stats.sem(split_means))
    assert (floored.df, floored.se_from) == (2.0, "splits")
    assert floored["high"] - floored.estimate == pytest.approx(stats.t.ppf(0.95, 2) * stats.sem(split_means))


def test_the_floor_with_unequal_seeds_per_split():
    # Split means of n₀ = 3 and n₁ = 2 seeds: under seed noise alone Var(mean of means) = σ²·(1/3 + 1/2)/4.
    table = _pairs({0: [0.0, 0.3, 0.6], 1: [0.4, 0.5]})
    floored = standard_error_floor(table)
    within, within_df = _within_by_least_squares(table)
    assert floored.within_df == within_df == 3
    assert floored.se_floor == pytest.approx(math.sqrt(within * (1 / 3 + 1 / 2) / 4))
    assert floored.estimate == pytest.approx((0.3 + 0.45) / 2)
    assert (floored.splits, floored.pairs) == (2, 5)


def test_the_floor_without_enough_pairs_is_nan_or_one_part():
    one_split = standard_error_floor(_pairs({0: [0.1, 0.3]}))
    assert math.isnan(one_split.se_splits) and one_split.se_from == "seed floor" and one_split.df == 1
    one_seed = standard_error_floor(_pairs({0: [0.1], 1: [0.3], 2: [0.2]}))
    assert math.isnan(one_seed.se_floor) and one_seed.se_from == "splits" and one_seed.df == 2
    nothing = standard_error_floor(pd.DataFrame(columns=["split", "seed", "difference"]))
    assert math.isnan(nothing.standard_error) and nothing.splits == 0
    with pytest.raises(ValueError, match="columns split, seed, difference"):
        standard_error_floor(pd.DataFrame({"split": [0], "difference": [0.1]}))
    with pytest.raises(ValueError, match="one difference per split and seed"):
        standard_error_floor(pd.DataFrame({"split": [0, 0], "seed": [1, 1], "difference": [0.1, 0.2]}))


# --- slope_within_source --------------------------------------------------------------------------------------------


def test_slope_within_source_against_numpy_polyfit():
    x = np.log10([10, 10, 50, 100, 100, 300, 1000])
    y = np.array([0.0104, 0.0064, 0.0054, 0.0033, -0.0074, 0.0011, 0.0014])
    fit = slope_within_source(y, x, OLD_SOURCES, "glyphs")
    inside = np.array(OLD_SOURCES) == "glyphs"
    coefficients, covariance = np.polyfit(x[inside], y[inside], 1, cov=True)
    assert fit.slope == pytest.approx(coefficients[0])
    assert fit.standard_error == pytest.approx(math.sqrt(covariance[0, 0]))
    assert (fit.df, fit.configurations, fit.reason) == (3, 5, "")
    half = stats.t.ppf(0.975, 3) * math.sqrt(covariance[0, 0])
    assert (fit.low, fit.high) == pytest.approx((coefficients[0] - half, coefficients[0] + half))
    assert slope_within_source(y, x, OLD_SOURCES).source == "glyphs"  # the source with the most class counts


def test_slope_within_source_is_nan_with_its_reason_where_not_identified():
    x, sources = [1.0, 2.0, 1.0, 1.5, 2.0], ["a", "a", "b", "b", "b"]
    short = slope_within_source([0.1, 0.2, 0.3, 0.1, 0.2], x, sources, "a")
    assert math.isnan(short.slope) and short.reason == "fewer than 3 configurations in source 'a' (2)"
    flat = slope_within_source([0.1, 0.2, 0.3], [2.0, 2.0, 2.0], ["c"] * 3)
    assert math.isnan(flat["low"]) and flat.reason == "one covariate value in source 'c'"
    with pytest.raises(ValueError, match="the sources are a, b"):
        slope_within_source([0.1, 0.2, 0.3, 0.1, 0.2], x, sources, "glyphs")


def test_a_study_beside_the_pool_is_the_normal_posterior_by_numerical_integration():
    from study.analysis import shrink_towards_pool

    own, se, predicted, spread = 0.03, 0.012, -0.005, 0.02
    beside = shrink_towards_pool(own, se, predicted, spread)
    theta = np.linspace(-0.2, 0.2, 400_001)
    posterior = stats.norm.pdf(theta, predicted, spread) * stats.norm.pdf(own, theta, se)
    posterior /= np.trapezoid(posterior, theta)
    mean = np.trapezoid(theta * posterior, theta)
    sd = math.sqrt(np.trapezoid((theta - mean) ** 2 * posterior, theta))
    assert beside.estimate == pytest.approx(mean, abs=1e-7)
    assert (beside.high - beside.low) / 2 == pytest.approx(stats.norm.ppf(0.975) * sd, rel=1e-5)
    assert predicted < beside.estimate < own  # shrunk, never past either
    # No prediction from the pool: the study's own interval stands; no own estimate: nothing to say.
    alone = shrink_towards_pool(own, se, math.nan, math.nan)
    assert alone.estimate == own and alone.weight_on_own == 1.0
    assert math.isnan(shrink_towards_pool(math.nan, se, predicted, spread).estimate)


def test_cells_stated_exact_are_drawn_with_their_noise_and_pooled_as_exact():
    """stated_exact leaves the worlds as they are (same seed, same draws) and only tells the pooling a cell's standard
    error is 0: with no cell marked the table is the plain one; with every cell marked, the prediction no longer
    takes the cells' noise out of the spread, so it widens."""
    design = ([0.02] * 6, [10] * 6, list("aabcde"), 0.005)
    plain = source_pooling_coverage(*design, source_ratios=(1.0,), benchmarks=2000, seed=3)
    unmarked = source_pooling_coverage(*design, source_ratios=(1.0,), benchmarks=2000, seed=3,
                                       stated_exact=[False] * 6)
    pd.testing.assert_frame_equal(plain, unmarked)
    marked = source_pooling_coverage(*design, source_ratios=(1.0,), benchmarks=2000, seed=3, stated_exact=[True] * 6)
    width = {name: table[table["read"]].set_index("interval")["mean_width"] for name, table in
             (("plain", plain), ("marked", marked))}
    assert width["marked"]["prediction"] > width["plain"]["prediction"]
