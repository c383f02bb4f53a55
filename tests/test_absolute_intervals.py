"""The absolute scores' logit-scale interval against a hand-computed back-transformed t interval, and the power of
counting published rows inside a prediction against a brute-force binomial."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import absolute_scores
from study.analysis.comparison import LOGIT_EPSILON, logit_t_interval
from study.analysis.published_comparisons import inside_by_chance


def _logit(p):
    return math.log(p / (1 - p))


def _expit(z):
    return 1 / (1 + math.exp(-z))


def test_logit_interval_is_the_back_transformed_t_interval_by_hand():
    values = [0.97, 0.99, 0.995]
    logits = [_logit(v) for v in values]
    centre = sum(logits) / 3
    sd = math.sqrt(sum((z - centre) ** 2 for z in logits) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t_{0.975, 2}
    low, high = logit_t_interval(values, 0.95)
    assert (float(low), float(high)) == (pytest.approx(_expit(centre - half), rel=1e-9),
                                         pytest.approx(_expit(centre + half), rel=1e-9))
    # The raw-scale t interval of the same values runs above 1; this one cannot.
    assert np.mean(values) + 4.302652729911275 * np.std(values, ddof=1) / math.sqrt(3) > 1 and 0 < low < high < 1


def test_logit_interval_stays_in_the_unit_interval_and_clips_the_ends():
    rng = np.random.default_rng(1)
    values = np.clip(rng.normal(0.98, 0.03, (500, 3)), 0, 1)
    low, high = logit_t_interval(values, 0.95)
    assert ((0 <= low) & (low <= high) & (high <= 1)).all()
    # A split at exactly 1 is read as 1 − ε; all splits equal give the value itself, and one value no interval.
    low, high = logit_t_interval([1.0, 0.99], 0.95)
    z = [_logit(1 - LOGIT_EPSILON), _logit(0.99)]
    half = stats.t.ppf(0.975, 1) * abs(z[0] - z[1]) / math.sqrt(2) / math.sqrt(2)
    assert float(high) == pytest.approx(_expit(sum(z) / 2 + half)) and float(high) < 1
    assert tuple(map(float, logit_t_interval([1.0, 1.0, 1.0], 0.95))) == (1.0, 1.0)
    assert all(math.isnan(float(bound)) for bound in logit_t_interval([0.5], 0.95))


def test_absolute_scores_keep_the_plain_mean_and_the_logit_interval():
    runs = pd.DataFrame({"method": "m", "split": [0, 0, 1, 1, 2, 2],
                         "test_precision_at_1": [0.96, 0.98, 0.99, 1.0, 0.995, 0.985]})
    row = absolute_scores(runs, ["m"], 0.95, metrics=("precision_at_1",)).iloc[0]
    units = [0.97, 0.995, 0.99]
    assert row["mean"] == pytest.approx(np.mean(units)) and row["over"] == "splits" and row["n"] == 3
    low, high = logit_t_interval(units, 0.95)
    assert (row["low"], row["high"]) == (pytest.approx(float(low)), pytest.approx(float(high)))
    assert row["low"] <= row["mean"] <= row["high"] <= 1


def _brute_force_at_least(k, n, p):
    return sum(p ** sum(draw) * (1 - p) ** (n - sum(draw))
               for draw in itertools.product((0, 1), repeat=n) if sum(draw) >= k)


def test_inside_by_chance_against_a_brute_force_binomial():
    differences = [-0.08, 0.49, 1.46, 0.89, 6.56, -0.58, -5.33, -0.74]
    power = inside_by_chance(differences, -3.0, 2.0)
    sd = float(np.std(differences, ddof=1))
    p = 2 * stats.norm.cdf(5.0 / (2 * sd)) - 1
    assert (power.rows, power.inside, power.width, power.spread) == (8, 6, 5.0, pytest.approx(sd))
    assert power.chance_one == pytest.approx(p)
    assert power.chance == pytest.approx(_brute_force_at_least(6, 8, p), rel=1e-9)
    # At the width for a test, n of n inside has chance exactly α; just below it, less.
    edge = power.width_for_a_test
    at_edge = inside_by_chance(differences, -edge / 2, edge / 2)
    assert at_edge.inside == 6 and at_edge.chance_one ** 8 == pytest.approx(0.05)
    assert _brute_force_at_least(8, 8, at_edge.chance_one) == pytest.approx(0.05)
    wide = inside_by_chance(differences, -30.0, 12.0)
    assert wide.inside == 8 and wide.chance > 0.99 and not wide.is_a_test
    assert math.isnan(inside_by_chance(differences, math.nan, math.nan).chance)
