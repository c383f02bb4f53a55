"""study/analysis/design.py against closed forms and simulation: what more sources can and cannot settle."""

import math

import numpy as np
import pytest
from scipy import stats

from study.analysis.design import design_limits


def test_one_configuration_per_source_reads_the_closed_forms():
    # One configuration per source, equal standard errors: the source means are the estimates themselves.
    y = np.array([0.01, -0.02, 0.03, 0.015, 0.0, 0.025])
    se = np.full(y.size, 0.004)
    limits = design_limits(y, se, [f"s{i}" for i in range(y.size)])
    s2 = y.var(ddof=1)
    z = stats.norm.ppf(0.975)
    assert limits.sources == 6 and limits.source_sd == pytest.approx(math.sqrt(s2))
    assert limits.spread == pytest.approx(math.sqrt(s2 - 0.004 ** 2))  # cell noise taken out
    assert limits.floor_half_width == pytest.approx(z * math.sqrt(s2))
    assert limits.noise_free_half_width == pytest.approx(z * limits.spread)
    # The spread's interval: (k − 1)s²/χ² with the noise taken out, the usual normal-variance interval.
    high = math.sqrt(5 * s2 / stats.chi2.ppf(0.025, 5) - 0.004 ** 2)
    assert limits.spread_high == pytest.approx(high)
    # Sources for the mean's CI to exclude 0: the smallest k with t_{k−1}·s/√k < |mean|, by brute force.
    k = 2
    while stats.t.ppf(0.975, k - 1) * math.sqrt(s2 / k) >= abs(y.mean()):
        k += 1
    assert limits.sources_to_exclude_zero == k
    assert limits.sources_for_power == pytest.approx(((z + stats.norm.ppf(0.8)) * math.sqrt(s2) / y.mean()) ** 2)


def test_the_spread_interval_covers_the_true_spread_in_simulated_benchmarks():
    """Worlds of 6 sources with one to three configurations each, a source and a configuration effect and cell noise:
    the 95% interval of the new configuration's spread holds the true √(σ²_s + σ²_c) about 95% of the time."""
    rng = np.random.default_rng(1)
    counts = [1, 1, 1, 3, 1, 2]
    sources = [f"s{i}" for i, n in enumerate(counts) for _ in range(n)]
    sigma_s, sigma_c, noise = 0.012, 0.008, 0.006
    truth = math.hypot(sigma_s, sigma_c)
    held = []
    for _ in range(600):
        effects = np.repeat(rng.normal(0, sigma_s, len(counts)), counts)
        y = 0.01 + effects + rng.normal(0, sigma_c, effects.size) + rng.normal(0, noise, effects.size)
        limits = design_limits(y, np.full(y.size, noise), sources)
        held.append(limits.spread_low <= truth <= limits.spread_high)
    assert 0.90 <= np.mean(held) <= 0.99  # Monte Carlo error about ±0.9 points
