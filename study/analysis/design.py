"""What more data can and cannot settle: the between-source spread, the floor under a new source's interval, and the
sources the mean needs, from the same two-stage model as pool_across_sources (study/analysis/pooling.py); and, within
one source, how many class splits its classes can make that are new evidence."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from study.analysis.pooling import pool_across_sources, source_membership


def independent_splits(manifest: dict) -> int | None:
    """Under the open protocol, how many class splits a source's classes make with disjoint test classes (all its
    classes // the test split's, from a prepared split's manifest): more splits of the same classes test on classes
    already tested, so they narrow the interval around these classes, not around the source's. None under the
    closed protocol, where every split holds every class."""
    if manifest.get("protocol") != "open":
        return None
    counts = {name: int(split["num_classes"]) for name, split in manifest["splits"].items()}
    return sum(counts.values()) // counts["test"] if counts.get("test") else None


@dataclass(frozen=True)
class DesignLimits:
    """The design arithmetic of one pooled difference (shares of Fixed AdaCos's score)."""

    mean: float
    sources: int
    source_sd: float  # s_sources: the sd of the source means, noise included
    spread: float  # √(σ²_s + σ²_c): the sd of a new configuration's true difference, cell noise taken out
    spread_low: float
    spread_high: float
    floor_half_width: float  # a new source's half-width as k → ∞, at today's cells' noise
    noise_free_half_width: float  # the same with noise-free cells: z·spread
    sources_to_exclude_zero: float  # k at which the mean's CI is expected to exclude 0 (at today's mean)
    sources_for_power: float  # k for 80% power to exclude 0 at today's mean
    confidence: float


def design_limits(estimates, standard_errors, sources, confidence: float = 0.95, power: float = 0.8) -> DesignLimits:
    """pool_across_sources' model, read for the design: ȳᵢ (source means) vary with
    E[s²_sources] = σ²_s + mean((σ²_c + se̅ᵢ²)/nᵢ), so a new configuration's true spread is
    σ²_s + σ²_c = s²_sources − mean(se̅ᵢ²/nᵢ) + (1 − h)·σ̂²_c (h = mean(1/nᵢ)), and its interval is that of the
    normal variance of k source means, (k − 1)s²/χ², with the same noise taken out (clipped at 0).
    As k → ∞ the prediction's half-width tends to z·√(s²_sources + (1 − h)·σ̂²_c) at today's cells, and to z·spread
    with noise-free cells: no number of sources brings it below. The mean's CI, t_{k−1}·s_sources/√k, excludes 0
    once that is below |mean|; 80% power needs k ≥ ((z_{1−α/2} + z_power)·s_sources/|mean|)²."""
    y, se = np.asarray(estimates, float), np.asarray(standard_errors, float)
    pooled = pool_across_sources(y, se, sources, confidence=confidence)
    _, membership = source_membership(list(sources))
    counts = membership.sum(axis=0)
    k = counts.size
    source_se2 = (membership.T @ se ** 2) / counts ** 2  # se̅ᵢ²/nᵢ: the noise in each source mean
    means = np.array([value for _, value, _ in pooled.source_means])
    s2 = float(np.var(means, ddof=1)) if k >= 2 else math.nan
    h = float(np.mean(1 / counts))
    configuration = pooled.configuration_variance if math.isfinite(pooled.configuration_variance) else 0.0
    noise, extra = float(np.mean(source_se2)), (1 - h) * configuration
    z = stats.norm.ppf(0.5 + confidence / 2)

    def spread_of(variance_of_means: float) -> float:
        return math.sqrt(max(0.0, variance_of_means - noise + extra))

    chi_high, chi_low = (stats.chi2.ppf(q, k - 1) for q in (0.5 + confidence / 2, 0.5 - confidence / 2))
    mean = pooled.mean
    needed = math.nan
    if k >= 2 and mean != 0:
        needed = next((float(n) for n in range(2, 10_000)
                       if stats.t.ppf(0.5 + confidence / 2, n - 1) * math.sqrt(s2 / n) < abs(mean)), math.inf)
    return DesignLimits(
        mean=mean, sources=k, source_sd=math.sqrt(s2), spread=spread_of(s2),
        spread_low=spread_of((k - 1) * s2 / chi_high), spread_high=spread_of((k - 1) * s2 / chi_low),
        floor_half_width=z * math.sqrt(s2 + extra), noise_free_half_width=z * spread_of(s2),
        sources_to_exclude_zero=needed,
        sources_for_power=((z + stats.norm.ppf(power)) * math.sqrt(s2) / abs(mean)) ** 2 if mean else math.inf,
        confidence=confidence)
