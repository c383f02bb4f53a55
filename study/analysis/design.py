"""What more data can and cannot settle: the between-source spread, the floor under a new source's interval, and the
sources the mean needs, from the same two-stage model as pool_across_sources (study/analysis/pooling.py); within
one source, how many class splits its classes can make that are new evidence; and the next study's trials, seeds and
class splits on the same data, from the variance and the search this one measured."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.pooling import pool_across_sources, source_membership
from study.class_splits import disjoint_test_splits
from study.statistics import replicates_to_resolve


def independent_splits(manifest: dict) -> int | None:
    """study.class_splits.disjoint_test_splits from a prepared split's manifest."""
    return disjoint_test_splits(manifest.get("protocol"),
                                {name: int(split["num_classes"]) for name, split in manifest["splits"].items()})


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


# The source counts design_limits looks through for the fewest whose mean's CI excludes 0.
SOURCE_COUNTS = np.arange(2, 10_000)


@functools.lru_cache(maxsize=8)
def _t_critical(confidence: float) -> np.ndarray:
    """t_{k−1} at the two-sided `confidence` for every k in SOURCE_COUNTS (the same for every call: computed once)."""
    critical = stats.t.ppf(0.5 + confidence / 2, SOURCE_COUNTS - 1)
    critical.flags.writeable = False  # shared by every call
    return critical


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
        excludes = np.flatnonzero(_t_critical(confidence) * np.sqrt(s2 / SOURCE_COUNTS) < abs(mean))
        needed = float(SOURCE_COUNTS[excludes[0]]) if excludes.size else math.inf
    return DesignLimits(
        mean=mean, sources=k, source_sd=math.sqrt(s2), spread=spread_of(s2),
        spread_low=spread_of((k - 1) * s2 / chi_high), spread_high=spread_of((k - 1) * s2 / chi_low),
        floor_half_width=z * math.sqrt(s2 + extra), noise_free_half_width=z * spread_of(s2),
        sources_to_exclude_zero=needed,
        sources_for_power=((z + stats.norm.ppf(power)) * math.sqrt(s2) / abs(mean)) ** 2 if mean else math.inf,
        confidence=confidence)


# More seeds than this a split narrow nothing that the split's own variance does not already bound.
MOST_SEEDS = 10


@dataclass(frozen=True)
class NextDesign:
    """The next study on the same data, laid out from what this one measured (study.analysis.variance's split,
    search and seed variance of the tuned − Fixed AdaCos difference, and the search's tuning curve)."""

    trials: int  # a split's trials: the fewest whose expected test score comes within the margin of the whole search's
    trials_run: int
    search_still_gaining: bool  # the search's last trial still gained more than the margin: more trials may pay
    seeds: int  # a split's seeds: the fewest trainings per unit of the mean difference's variance
    splits: int | None  # the class splits that resolve a difference of the observed size; None: no practical number
    independent_splits: int | None  # the splits with disjoint test classes these classes make (open protocol)
    proposed_splits: int | None  # `splits`, or the independent ones where fewer: never more than the classes make
    trainings: int | None  # proposed splits × (trials + seeds × final runs a seed)
    splits_run: int
    seeds_run: int
    trainings_run: int  # this study's, counted the same way
    split_sd: float  # the sd of one split's mean difference at `seeds`
    between_to_seed: float  # the split's and search's variance over one seed's


def trials_within_margin(n, expected, margin: float, higher_is_better: bool = True) -> tuple[int, bool]:
    """The fewest trials whose expected test score (a tuning curve over n) comes within `margin` of the whole
    search's (its largest n), and whether the search's last trial still gained more than the margin."""
    n, expected = np.asarray(n, int), np.asarray(expected, float)
    order = np.argsort(n)
    n, score = n[order], expected[order] if higher_is_better else -expected[order]
    fewest = int(n[np.argmax(score[-1] - score <= margin)])
    return fewest, bool(len(score) >= 2 and score[-1] - score[-2] > margin)


def seeds_per_split(between: float, seed: float, trials: int, runs_per_seed: int, most: int = MOST_SEEDS) -> int:
    """The seeds a split that give the mean difference the least variance per training: a split's mean varies by
    between + seed / seeds and costs trials + seeds × runs_per_seed trainings (Cochran's two-stage allocation,
    √(seed·trials / (between·runs_per_seed)), taken over the whole numbers 2..most: two at least, so that the next
    study measures its own seed noise)."""
    choices = np.arange(2, most + 1)
    per_training = (between + seed / choices) * (trials + choices * runs_per_seed)
    return int(choices[np.argmin(per_training)])


def next_design(sources: dict | None, comparison: dict | None, search_curve: pd.DataFrame, runs_per_seed: int,
                independent: int | None, confidence: float, power: float,
                higher_is_better: bool = True) -> NextDesign | None:
    """The next study's trials, seeds and class splits on the same data, for a difference the size of `comparison`'s
    (a differences row over class splits: difference, standard_error, splits, margin, decision_alpha): its search's
    tuning curve (n, expected_test: a split's search of n trials) sets the trials; the variance of a split's mean
    (the comparison's own, standard_error²·splits) less its seeds' share (variance_sources' seed variance over its
    seeds) is what splits and searches add, which sets the seeds; the splits are those that variance needs, by the
    rule the comparison's seeds_to_resolve follows (at this study's seeds and trials, the same count). None where
    the comparison did not run over class splits, nothing was searched, or the seeds showed no noise."""
    if (not sources or not comparison or comparison.get("unit") != "splits" or comparison.get("margin") is None
            or search_curve.empty):
        return None
    seed, seeds_run = sources.get("seed"), sources.get("seeds")
    if seed is None or not math.isfinite(seed) or seed <= 0 or not seeds_run:  # no seed noise to weigh splits by
        return None
    split_mean_variance = comparison["standard_error"] ** 2 * comparison["splits"]
    between = max(0.0, split_mean_variance - seed / seeds_run)
    margin = comparison["margin"]
    trials, gaining = trials_within_margin(search_curve["n"], search_curve["expected_test"], margin, higher_is_better)
    seeds = seeds_per_split(between, seed, trials, runs_per_seed)
    split_sd = math.sqrt(between + seed / seeds)
    splits = replicates_to_resolve(comparison["difference"], split_sd, margin, comparison["decision_alpha"],
                                   1 - confidence, power) if split_sd > 0 else None
    proposed = None if splits is None else min(splits, independent) if independent else splits
    return NextDesign(trials=trials, trials_run=int(search_curve["n"].max()), search_still_gaining=gaining,
                      seeds=seeds, splits=splits, independent_splits=independent, proposed_splits=proposed,
                      split_sd=split_sd,
                      trainings=None if proposed is None else proposed * (trials + seeds * runs_per_seed),
                      splits_run=comparison["splits"], seeds_run=int(seeds_run),
                      trainings_run=comparison["splits"] * (int(search_curve["n"].max()) + seeds_run * runs_per_seed),
                      between_to_seed=between / seed)
