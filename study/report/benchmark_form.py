"""Tuning cost against accuracy and the iterations to converge, as tables of one form for the benchmark (pooled over
data sources) and for one study (its own class splits), so that a reader sets a study beside the benchmark row by
row: the search's lead over as many Fixed AdaCos trainings at each n, and each method's iterations to 95% and 99% of
its own best val as a multiple of Fixed AdaCos's."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis import REFERENCE_METHOD, TEST_PREFIX, StudyAnalysis
from study.analysis.iteration_ratios import EQUIVALENCE_BAND, equivalence, study_iterations
from study.analysis.tuning_lead import crossings, study_tuning_cost
from study.report.document import Section, Table
from study.report.formats import method_name


def _percent(value) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{100 * value:+.1f}%"


def _percent_interval(low, high) -> str:
    return "[n/a]" if not (math.isfinite(low) and math.isfinite(high)) else f"[{_percent(low)}, {_percent(high)}]"


def tuning_cost_shown(table: pd.DataFrame, pooled: bool = True) -> pd.DataFrame:
    """A tuning-cost table (study.analysis.tuning_lead.COLUMNS) as the reader sees it: pooled over sources with a new
    source's prediction, or one study's over its class splits."""
    lead = ("search − best of n Fixed AdaCos, mean over sources [95% CI]" if pooled
            else "search − best of n Fixed AdaCos, % of its score [95% interval]")
    return pd.DataFrame([{
        "trials per split (n)": int(row.n),
        lead: f"{_percent(row.mean)} {_percent_interval(row.low, row.high)}",
        **({"a new source [95% prediction]": _percent_interval(row.prediction_low, row.prediction_high)}
           if pooled else {}),
        "Fixed AdaCos's best of n": "measured" if row.control_measured else "extrapolated (normal seeds)",
    } for row in table.itertuples()])


def iterations_shown(table: pd.DataFrame, pooled: bool = True) -> pd.DataFrame:
    """An iterations table (study.analysis.iteration_ratios.COLUMNS) as the reader sees it: pooled over sources with
    a new source's prediction and the cells still improving, or one study's with whether each method still was."""
    def ratio(low: float, high: float) -> str:
        return f"[{low:.2f}, {high:.2f}]" if math.isfinite(low) and math.isfinite(high) else "[n/a]"

    return pd.DataFrame([{
        "method": method_name(row.method), "reaches its own best val to": f"{row.level:.0%}",
        "median iterations": f"{row.median_iterations:,.0f}",
        "× Fixed AdaCos's iterations [95% CI]": "reference" if row.method == REFERENCE_METHOD else
        f"{row.ratio:.2f} {ratio(row.ratio_low, row.ratio_high)}",
        **({"a new source": "" if row.method == REFERENCE_METHOD else ratio(row.prediction_low, row.prediction_high),
            f"against {EQUIVALENCE_BAND[0]}–{EQUIVALENCE_BAND[1]}×": row.equivalence,
            "cells still improving": f"{row.still_improving_cells} of {row.cells}"} if pooled else
           {f"against {EQUIVALENCE_BAND[0]}–{EQUIVALENCE_BAND[1]}×": row.equivalence,
            "still improving": "yes" if row.still_improving_cells else "no"}),
    } for row in table.itertuples()])


def crossing_text(what: str, facts: dict, trials: int) -> str:
    """Where a lead crosses `what` (study.analysis.tuning_lead.crossings' facts), with the interval its band gives,
    in words: 'crosses zero at n = 3 [2, 5] trials', or 'never reaches zero within 10 trials'."""
    if facts["n"] is None:
        reach = f" (its CI allows it from n = {facts['low']})" if facts["low"] is not None else ""
        return f"never reaches {what} within {trials} trials{reach}"
    upper = facts["high"] if facts["high"] is not None else f"not shown within {trials}"
    return f"crosses {what} at n = {facts['n']} [{facts['low']}, {upper}] trials"


def study_tuning_sentence(table: pd.DataFrame, margin: float) -> str:
    """Where one study's lead crosses zero and the margin, and what it is at the last n, from its table."""
    found, last = crossings(table, margin), table.iloc[-1]
    margin_words = f"the {_percent(margin)} margin" if math.isfinite(margin) else "a margin (none declared as a share)"
    banded = table.dropna(subset=["low", "high"])
    interval = (f"; the last n with an interval, {int(banded['n'].max())}: "
                f"{_percent(banded.iloc[-1]['mean'])} {_percent_interval(banded.iloc[-1]['low'], banded.iloc[-1]['high'])}"
                if len(banded) and int(banded["n"].max()) < int(last["n"]) else "")
    measured = table.loc[table["control_measured"].astype(bool), "n"]
    beyond = (f" Beyond n = {int(measured.max())} Fixed AdaCos's best of n is extrapolated from its seeds (normal "
              "seed scores)." if len(measured) < len(table) and len(measured) else "")
    return (f"Here the search's expected lead over as many Fixed AdaCos trainings (the best by val) "
            f"{crossing_text('zero', found['zero'], found['trials'])} and "
            f"{crossing_text(margin_words, found['margin'], found['trials'])}; at n = {int(last['n'])} it is "
            f"{_percent(last['mean'])} of Fixed AdaCos's score{interval}.{beyond}")


def study_iterations_sentence(table: pd.DataFrame, against: str = "arcface_tuned") -> str:
    """The founding question on this study's runs: Fixed AdaCos's iterations as a multiple of `against`'s."""
    rows = table[(table["method"] == against) & np.isfinite(table["ratio"].astype(float))].set_index("level")
    if rows.empty:
        return f"No run of {method_name(against)} pairs with Fixed AdaCos on iterations to its own best val here."
    parts, readings = [], []
    for index, (level, row) in enumerate(rows.iterrows()):
        low, high = 1.0 / row["ratio_high"], 1.0 / row["ratio_low"]  # Fixed AdaCos against the method
        bounds = f"[{low:.2f}, {high:.2f}]" if math.isfinite(low) and math.isfinite(high) else "[n/a]"
        parts.append(f"{level:.0%}{' of its own best val' if index == 0 else ''} in {1.0 / row['ratio']:.2f}× {bounds}")
        readings.append(f"{equivalence(low, high)} at {level:.0%}")
    improving = bool(rows["still_improving_cells"].max())
    return (f"With its fixed scale, Fixed AdaCos reaches {' and '.join(parts)} the iterations "
            f"{method_name(against)} needs here ({rows.iloc[0]['confidence']:.0%} intervals over the class splits, "
            "widened to the evaluation schedule's steps); against the "
            f"{EQUIVALENCE_BAND[0]}–{EQUIVALENCE_BAND[1]}× band of equal iterations: {', '.join(readings)}"
            + (f" ({method_name(against)} still improving: counts of a run cut short)." if improving else "."))


def benchmark_form_section(analysis: StudyAnalysis, margin: float) -> Section:
    """This study's tuning cost and iterations in the benchmark's form (reports/benchmark/report.md), `margin` the
    study's margin as a share of Fixed AdaCos's score."""
    blocks: list = []
    runs = analysis.run_scores
    metric = f"{TEST_PREFIX}{analysis.objective}"
    reference = runs.loc[runs["method"] == REFERENCE_METHOD, metric].astype(float).mean() if metric in runs \
        else math.nan
    curves = analysis.tuning_curves
    if math.isfinite(reference) and reference > 0 and len(curves) and (curves["kind"] == "search").any():
        table = study_tuning_cost(curves, reference, analysis.confidence)
        blocks += [study_tuning_sentence(table, margin),
                   Table(tuning_cost_shown(table, pooled=False), "The search's lead over as many Fixed AdaCos "
                         "trainings, % of Fixed AdaCos's score (the benchmark pools the same table over sources)")]
    else:
        blocks.append("No ArcFace search with a Fixed AdaCos control here, so no tuning cost in the benchmark's form.")
    if len(analysis.learning_curves):
        improving = dict(zip(analysis.plateau["method"], ~analysis.plateau["converged"].astype(bool))) \
            if len(analysis.plateau) else {}
        iterations = study_iterations(analysis.learning_curves, improving, analysis.confidence)
        blocks += [study_iterations_sentence(iterations),
                   Table(iterations_shown(iterations, pooled=False), "Iterations to reach 95% and 99% of each run's "
                         "own best val, against Fixed AdaCos's on the same split and seed")]
    return Section("Tuning cost and iterations, in the benchmark's form", blocks)
