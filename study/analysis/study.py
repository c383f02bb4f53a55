"""The whole study: every table and number the report needs, from the stages' result tables (trials.csv of each
search, evaluation/runs.csv and evaluation/history.csv; see study/results.py), built from the tuning, comparison,
convergence and verdict modules beside this one; and the searches' own summary and landscape of trials.

Pure functions on pandas frames: no file I/O, no plotting.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from study.analysis.common import (ADACOS_METHODS, ARCFACE_METHODS, FINISHED_STATES, REFERENCE_METHOD, TEST_PREFIX,
                                   finite_values, fixed_scale_of, higher_is_better, is_evidence, primary_loss,
                                   split_of, untuned_methods)
from study.analysis.comparison import final_tables, run_score_table
from study.analysis.design import next_design
from study.analysis.convergence import (
    angle_dynamics,
    convergence_tables,
    crossings_table,
    final_gap_tests,
    mean_curves,
)
from study.plateau import plateau_table
from study.analysis.learning_curves import (DIFFERENCE_CURVE_COLUMNS, crossover_table, difference_curve,
                                           learning_curves_table)
from study.analysis.tuning import _trial_draws, reference_bands, seed_luck_over_splits, tuning_budget
from study.analysis.variance import search_variance
from study.analysis.verdict import verdict_facts
from study.config import AnalysisConfig
from study.results import tuned_method


@dataclass
class StudyAnalysis:
    """Every table and number of the report: tidy frames (one row per observation) and a few scalars."""

    objective: str
    confidence: float
    methods: list[str]  # display order: the baselines, then each searched loss's tuned method, then any other
    searched_losses: list[str]
    # loss, repeats, trials (finished), complete, pruned, failed, running, seconds, seconds_per_trial,
    # best_trial, best_value, best_s, best_m (the best of the first repeat: what the tuned runs retrain), and
    # seed_luck, seed_luck_low, seed_luck_high, seed_luck_splits (the best trial's test score against its (s, m)
    # retrained at fresh seeds, mean over splits with its t interval)
    search_summary: pd.DataFrame
    # method (a searched loss, or an untuned method as the budget-matched control), kind (search | control), n,
    # expected_test (test score of the trial val selects among n), low, high, expected_val (the expected best
    # val score, which includes the maximum of seed noise), seconds (n × one trial or run)
    tuning_curves: pd.DataFrame
    estimator: dict  # kind (pooled | repeats), exact, text: which tuning-curve estimator and why
    reference_bands: pd.DataFrame  # method, mean, low, high, seeds, seconds (mean final val score)
    break_even: pd.DataFrame  # BREAK_EVEN_COLUMNS: per searched loss and untuned reference
    final: pd.DataFrame  # method, metric, mean, std, n, higher_is_better
    costs: pd.DataFrame  # method, loss, runs, diverged, at_chance, tuning_trials, tuning_seconds, run_seconds
    run_scores: pd.DataFrame  # method, seed, status, val_score, test_<metric>...: one row per final run
    differences: pd.DataFrame  # DIFFERENCE_COLUMNS: method − Fixed AdaCos per test metric
    best_final_val: float  # the best method's mean final val score: what the absolute targets are fractions of
    best_final_method: str | None
    targets: dict[float, float]  # convergence fraction → val score (basis "best")
    convergence_runs: pd.DataFrame  # method, seed, basis, fraction, target, iteration (NaN: never reached)
    convergence: pd.DataFrame  # CONVERGENCE_COLUMNS: median iterations over seeds with a bootstrap interval
    convergence_speed: pd.DataFrame  # SPEED_COLUMNS: method − Fixed AdaCos in median iterations, and who is faster
    curves: pd.DataFrame  # method, iteration, mean, low, high, n
    angles: pd.DataFrame  # method, iteration, theta_med_deg, cos_nontarget_mean, s
    # CROSSING_COLUMNS and gap_low, gap_high, gap_significant (the final val gap tested across seeds)
    crossings: pd.DataFrame
    landscape: pd.DataFrame  # loss, repeat, trial, state, s, m, value, test_value, best
    learning_curves: pd.DataFrame  # LEARNING_CURVE_COLUMNS: every final run's val and test objective per evaluation
    plateau: pd.DataFrame  # PLATEAU_COLUMNS: the plateau rule of docs/analysis.md per method
    difference_curves: pd.DataFrame  # DIFFERENCE_CURVE_COLUMNS: each method − Fixed AdaCos on test along training
    learning_crossovers: pd.DataFrame  # crossover_table: where each AdaCos overtakes each ArcFace on test, if anywhere
    num_classes: int | None
    s_f: float | None
    verdict_facts: dict


def _require_columns(frame: pd.DataFrame, columns, name: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise KeyError(f"{name} lacks columns {missing}; it has {list(frame.columns)}")


def _method_order(runs: pd.DataFrame, history: pd.DataFrame, searched_losses: list[str]) -> list[str]:
    present = list(dict.fromkeys([*runs["method"], *history["method"]]))
    ordered = untuned_methods(present)
    ordered += [tuned_method(loss) for loss in searched_losses if tuned_method(loss) in present]
    return ordered + [m for m in present if m not in ordered]


def _search_summary(trials: pd.DataFrame) -> pd.DataFrame:
    """Per searched loss: trial counts by state, device-seconds (and CPU-seconds) spent, and the best completed
    trial."""
    rows = []
    for loss, everything in trials.groupby("loss", sort=False):
        group = everything[is_evidence(everything)]
        finished = group[group["state"].isin(FINISHED_STATES)]
        complete = group[(group["state"] == "COMPLETE") & np.isfinite(pd.to_numeric(group["value"], errors="coerce"))]
        seconds = float(finite_values(finished["seconds"]).sum())
        # CPU time only where every finished trial recorded it (trials trained before it was recorded have none): a
        # sum over some of them would read as the search's.
        cpu = pd.to_numeric(finished.get("cpu_seconds", pd.Series(math.nan, index=finished.index)), errors="coerce")
        cpu_seconds = float(cpu.sum()) if len(cpu) and np.isfinite(cpu).all() else math.nan
        # The best of the first repeat: the one search a user runs, whose values the tuned runs retrain.
        first = complete[complete["repeat"] == complete["repeat"].min()] if len(complete) else complete
        best = first.loc[first["value"].astype(float).idxmax()] if len(first) else None
        rows.append({
            "loss": loss, "repeats": int(group["repeat"].nunique()), "trials": len(finished),
            "complete": len(complete),
            "pruned": int((group["state"] == "PRUNED").sum()), "failed": int((group["state"] == "FAIL").sum()),
            "running": int((group["state"] == "RUNNING").sum()), "interrupted": int((~is_evidence(everything)).sum()),
            "seconds": seconds, "cpu_seconds": cpu_seconds,
            # Every finished trial is a draw the tuning curve counts, pruned and failed ones included.
            "seconds_per_trial": seconds / len(finished) if len(finished) else math.nan,
            "best_trial": int(best["trial"]) if best is not None else None,
            "best_value": float(best["value"]) if best is not None else math.nan,
            "best_s": float(best["s"]) if best is not None else math.nan,
            "best_m": float(best["m"]) if best is not None else math.nan,
        })
    return pd.DataFrame(rows, columns=["loss", "repeats", "trials", "complete", "pruned", "failed", "running",
                                       "interrupted", "seconds", "cpu_seconds", "seconds_per_trial", "best_trial",
                                       "best_value", "best_s", "best_m"])


def _landscape(trials: pd.DataFrame) -> pd.DataFrame:
    """Every finished trial's (s, m), state, val and test scores, training seed, iterations and seconds, with each
    loss's best trial flagged (the best of its first repeat, whose values the tuned runs retrain)."""
    finished = trials[trials["state"].isin(FINISHED_STATES)]
    frame = finished.reindex(columns=["loss", "split", "repeat", "trial", "state", "s", "m", "value", "test_value",
                                      "seed", "iterations", "seconds"]).reset_index(drop=True)
    frame["split"] = frame["split"].fillna(0).astype(int)
    frame["best"] = False
    first_repeat = frame["repeat"] == frame.groupby(["loss", "split"])["repeat"].transform("min")
    values = pd.to_numeric(frame["value"], errors="coerce").where((frame["state"] == "COMPLETE") & first_repeat)
    for _, group in values.groupby([frame["loss"], frame["split"]], sort=False):
        if group.notna().any():
            frame.loc[group.idxmax(), "best"] = True
    return frame


def _with_seed_luck(summary: pd.DataFrame, landscape: pd.DataFrame, run_scores: pd.DataFrame, objective: str,
                    confidence: float) -> pd.DataFrame:
    """The search summary with each searched loss's seed luck (study.analysis.tuning.seed_luck_over_splits)."""
    luck = [seed_luck_over_splits(landscape, run_scores, loss, f"{TEST_PREFIX}{objective}", confidence)
            for loss in summary["loss"]]
    columns = ["seed_luck", "seed_luck_low", "seed_luck_high", "seed_luck_splits"]
    return pd.concat([summary.reset_index(drop=True), pd.DataFrame(luck, columns=columns)], axis=1)


def _one_run_key(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its seed made "split:seed" where it holds several class splits, so that a seed names one run."""
    if "split" not in frame or frame["split"].nunique() < 2:
        return frame
    return frame.assign(seed=frame["split"].astype(str) + ":" + frame["seed"].astype(str))


def _search_variance(trials: pd.DataFrame, runs: pd.DataFrame, loss: str | None, objective: str) -> float:
    """The search's share of the variance a user meets (study.analysis.variance): from each split's trials of the
    searched loss, less the seed noise of its retrained runs."""
    tuned = runs[runs["method"] == tuned_method(loss)] if loss else runs.iloc[:0]
    metric = f"{TEST_PREFIX}{objective}"
    if tuned.empty or metric not in tuned:
        return math.nan
    seed_variance = tuned.groupby(split_of(tuned))[metric].var(ddof=1).mean()
    draws = [_trial_draws(part) for _, part in trials[trials["loss"] == loss].groupby(split_of(trials))]
    draws = [d for d in draws if len(d) >= 2]
    if not draws:
        return math.nan
    return search_variance([d["selection"] for d in draws], [d["reported"] for d in draws], float(seed_variance))


def analyse_study(trials: pd.DataFrame, runs: pd.DataFrame, history: pd.DataFrame, objective: str,
                  config: AnalysisConfig = AnalysisConfig(), num_classes: int | None = None,
                  sampler: str = "random", independent_splits: int | None = None) -> StudyAnalysis:
    """Every table and number of the report from the search trials, the evaluated runs and their val curves.

    `num_classes` is the number of training classes C (manifest["splits"]["train"]["num_classes"]), for s_f;
    `sampler` is search.sampler, which decides the tuning-cost estimator; `independent_splits`, under the open
    protocol, how many class splits the source's classes can make with disjoint test classes (`independent_splits`
    of study.splits), beyond which more splits of the same classes are no new evidence. The convergence targets are
    fractions of the best final val score among all methods, where a method's final val score is the mean
    over its seeds (diverged seeds left out), and fractions of each method's own.
    """
    _require_columns(trials, ["loss", "repeat", "trial", "state", "s", "m", "value", "test_value", "seconds"],
                     "trials (a trials.csv without repeat or test_value was written by an older search: rerun "
                     "`dvc repro`)")
    _require_columns(runs, ["method", "seed", "val_score", "seconds"], "runs")
    _require_columns(history, ["method", "seed", "iteration", objective], "history")
    searched_losses = list(dict.fromkeys(trials["loss"]))
    methods = _method_order(runs, history, searched_losses)
    summary = _search_summary(trials)
    trials = trials[is_evidence(trials)]
    bands = reference_bands(runs, config)
    tuning_curves, even, estimator = tuning_budget(trials, runs, summary, objective, sampler, config)
    final, costs, differences = final_tables(runs, methods, summary, config)
    # The convergence analysis pairs runs by seed: with several class splits a run is its split and seed.
    keyed_runs, keyed_history = _one_run_key(runs), _one_run_key(history)
    best, best_method, targets, per_run, per_method, speed = convergence_tables(keyed_runs, keyed_history, objective,
                                                                                methods, config)
    curves = mean_curves(keyed_history, objective, methods, config)
    default = runs.loc[runs["method"] == "arcface_default"].reindex(columns=["s", "m"])
    default_hyperparameters = {key: float(value) for key, value in default.iloc[0].items()} if len(default) else {}
    run_scores = run_score_table(runs)
    landscape = _landscape(trials)
    learning_curves = learning_curves_table(history, objective)
    difference_curves = pd.concat([difference_curve(learning_curves, method, confidence=config.confidence)
                                   for method in methods if method != REFERENCE_METHOD]
                                  or [pd.DataFrame(columns=DIFFERENCE_CURVE_COLUMNS)], ignore_index=True)
    summary = _with_seed_luck(summary, landscape, run_scores, objective, config.confidence)
    facts = verdict_facts(objective, searched_losses, final, costs, differences, even, summary, tuning_curves, speed,
                          estimator, default_hyperparameters, config, run_scores,
                          _search_variance(trials, runs, primary_loss(searched_losses), objective))
    facts["independent_splits"] = independent_splits
    loss = facts["tuned_loss"]
    design = next_design(facts["variance_sources"], facts["tuned"],
                         tuning_curves[(tuning_curves["method"] == loss) & (tuning_curves["kind"] == "search")],
                         int(runs["method"].nunique()), independent_splits, config.confidence, config.power,
                         higher_is_better(facts["metric"]))
    facts["next_design"] = None if design is None else asdict(design)
    return StudyAnalysis(
        objective=objective, confidence=config.confidence, methods=methods, searched_losses=searched_losses,
        search_summary=summary, tuning_curves=tuning_curves, estimator=estimator, reference_bands=bands,
        break_even=even, final=final, costs=costs, run_scores=run_scores, differences=differences,
        best_final_val=best, best_final_method=best_method, targets=targets, convergence_runs=per_run,
        convergence=per_method, convergence_speed=speed, curves=curves, angles=angle_dynamics(keyed_history, methods),
        crossings=final_gap_tests(keyed_runs, crossings_table(curves), config), landscape=landscape,
        learning_curves=learning_curves, plateau=plateau_table(learning_curves, methods),
        difference_curves=difference_curves,
        learning_crossovers=crossover_table(learning_curves, [m for m in ADACOS_METHODS if m in methods],
                                            [m for m in ARCFACE_METHODS if m in methods], confidence=config.confidence),
        num_classes=num_classes, s_f=fixed_scale_of(num_classes), verdict_facts=facts,
    )
