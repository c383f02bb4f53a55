"""The benchmark's report: the meta-verdict's sentences chosen by the numbers, a forest plot per loss, the tuners at
equal device-seconds, the "tuning cost per loss" table and one row per cell, as Markdown and self-contained HTML."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Polygon
from matplotlib.ticker import MaxNLocator

import study.report.formats as fmt
from study.analysis import EQUAL_WEIGHT_METHOD, RANDOM_EFFECTS_METHOD
from study.benchmark.cells import cell_rows, tuning_curve
from study.benchmark.meta import COVERAGE_BENCHMARKS, MIN_COVERAGE, benchmark_seconds, pooled_table, tuner_table
from study.report import (Bullets, FigureRef, Section, Table, loss_name, metric_name, new_figure, render_html,
                          render_markdown, save_figure, trials_interval)
from study.results import REPORT_DIR, write_csv, write_json

OUTCOME_WORDS = {"paid": "tuning paid", "equivalent": "equivalent", "adacos_better": "Fixed AdaCos better",
                 "undecided": "undecided"}
TUNER_WORDS = {"random": "random search", "tpe": "TPE", "qmc": "QMC", "grid": "grid search"}


# --- words --------------------------------------------------------------------------------------------------


def tuner_label(sampler: str, repeats: int, pruner: str) -> str:
    """A tuner as the reader sees it: 'TPE + median pruner (4 repeats)'."""
    label = TUNER_WORDS.get(sampler, sampler) + ("" if pruner in (None, "none") else f" + {pruner} pruner")
    return label + (f" ({repeats} repeats)" if repeats and repeats > 1 else "")


def _judgement(facts: dict) -> str:
    """What the interval the verdict reads (judged_low/high: the pooled mean's interval that covered in simulation)
    says against zero and the equivalence margin, by the study's significant-and-relevant rule."""
    low, high, margin = facts["judged_low"], facts["judged_high"], facts["margin"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return "no pooled interval held its level in simulated benchmarks of these cells, so the average is not judged"
    estimate = facts["judged_estimate"]
    significant = low > 0 or high < 0
    relevant = math.isfinite(margin) and abs(estimate) >= margin
    margin_text = f"±{margin:.4g}" if math.isfinite(margin) else "the margin"
    if significant and relevant:
        return ("on average tuning pays: tuned is better than Fixed AdaCos by at least the margin" if estimate > 0
                else "on average Fixed AdaCos is better, by at least the margin")
    if math.isfinite(margin) and -margin < low and high < margin:
        return f"on average the two are equivalent within {margin_text}"
    if significant:
        return (f"on average {'tuned' if estimate > 0 else 'Fixed AdaCos'} is better, by less than the "
                f"{margin_text} margin")
    return f"the average is not resolved: its interval covers zero and reaches beyond {margin_text}"


def _coverage_clause(facts: dict, key: str, before: str = "") -> str:
    """`before` + 'covered 87%' (the worst simulated coverage of one interval), or '' where it was not simulated."""
    value = facts.get(key, math.nan)
    return "" if fmt.missing(value) else f"{before}covered {_share(value)}"


def _pooled_sentence(facts: dict, name: str, metric: str, pooled: int, left_out: str) -> str:
    """The pooled mean: random effects as specified, what its interval covered in simulation, and the interval the
    verdict reads when it is another one."""
    simulated = _coverage_clause(facts, "dl_coverage", ", which ")
    text = (f"**{name}**: over {pooled} configurations{left_out}, tuned {name} − Fixed AdaCos on test {metric} pools "
            f"to {fmt.signed(facts['estimate'])} (random effects: 95% CI {fmt.interval(facts['low'], facts['high'])}"
            + (f"{simulated} in simulated benchmarks of these cells" if simulated else "")
            + f"; τ² = {facts['tau2']:.2g}, I² = {_share(facts['i2'])})")
    if facts.get("judged_by") == "equal weights":
        text += (f"; the configurations' plain mean {fmt.signed(facts['equal_estimate'])} "
                 f"{fmt.interval(facts['equal_low'], facts['equal_high'])} "
                 f"({_coverage_clause(facts, 'equal_coverage')}) is the interval read here")
    return text + f": {_judgement(facts)}."


def _prediction_sentence(facts: dict) -> str:
    """What a new data set should expect: the interval that covered in simulation, HTS's beside it."""
    if not math.isfinite(facts.get("prediction_low", math.nan)):
        return "A prediction interval for a new data set needs at least 3 configurations."
    hts = (f"{fmt.interval(facts['prediction_low'], facts['prediction_high'])} (95% Higgins–Thompson–Spiegelhalter "
           f"prediction interval{_coverage_clause(facts, 'prediction_coverage', '; it ')})")
    by = facts.get("predicted_by")
    if not by:
        return (f"On a new data set the difference is hard to predict: {hts}, and no prediction interval held its "
                "level in simulated benchmarks of these cells.")
    low, high = facts["predicted_low"], facts["predicted_high"]
    spans = "; it spans zero, so there it could go either way" if low < 0 < high else ""
    if by == "random effects":
        return f"On a new data set, expect a difference in {hts}{spans}."
    return (f"On a new data set, expect a difference in {fmt.interval(low, high)} (95% prediction interval from the "
            f"configurations' spread, which {_coverage_clause(facts, 'equal_prediction_coverage')}"
            f"{spans}); the random-effects one is {hts}.")


def _slope_sentence(facts: dict) -> str:
    """How the difference moves per tenfold C, by the slope whose interval covered in simulation."""
    classes = f"over {int(facts['slope_configurations'])} class counts"
    weighted = (f"{fmt.signed(facts['slope_per_decade'])} {fmt.interval(facts['slope_low'], facts['slope_high'])} "
                f"with random-effects weights{_coverage_clause(facts, 'slope_coverage', ', which ')}")
    by = facts.get("slope_read_by")
    if not by:
        return f"Per tenfold C the difference moves by {weighted}; no slope interval held its level, so it is not read."
    resolved = facts["slope_read_low"] > 0 or facts["slope_read_high"] < 0
    verdict = "" if resolved else "; not resolved"
    if by == "random effects":
        return f"Per tenfold C the difference moves by {weighted} ({classes}{verdict})."
    return (f"Per tenfold C the difference moves by {fmt.signed(facts['slope_read'])} "
            f"{fmt.interval(facts['slope_read_low'], facts['slope_read_high'])} (every configuration weighted alike, "
            f"{_coverage_clause(facts, 'equal_slope_coverage')}, {classes}{verdict}; {weighted}).")


def lead_sentence(facts: dict) -> str:
    """The answer in one bold sentence: the pooled judgement of the interval the verdict reads, and what a new data
    set should expect."""
    name = loss_name(facts["loss"])
    if int(facts["pooled_configurations"]) < 2:
        return f"**{name} was pooled over fewer than 2 configurations, so the benchmark gives no pooled answer.**"
    read = (f" (tuned − Fixed AdaCos {fmt.signed(facts['judged_estimate'])}, 95% CI "
            f"{fmt.interval(facts['judged_low'], facts['judged_high'])})" if facts.get("judged_by") else "")
    new = (f"; on a new data set expect {fmt.interval(facts['predicted_low'], facts['predicted_high'])}"
           if facts.get("predicted_by") else "")
    return (f"**Tuning {name}'s (s, m) against Fixed AdaCos over {int(facts['pooled_configurations'])} "
            f"configurations: {_judgement(facts)}{read}{new}.**")


def loss_sentences(facts: dict) -> str:
    """One loss's meta-verdict: the pooled difference, heterogeneity, the prediction interval, the cells' outcomes,
    the break-even and the slope on log C, each clause from the numbers."""
    name, metric = loss_name(facts["loss"]), metric_name(facts["metric"])
    configurations = int(facts["configurations"])
    pooled = int(facts["pooled_configurations"])
    if pooled == 0:
        return (f"**{name}**: none of its {configurations} configurations has a tuned − Fixed AdaCos difference with "
                "a standard error, so nothing is pooled.")
    left_out = f" ({configurations - pooled} without a standard error left out)" if pooled < configurations else ""
    if pooled == 1:
        return (f"**{name}**: searched on one configuration only ({facts['only_cell']}{left_out}), so nothing is "
                f"pooled: tuned {name} − Fixed AdaCos on test {metric} is {fmt.signed(facts['estimate'])} "
                f"({fmt.interval(facts['low'], facts['high'])}, its study's own 95% interval); by its study's own "
                f"rule: {OUTCOME_WORDS[facts['only_outcome']]}.")
    sentences = [_pooled_sentence(facts, name, metric, pooled, left_out), _prediction_sentence(facts)]
    counts = {key: int(facts[key]) for key in ("paid", "equivalent", "adacos_better", "undecided")}
    sentences.append(f"By each study's own rule, tuning paid on {counts['paid']} of {configurations} "
                     f"configurations, was equivalent on {counts['equivalent']}, Fixed AdaCos was better on "
                     f"{counts['adacos_better']}, and {counts['undecided']} stayed undecided.")
    reached = int(facts["break_even_reached"])
    if reached:
        sentences.append(f"The trial val selects reached one Fixed AdaCos run's mean test score within the search on "
                         f"{reached} of {configurations} (median {fmt.count(facts['break_even_trials_median'])} "
                         f"trials, {fmt.seconds(facts['break_even_seconds_median'])} of device time).")
    else:
        sentences.append(f"The trial val selects never reached one Fixed AdaCos run's mean test score within the "
                         f"search, on any of the {configurations} configurations.")
    if math.isfinite(facts.get("slope_per_decade", math.nan)):
        sentences.append(_slope_sentence(facts))
    return " ".join(sentences)


def _share(value) -> str:
    return "n/a" if fmt.missing(value) else f"{100 * value:.0f}%"


def tuner_sentences(tuners: pd.DataFrame) -> list[str]:
    """Per configuration: each tuner's selected test score at the common device-second budget, and its break-even."""
    sentences = []
    for configuration, group in tuners.groupby("configuration", sort=False):
        budget = group["budget_seconds"].iloc[0]
        scores = "; ".join(
            f"{tuner_label(row.sampler, row.repeats, row.pruner)} {fmt.score(row.expected_test_at_budget)} "
            f"{fmt.interval(row.low_at_budget, row.high_at_budget).replace('+', '')}"
            for row in group.itertuples())
        evens = "; ".join(
            f"{tuner_label(row.sampler, row.repeats, row.pruner)} "
            + (f"{fmt.count(row.break_even_trials)} trials ({fmt.seconds(row.break_even_seconds)})"
               if row.break_even_reached else f"not within {fmt.count(row.max_trials)} trials")
            for row in group.itertuples())
        apart = _bands_apart(group)
        sentences.append(
            f"On **{configuration}**, at {fmt.seconds(budget)} of device time per search (the budget every tuner "
            f"reached), the trial val selects scores on test: {scores}. "
            + ("Their intervals overlap, so these searches do not tell the tuners apart at equal device-seconds. "
               if not apart else f"{apart}. ")
            + f"Break-even against one Fixed AdaCos run: {evens}.")
    return sentences


def _bands_apart(group: pd.DataFrame) -> str:
    """The pairs of tuners whose intervals at the budget do not overlap, as a clause ('' when every pair overlaps)."""
    rows = list(group.itertuples())
    clauses = []
    for index, first in enumerate(rows):
        for second in rows[index + 1:]:
            if first.low_at_budget > second.high_at_budget or second.low_at_budget > first.high_at_budget:
                better, worse = (first, second) if first.expected_test_at_budget > second.expected_test_at_budget \
                    else (second, first)
                clauses.append(f"{tuner_label(better.sampler, better.repeats, better.pruner)} is ahead of "
                               f"{tuner_label(worse.sampler, worse.repeats, worse.pruner)} (intervals apart)")
    return "; ".join(clauses)


# --- figures --------------------------------------------------------------------------------------------


def _cell_label(row) -> str:
    return f"{row.configuration} (C = {int(row.train_classes):,})"


def _forest_limits(rows: pd.DataFrame, facts: dict) -> tuple[float, float]:
    """X limits around the estimates, the pooled interval, the prediction interval and the margin; a cell's interval
    much wider than those is clipped (and marked) rather than squeezing every other row."""
    core = [*rows["difference"], facts.get("low"), facts.get("high"), facts.get("prediction_low"),
            facts.get("prediction_high"), facts.get("margin"), -facts.get("margin", math.nan), 0.0]
    core = np.array([value for value in core if value is not None and np.isfinite(value)], dtype=float)
    span = max(np.ptp(core), 1e-3)
    wanted = np.array([*rows["low"], *rows["high"]], dtype=float)
    wanted = wanted[np.isfinite(wanted)]
    low = min(core.min() - 0.3 * span, wanted.min() if wanted.size else core.min())
    high = max(core.max() + 0.3 * span, wanted.max() if wanted.size else core.max())
    return max(low, core.min() - 1.5 * span), min(high, core.max() + 1.5 * span)


def _forest_read(facts: dict) -> tuple[dict, str, str]:
    """The pooled mean and prediction interval the forest plot draws: those the verdict reads (which held their level
    in simulation), else the random-effects ones as specified; with their rows' labels naming the method."""
    shown = dict(facts)
    by, predicted_by = facts.get("judged_by") or "", facts.get("predicted_by") or ""
    if by == "equal weights":
        shown.update(estimate=facts["judged_estimate"], low=facts["judged_low"], high=facts["judged_high"])
    if predicted_by == "equal weights":
        shown.update(prediction_low=facts["predicted_low"], prediction_high=facts["predicted_high"])
    return (shown, f"pooled ({by or 'random effects'})", f"new data set ({predicted_by or 'random effects'})")


def figure_forest(rows: pd.DataFrame, weights: pd.Series, facts: dict, path: Path, dpi: int) -> Path:
    """Cells as rows (each its study's own interval, the square sized by its weight in the pool), the pooled diamond
    and the prediction interval at the bottom, zero and the equivalence margin marked."""
    rows = rows.sort_values(["train_classes", "configuration"]).reset_index()
    count = len(rows)
    facts, pooled_label, predicted_label = _forest_read(facts)
    figure, axes = new_figure(size=(6.2, 1.9 + 0.42 * (count + 2)))
    ax = axes[0]
    left, right = _forest_limits(rows, facts)
    margin = facts.get("margin", math.nan)
    if np.isfinite(margin):
        ax.axvspan(-margin, margin, color="#dcdcdc", alpha=0.6, zorder=0, label=f"equivalence margin ±{margin:.3g}")
    ax.axvline(0.0, color="black", linewidth=0.9)
    positions = np.arange(count, 0, -1) + 2.0
    for y, row in zip(positions, rows.itertuples()):
        weight = weights.get(row.index, math.nan)
        pooled = np.isfinite(weight)
        low, high = max(row.low, left), min(row.high, right)
        if np.isfinite(row.low) and np.isfinite(row.high):
            ax.plot([low, high], [y, y], color="C0", linewidth=1.4)
            for value, edge, marker in ((row.low, left, "<"), (row.high, right, ">")):
                if value < left or value > right:
                    ax.plot(edge, y, marker=marker, color="C0", markersize=6)
        size = 5 + 14 * math.sqrt(weight) if pooled else 6
        ax.plot(row.difference, y, "s", color="C0", markersize=size, markerfacecolor="C0" if pooled else "white")
    labels = [_cell_label(row) for row in rows.itertuples()]
    pooled = facts.get("pooled_configurations", 0) >= 2
    if pooled:
        y = 1.0
        diamond = [(facts["low"], y), (facts["estimate"], y + 0.3), (facts["high"], y), (facts["estimate"], y - 0.3)]
        ax.add_patch(Polygon(diamond, closed=True, color="C3", zorder=3, label="pooled mean, 95% CI"))
        if np.isfinite(facts.get("prediction_low", math.nan)):
            ax.plot([max(facts["prediction_low"], left), min(facts["prediction_high"], right)], [0.0, 0.0], "-",
                    color="C3", linewidth=2.2, solid_capstyle="butt", label="95% prediction interval")
            for value, mark in ((facts["prediction_low"], "|"), (facts["prediction_high"], "|")):
                if left <= value <= right:
                    ax.plot(value, 0.0, mark, color="C3", markersize=12)
    ticks = [*positions, 1.0, 0.0]
    ax.set_yticks(ticks, labels=[*labels, pooled_label, predicted_label])
    ax.set_ylim(-0.8, positions.max() + 0.8 if count else 2.0)
    ax.set_xlim(left, right)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, steps=[1, 2, 5, 10]))  # wide signed ticks overlap beyond 5
    numbers = ax.twinx()  # each row's numbers on the right, as a forest plot's reader expects them
    numbers.set_ylim(ax.get_ylim())
    numbers.set_yticks(ticks, labels=[*(f"{fmt.signed(row.difference)} {fmt.interval(row.low, row.high)}"
                                        for row in rows.itertuples()),
                                      f"{fmt.signed(facts.get('estimate'))} "
                                      f"{fmt.interval(facts.get('low'), facts.get('high'))}"
                                      if pooled else "needs ≥ 2 configurations",
                                      fmt.interval(facts.get("prediction_low"), facts.get("prediction_high"))
                                      .replace("[n/a]", "needs ≥ 3 configurations")], fontsize="small")
    numbers.tick_params(length=0)
    ax.set_xlabel(f"test {metric_name(facts['metric'])}: tuned {loss_name(facts['loss'])} − Fixed AdaCos")
    ax.set_title(f"{loss_name(facts['loss'])}: tuning against Fixed AdaCos, per configuration", fontsize="medium")
    ax.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.08), ncols=3, frameon=False)
    return save_figure(figure, path, dpi)


def figure_tuners(tuners: pd.DataFrame, curves: dict[str, pd.DataFrame], path: Path, dpi: int) -> Path:
    """Per configuration: the expected test score of the trial val selects against device-seconds per search, one
    line (and band) per tuner, Fixed AdaCos's mean test score of one run and the common budget marked."""
    configurations = list(dict.fromkeys(tuners["configuration"]))
    figure, axes = new_figure(ncols=len(configurations), size=(6.2 * max(1, len(configurations)) / 1.4, 4.2))
    for ax, configuration in zip(axes, configurations):
        group = tuners[tuners["configuration"] == configuration]
        for index, row in enumerate(group.itertuples()):
            curve = curves.get(row.cell)
            if curve is None or curve.empty:
                continue
            colour = f"C{index}"
            ax.plot(curve["seconds"], curve["expected_test"], "-o", color=colour, markersize=3,
                    label=tuner_label(row.sampler, row.repeats, row.pruner))
            valid = np.isfinite(curve["low"]) & np.isfinite(curve["high"])
            ax.fill_between(curve["seconds"][valid], curve["low"][valid], curve["high"][valid], color=colour,
                            alpha=0.15, linewidth=0)
        ax.axhline(group["reference_test_mean"].iloc[0], color="black", linestyle="--", linewidth=1,
                   label="Fixed AdaCos, one run")
        ax.axvline(group["budget_seconds"].iloc[0], color="grey", linestyle=":", linewidth=1,
                   label="common budget")
        ax.set_title(configuration, fontsize="medium")
        ax.set_xlabel("device-seconds per search")
    axes[0].set_ylabel("expected test score of the selected trial")
    axes[0].legend(fontsize="small", loc="lower right")
    return save_figure(figure, path, dpi)


# --- tables ----------------------------------------------------------------------------------------------


def _covered(interval: str, coverage) -> str:
    """'[a, b], covered 88%' (the interval with its worst simulated coverage)."""
    return interval if fmt.missing(coverage) else f"{interval}, covered {_share(coverage)}"


def _read(estimate, low, high, by: str) -> str:
    """The interval the verdict reads, with the method that gave it; '—' where none held its level."""
    return f"{fmt.signed(estimate)} {fmt.interval(low, high)} ({by})" if by else "— (none held its level)"


def cost_table(pooled: pd.DataFrame) -> pd.DataFrame:
    """"Tuning cost per loss", as the reader sees it: the random-effects numbers as specified, each with its simulated
    coverage, and the intervals the verdict reads."""
    shown = []
    for row in pooled.itertuples():
        shown.append({
            "loss": loss_name(row.loss),
            "configurations": f"{row.configurations}" + (" (nothing pooled)" if row.pooled_configurations < 2 else ""),
            "random effects: tuned − Fixed AdaCos [95% CI]": _covered(
                f"{fmt.signed(row.estimate)} {fmt.interval(row.low, row.high)}", row.dl_coverage),
            "τ², I²": ("n/a" if fmt.missing(row.tau2) else f"{row.tau2:.2g}") + f", {_share(row.i2)}",
            "mean read [95%]": _read(row.judged_estimate, row.judged_low, row.judged_high,
                                     row.judged_by) if row.pooled_configurations >= 2 else "—",
            "new data set: HTS 95% prediction interval": _covered(
                fmt.interval(row.prediction_low, row.prediction_high), row.prediction_coverage),
            "prediction read [95%]": (f"{fmt.interval(row.predicted_low, row.predicted_high)} ({row.predicted_by})"
                                      if row.predicted_by else "—"),
            "paid / equivalent / AdaCos better / undecided":
                f"{row.paid} / {row.equivalent} / {row.adacos_better} / {row.undecided}",
            "break-even reached": f"{row.break_even_reached} of {row.configurations}",
            "median break-even": (f"{fmt.count(row.break_even_trials_median)} trials, "
                                  f"{fmt.seconds(row.break_even_seconds_median)}") if row.break_even_reached else "—",
            "median search device-seconds": fmt.seconds(row.search_seconds_median),
            "slope per tenfold C read [95%]": _read(row.slope_read, row.slope_read_low, row.slope_read_high,
                                                    row.slope_read_by) if row.slope_read_by else "—",
        })
    return pd.DataFrame(shown)


def _seconds_interval(low, high) -> str:
    """A break-even's interval in device-seconds (its trials' interval × seconds per trial); '' where it has none."""
    if fmt.missing(low):
        return ""
    return f"[{fmt.seconds(low)}, {'not within the search' if fmt.missing(high) else fmt.seconds(high)}]"


def _break_even_trials(row) -> str:
    """A row's break-even in trials with its interval: '3 [2, 6]', or 'not within 8 [beyond 6]'."""
    reached = f"{fmt.count(row.break_even_trials)}" if row.break_even_reached else \
        f"not within {fmt.count(row.max_trials)}"
    return f"{reached} {trials_interval(row.break_even_low, row.break_even_high, row.max_trials, row.valid_trials)}"


def cells_table(rows: pd.DataFrame, links: dict[str, str]) -> pd.DataFrame:
    """One row per cell and searched loss, as the reader sees it."""
    shown = []
    for row in rows.itertuples():
        shown.append({
            "cell": row.cell, "loss": loss_name(row.loss), "data": f"{row.source}, {row.protocol}",
            "C": f"{int(row.train_classes):,}", "splits × seeds": f"{row.splits} × {row.seeds}",
            "tuner": tuner_label(row.sampler, row.repeats, row.pruner),
            "tuned − Fixed AdaCos [95% CI]": f"{fmt.signed(row.difference)} {fmt.interval(row.low, row.high)}",
            "SE (df)": f"{fmt.score(row.standard_error)} ({fmt.count(row.df)})",
            "detectable": fmt.score(row.detectable), "outcome": OUTCOME_WORDS.get(row.outcome, row.outcome),
            "break-even trials [95%]": _break_even_trials(row),
            "break-even device-seconds": " ".join(filter(None, [
                fmt.seconds(row.break_even_seconds),
                _seconds_interval(row.break_even_seconds_low, row.break_even_seconds_high)]))
                if row.break_even_reached else "—",
            "cell device-seconds": fmt.seconds(row.cell_seconds),
            "report": f"[report]({links[row.cell]})",
        })
    return pd.DataFrame(shown)


def tuners_shown(tuners: pd.DataFrame) -> pd.DataFrame:
    """The tuner comparison, as the reader sees it."""
    return pd.DataFrame([{
        "configuration": row.configuration, "tuner": tuner_label(row.sampler, row.repeats, row.pruner),
        "trials (pruned)": f"{fmt.count(row.trials)} ({fmt.count(row.pruned_trials)})",
        "device-seconds per trial": fmt.seconds(row.seconds_per_trial),
        "selected test score at the common budget [95%]": f"{fmt.score(row.expected_test_at_budget)} "
                                                          f"{fmt.interval(row.low_at_budget, row.high_at_budget)}",
        "budget (trials it buys)": f"{fmt.seconds(row.budget_seconds)} ({row.trials_in_budget:.1f})",
        "break-even trials [95%]": _break_even_trials(row),
        "break-even device-seconds": fmt.seconds(row.break_even_seconds) if row.break_even_reached else "—",
        "tuned − Fixed AdaCos [95% CI]": f"{fmt.signed(row.difference)} {fmt.interval(row.low, row.high)}",
        "outcome": OUTCOME_WORDS.get(row.outcome, row.outcome),
    } for row in tuners.itertuples()])


# --- the whole report ---------------------------------------------------------------------------------------


def read_cells(plan: dict, cells_dir: Path) -> pd.DataFrame:
    """Every finished cell's rows, one per searched loss."""
    return pd.DataFrame([row for cell in plan["cells"] for row in cell_rows(cell, cells_dir / cell["name"])])


def method_bullets(plan: dict, rows: pd.DataFrame, seconds: dict, label: str) -> list[str]:
    """How the numbers are computed, and what the benchmark cost."""
    return [
        f"Each cell is one whole study (its own `dvc repro` under `{label}/<cell>/`, with its own report); its "
        "configuration's first tuner's cell enters the pooled numbers, the others only the tuner comparison.",
        f"Pooling: {RANDOM_EFFECTS_METHOD} (`study.analysis.random_effects`). Each cell's standard error comes from "
        "its own interval: over its class splits (t on splits − 1 df), paired by seed (t on pairs − 1 df), or "
        "recomputed by Welch; few splits give a standard error of few degrees of freedom, which the pooling treats "
        "as known.",
        f"Coverage, checked before anything is read: {COVERAGE_BENCHMARKS:,} simulated benchmarks per τ (0 to 4 "
        "times the median standard error) with these very cells, each standard error drawn again on its own degrees "
        "of freedom (`study.analysis.coverage.pooled_interval_coverage`; tables/pooled_coverage.csv). The verdict "
        f"reads the random-effects interval where its worst coverage reaches {MIN_COVERAGE:.0%}, else the "
        f"equal-weight one ({EQUAL_WEIGHT_METHOD}; prediction ȳ ± t·s·√(1 + 1/k); slope by ordinary least squares, "
        "t on k − 2), where that one does; otherwise it judges nothing. Hartung–Knapp is simulated beside them "
        "(hk_coverage).",
        "Outcomes are each study's own rule (study.analysis.verdict) for that loss against Fixed AdaCos: tuning paid "
        "when tuned is significantly better by at least the equivalence margin; equivalent when two one-sided tests "
        "show it within the margin; Fixed AdaCos better when significantly so; otherwise undecided.",
        "The random-effects slope is weighted least squares of the cells' differences on log10 C with the "
        "random-effects weights (τ² of the intercept-only fit), normal CI.",
        "Tuners are compared at equal device-seconds per search (one repeat): each curve's trials at their mean "
        "device-seconds, a pruned trial costing what it ran. Device-seconds are the runs' own wall seconds on their "
        "device, so tuners compare fairly only when their cells ran on one machine under the same load.",
        f"Device-seconds trained: {fmt.seconds(seconds['trained'])} (every cell's searches and tuned runs, and the "
        f"untuned methods' runs once per configuration); {fmt.seconds(seconds['cells'])} if each cell had trained "
        f"everything itself. {len(plan['cells'])} cells, {rows['configuration'].nunique()} configurations.",
    ]


def aggregate_benchmark(plan_path: str | Path, report_dir: str | Path, *, label: str = ".", dpi: int = 120
                        ) -> dict[str, Path]:
    """The aggregate stage: every cell of plan.json (cells in its folder) read from its committed report, pooled,
    and written to report_dir: report.md, report.html, benchmark.json, tables/ and figures/."""
    plan_path, report_dir = Path(plan_path), Path(report_dir)
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    cells_dir = plan_path.parent
    rows = read_cells(plan, cells_dir)
    confidence = float(rows["confidence"].iloc[0])  # each cell's own (analysis.confidence)
    pooled, coverage, rows["weight"] = pooled_table(rows, confidence)
    tuner_cells = rows[rows["loss"] == "arcface"]
    curves = {cell: tuning_curve(cells_dir / cell, "arcface") for cell in tuner_cells["cell"]}
    tuners = tuner_table(rows, curves)
    seconds = benchmark_seconds(rows)
    (report_dir / "tables").mkdir(parents=True, exist_ok=True)
    written = {name: report_dir / "tables" / f"{name}.csv" for name in ("cells", "pooled", "tuners",
                                                                                  "pooled_coverage")}
    write_csv(rows, written["cells"])
    write_csv(pooled, written["pooled"])
    write_csv(coverage, written["pooled_coverage"])
    write_csv(tuners, written["tuners"])
    figures = {}
    for facts in pooled.to_dict("records"):
        loss_rows = rows[(rows["loss"] == facts["loss"]) & rows["primary"].astype(bool)]
        figures[facts["loss"]] = figure_forest(loss_rows, rows["weight"], facts,
                                               report_dir / "figures" / f"forest_{facts['loss']}.png", dpi)
    if len(tuners):
        figures["tuners"] = figure_tuners(tuners, curves, report_dir / "figures" / "tuners.png", dpi)
    links = {cell["name"]: Path(os.path.relpath(cells_dir / cell["name"] / REPORT_DIR / "report.md", report_dir)
                                ).as_posix() for cell in plan["cells"]}
    sections = report_sections(plan, rows, pooled, tuners, seconds, links, label)
    written["benchmark.json"] = report_dir / "benchmark.json"
    write_json({"title": plan["title"], "confidence": confidence, "method": RANDOM_EFFECTS_METHOD,
                "pooled": {row["loss"]: row for row in pooled.to_dict("records")},
                "device_seconds": seconds, "tuners": tuners.to_dict("records"),
                "cells": rows.to_dict("records")}, written["benchmark.json"])
    written["report.md"] = report_dir / "report.md"
    written["report.md"].write_text(render_markdown(plan["title"], sections), encoding="utf-8")
    written["report.html"] = report_dir / "report.html"
    written["report.html"].write_text(render_html(plan["title"], sections, report_dir), encoding="utf-8")
    return written | {f"figure {name}": path for name, path in figures.items()}


def _span(values) -> str:
    """'4' or '4–6' (the range of a few integers)."""
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def scope_sentence(plan: dict) -> str:
    """How far the answer carries: what the primary cells span, and what none of them varied."""
    cells = [cell for cell in plan["cells"] if cell["primary"]]
    sources = list(dict.fromkeys(cell["source"] for cell in cells))
    protocols = list(dict.fromkeys(cell["protocol"] for cell in cells))
    models = list(dict.fromkeys(cell["model"] for cell in cells))
    return (f"How far this carries: {len(cells)} configurations from {len(sources)} "
            f"source{'s' if len(sources) > 1 else ''} ({', '.join(sources)}), "
            f"the {' and '.join(protocols)} protocol{'s' if len(protocols) > 1 else ''}, C = "
            f"{_span([cell['train_classes'] for cell in cells])} training classes; "
            f"{_span([len(cell['splits']) for cell in cells])} class splits × "
            f"{_span([len(cell['seeds']) for cell in cells])} seeds per cell, searches of "
            f"{_span([cell['n_trials'] for cell in cells])} trials per split, "
            f"{'one model' if len(models) == 1 else 'the models'} ({', '.join(models)}) trained "
            f"{_span([cell['epochs'] for cell in cells])} epochs. Each cell's interval is over its class splits, so "
            "it carries split, search and seed variance; what no cell varied (other architectures, longer training, "
            "larger C, other search spaces) is beyond this answer.")


def report_sections(plan: dict, rows: pd.DataFrame, pooled: pd.DataFrame, tuners: pd.DataFrame, seconds: dict,
                    links: dict[str, str], label: str) -> list[Section]:
    """The answer first (ArcFace's meta-verdict and forest plot), the cost table, the other losses, the tuners, the
    cells and how it was computed."""
    records = pooled.to_dict("records")
    metric = metric_name(records[0]["metric"]) if records else "objective"
    answer = [lead_sentence(records[0]), loss_sentences(records[0]),
              FigureRef(f"figures/forest_{records[0]['loss']}.png", _forest_caption(records[0], metric))]
    answer += [loss_sentences(facts) for facts in records[1:]]
    answer.append(Table(cost_table(pooled), "Tuning cost per loss: tuned − Fixed AdaCos on test "
                                            f"{metric}, pooled over configurations"))
    answer.append(scope_sentence(plan))
    sections = [Section("Answer", answer)]
    if len(records) > 1:
        sections.append(Section("Other losses", [FigureRef(f"figures/forest_{facts['loss']}.png",
                                                           _forest_caption(facts, metric)) for facts in records[1:]]))
    if len(tuners):
        sections.append(Section("Tuners at equal device-seconds", [
            *tuner_sentences(tuners),
            FigureRef("figures/tuners.png", "Expected test score of the trial val selects against device-seconds per "
                                            "search (one repeat of TPE), with its band; dashed: Fixed AdaCos's mean "
                                            "test score of one run; dotted: the budget every tuner reached."),
            Table(tuners_shown(tuners), "ArcFace's search under each tuner")]))
    sections.append(Section("Cells", [Table(cells_table(rows, links), f"Every cell of `{label}`: each searched "
                                                                      "loss against Fixed AdaCos, from its report")]))
    sections.append(Section("How these numbers are computed", [Bullets(method_bullets(plan, rows, seconds, label))]))
    return sections


def _forest_caption(facts: dict, metric: str) -> str:
    return (f"{loss_name(facts['loss'])}: tuned − Fixed AdaCos on test {metric} per configuration (each its study's "
            "own 95% interval; filled squares, sized by their random-effects weight, enter the pool), the pooled "
            "mean's 95% CI (diamond) and the 95% prediction interval for a new data set (bar), each by the method that "
            "held its level in simulated benchmarks of these cells (named on its row; the random-effects numbers "
            "are in the table); grey: the equivalence margin.")
