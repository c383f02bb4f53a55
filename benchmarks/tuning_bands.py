"""Bands over the whole tuning curve: opda's, ours and the one the report adopts, in worlds with a known truth.

Issue 26, item 8. Each band is measured on its own target:

- opda's (Lourie, Cho & He, NAACL 2024; `opda.nonparametric.EmpiricalDistribution.confidence_bands`, its default
  `ld_highest_density` method, support [0, 1]): the expected best **val** score of n draws (its average tuning curve)
  and the median best val (its quantile tuning curve), simultaneous over n = 1…2N;
- ours (`study.analysis.tuning`): the studentised pointwise interval on the expected **test** score of the trial val
  selects among n, where it is drawn (selection weights over ≥ 5 trials);
- whole-curve bands on that same selected-test curve at every n = 1…N: `whole_curve_band` (adopted) and
  `val_cdf_selected_band` (opda's construction carried over to the selected trial), both from
  `study.analysis.tuning_bands`.

A world draws a trial's (val, test) from a known joint distribution; the truth (with-replacement order statistics of
400,000 draws, i.e. the population curve) is computed once per world. Each simulated search draws N trials. For
each band the table gives the share of searches whose band held the truth at every n of its range (simultaneous
coverage; for our pointwise interval, over the n it is drawn for, with its lowest pointwise coverage beside) with its
Monte Carlo error, the shares that failed below and above, and the mean widths at n = 1, at the
last n our interval is drawn for, and at n = N, with each width against the estimate's real spread (2·1.96·its sd
over the searches). A second table applies the bands to the committed random-search trials.

    python benchmarks/tuning_bands.py [--studies 500] [--out benchmarks/tuning_bands.csv]
        [--trials-out benchmarks/tuning_bands_trials.csv]

Needs `opda` (pip install opda==0.8.0) for opda's own band; without it those rows are left out.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from study.analysis.coverage import World, true_selected_curve
from study.analysis.tuning import MAX_STUDENTISED_DF, selected_curve_with_variance
from study.analysis.tuning_bands import expected_best_band, val_cdf_selected_band, whole_curve_band

try:
    from opda.nonparametric import EmpiricalDistribution
except ImportError:  # the simulation of our bands needs no opda
    EmpiricalDistribution = None

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = ROOT / "tests" / "data" / "coverage_world.csv"
TRIAL_COUNTS = (12, 30)
POOL = 400_000
Z = 1.959963984540054
# A good trial's quality and a bad one's (some (s, m) train badly): 20% of trials, as in the real searches.
GOOD, BAD, BAD_SHARE = (0.36, 0.03), (0.22, 0.05), 0.2


class MixtureWorld:
    """Quality Q: good trials N(0.36, 0.03²), 20% bad ones N(0.22, 0.05²); val = Q + e, test = Q + e′ with independent
    normal noise of the sd that makes corr(val, test) = rho; rho = 0 draws test from an independent trial. Clipped
    to [0, 1] (rarely binding)."""

    def __init__(self, rho: float):
        self.rho = rho
        mean = (1 - BAD_SHARE) * GOOD[0] + BAD_SHARE * BAD[0]
        second = (1 - BAD_SHARE) * (GOOD[1] ** 2 + GOOD[0] ** 2) + BAD_SHARE * (BAD[1] ** 2 + BAD[0] ** 2)
        variance = second - mean ** 2
        self.noise = float(np.sqrt(variance * (1.0 / (rho if rho > 0 else 0.5) - 1.0)))

    def _quality(self, count, rng):
        bad = rng.random(count) < BAD_SHARE
        return np.where(bad, rng.normal(BAD[0], BAD[1], count), rng.normal(GOOD[0], GOOD[1], count))

    def trials(self, count, rng):
        quality = self._quality(count, rng)
        val = quality + rng.normal(0.0, self.noise, count)
        if self.rho == 0:
            quality = self._quality(count, rng)
        return np.clip(val, 0, 1), np.clip(quality + rng.normal(0.0, self.noise, count), 0, 1)


class TailWorld:
    """Quality with a long upper tail (0.25 + Exponential(0.04): rare trials far above the rest) or a ceiling
    (0.42 − Gamma(2, 0.03): many trials near a best configuration, as near an optimum); val and test = Q + noise
    for corr(val, test) = rho."""

    def __init__(self, kind: str, rho: float):
        self.kind, self.rho = kind, rho
        variance = 0.04 ** 2 if kind == "long upper tail" else 2 * 0.03 ** 2
        self.noise = float(np.sqrt(variance * (1.0 / rho - 1.0)))

    def trials(self, count, rng):
        quality = 0.25 + rng.exponential(0.04, count) if self.kind == "long upper tail" else \
            0.42 - rng.gamma(2.0, 0.03, count)
        noise = rng.normal(0.0, self.noise, (2, count))
        return np.clip(quality + noise[0], 0, 1), np.clip(quality + noise[1], 0, 1)


def pointwise_interval(val, test):
    """Our interval (study.analysis.tuning): the curve ± t · its jackknife standard error, t on min(effective trials
    − 1, MAX_STUDENTISED_DF) df, NaN where the selection weights spread over fewer than five trials."""
    curve, variance, df = selected_curve_with_variance(val, test)
    with np.errstate(invalid="ignore"):
        half = stats.t.ppf(0.975, np.minimum(df, MAX_STUDENTISED_DF)) * np.sqrt(variance)
    return curve, curve - half, curve + half


def calibrated_world() -> World:
    """The coverage worlds' trial model (benchmarks/coverage.py): one of the default study's 32 ArcFace trials at
    7162b85, picked at random, with fresh seed noise (half Fixed AdaCos's seed sd) on its val and test scores."""
    table = pd.read_csv(CALIBRATION)
    trials, reference = table[table["kind"] == "trial"], table[table["kind"] == "fixed_adacos"]
    return World("calibrated", trials["val"].to_numpy(float), trials["test"].to_numpy(float),
                 float(reference["test"].std(ddof=1)) / 2.0, 0.0, 0.0, np.array([]))


def worlds() -> list[tuple[str, object]]:
    return ([(f"mixture, rho {rho:g}", MixtureWorld(rho)) for rho in (0.0, 0.5, 0.8, 0.95)]
            + [("calibrated (real trials + noise)", calibrated_world()),
               ("ceiling, rho 0.9", TailWorld("ceiling", 0.9)),
               ("long upper tail, rho 0.9", TailWorld("long upper tail", 0.9))])


class Tally:
    """Per band: hits, failures below and above, widths and estimates over the simulated searches."""

    def __init__(self):
        self.rows = {}

    def add(self, band, truth, low, high, estimate):
        entry = self.rows.setdefault(band, {"truth": truth, "low": [], "high": [], "estimate": []})
        entry["low"].append(low)
        entry["high"].append(high)
        entry["estimate"].append(estimate)

    def table(self, world, rho, trials, valid_n):
        rows = []
        for band, entry in self.rows.items():
            truth = entry["truth"]
            low, high, estimate = (np.array(entry[key]) for key in ("low", "high", "estimate"))
            drawn = np.isfinite(low[0]) & np.isfinite(high[0])
            last = int(np.flatnonzero(drawn).max()) + 1
            below, above = (low[:, drawn] > truth[drawn]), (high[:, drawn] < truth[drawn])
            held = ~(below | above).any(axis=1)
            width = (high - low).mean(axis=0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # no estimate for opda's median curve
                spread = 2 * Z * np.nanstd(estimate, axis=0)
            row = {"world": world, "rho": rho, "trials": trials, "band": band, "n_from": 1, "n_to": last,
                   "studies": low.shape[0], "coverage": held.mean(),
                   "mc_error": np.sqrt(held.mean() * (1 - held.mean()) / low.shape[0]),
                   "fails_below": below.any(axis=1).mean(), "fails_above": above.any(axis=1).mean(),
                   "lowest_pointwise": (~(below | above)).mean(axis=0).min()}
            for label, n in (("1", 1), ("valid", valid_n), ("N", trials), ("2N", 2 * trials)):
                inside = n <= width.size and drawn[n - 1]
                row[f"width_n{label}"] = width[n - 1] if inside else np.nan
                row[f"width_ratio_n{label}"] = (width[n - 1] / spread[n - 1]
                                                if inside and n <= trials and spread[n - 1] > 0 else np.nan)
            rows.append(row)
        return rows


def opda_average_band(val, max_n, generator):
    """opda's simultaneous band on E[max of n val scores], n = 1…max_n, and on the median of that max."""
    lower_cdf, _, upper_cdf = EmpiricalDistribution.confidence_bands(val, 0.95, a=0.0, b=1.0, generator=generator,
                                                                     n_jobs=1)
    draws = np.arange(1, max_n + 1)
    return (upper_cdf.average_tuning_curve(draws), lower_cdf.average_tuning_curve(draws),
            upper_cdf.quantile_tuning_curve(draws), lower_cdf.quantile_tuning_curve(draws))


def simulate(name, world, trials, studies, seed, generator):
    """One world and one number of trials: the coverage rows of every band."""
    rng = np.random.default_rng(seed)
    pool_val, pool_test = world.trials(POOL, rng)
    rho = float(np.corrcoef(pool_val, pool_test)[0, 1])
    selected = true_selected_curve(pool_val, pool_test, trials)
    best_val = true_selected_curve(pool_val, pool_val, 2 * trials)
    median_val = np.quantile(pool_val, 0.5 ** (1.0 / np.arange(1, 2 * trials + 1)))
    tally = Tally()
    valid_n = 0
    for _ in range(studies):
        val, test = world.trials(trials, rng)
        curve, low, high = pointwise_interval(val, test)
        valid_n = int(np.isfinite(low).sum())
        tally.add("ours: pointwise t (selected test)", selected, low, high, curve)
        band = whole_curve_band(val, test)
        tally.add("adopted: whole_curve_band (selected test)", selected, band["low"].to_numpy(),
                  band["high"].to_numpy(), curve)
        band = val_cdf_selected_band(val, test)
        tally.add("opda carried over: val_cdf_selected_band (selected test)", selected, band["low"].to_numpy(),
                  band["high"].to_numpy(), curve)
        if EmpiricalDistribution is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # rare ties from clipping at 0 or 1
                average_low, average_high, median_low, median_high = opda_average_band(val, 2 * trials, generator)
            estimate = np.append(expected_best_band(val, max_n=trials)["estimate"].to_numpy(),
                                 np.full(trials, np.nan))
            tally.add("opda: average tuning curve (best val)", best_val, average_low, average_high, estimate)
            tally.add("opda: median tuning curve (best val)", median_val, median_low, median_high,
                      np.full(2 * trials, np.nan))
    return tally.table(name, rho, trials, valid_n)


def measure_coverage(args) -> pd.DataFrame:
    generator = np.random.default_rng(0)  # opda calibrates its band with it (cached per number of trials)
    rows = []
    for index, (name, world) in enumerate(worlds()):
        for trials in TRIAL_COUNTS:
            start = time.perf_counter()
            rows += simulate(name, world, trials, args.studies, seed=1000 * index + trials, generator=generator)
            print(f"{name}, N = {trials}: {time.perf_counter() - start:.1f} s", flush=True)
    return pd.DataFrame(rows)


def committed_searches() -> list[tuple[str, int, pd.DataFrame]]:
    """Every random search in the committed tables: the default study's and each benchmark cell's whose sampler is
    random, per loss and class split (complete trials; none failed or was pruned in these)."""
    sources = [("default study", ROOT / "reports" / "tables" / "landscape.csv")]
    for cell in sorted((ROOT / "benchmarks" / "cells").glob("*/params.yaml")):
        sampler = yaml.safe_load(cell.read_text(encoding="utf-8"))["search"]["sampler"]
        landscape = cell.parent / "reports" / "tables" / "landscape.csv"
        if sampler == "random" and landscape.exists():
            sources.append((cell.parent.name, landscape))
    searches = []
    for name, path in sources:
        table = pd.read_csv(path)
        table = table[table["state"] == "COMPLETE"]
        for (loss, split), group in table.groupby(["loss", "split"]):
            searches.append((f"{name} / {loss}", int(split), group))
    return searches


def measure_committed_trials() -> pd.DataFrame:
    """The bands on the committed random-search trials, at n = 1, the last n our interval is drawn for, and N."""
    generator = np.random.default_rng(0)
    rows = []
    for search, split, group in committed_searches():
        val, test = group["value"].to_numpy(float), group["test_value"].to_numpy(float)
        trials = val.size
        curve, ours_low, ours_high = pointwise_interval(val, test)
        adopted = whole_curve_band(val, test)
        carried = val_cdf_selected_band(val, test)
        bands = {"ours": (ours_low, ours_high), "adopted": (adopted["low"], adopted["high"]),
                 "opda carried over": (carried["low"], carried["high"])}
        if EmpiricalDistribution is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                average_low, average_high, _, _ = opda_average_band(val, trials, generator)
            bands["opda (best val)"] = (average_low, average_high)
        valid = int(np.isfinite(ours_low).sum())
        for n in sorted({1, max(valid, 1), trials}):
            row = {"search": search, "split": split, "trials": trials, "n": n, "valid_n": valid,
                   "selected_test": curve[n - 1], "best_val": expected_best_band(val)["estimate"].iloc[n - 1],
                   "corr_val_test": float(np.corrcoef(val, test)[0, 1])}
            for label, (low, high) in bands.items():
                row[f"{label} low"] = float(np.asarray(low)[n - 1])
                row[f"{label} high"] = float(np.asarray(high)[n - 1])
            rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=500, help="simulated searches per world and N")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "tuning_bands.csv"))
    parser.add_argument("--trials-out", default=str(ROOT / "benchmarks" / "tuning_bands_trials.csv"))
    args = parser.parse_args()
    if EmpiricalDistribution is None:
        print("opda is not installed (pip install opda==0.8.0): its own band is left out")
    start = time.perf_counter()
    committed = measure_committed_trials()
    committed.to_csv(args.trials_out, index=False)
    table = measure_coverage(args)
    table.to_csv(args.out, index=False)
    shown = ["world", "trials", "band", "n_to", "coverage", "fails_below", "fails_above", "width_n1", "width_nvalid",
             "width_nN", "width_ratio_n1", "width_ratio_nN"]
    with pd.option_context("display.width", 250, "display.max_colwidth", 60):
        print(table[shown].round(3).to_string(index=False))
    print(f"\n{args.studies} searches per world and N ({time.perf_counter() - start:.0f} s); written to {args.out} "
          f"and {args.trials_out}")


if __name__ == "__main__":
    main()
