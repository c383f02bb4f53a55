"""One finished cell read from its committed files: every method against Fixed AdaCos on the objective (absolute and
relative to Fixed AdaCos's score, with a standard error that knows its seed noise), the study's own outcome, and for
each searched loss what tuning cost (break-even against one run and against the budget-matched control), the
selected trial's seed luck and what the search found (tuned s against AdaCos's s_f, the importance of s and m)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from study.analysis import (REFERENCE_METHOD, TEST_PREFIX, count_or_none, differences_to_fixed_adacos,
                            expected_selected_after_n_trials, seed_luck)
from study.plateau import PLATEAU_RISE, plateau_rise, plateau_table
from study.analysis.rate_selection import selection_bias_bound
from study.analysis.verdict import difference_row, recommendation_rule
from study.benchmark.rate_edges import rate_edges
from study.config import load_params
from study.adacos_scale import fixed_adacos_scale
from study.results import REPORT_DIR, read_csv, read_json
from study.sources import is_synthetic_source
from study.sweep.pipelines import DIFFERENCES_FILE, METRICS_FILE

TABLES = REPORT_DIR / "tables"
# How each of the study's reasons reads across cells: did the method beat Fixed AdaCos by the margin, was it
# equivalent, was Fixed AdaCos better, or open?
OUTCOMES = {"tuning_better_beyond_margin": "paid", "equivalent": "equivalent", "gain_within_margin": "equivalent",
            "adacos_significantly_better": "adacos_better", "gain_not_shown_relevant": "undecided",
            "not_resolved": "undecided", "no_tuned_comparison": "undecided", "nothing_learned": "undecided"}
OUTCOME_ORDER = ("paid", "equivalent", "adacos_better", "undecided")
# A cell where Fixed AdaCos's objective (MAP@R, accuracy: bounded by 1) is below this retrieves little: such cells are
# flagged, and the pool without them is a labelled sensitivity row (no rule that looks at a score leaves a cell out).
NEAR_FLOOR_SCORE = 0.15


def _number(value) -> float:
    return math.nan if value is None or (not isinstance(value, str) and pd.isna(value)) else float(value)


def comparison_outcome(differences: pd.DataFrame, method: str, metric: str) -> tuple[str, dict | None]:
    """The study's own rule (study.analysis.verdict) for one method against Fixed AdaCos alone: its reason and the
    comparison it read."""
    comparison = difference_row(differences, method, metric)
    _, reason = recommendation_rule(method, comparison, [])
    return reason, comparison


def budget_matched(landscape: pd.DataFrame, run_scores: pd.DataFrame, loss: str, metric: str) -> pd.Series:
    """Per class split, at n = the split's Fixed AdaCos seeds: the expected test score of the trial val selects among n
    random-search trials minus the test score of the best of the n Fixed AdaCos runs by val (the same number of
    trainings)."""
    trials = landscape[(landscape["loss"] == loss) & (landscape["state"] == "COMPLETE")]
    trials = trials[trials["repeat"].fillna(0) == trials["repeat"].fillna(0).min()] if len(trials) else trials
    reference = run_scores[run_scores["method"] == REFERENCE_METHOD]
    if trials.empty or reference.empty or metric not in reference:
        return pd.Series(dtype=float)
    reference = reference.assign(split=reference.get("split", 0))
    gaps = {}
    for split, seeds in reference.groupby("split"):
        searched = trials[trials["split"].fillna(0).astype(int) == int(split)]
        n = len(seeds)
        if len(searched) < n or n < 1:
            continue
        curve = expected_selected_after_n_trials(searched["value"].astype(float), searched["test_value"].astype(float))
        control = float(seeds.loc[seeds["val_score"].astype(float).idxmax(), metric])
        gaps[int(split)] = float(curve[n - 1]) - control
    return pd.Series(gaps, dtype=float)


def scale_ratios(landscape: pd.DataFrame, loss: str, train_classes: int) -> np.ndarray:
    """Each class split's best s over AdaCos's s_f = √2·ln(C − 1) at the cell's training class count."""
    best = landscape[(landscape["loss"] == loss) & landscape["best"].astype(bool)]
    return best["s"].astype(float).to_numpy() / fixed_adacos_scale(train_classes) if train_classes >= 3 else np.array([])


# A selected s this close to an end of the searched range (as a share of its log-width) says the range may cut the
# optimum off: the search should have reached further.
EDGE_SHARE = 0.05


def splits_at_edge(landscape: pd.DataFrame, loss: str, s_range) -> int:
    """How many class splits selected an s within EDGE_SHARE of either end of the log-uniform range `s_range`."""
    best = landscape[(landscape["loss"] == loss) & landscape["best"].astype(bool)]["s"].astype(float).to_numpy()
    low, high = np.log(float(s_range[0])), np.log(float(s_range[1]))
    where = (np.log(best) - low) / (high - low)
    return int(((where <= EDGE_SHARE) | (where >= 1 - EDGE_SHARE)).sum())


def importance_of_s(landscape: pd.DataFrame, loss: str, seed: int = 0) -> float:
    """The share of the val score's variance that s explains against m over the search's completed trials (Optuna's
    PED-ANOVA evaluator, averaged over class splits); NaN with fewer than 8 trials in a split."""
    shares, verbosity = [], optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one in-memory study per split, not worth a line each
    trials = landscape[(landscape["loss"] == loss) & (landscape["state"] == "COMPLETE")]
    for _, split in trials.groupby(trials["split"].fillna(0)):
        if len(split) < 8:
            continue
        study = optuna.create_study(direction="maximize")
        space = {"s": optuna.distributions.FloatDistribution(min(split["s"].min(), 1.0), max(split["s"].max(), 1.0),
                                                             log=True),
                 "m": optuna.distributions.FloatDistribution(float(split["m"].min()), float(split["m"].max()) + 1e-9)}
        study.add_trials([optuna.trial.create_trial(params={"s": float(row.s), "m": float(row.m)},
                                                    distributions=space, value=float(row.value))
                          for row in split.itertuples()])
        importances = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), normalize=True)
        shares.append(importances.get("s", math.nan))
    optuna.logging.set_verbosity(verbosity)
    return float(np.mean(shares)) if shares else math.nan


def rate_lengths(rates: int, choose_at: float | None) -> float:
    """An untuned method's trainings per kept run, in whole lengths, where val chose among `rates` learning rates:
    one at each rate, or with `choose_at` (train.choose_at) each rate that share of the length and the chosen one
    whole."""
    return rates if choose_at is None or rates < 2 else 1 + rates * choose_at


def cell_device_seconds(search: pd.DataFrame, final: pd.DataFrame, run_scores: pd.DataFrame, rates: int = 1,
                        choose_at: float | None = None) -> dict:
    """What a cell's study trained, in device-seconds: every search trial, and every final run (its method's mean
    seconds × its runs), per untuned method apart so that runs shared between cells can be counted once. Where val
    chose among `rates` learning rates, an untuned method trained its runs at each (counted at the chosen rate's
    seconds per iteration: `rate_lengths` whole runs); a tuned one at its selected trial's rate alone."""
    runs = run_scores.groupby("method").size()
    per_method = final.drop_duplicates("method").set_index("method")["run_seconds"]
    lengths = rate_lengths(rates, choose_at)
    finals = {method: float(per_method.get(method, math.nan)) * int(count)
              * (1 if method.endswith("_tuned") else lengths) for method, count in runs.items()}
    return {"search": float(search["seconds"].sum()), "finals": finals,
            "total": float(search["seconds"].sum()) + float(np.nansum(list(finals.values())))}


def cell_trainings(landscape: pd.DataFrame, run_scores: pd.DataFrame, iterations: float, rates: int = 1,
                   choose_at: float | None = None) -> dict:
    """What a cell trained, counted as cell_device_seconds counts its seconds: every search trial (a pruned one its
    iterations so far) and every final run, an untuned method's once per learning rate val chose among (and, chosen
    early, once more at the chosen rate: `rate_lengths` whole lengths)."""
    runs = run_scores.groupby("method").size()
    early = choose_at is not None and rates > 1
    untuned = sum(int(count) for method, count in runs.items() if not method.endswith("_tuned"))
    tuned = int(runs.sum()) - untuned
    searched = pd.to_numeric(landscape["iterations"], errors="coerce") if "iterations" in landscape else None
    return {"trainings": len(landscape) + tuned + untuned * (rates + early),
            "iterations_trained": (float(searched.sum()) if searched is not None else math.nan)
            + (tuned + untuned * rate_lengths(rates, choose_at)) * float(iterations)}


def _search_facts(directory: Path, loss: str, facts: dict, landscape: pd.DataFrame, run_scores: pd.DataFrame,
                  search: pd.DataFrame, even: pd.DataFrame, metric: str) -> dict:
    """A searched loss's tuning cost and findings in one cell."""
    searched = search[search["loss"] == loss]
    searched = searched.iloc[0] if len(searched) else pd.Series(dtype=object)
    per_trial = _number(searched.get("seconds_per_trial"))
    reached = even[(even["loss"] == loss) & (even["reference"] == REFERENCE_METHOD)]
    reached = reached.iloc[0] if len(reached) else pd.Series(dtype=object)
    trials_low = _number(count_or_none(reached.get("trials_low")))
    trials_high = _number(count_or_none(reached.get("trials_high")))
    trials = landscape[landscape["loss"] == loss]
    luck, matched = seed_luck(landscape, run_scores, loss, metric), budget_matched(landscape, run_scores, loss, metric)
    ratios = scale_ratios(landscape, loss, int(facts["train_classes"]))
    s_range = _s_range(directory)  # read once: its params.yaml
    return {
        "break_even_reached": bool(reached.get("reached", False)),
        "break_even_trials": _number(count_or_none(reached.get("trials"))),
        "break_even_low": trials_low, "break_even_high": trials_high,
        "break_even_shown": bool(reached.get("reached", False)) and math.isfinite(trials_high),
        "valid_trials": _number(reached.get("valid_trials")), "max_trials": _number(reached.get("max_trials")),
        "seconds_per_trial": per_trial, "break_even_seconds": _number(reached.get("seconds")),
        "search_seconds": _number(searched.get("seconds")), "search_trials": _number(searched.get("trials")),
        "pruned_trials": _number(searched.get("pruned")),
        "search_iterations": float(pd.to_numeric(trials.get("iterations"), errors="coerce").sum())
        if "iterations" in trials else math.nan,
        "seed_luck": float(luck.mean()) if len(luck) else math.nan, "seed_luck_splits": len(luck),
        "matched_gap": float(matched.mean()) if len(matched) else math.nan, "matched_splits": len(matched),
        "matched_n": int(run_scores[run_scores["method"] == REFERENCE_METHOD].groupby(
            run_scores.get("split", 0)).size().min()) if len(run_scores) else 0,
        "s_ratio_median": float(np.median(ratios)) if ratios.size else math.nan,
        "s_ratio_low": float(ratios.min()) if ratios.size else math.nan,
        "s_ratio_high": float(ratios.max()) if ratios.size else math.nan,
        "best_m_median": float(trials.loc[trials["best"].astype(bool), "m"].median()) if len(trials) else math.nan,
        "importance_s": importance_of_s(landscape, loss),
        "s_range": "–".join(f"{value:g}" for value in s_range),
        "s_edge_splits": splits_at_edge(landscape, loss, s_range),
    }


def _s_range(directory: Path) -> tuple[float, float]:
    """The cell's searched s range, from its params.yaml (the code's default where the file leaves it out)."""
    return tuple(load_params(directory / "params.yaml").search.s_range)


def learning_curves(directory: str | Path) -> pd.DataFrame | None:
    """A cell's final runs' learning curves (tables/learning_curves.csv); None in cells written before runs kept
    theirs."""
    path = Path(directory) / TABLES / "learning_curves.csv"
    return read_csv(path, "report") if path.exists() else None


def cell_plateau(directory: str | Path) -> tuple[dict[str, float], str]:
    """Per method, the plateau rule's rise over the second half of training (study.plateau), and what it
    was read from: every run's learning curve (tables/learning_curves.csv), or, in cells written before runs kept
    theirs, the mean val curve over runs (tables/curves.csv)."""
    curves = learning_curves(directory)
    if curves is not None:
        table = plateau_table(curves, list(dict.fromkeys(curves["method"])))
        return dict(zip(table["method"], table["rise"].astype(float))), "runs"
    curves = read_csv(Path(directory) / TABLES / "curves.csv", "report").sort_values("iteration", kind="stable")
    return {method: plateau_rise(group["iteration"].to_numpy(dtype=float), group["mean"].to_numpy(dtype=float))
            for method, group in curves.groupby("method", sort=False)}, "mean curve"


def cell_rows(facts: dict, directory: str | Path) -> list[dict]:
    """One row per method of a finished cell against Fixed AdaCos, read from its reports/ (metrics.json, tables/)."""
    directory = Path(directory)
    metrics = read_json(directory / METRICS_FILE, "report")
    verdict = metrics["verdict"]
    confidence = float(verdict.get("confidence", 0.95))
    metric = verdict.get("metric") or f"{TEST_PREFIX}{verdict['objective']}"
    differences = read_csv(directory / DIFFERENCES_FILE, "report")
    search = read_csv(directory / TABLES / "search.csv", "report")
    final = read_csv(directory / TABLES / "final_test.csv", "report")
    run_scores = read_csv(directory / TABLES / "run_scores.csv", "report")
    even = read_csv(directory / TABLES / "break_even.csv", "report")
    landscape = read_csv(directory / TABLES / "landscape.csv", "report")
    rates = len(facts.get("learning_rates") or [None])  # train.learning_rates, or train.lr alone
    choose_at = facts.get("choose_at")  # train.choose_at where val chose the rate early, else absent
    cost = cell_device_seconds(search, final, run_scores, rates, choose_at)
    edges = rate_edges(run_scores, facts.get("learning_rates"))
    nothing = {"top": math.nan, "bottom": math.nan, "splits": math.nan}
    rises, plateau_basis = cell_plateau(directory)
    reference = float(run_scores.loc[run_scores["method"] == REFERENCE_METHOD, metric].mean())
    # An untuned method reports the runs val chose its rate among; a tuned one is retrained at fresh seeds: the most
    # that choice flatters each method, in % of Fixed AdaCos's score (study.analysis.rate_selection).
    flattered = {method: 0.0 if method.endswith("_tuned") else
                 selection_bias_bound(own, metric, rates) / reference for method, own in run_scores.groupby("method")}
    common = {key: facts.get(key) for key in ("configuration", "tuner", "primary", "source", "protocol",
                                              "train_classes", "sampler", "repeats", "pruner", "n_trials",
                                              "longer_of", "iterations", "epochs")}
    common.update(cell=facts["name"], by_people=not is_synthetic_source(facts["source"]), metric=metric,
                  confidence=confidence, splits=len(facts["splits"]), seeds=len(facts["seeds"]),
                  reference_test_mean=reference, near_floor=reference < NEAR_FLOOR_SCORE,
                  regime="long" if facts.get("longer_of") or facts.get("converged_only") else "short",
                  plateau_basis=plateau_basis, rates=rates,
                  reference_rise=rises.get(REFERENCE_METHOD, math.nan),
                  **{f"reference_rate_{edge}": count for edge, count in edges.get(REFERENCE_METHOD, nothing).items()},
                  reference_converged=bool(rises.get(REFERENCE_METHOD, math.nan) < PLATEAU_RISE),
                  reference_selection_bias=flattered.get(REFERENCE_METHOD, math.nan),
                  cell_seconds=cost["total"], cell_search_seconds=cost["search"],
                  **cell_trainings(landscape, run_scores, _number(facts.get("iterations")), rates, choose_at),
                  shared_final_seconds=float(np.nansum([seconds for method, seconds in cost["finals"].items()
                                                        if not method.endswith("_tuned")])))
    rows = []
    estimates = differences_to_fixed_adacos(run_scores, metric, confidence).set_index("method")
    for method in dict.fromkeys(run_scores["method"]):
        if method == REFERENCE_METHOD:
            continue
        loss = method.removesuffix("_tuned") if method.endswith("_tuned") else None
        estimate = estimates.loc[method]
        reason, comparison = comparison_outcome(differences, method, metric)
        table = differences[(differences["method"] == method) & (differences["metric"] == metric)]
        cell_row = table.iloc[0] if len(table) else pd.Series(dtype=object)
        row = {**common, "method": method, "loss": loss, "tuned": loss is not None,
               **{key: estimate[key] for key in ("difference", "low", "high", "standard_error", "df", "se_splits",
                                                 "se_floor", "se_from", "relative", "relative_se")},
               "method_test_mean": float(run_scores.loc[run_scores["method"] == method, metric].mean()),
               "selection_bias": flattered[method],
               "margin": _number(cell_row.get("margin")), "detectable": _number(cell_row.get("detectable")),
               "reason": reason, "outcome": OUTCOMES.get(reason, "undecided"),
               "method_rise": rises.get(method, math.nan),
               **{f"rate_{edge}": count for edge, count in edges.get(method, nothing).items()},
               "converged": bool(common["reference_converged"] and rises.get(method, math.nan) < PLATEAU_RISE)}
        if loss is not None:
            row.update(_search_facts(directory, loss, facts, landscape, run_scores, search, even, metric))
        rows.append(row)
    return rows


def search_trials(rows: pd.DataFrame, cells_dir: str | Path, loss: str) -> pd.DataFrame:
    """Every finished trial of `loss`'s random searches over the cells of `rows` (cell, split, s, value), with s_f at
    the cell's training class count: what study.analysis.scale_bands reads. Random search only: a sampler that
    learns would draw fewer trials where the scale failed before."""
    searched = rows[(rows["method"] == f"{loss}_tuned") & (rows["sampler"] == "random")].drop_duplicates("cell")
    tables = []
    for row in searched.itertuples():
        if int(row.train_classes) < 3:  # s_f = √2·ln(C − 1) needs C ≥ 3
            continue
        landscape = read_csv(Path(cells_dir) / row.cell / TABLES / "landscape.csv", "report")
        mine = landscape[(landscape["loss"] == loss) & (landscape["state"] == "COMPLETE")]
        tables.append(mine[["split", "s", "value"]].assign(cell=row.cell,
                                                           s_f=fixed_adacos_scale(int(row.train_classes))))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["split", "s", "value", "cell",
                                                                                     "s_f"])


def tuning_curve(directory: str | Path, loss: str) -> pd.DataFrame:
    """A cell's selection-aware tuning curve of one searched loss: n, expected test, its band, device-seconds."""
    curves = read_csv(Path(directory) / TABLES / "tuning_curves.csv", "report")
    curve = curves[(curves["method"] == loss) & (curves["kind"] == "search")]
    return curve[["n", "expected_test", "low", "high", "seconds"]].reset_index(drop=True)


def convergence_iterations(directory: str | Path, fraction: float = 0.95) -> dict[str, float]:
    """Per method: the median over runs of the iterations to reach `fraction` of its own best val score (NaN where
    the median run never reached it)."""
    table = read_csv(Path(directory) / TABLES / "convergence.csv", "report")
    rows = table[(table["basis"] == "best") & np.isclose(table["fraction"], fraction)]
    return {row.method: _number(row.median_iteration) for row in rows.itertuples()}
