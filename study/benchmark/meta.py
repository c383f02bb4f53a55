"""The benchmark's numbers: every method against Fixed AdaCos pooled with the data source as a level (what a new
data source should expect), judged against a relative margin; the margin at which each answer changes; trends within
one source; the tuners at equal trials and training iterations; the long regime against the short one."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis import (bayesian_true_effect, hartung_knapp_true_effect, pool_across_sources, random_effects,
                            slope_within_source, weighting_sensitivity)
from study.analysis.coverage import source_pooling_coverage
from study.analysis.headline import headline_cells, long_cells, rate_chosen
from study.benchmark.cells import OUTCOME_ORDER
from study.config import AnalysisConfig

# The relevance margin, pre-specified relative to the score: a difference within ±2% of Fixed AdaCos's score counts
# as none. A share of the score reads the same on every data set (2% of MAP@R 0.9 is 0.018, of 0.3 is 0.006), where
# an absolute ±0.01 is 1% of a high score and 15% of a near-floor one; the absolute value is shown beside it. It is
# the study's own declared margin (analysis.equivalence_margin, "2% of score"), read from its one declaration.
RELATIVE_MARGIN = AnalysisConfig().score_share("retrieval")
# Methods that need no tuning, against which the answer names the best choice (Fixed AdaCos is the reference).
UNTUNED = ("fixed_adacos", "dynamic_adacos", "p2sgrad", "softmax", "arcface_default")
# The headline pools the cells where Fixed AdaCos and the method converged (docs/analysis.md's plateau rule, declared
# before the converged runs); the short regime's pool, with and without its near-floor cells, and the long cells
# whether or not they converged, are sensitivity rows.
SCOPES = {"": "converged", "short_": "short regime", "short_off_floor_": "short regime, near-floor cells left out",
          "people_": "converged, made by people", "code_": "converged, rendered by code",
          "shared_rate_": "converged, every method at one shared learning rate",
          "long_": "trained long, converged or not"}
POOLED_NUMBERS = ("mean", "low", "high", "prediction_low", "prediction_high", "prediction_standard_error",
                  "between_source_variance", "sources", "configurations")


def poolable(rows: pd.DataFrame) -> pd.Series:
    """The cells that enter a pooled estimate: each configuration's primary cell, with a finite, positive SE."""
    return (rows["primary"].astype(bool) & np.isfinite(rows["relative"].astype(float))
            & (rows["relative_se"].astype(float) > 0))


def pooled_numbers(rows: pd.DataFrame, column: str, confidence: float) -> dict:
    """pool_across_sources on one column (relative or absolute difference) of `rows`, as plain numbers."""
    if rows.empty:
        return {name: math.nan for name in POOLED_NUMBERS} | {"sources": 0, "configurations": 0}
    se_column = "relative_se" if column == "relative" else "standard_error"
    result = pool_across_sources(rows[column].astype(float), rows[se_column].astype(float), rows["source"],
                                 confidence=confidence, degrees_of_freedom=rows["df"].astype(float))
    return {name: (float(result[name]) if name not in ("sources", "configurations") else int(result[name]))
            for name in POOLED_NUMBERS}


def headline_with_differences(cells: pd.DataFrame, after: pd.DataFrame,
                              confidence: float = 0.95) -> tuple[pd.DataFrame, list]:
    """Every method's converged headline pooled as the aggregate pools it (`cells`: its cells.csv), and again with
    the differences `after` (cell, method, relative_after, relative_se_after), a second reading of the cells' own
    runs, in place of those cells' own; the headline keeps its cells. Where the headline reads a method's longer
    runs (trained on to convergence: length_factor above 1), `after` moves them by as much as it moved the cell's own
    difference (`own_relative`), at the longer runs' standard error: a check of the cell's runs retrains no longer
    run, only the Fixed AdaCos runs it is compared with may change. Also which headline cells `after` covered."""
    headline = headline_cells(cells)
    moved = headline.merge(after[["cell", "method", "relative_after", "relative_se_after"]], on=["cell", "method"],
                           how="left")
    checked = moved["relative_after"].notna()
    if "length_factor" in moved:
        longer = checked & (moved["length_factor"].astype(float) > 1)
        moved.loc[longer, "relative_after"] += moved.loc[longer, "relative"] - moved.loc[longer, "own_relative"]
        moved.loc[longer, "relative_se_after"] = moved.loc[longer, "relative_se"]
    moved.loc[checked, "relative"] = moved.loc[checked, "relative_after"]
    moved.loc[checked, "relative_se"] = moved.loc[checked, "relative_se_after"]
    table = [{"method": method, **pooled_numbers(headline[headline["method"] == method], "relative", confidence),
              **{f"{key}_after": value for key, value in
                 pooled_numbers(moved[moved["method"] == method], "relative", confidence).items()}}
             for method in dict.fromkeys(headline["method"])]
    return pd.DataFrame(table), sorted(set(moved.loc[checked, "cell"]))


BESIDE_NUMBERS = ("true_low", "true_high", "hk_true_low", "hk_true_high", "inverse_variance_mean",
                  "inverse_variance_low", "inverse_variance_high")


def _beside(rows: pd.DataFrame, confidence: float) -> dict:
    """Printed beside pool_across_sources' prediction, never read by the verdict: a new source's true effect (the
    Bayesian model with the between-source spread integrated out, and Hartung–Knapp with the HTS interval) and the
    inverse-variance mean over sources (study/analysis/true_effect.py); NaN below 2 sources."""
    if rows["source"].nunique() < 2:
        return {name: math.nan for name in BESIDE_NUMBERS}
    y, se, sources = rows["relative"].astype(float), rows["relative_se"].astype(float), rows["source"]
    bayes = bayesian_true_effect(y, se, sources, confidence=confidence)
    knapp = hartung_knapp_true_effect(y, se, sources, confidence=confidence)
    weights = weighting_sensitivity(y, se, sources, confidence=confidence)
    return {"true_low": bayes.prediction_low, "true_high": bayes.prediction_high,
            "hk_true_low": knapp.prediction_low, "hk_true_high": knapp.prediction_high,
            "inverse_variance_mean": weights.inverse_variance_mean, "inverse_variance_low": weights.inverse_variance_low,
            "inverse_variance_high": weights.inverse_variance_high}


def judgement(low: float, high: float, margin: float = RELATIVE_MARGIN) -> str:
    """What an interval of method − Fixed AdaCos says against ±margin: 'better' (beyond +margin), 'worse' (beyond
    −margin), 'equivalent' (within ±margin), 'slightly better' / 'slightly worse' (excludes 0, not the margin) or
    'open' (covers 0 and reaches beyond the margin); 'n/a' without an interval."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "n/a"
    if low >= margin:
        return "better"
    if high <= -margin:
        return "worse"
    if -margin < low and high < margin:
        return "equivalent"
    if low > 0:
        return "slightly better"
    if high < 0:
        return "slightly worse"
    return "open"


def margin_reading(low: float, high: float) -> dict:
    """The verdict as a function of the margin: the smallest margin at which the interval shows equivalence, and the
    smallest gain (or loss) it reliably shows (its bound nearer zero, where it excludes zero)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return {"equivalent_from": math.nan, "reliable_gain": math.nan, "reliable_loss": math.nan}
    return {"equivalent_from": max(abs(low), abs(high)), "reliable_gain": low if low > 0 else math.nan,
            "reliable_loss": high if high < 0 else math.nan}


def pooled_method(every: pd.DataFrame, method: str, confidence: float) -> dict:
    """One method against Fixed AdaCos: pooled over sources on the relative scale, for the headline (the converged
    cells), for the short regime (every primary cell, and without its near-floor cells), for the long cells converged
    or not, and at one shared learning rate (sensitivity rows), and for sources made by people and rendered by code
    apart; the absolute scale beside it; DerSimonian–Laird over configurations, labelled, for comparison."""
    rows = every[every["method"] == method]
    short = rows[poolable(rows) & (rows["regime"] == "short")]

    def mine(pool: pd.DataFrame) -> pd.DataFrame:
        return pool[pool["method"] == method]

    headline = mine(headline_cells(every))  # cells are chosen on every method's rows, then this method's read
    scopes = {"": headline, "short_": short, "short_off_floor_": short[~short["near_floor"].astype(bool)],
              "people_": headline[headline["by_people"].astype(bool)],
              "code_": headline[~headline["by_people"].astype(bool)],
              "shared_rate_": mine(headline_cells(every[~rate_chosen(every)])),  # one rate for all: sensitivity
              "long_": long_cells(rows)}  # with the long cells still improving: sensitivity
    facts = {"method": method, "loss": rows["loss"].iloc[0], "tuned": bool(rows["tuned"].iloc[0]),
             "metric": rows["metric"].iloc[0], "margin": RELATIVE_MARGIN,
             "near_floor_configurations": int(short["near_floor"].astype(bool).sum()),
             # each converged cell's own difference, in % of its Fixed AdaCos score, with its interval
             "converged_cells": [{"cell": row.cell, "relative": row.relative,
                                  "low": row.low / row.reference_test_mean, "high": row.high / row.reference_test_mean}
                                 for row in headline.itertuples()],
             "short_converged": int(short["converged"].astype(bool).sum()),
             "still_improving_cells": sorted(set(scopes["long_"]["cell"]) - set(headline["cell"])),
             # headline cells pooled although this method was still improving there (flagged): after the longer
             # runs the declared rule trains (study.benchmark.trained_on), only where it was still at the cap
             "unconverged_cells": sorted(headline.loc[headline["still_improving"].astype(bool), "cell"]),
             # headline cells whose runs of this method are those longer runs: × the cell's iterations
             "trained_on_cells": {row.cell: int(row.length_factor) for row in headline.itertuples()
                                  if getattr(row, "length_factor", 1) > 1},
             "rate_chosen_cells": int(rate_chosen(headline).sum()),
             "reference_mean": float((headline if len(headline) else short)["reference_test_mean"].mean())}
    for prefix, subset in scopes.items():
        pooled = pooled_numbers(subset, "relative", confidence)
        facts.update({f"{prefix}{key}": value for key, value in pooled.items()})
    for prefix in ("", "short_"):  # beside the interval read: a new source's true effect, and the weighting's sway
        facts.update({f"{prefix}{key}": value for key, value in _beside(scopes[prefix], confidence).items()})
    facts.update(_fresh_seed_bounds(headline, confidence))
    absolute = pooled_numbers(headline, "difference", confidence)
    facts.update({f"absolute_{key}": value for key, value in absolute.items()})
    facts["absolute_margin"] = RELATIVE_MARGIN * facts["reference_mean"]
    facts["judgement"] = judgement(facts["prediction_low"], facts["prediction_high"])
    facts["short_judgement"] = judgement(facts["short_prediction_low"], facts["short_prediction_high"])
    facts["mean_judgement"] = judgement(facts["low"], facts["high"])
    facts.update(margin_reading(facts["prediction_low"], facts["prediction_high"]))
    dl_keys = ("estimate", "low", "high", "prediction_low", "prediction_high", "tau2")
    facts.update({f"dl_{key}": math.nan for key in dl_keys})  # none below 2 cells
    if len(headline) >= 2:
        dl = random_effects(headline["relative"].astype(float), headline["relative_se"].astype(float), confidence,
                            degrees_of_freedom=headline["df"].astype(float))
        facts.update({f"dl_{key}": dl[key] for key in dl_keys})
    primary = rows[rows["primary"].astype(bool)]
    facts.update({name: int((primary["outcome"] == name).sum()) for name in OUTCOME_ORDER})
    if facts["tuned"]:
        facts.update(_tuning_cost(primary, confidence))
    return facts


def _fresh_seed_bounds(headline: pd.DataFrame, confidence: float) -> dict:
    """The pooled mean as it would be with every method at fresh seeds, at the ends the rate choice allows: each
    untuned method reports the runs val chose its rate among and is flattered by at most its cell's bound
    (study.analysis.rate_selection), so the difference to Fixed AdaCos at fresh seeds lies between the cell's own
    minus the method's bound and plus Fixed AdaCos's. Also the bounds themselves, averaged over the cells."""
    keys = ("fresh_low_mean", "fresh_high_mean", "selection_bias_mean", "reference_selection_bias_mean",
            "reference_selection_bias_low", "reference_selection_bias_high")
    if headline.empty or "selection_bias" not in headline:
        return dict.fromkeys(keys, math.nan)
    own, reference = (headline[key].astype(float) for key in ("selection_bias", "reference_selection_bias"))
    low = pooled_numbers(headline.assign(relative=headline["relative"].astype(float) - own), "relative", confidence)
    high = pooled_numbers(headline.assign(relative=headline["relative"].astype(float) + reference), "relative",
                          confidence)
    return dict(zip(keys, (low["mean"], high["mean"], float(own.mean()), float(reference.mean()),
                           float(reference.min()), float(reference.max()))))


def _mean_interval(values, confidence: float) -> tuple[float, float, float]:
    """The mean of per-configuration values with its t interval over them (NaN bounds below 2)."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if values.size < 2:
        return (float(values.mean()) if values.size else math.nan), math.nan, math.nan
    half = stats.t.ppf(0.5 + confidence / 2, values.size - 1) * values.std(ddof=1) / math.sqrt(values.size)
    return float(values.mean()), float(values.mean() - half), float(values.mean() + half)


def _tuning_cost(primary: pd.DataFrame, confidence: float) -> dict:
    """What a search costs and finds over the configurations: break-even counted only where its interval shows it,
    the budget-matched gap (search against the best of as many Fixed AdaCos runs by val), the selected trial's seed
    luck, and the tuned scale against s_f."""
    matched, matched_low, matched_high = _mean_interval(primary["matched_gap"], confidence)
    matched_configurations = int(np.isfinite(primary["matched_gap"].astype(float)).sum())
    luck, luck_low, luck_high = _mean_interval(primary["seed_luck"], confidence)
    shown = primary[primary["break_even_shown"].astype(bool)]
    return {"break_even_shown": int(len(shown)),
            "break_even_point": int(primary["break_even_reached"].astype(bool).sum()),
            "break_even_trials_median": float(shown["break_even_trials"].median()) if len(shown) else math.nan,
            "matched_gap": matched, "matched_low": matched_low, "matched_high": matched_high,
            "matched_n": int(primary["matched_n"].min()) if len(primary) else 0,
            "matched_search_ahead": int((primary["matched_gap"] > 0).sum()),
            "matched_configurations": matched_configurations,
            "seed_luck": luck, "seed_luck_low": luck_low, "seed_luck_high": luck_high,
            "s_ratio_median": float(primary["s_ratio_median"].median()),
            "importance_s_median": float(primary["importance_s"].median())}


def pooled_table(rows: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """One row per method against Fixed AdaCos: the tuned losses first (ArcFace leading), then the untuned methods."""
    methods = list(dict.fromkeys(["arcface_tuned", *rows.loc[rows["tuned"].astype(bool), "method"],
                                  *[method for method in UNTUNED if method in set(rows["method"])]]))
    table = [pooled_method(rows, method, confidence) for method in methods
             if (rows["method"] == method).any()]
    return pd.DataFrame(table)


def best_untuned(pooled: pd.DataFrame, prefix: str = "") -> dict:
    """The untuned method with the highest pooled mean against Fixed AdaCos (Fixed AdaCos itself at 0) in one pool
    (`prefix`: "" the converged cells, "short_" the short regime), and whether the data tell it apart from Fixed
    AdaCos (its CI excludes 0)."""
    candidates = [{"method": "fixed_adacos", "mean": 0.0, "low": 0.0, "high": 0.0, "distinct": False,
                   "pool": SCOPES[prefix]}]
    for row in pooled[pooled["method"].isin(UNTUNED)].to_dict("records"):
        mean, low, high = (row[f"{prefix}{key}"] for key in ("mean", "low", "high"))
        if math.isfinite(mean):
            candidates.append({"method": row["method"], "mean": mean, "low": low, "high": high,
                               "distinct": bool(low > 0 or high < 0), "pool": SCOPES[prefix]})
    return max(candidates, key=lambda candidate: candidate["mean"])


def beyond_margin_from(rows: pd.DataFrame, method: str) -> dict | None:
    """Where `method` beats Fixed AdaCos beyond the margin in a class-count range: within one source of several class
    counts (primary cells), the smallest C from which every cell's interval lies above +margin (relative to Fixed
    AdaCos's score); None where no such range exists. Reads within a source only, where C is the one thing that
    moves."""
    found = []
    cells = rows[rows["primary"].astype(bool) & (rows["method"] == method)]
    for source, group in cells.groupby("source", sort=False):
        if group["train_classes"].nunique() < 2:
            continue
        group = group.sort_values("train_classes")
        beyond = (group["low"].astype(float) / group["reference_test_mean"].astype(float)) >= RELATIVE_MARGIN
        if not beyond.iloc[-1]:
            continue
        start = len(beyond) - int(np.argmin(beyond.to_numpy()[::-1])) if not beyond.all() else 0
        from_row = group.iloc[start]
        # The same configurations trained longer: does the lead hold, or does it start fast and fall behind?
        longer = rows[(rows["method"] == method) & rows["longer_of"].isin(set(group["configuration"].iloc[start:]))]
        longer = longer.sort_values("train_classes")
        reference = longer["reference_test_mean"].astype(float)
        found.append({"method": method, "source": source, "from_classes": int(from_row["train_classes"]),
                      "cells": list(group["cell"].iloc[start:]),
                      "relative": [float(v) for v in (group["difference"] / group["reference_test_mean"]).iloc[start:]],
                      "regime": "short" if (group["regime"].iloc[start:] == "short").all() else "mixed",
                      "longer_cells": list(longer["cell"]),
                      "longer_relative": [float(v) for v in longer["difference"].astype(float) / reference],
                      "longer_behind": len(longer) > 0 and bool(
                          (longer["high"].astype(float) / reference <= -RELATIVE_MARGIN).all())})
    return min(found, key=lambda f: f["from_classes"]) if found else None


def wins_beyond_short_training(rows: pd.DataFrame, methods) -> list[dict]:
    """The class-count ranges where an untuned method beats Fixed AdaCos beyond the margin (beyond_margin_from) that
    the answer states: only those that cells trained beyond the short regime show. A lead seen only in short cells
    is a faster start, not a better model, and the converged cells are the answer (docs/analysis.md)."""
    return [win for method in methods if (win := beyond_margin_from(rows, method)) and win["regime"] != "short"]


def trend_in_classes(rows: pd.DataFrame, confidence: float) -> dict:
    """How tuned ArcFace − Fixed AdaCos moves per tenfold C within the open-protocol source with the most class
    counts (slope_within_source): never across sources, where C and the source move together."""
    tuned = rows[rows["primary"].astype(bool) & (rows["method"] == "arcface_tuned") & (rows["protocol"] == "open")]
    if tuned.empty:
        return {"source": "", "slope": math.nan, "low": math.nan, "high": math.nan, "k": 0, "classes": []}
    fit = slope_within_source(tuned["difference"].astype(float), np.log10(tuned["train_classes"].astype(float)),
                              tuned["source"], confidence=confidence)
    classes = sorted(int(c) for c in tuned.loc[tuned["source"] == fit.source, "train_classes"])
    return {"source": fit.source, "slope": fit.slope, "low": fit.low, "high": fit.high, "k": len(classes),
            "classes": classes}


def pooled_coverage(rows: pd.DataFrame, benchmarks: int = 4000) -> pd.DataFrame:
    """The pooled intervals' coverage in simulated benchmarks with these cells' design (sources, standard errors on
    their df) and a source effect from none to 4× the configuration spread, per method, on the relative scale read
    by the verdict: for the short regime's pool and for the converged headline's (`scope`), the cells the card
    reads; `read` marks pool_across_sources' own intervals."""
    tables = []
    pools = (("short", rows[poolable(rows) & (rows["regime"] == "short")]), ("headline", headline_cells(rows)))
    for scope, pool in pools:
        for method, group in pool.groupby("method", sort=False):
            if len(group) < 3:
                continue
            pooled = pool_across_sources(group["relative"], group["relative_se"], group["source"])
            spread = pooled.configuration_variance
            sd = math.sqrt(spread) if math.isfinite(spread) and spread > 0 else float(group["relative_se"].median())
            tables.append(source_pooling_coverage(group["relative_se"], group["df"], group["source"], sd,
                                                  benchmarks=benchmarks, seed=0).assign(method=method,
                                                                                        configuration_sd=sd,
                                                                                        scope=scope))
    return (pd.concat(tables, ignore_index=True) if tables else
            pd.DataFrame(columns=["method", "scope", "read", "coverage"]))


def value_at(curve: pd.DataFrame, budget: float, x: str, column: str) -> float:
    """A curve's `column` at `budget` on its `x` axis, linear between points (NaN outside, or where missing)."""
    xs, values = curve[x].to_numpy(dtype=float), curve[column].to_numpy(dtype=float)
    if not len(xs) or not math.isfinite(budget) or not np.all(np.isfinite(xs)) or budget > xs[-1] + 1e-9 \
            or budget < xs[0] - 1e-9:
        return math.nan
    after = int(np.searchsorted(xs, budget - 1e-9))
    if after == 0 or abs(xs[after] - budget) <= 1e-9:
        return float(values[after])
    share = (budget - xs[after - 1]) / (xs[after] - xs[after - 1])
    return float(values[after - 1] + share * (values[after] - values[after - 1]))


TUNER_COLUMNS = ["configuration", "cell", "tuner", "sampler", "repeats", "pruner", "trials", "pruned_trials",
                 "iterations_per_trial", "budget", "trials_at_budget", "test_at_budget", "low_at_budget",
                 "high_at_budget", "iterations_budget", "trials_at_iterations", "test_at_iterations",
                 "low_at_iterations", "high_at_iterations", "seconds_per_trial", "reference_test_mean"]


def tuner_table(rows: pd.DataFrame, curves: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per configuration searched with several tuners: each tuner's selected-test curve at the largest number of
    trials every one reached, and at the largest number of training iterations every one reached (a pruned trial
    costs the iterations it ran). Device-seconds stay in the table as measured, never as the budget."""
    searched = rows[rows["method"] == "arcface_tuned"]
    table = []
    for configuration, group in searched.groupby("configuration", sort=False):
        if group["tuner"].nunique() < 2:
            continue
        shown = {cell: curves[cell].assign(iterations=curves[cell]["n"] * per_trial)
                 for cell, per_trial in zip(group["cell"], group["search_iterations"] / group["search_trials"])
                 if cell in curves and len(curves[cell])}
        budget = min(curve["n"].max() for curve in shown.values()) if shown else math.nan
        iterations = min(curve["iterations"].max() for curve in shown.values()) if shown else math.nan
        for row in group.itertuples():
            curve = shown.get(row.cell)
            per_trial = row.search_iterations / row.search_trials if row.search_trials else math.nan
            at = {} if curve is None else {
                **{f"{name}_at_budget": value_at(curve, budget, "n", column)
                   for name, column in (("test", "expected_test"), ("low", "low"), ("high", "high"))},
                **{f"{name}_at_iterations": value_at(curve, iterations, "iterations", column)
                   for name, column in (("test", "expected_test"), ("low", "low"), ("high", "high"))}}
            table.append({"configuration": configuration, "cell": row.cell, "tuner": row.tuner,
                          "sampler": row.sampler, "repeats": row.repeats, "pruner": row.pruner,
                          "trials": row.search_trials, "pruned_trials": row.pruned_trials,
                          "iterations_per_trial": per_trial, "budget": budget, "trials_at_budget": budget,
                          "iterations_budget": iterations, "trials_at_iterations": iterations / per_trial,
                          "seconds_per_trial": row.seconds_per_trial,
                          "reference_test_mean": row.reference_test_mean, **at})
    return pd.DataFrame(table, columns=TUNER_COLUMNS)


def longer_table(rows: pd.DataFrame, convergence: dict[str, dict[str, float]], confidence: float) -> pd.DataFrame:
    """Per long-regime cell and method: method − Fixed AdaCos at the long and the short training length, the change
    (long − short) with its interval (the two cells' SEs combined, t on the smaller df), and each method's
    convergence iterations in both."""
    table = []
    long_cells = rows[rows["longer_of"].notna()].drop_duplicates(["cell", "method"])
    for row in long_cells.itertuples():
        short = rows[(rows["configuration"] == row.longer_of) & rows["primary"].astype(bool)
                     & (rows["method"] == row.method)]
        if short.empty:
            continue
        short = short.iloc[0]
        change = row.difference - short["difference"]
        se = math.hypot(row.standard_error, short["standard_error"])
        df = min(row.df, short["df"])
        half = stats.t.ppf(0.5 + confidence / 2, df) * se if df > 0 and math.isfinite(se) else math.nan
        long_iterations, short_iterations = convergence.get(row.cell, {}), convergence.get(short["cell"], {})
        table.append({"configuration": row.longer_of, "long_cell": row.cell, "short_cell": short["cell"],
                      "method": row.method, "rate_chosen": float(getattr(row, "rates", 1)) > 1,
                      "short_iterations": short["iterations"], "long_iterations": row.iterations,
                      "short_difference": short["difference"], "long_difference": row.difference,
                      "change": change, "change_low": change - half, "change_high": change + half,
                      "short_converged_at": short_iterations.get(row.method, math.nan),
                      "long_converged_at": long_iterations.get(row.method, math.nan),
                      "reference_short_converged_at": short_iterations.get("fixed_adacos", math.nan),
                      "reference_long_converged_at": long_iterations.get("fixed_adacos", math.nan)})
    return pd.DataFrame(table)


def _span(cells: pd.DataFrame) -> str:
    """The cells' training iterations: '96', '186–230', or '' for none."""
    if cells.empty:
        return ""
    low, high = int(cells["iterations"].min()), int(cells["iterations"].max())
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def length_by_source(rows: pd.DataFrame, method: str = "arcface_tuned") -> pd.DataFrame:
    """Training length as a moderator: per source, `method` − Fixed AdaCos (in % of Fixed AdaCos's score) averaged
    over its short-regime configurations and over its converged cells (those the headline pools), with the counts."""
    short = rows[poolable(rows) & (rows["regime"] == "short") & (rows["method"] == method)]
    converged = headline_cells(rows)
    converged = converged[converged["method"] == method]
    table = []
    for source in sorted(set(short["source"]) | set(converged["source"])):
        mine, done = short[short["source"] == source], converged[converged["source"] == source]
        table.append({"source": source, "short_configurations": len(mine), "short_iterations": _span(mine),
                      "short_relative": float(mine["relative"].mean()) if len(mine) else math.nan,
                      "converged_cells": len(done), "converged_iterations": _span(done),
                      "converged_relative": float(done["relative"].mean()) if len(done) else math.nan})
    return pd.DataFrame(table)


