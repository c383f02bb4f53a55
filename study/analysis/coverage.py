"""Do the tuning intervals cover what they claim? Simulated studies in worlds with a known truth.

A world is calibrated from a real search: a trial is one of its trials, picked at random, with fresh seed noise
on its val and test scores (a smoothed bootstrap), so the world has the real search's spread of (s, m) quality
and of val–test agreement. Its truth, the expected test score of the trial val selects among n, comes from a pool
of a million-odd draws; the untuned reference (Fixed AdaCos) is normal with the real runs' spread, its mean set
so that tuning pays early, breaks even late (beyond the trials that carry an interval) or never pays. Each
simulated study draws N trials and R reference runs and computes the report's intervals; coverage is the share
of studies whose interval holds the truth, with its Monte Carlo error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.pooling import (_across_sources_rows, _random_effects_rows, equal_weight_mean,
                                    equal_weight_slope, hartung_knapp, random_effects, random_effects_slope,
                                    source_membership)
from study.analysis.true_effect import (SOURCE_SPREAD_PRIOR_SCALE, _bayesian_rows, _hartung_knapp_rows,
                                        _source_means_rows)
from study.analysis.tuning import (
    _over_splits,
    _pooled_split,
    _reference_over_splits,
    _t_bounds,
    bootstrap_selected_curves,
    break_even_with_interval,
    first_reaching,
    percentile_band,
)
from study.statistics import check_probability

COVERAGE_COLUMNS = ["world", "trials", "splits", "interval", "method", "n", "studies", "coverage", "mc_error", "truth", "mean_width",
                    "needed_width", "width_ratio"]
WORLD_KINDS = ("pays", "late", "never")


@dataclass(frozen=True)
class World:
    """Where trials and reference runs come from, and the truth they imply."""

    name: str
    trial_val: np.ndarray
    trial_test: np.ndarray
    noise_sd: float
    reference_mean: float
    reference_sd: float
    truth: np.ndarray  # expected test score of the val-selected trial among n = 1…len(truth)

    def trials(self, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        picks = rng.integers(0, self.trial_val.size, count)
        noise = rng.normal(0.0, self.noise_sd, (2, count))
        return self.trial_val[picks] + noise[0], self.trial_test[picks] + noise[1]

    def references(self, count: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(self.reference_mean, self.reference_sd, count)

    def break_even(self) -> float:
        """The true break-even: the fewest n whose expected selected test score reaches the reference mean."""
        return float(first_reaching(self.truth, self.reference_mean)[0])


def true_selected_curve(val: np.ndarray, test: np.ndarray, max_n: int) -> np.ndarray:
    """E[test of the best-by-val of n draws], n = 1…max_n, for a population given by a large sample (with
    replacement from it, which for a large sample is drawing from the population itself)."""
    ranked = test[np.argsort(val, kind="stable")]
    quantile = np.arange(1, ranked.size + 1) / ranked.size
    below = quantile - 1.0 / ranked.size
    return np.array([ranked @ (quantile ** n - below ** n) for n in range(1, max_n + 1)])


def calibrated_worlds(trial_val, trial_test, reference_test, n_trials: int, noise_sd: float | None = None,
                      pool: int = 400_000, seed: int = 0) -> list[World]:
    """Three worlds from one real search's trials (val and test) and its reference's test scores: tuning pays
    after about 2 trials, breaks even at about 0.6·N (beyond the trials an interval is valid for), never pays."""
    trial_val, trial_test = np.asarray(trial_val, float), np.asarray(trial_test, float)
    reference_test = np.asarray(reference_test, float)
    reference_sd = float(reference_test.std(ddof=1))
    noise_sd = reference_sd / 2.0 if noise_sd is None else noise_sd
    rng = np.random.default_rng(seed)
    base = World("calibration", trial_val, trial_test, noise_sd, 0.0, reference_sd, np.array([]))
    val, test = base.trials(pool, rng)
    truth = true_selected_curve(val, test, 4 * n_trials)
    late = int(round(0.6 * n_trials))
    means = {"pays": (truth[0] + truth[1]) / 2.0, "late": (truth[late - 2] + truth[late - 1]) / 2.0,
             "never": truth[-1] + reference_sd / 4.0}
    return [World(kind, trial_val, trial_test, noise_sd, float(means[kind]), reference_sd, truth[:n_trials])
            for kind in WORLD_KINDS]


def _covers_break_even(truth: float, facts: dict) -> bool:
    """Whether the break-even interval (None ends: beyond the valid trials) holds the true break-even."""
    low, high, valid = facts["trials_low"], facts["trials_high"], facts["valid_trials"]
    above_low = truth > valid if low is None else truth >= low
    below_high = high is None or truth <= high
    return bool(above_low and below_high)


def simulate_world(world: World, n_trials: int, n_references: int, studies: int, confidence: float = 0.95,
                   seed: int = 0, with_bootstrap: bool = False, n_bootstrap: int = 300, splits: int = 1) -> pd.DataFrame:
    """Coverage of the curve (per valid n), the search gain (at the largest valid n) and the break-even intervals
    over `studies` simulated studies of `world`, each of `splits` class splits with a search and reference runs of
    its own, averaged as the report averages them; with `with_bootstrap`, the earlier percentile bootstrap beside
    (of one split's search)."""
    rng = np.random.default_rng(seed)
    curve_hits, curve_widths, estimates, gain_hits, gain_widths, gains, even_hits = [], [], [], [], [], [], []
    boot_hits = []
    for _ in range(studies):
        draws = [world.trials(n_trials, rng) for _ in range(splits)]
        search = _over_splits([_pooled_split(pd.DataFrame({"selection": val, "reported": test, "val": val}), False)
                               for val, test in draws])
        reference = _reference_over_splits([pd.DataFrame({"reported": world.references(n_references, rng)})
                                            for _ in range(splits)])
        val, test = draws[0]
        low, high = _t_bounds(search["curve"], search["variance"], search["df"], confidence)
        curve_hits.append((low <= world.truth) & (world.truth <= high))
        curve_widths.append(high - low)
        estimates.append(search["curve"])
        facts = break_even_with_interval(search, reference, confidence)
        at = facts["gain_n"]
        if at:
            true_gain = world.truth[at - 1] - world.reference_mean
            gain_hits.append(facts["gain_low"] <= true_gain <= facts["gain_high"])
            gain_widths.append(facts["gain_high"] - facts["gain_low"])
            gains.append(facts["gain_at_n"])
        even_hits.append(_covers_break_even(world.break_even(), facts))
        if with_bootstrap:
            low, high = percentile_band(bootstrap_selected_curves(val, test, n_bootstrap=n_bootstrap,
                                                                  seed=int(rng.integers(1 << 31))), confidence)
            boot_hits.append((low <= world.truth) & (world.truth <= high))
    rows = []
    hits, widths, estimates = np.array(curve_hits), np.array(curve_widths), np.array(estimates)
    valid = np.isfinite(widths).all(axis=0)
    z = stats.norm.ppf(0.5 + confidence / 2.0)
    for n in np.flatnonzero(valid) + 1:
        rows.append(_row(world, "curve", "studentised jackknife", n, hits[:, n - 1], widths[:, n - 1],
                         estimates[:, n - 1], world.truth[n - 1], z))
    if gain_hits:
        n = int(valid.sum())
        rows.append(_row(world, "search gain", "studentised jackknife", n, np.array(gain_hits), np.array(gain_widths),
                         np.array(gains), world.truth[n - 1] - world.reference_mean, z))
    rows.append(_row(world, "break-even", "test inversion", world.break_even(), np.array(even_hits), None, None,
                     world.break_even(), z))
    if with_bootstrap:
        boot = np.array(boot_hits)
        for n in (1, n_trials // 4, n_trials // 2, n_trials):
            rows.append(_row(world, "curve", "percentile bootstrap (earlier)", n, boot[:, n - 1], None, None,
                             world.truth[n - 1], z))
    return pd.DataFrame(rows).assign(trials=n_trials, splits=splits)[COVERAGE_COLUMNS]


def _row(world: World, interval: str, method: str, n, hits: np.ndarray, widths, estimates, truth: float,
         z: float) -> dict:
    coverage = float(hits.mean())
    needed = float(2 * z * estimates.std(ddof=1)) if estimates is not None else np.nan
    mean_width = float(np.mean(widths)) if widths is not None else np.nan
    return {"world": world.name, "interval": interval, "method": method, "n": n, "studies": int(hits.size),
            "coverage": coverage, "mc_error": float(np.sqrt(coverage * (1 - coverage) / hits.size)),
            "truth": float(truth), "mean_width": mean_width, "needed_width": needed,
            "width_ratio": mean_width / needed if needed else np.nan}


def coverage_table(trial_val, trial_test, reference_test, n_trials: int, n_references: int, studies: int,
                   confidence: float = 0.95, seed: int = 0, with_bootstrap: bool = False, splits: int = 1
                   ) -> pd.DataFrame:
    """Coverage of every tuning interval the report shows, in each calibrated world (see the module's docstring)."""
    worlds = calibrated_worlds(trial_val, trial_test, reference_test, n_trials, seed=seed)
    return pd.concat([simulate_world(world, n_trials, n_references, studies, confidence, seed + 1 + index,
                                     with_bootstrap, splits=splits) for index, world in enumerate(worlds)],
                     ignore_index=True)


# The spread of the default study at 7162b85 (10 seeds, test MAP@R): one Fixed AdaCos run's seed sd, and the sd of
# the paired differences tuned ArcFace − Fixed AdaCos and Dynamic − Fixed AdaCos.
CALIBRATED_SPREAD = {"reference": 0.0191, "tuned": 0.0053, "dynamic": 0.0019}
DECISION_COLUMNS = ["world", "gain", "dynamic_gain", "studies", "tune", "dynamic", "fixed", "undecided", "changed"]


# Fixed AdaCos's mean test MAP@R in the calibrated world (the default study's at 7162b85).
WORLD_REFERENCE_MEAN = 0.39


def world_margin(config, spread: dict = CALIBRATED_SPREAD) -> float:
    """The retrieval margin of `config` in the calibrated world's score units: absolute as declared, or relative to
    its Fixed AdaCos (mean, seed sd, remaining error) as equivalence_margin reads it."""
    from study.analysis.comparison import equivalence_margin

    half = spread["reference"] / math.sqrt(2)  # two runs whose mean and sd are the world's
    reference = [WORLD_REFERENCE_MEAN - half, WORLD_REFERENCE_MEAN + half]
    return equivalence_margin("test_map_at_r", config, reference)


def simulated_run_scores(gain: float, dynamic_gain: float, seeds: int, rng: np.random.Generator,
                         spread: dict = CALIBRATED_SPREAD, objective: str = "map_at_r", splits: int = 1,
                         split_sd: float = 0.0) -> pd.DataFrame:
    """A run_scores table of one simulated study: Fixed AdaCos, Dynamic AdaCos and tuned ArcFace at `seeds` seeds on
    each of `splits` class splits, each method's runs paired with Fixed AdaCos's by split and seed (same
    initialisation and data order); each split moves the tuned − Fixed AdaCos difference by N(0, split_sd²)."""
    rows = []
    for split in range(splits):
        fixed = rng.normal(WORLD_REFERENCE_MEAN, spread["reference"], seeds)
        split_effect = rng.normal(0.0, split_sd) if split_sd else 0.0
        scores = {"fixed_adacos": fixed,
                  "dynamic_adacos": fixed + dynamic_gain + rng.normal(0.0, spread["dynamic"], seeds),
                  "arcface_tuned": fixed + gain + split_effect + rng.normal(0.0, spread["tuned"], seeds)}
        rows += [{"method": method, "split": split, "seed": seed, "status": "ok", "val_score": value,
                  f"test_{objective}": value} for method, values in scores.items() for seed, value in enumerate(values)]
    return pd.DataFrame(rows)


VERDICT_COVERAGE_COLUMNS = ["design", "splits", "seeds", "split_sd", "studies", "coverage", "mc_error", "mean_width",
                            "needed_width", "width_ratio"]


def verdict_interval_coverage(config, designs, studies: int = 500, seed: int = 0) -> pd.DataFrame:
    """Coverage of the verdict's interval for tuned ArcFace − Fixed AdaCos (paired over seeds of one split, or a t
    interval over split means) in simulated studies whose true difference is known; `designs` holds (name, splits,
    seeds, split_sd)."""
    from study.analysis.verdict import recommend

    z = stats.norm.ppf(0.5 + config.confidence / 2.0)
    rows = []
    for index, (name, splits, seeds, split_sd) in enumerate(designs):
        rng = np.random.default_rng(seed * 1_000_003 + index)
        hits, widths, estimates = [], [], []
        for _ in range(studies):
            row = recommend(simulated_run_scores(0.0, 0.0, seeds, rng, splits=splits, split_sd=split_sd), "map_at_r",
                            config, sample_sizes=False)["tuned"]
            hits.append(row["low"] <= 0.0 <= row["high"])
            widths.append(row["high"] - row["low"])
            estimates.append(row["difference"])
        coverage, needed = float(np.mean(hits)), float(2 * z * np.std(estimates, ddof=1))
        rows.append({"design": name, "splits": splits, "seeds": seeds, "split_sd": split_sd, "studies": studies,
                     "coverage": coverage, "mc_error": float(np.sqrt(coverage * (1 - coverage) / studies)),
                     "mean_width": float(np.mean(widths)), "needed_width": needed,
                     "width_ratio": float(np.mean(widths)) / needed})
    return pd.DataFrame(rows, columns=VERDICT_COVERAGE_COLUMNS)


def decision_rates(config, seeds: int = 10, studies: int = 400, seed: int = 0) -> pd.DataFrame:
    """How often `recommend` says what, in simulated studies where the truth is known: no gain, half the margin and
    twice the margin from tuning; and how often a Dynamic − Fixed AdaCos difference of a fifth of the margin changes
    the recommendation (the same noise with and without it)."""
    from study.analysis.verdict import recommend

    margin = world_margin(config)
    worlds = [("no gain", 0.0, 0.0), ("half the margin", margin / 2, 0.0), ("twice the margin", 2 * margin, 0.0),
              ("dynamic a fifth of the margin", 0.0, margin / 5)]
    rows = []
    for index, (name, gain, dynamic_gain) in enumerate(worlds):
        choices, changed = [], 0
        for study in range(studies):
            state = seed * 1_000_003 + index * 10_007 + study
            choice = recommend(simulated_run_scores(gain, dynamic_gain, seeds, np.random.default_rng(state)),
                               "map_at_r", config, sample_sizes=False)["recommendation"]
            choices.append(choice)
            if dynamic_gain:
                without = recommend(simulated_run_scores(gain, 0.0, seeds, np.random.default_rng(state)),
                                    "map_at_r", config, sample_sizes=False)["recommendation"]
                changed += choice != without
        share = pd.Series(choices).value_counts(normalize=True)
        rows.append({"world": name, "gain": gain, "dynamic_gain": dynamic_gain, "studies": studies,
                     "tune": float(share.get("arcface_tuned", 0.0)), "dynamic": float(share.get("dynamic_adacos", 0.0)),
                     "fixed": float(share.get("fixed_adacos", 0.0)), "undecided": float(share.get("undecided", 0.0)),
                     "changed": changed / studies if dynamic_gain else np.nan})
    return pd.DataFrame(rows, columns=DECISION_COLUMNS)


POOLED_INTERVALS = ("dl", "hk", "equal", "prediction", "equal_prediction", "slope", "equal_slope")
POOLED_COVERAGE_COLUMNS = ["tau_ratio", "tau", "benchmarks", "mc_error",
                           *(f"{name}_coverage" for name in POOLED_INTERVALS),
                           *(f"{name}_width" for name in POOLED_INTERVALS)]
TAU_RATIOS = (0.0, 0.5, 1.0, 2.0, 4.0)


def pooled_interval_coverage(standard_errors, degrees_of_freedom, covariate=None, *, tau_ratios=TAU_RATIOS,
                             benchmarks: int = 1000, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """How often the pooled intervals hold the truth in benchmarks like a real one: its k cells, each with its
    standard error (taken as the truth) estimated again on its own degrees of freedom (seᵢ·√(χ²_df/df); exact where
    df is missing), the cells' true differences drawn around 0 with τ = ratio × the median standard error. Per τ,
    the coverage of the pooled mean's intervals (dl: random_effects' DerSimonian–Laird normal CI; hk: hartung_knapp;
    equal: equal_weight_mean) and of the prediction intervals for a new cell's true difference (prediction:
    Higgins–Thompson–Spiegelhalter; equal_prediction: equal_weight_mean's) and, given the cells' covariate (e.g.
    log10 C), of the slope's intervals around its true 0 (slope: random_effects_slope; equal_slope:
    equal_weight_slope), with their mean widths. Every cell is drawn independently: a world with a data-source effect
    is source_pooling_coverage's."""
    sigma = np.asarray(standard_errors, dtype=float)
    df = np.asarray(degrees_of_freedom, dtype=float)
    if sigma.size < 3 or sigma.size != df.size or np.any(~np.isfinite(sigma)) or np.any(sigma <= 0):
        raise ValueError("give ≥ 3 positive standard errors, each with its degrees of freedom")
    x = np.full(sigma.size, np.nan) if covariate is None else np.asarray(covariate, dtype=float)
    with_slope = x.size == sigma.size and np.all(np.isfinite(x)) and np.ptp(x) > 0
    known = ~(np.isfinite(df) & (df > 0))  # a standard error without degrees of freedom is taken as exact
    safe_df = np.where(known, 1.0, df)
    rng = np.random.default_rng(seed)
    rows = []
    for ratio in tau_ratios:
        tau = float(ratio * np.median(sigma))
        hits = np.zeros((benchmarks, len(POOLED_INTERVALS)), dtype=bool)
        widths = np.zeros((benchmarks, len(POOLED_INTERVALS)))
        for index in range(benchmarks):
            truth = rng.normal(0.0, tau, sigma.size) if tau > 0 else np.zeros(sigma.size)
            estimates = rng.normal(truth, sigma)
            estimated = sigma * np.sqrt(np.where(known, 1.0, rng.chisquare(safe_df) / safe_df))
            pooled = random_effects(estimates, estimated, confidence)
            robust = hartung_knapp(estimates, estimated, confidence)
            equal = equal_weight_mean(estimates, confidence)
            new_cell = rng.normal(0.0, tau) if tau > 0 else 0.0
            slope = random_effects_slope(estimates, estimated, x, confidence) if with_slope else {"low": math.nan,
                                                                                                  "high": math.nan}
            plain = equal_weight_slope(estimates, x, confidence) if with_slope else slope
            bounds = ((pooled["low"], pooled["high"], 0.0), (robust["low"], robust["high"], 0.0),
                      (equal["low"], equal["high"], 0.0),
                      (pooled["prediction_low"], pooled["prediction_high"], new_cell),
                      (equal["prediction_low"], equal["prediction_high"], new_cell),
                      (slope["low"], slope["high"], 0.0), (plain["low"], plain["high"], 0.0))
            hits[index] = [low <= value <= high for low, high, value in bounds]
            widths[index] = [high - low for low, high, _ in bounds]
        rows.append({"tau_ratio": float(ratio), "tau": tau, "benchmarks": benchmarks,
                     "mc_error": float(np.sqrt(confidence * (1 - confidence) / benchmarks)),
                     **{f"{name}_coverage": float(value) if with_slope or "slope" not in name else math.nan
                        for name, value in zip(POOLED_INTERVALS, hits.mean(axis=0))},
                     **{f"{name}_width": float(value) for name, value in zip(POOLED_INTERVALS, widths.mean(axis=0))}})
    return pd.DataFrame(rows, columns=POOLED_COVERAGE_COLUMNS)


# (pooling, interval) per simulated interval; pool_across_sources' are the ones the benchmark's verdict reads.
SOURCE_INTERVALS = (("pool_across_sources", "mean"), ("pool_across_sources", "prediction"),
                    ("dersimonian_laird", "mean"), ("dersimonian_laird", "prediction"), ("hartung_knapp", "mean"),
                    ("equal_weights", "mean"), ("equal_weights", "prediction"))
SOURCE_COVERAGE_COLUMNS = ["world", "source_ratio", "source_sd", "configuration_sd", "sources", "configurations",
                           "benchmarks", "pooling", "interval", "read", "coverage", "mc_error", "mean_width",
                           "i2_over_half"]
SOURCE_RATIOS = (0.0, 0.5, 1.0, 2.0, 4.0)


def _over_configurations(y: np.ndarray, se: np.ndarray, confidence: float) -> dict[str, tuple[np.ndarray, ...]]:
    """(low, high) per benchmark row of the intervals that treat every configuration as independent:
    DerSimonian–Laird (random_effects' normal CI and HTS prediction), Hartung–Knapp and equal weights."""
    n = y.shape[-1]
    level = 0.5 + confidence / 2.0
    tau2, q, weights, mean = _random_effects_rows(y, se)
    standard_error = 1.0 / np.sqrt(weights.sum(axis=-1))
    half = float(stats.norm.ppf(level)) * standard_error
    predicted = float(stats.t.ppf(level, n - 2)) * np.sqrt(tau2 + standard_error ** 2) if n >= 3 else np.nan
    spread = np.sum(weights * (y - mean[:, None]) ** 2, axis=-1) / (n - 1)
    robust = float(stats.t.ppf(level, n - 1)) * np.sqrt(np.maximum(1.0, spread) / weights.sum(axis=-1))
    plain, sd = y.mean(axis=-1), y.std(axis=-1, ddof=1)
    equal_half, equal_predicted = (float(stats.t.ppf(level, n - 1)) * sd * factor
                                   for factor in (1.0 / math.sqrt(n), math.sqrt(1.0 + 1.0 / n)))
    with np.errstate(divide="ignore", invalid="ignore"):
        i2 = np.where(q > 0, np.maximum(0.0, (q - (n - 1)) / q), 0.0)
    return {("dersimonian_laird", "mean"): (mean - half, mean + half),
            ("dersimonian_laird", "prediction"): (mean - predicted, mean + predicted),
            ("hartung_knapp", "mean"): (mean - robust, mean + robust),
            ("equal_weights", "mean"): (plain - equal_half, plain + equal_half),
            ("equal_weights", "prediction"): (plain - equal_predicted, plain + equal_predicted), "i2": i2}


class SourceWorlds:
    """Simulated benchmarks with the real design and a data-source effect: one source label and one standard error
    (with its df) per configuration. draw(source_sd, benchmarks) gives, per benchmark, a source effect aᵢ ~ N(0, σ_s²)
    per source, a configuration effect bᵢⱼ ~ N(0, σ_c²), the cell's estimate yᵢⱼ = aᵢ + bᵢⱼ + N(0, seᵢⱼ²) and its
    standard error estimated again on its own df (seᵢⱼ·√(χ²_df/df); exact where df is NaN or inf), and the true
    effect a + b of a new configuration from a new source, freshly drawn. The true mean is 0. One generator serves
    every world in turn, so a table's worlds are reproducible from its seed."""

    def __init__(self, standard_errors, degrees_of_freedom, sources, configuration_sd: float, seed: int = 0):
        self.sigma = np.asarray(standard_errors, dtype=float).ravel()
        df = np.asarray(degrees_of_freedom, dtype=float).ravel()
        self.names, self.membership = source_membership(list(sources))
        if self.sigma.size < 3 or self.sigma.size != df.size or self.sigma.size != self.membership.shape[0]:
            raise ValueError("give ≥ 3 configurations, each with its source, standard error and df")
        if not (np.all(np.isfinite(self.sigma)) and np.all(self.sigma > 0)) or not (configuration_sd >= 0):
            raise ValueError("standard errors must be finite and positive, the configuration sd finite and ≥ 0")
        self.known = ~(np.isfinite(df) & (df > 0))
        self.safe_df = np.where(self.known, 1.0, df)
        self.configuration_sd = float(configuration_sd)
        self.sources, self.configurations = len(self.names), self.sigma.size
        self.rng = np.random.default_rng(seed)

    def draw(self, source_sd: float, benchmarks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(estimates, their estimated standard errors: benchmarks × configurations; a new source's true effect)."""
        rng, k, n, sd = self.rng, self.sources, self.configurations, self.configuration_sd
        source_effects = rng.normal(0.0, 1.0, (benchmarks, k)) * source_sd
        truth = source_effects @ self.membership.T + rng.normal(0.0, 1.0, (benchmarks, n)) * sd
        y = truth + rng.normal(0.0, 1.0, (benchmarks, n)) * self.sigma
        se = self.sigma * np.sqrt(np.where(self.known, 1.0,
                                           rng.chisquare(self.safe_df, (benchmarks, n)) / self.safe_df))
        new = rng.normal(0.0, 1.0, benchmarks) * source_sd + rng.normal(0.0, 1.0, benchmarks) * sd
        return y, se, new


def source_pooling_coverage(standard_errors, degrees_of_freedom, sources, configuration_sd: float, *,
                            source_ratios=SOURCE_RATIOS, benchmarks: int = 1000, confidence: float = 0.95,
                            seed: int = 0, stated_exact=None) -> pd.DataFrame:
    """How often the pooled intervals hold the truth in benchmarks with the real design and a data-source effect.

    The design is one source label and one standard error (with its df) per configuration. Per world (source sd =
    ratio × configuration_sd), SourceWorlds draws the benchmarks: a source effect aᵢ ~ N(0, σ_s²) per source, a
    configuration effect bᵢⱼ ~ N(0, σ_c²) and the cell's estimate yᵢⱼ = aᵢ + bᵢⱼ + N(0, seᵢⱼ²), its standard error
    estimated again on its own df (seᵢⱼ·√(χ²_df/df); exact where df is NaN or inf). The truth is 0 for the mean and
    a + b, freshly drawn, for a new configuration from a new source. Coverage and mean width of: pool_across_sources'
    CI and prediction interval (the ones read: `read` is True), DerSimonian–Laird over configurations (random_effects'
    normal CI and HTS prediction), Hartung–Knapp and equal weights over configurations, one row per world, pooling
    and interval; i2_over_half is the share of benchmarks whose DerSimonian–Laird I² reached 50%. Vectorised over
    benchmarks: the same code as pool_across_sources. A prediction interval the design cannot give (NaN) counts as
    not covering. `stated_exact` (a mask over configurations) marks cells drawn with their noise but whose estimate
    the pooling is told is exact (standard error 0), as a report does where a cell states no interval.
    """
    worlds = SourceWorlds(standard_errors, degrees_of_freedom, sources, configuration_sd, seed)
    k, n = worlds.sources, worlds.configurations
    rows = []
    for ratio in source_ratios:
        source_sd = float(ratio) * configuration_sd
        y, se, new = worlds.draw(source_sd, benchmarks)
        if stated_exact is not None:
            se = np.where(np.asarray(stated_exact, dtype=bool), 1e-12, se)
        pooled = _across_sources_rows(y, se, worlds.membership, confidence)
        bounds = {("pool_across_sources", "mean"): (pooled["low"], pooled["high"]),
                  ("pool_across_sources", "prediction"): (pooled["prediction_low"], pooled["prediction_high"]),
                  **_over_configurations(y, se, confidence)}
        i2 = bounds.pop("i2")
        world = {"world": f"source sd = {ratio:g} × configuration sd", "source_ratio": float(ratio),
                 "source_sd": source_sd, "configuration_sd": float(configuration_sd), "sources": k,
                 "configurations": n, "benchmarks": benchmarks}
        for pooling, interval in SOURCE_INTERVALS:
            low, high = (np.broadcast_to(bound, (benchmarks,)) for bound in bounds[pooling, interval])
            truth = new if interval == "prediction" else 0.0
            defined = np.isfinite(low) & np.isfinite(high)
            rows.append({**world, "pooling": pooling, "interval": interval,
                         "read": pooling == "pool_across_sources",
                         "coverage": float(np.mean(defined & (low <= truth) & (truth <= high))) if defined.any()
                         else math.nan,
                         "mc_error": float(np.sqrt(confidence * (1 - confidence) / benchmarks)),
                         "mean_width": float(np.mean(high[defined] - low[defined])) if defined.any() else math.nan,
                         "i2_over_half": float(np.mean(i2 >= 0.5)) if pooling == "dersimonian_laird" else math.nan})
    return pd.DataFrame(rows, columns=SOURCE_COVERAGE_COLUMNS)


TRUE_EFFECT_COVERAGE_COLUMNS = ["interval", "estimator", "prior_scale", "truth", "source_ratio", "source_sd",
                                "configuration_sd", "sources", "configurations", "worlds", "coverage", "mc_error",
                                "mean_width", "median_width"]


def true_effect_coverage(standard_errors, degrees_of_freedom, sources, configuration_sd: float, *,
                         prior_scales=(SOURCE_SPREAD_PRIOR_SCALE,), source_ratios=SOURCE_RATIOS, worlds: int = 400,
                         confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """How often the intervals for the true effect in a new source hold it, in benchmarks with the real design and a
    data-source effect (drawn by SourceWorlds, as in source_pooling_coverage).

    Per world (source sd = ratio × configuration_sd), `worlds` simulated benchmarks each give
    bayesian_true_effect's posterior predictive interval (once per half-normal prior scale in `prior_scales`, on the
    same draws) and hartung_knapp_true_effect's Higgins–Thompson–Spiegelhalter one, both over the sources' means,
    with pool_across_sources' prediction interval beside them. Their truth is a + b, the true effect of a new
    configuration from a new source (no noise of its own). The mean's intervals (Bayesian credible, Hartung–Knapp,
    pool_across_sources' t) are held against the true mean 0. One row per world, estimator (and prior scale) and
    interval: coverage, its Monte Carlo error at the nominal level (√(p(1 − p)/worlds)), mean and median width.
    Vectorised over benchmarks through the functions' own code paths."""
    check_probability(confidence, "confidence")
    drawn = SourceWorlds(standard_errors, degrees_of_freedom, sources, configuration_sd, seed)
    rows = []
    for ratio in source_ratios:
        source_sd = float(ratio) * configuration_sd
        y, se, new = drawn.draw(source_sd, worlds)
        means, errors = _source_means_rows(y, se, drawn.membership)
        results = [("hartung_knapp_hts", math.nan, _hartung_knapp_rows(means, errors, confidence)),
                   ("pool_across_sources", math.nan, _across_sources_rows(y, se, drawn.membership, confidence))]
        results[:0] = [("bayesian", float(scale), _bayesian_rows(means, errors, float(scale), confidence))
                       for scale in prior_scales]
        for interval in ("prediction", "mean"):
            prefix, truth = ("prediction_", new) if interval == "prediction" else ("", 0.0)
            for estimator, scale, result in results:
                low, high = result[f"{prefix}low"], result[f"{prefix}high"]
                defined = np.isfinite(low) & np.isfinite(high)
                width = (high - low)[defined]
                rows.append({"interval": interval, "estimator": estimator, "prior_scale": scale,
                             "truth": "a + b of a new source" if interval == "prediction" else "mean 0",
                             "source_ratio": float(ratio), "source_sd": source_sd,
                             "configuration_sd": float(configuration_sd), "sources": drawn.sources,
                             "configurations": drawn.configurations, "worlds": worlds,
                             "coverage": float(np.mean(defined & (low <= truth) & (truth <= high))),
                             "mc_error": float(math.sqrt(confidence * (1 - confidence) / worlds)),
                             "mean_width": float(width.mean()) if width.size else math.nan,
                             "median_width": float(np.median(width)) if width.size else math.nan})
    return pd.DataFrame(rows, columns=TRUE_EFFECT_COVERAGE_COLUMNS)
