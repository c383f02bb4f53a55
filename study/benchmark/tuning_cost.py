"""What a search costs against as many Fixed AdaCos trainings, pooled over data sources (SPEC, "Tuning cost").

Per headline cell, the lead at n is the val-selected ArcFace trial's expected test score among n trials minus the
best of n Fixed AdaCos runs picked by val (the budget-matched control), in a share of Fixed AdaCos's test mean; both
curves are the cell's own (tables/tuning_curves.csv). The leads are pooled at each n with the data source as a level
(`pool_across_sources`: configurations of one source are not independent), and the n at which the pooled lead
crosses zero and the margin is read with the interval the CI band gives, as `break_even_with_interval` reads a cell.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from study.analysis import pool_across_sources
from study.analysis.headline import headline_cells
from study.analysis.tuning_lead import (BEYOND_SEEDS, COLUMNS, control_curve, curves_lead,  # noqa: F401
                                        expected_maximum_of_normals)
from study.analysis.tuning_lead import crossings as lead_crossings
from study.benchmark.cells import TABLES
from study.benchmark.meta import RELATIVE_MARGIN
from study.config import AnalysisConfig, price_share
from study.report import new_figure, readable, save_figure
from study.report.benchmark_form import crossing_text
from study.report.palette import method_style
from study.report.plotting import legend_below

TUNED = "arcface_tuned"



def cell_lead(directory: Path, reference_mean: float, confidence: float, beyond_seeds: str = "normal") -> pd.DataFrame:
    """One cell's lead (curves_lead) from its tables/tuning_curves.csv."""
    path = Path(directory) / TABLES / "tuning_curves.csv"
    return curves_lead(pd.read_csv(path), reference_mean, confidence, beyond_seeds, str(path))


def crossings(table: pd.DataFrame, margin: float = RELATIVE_MARGIN) -> dict:
    """study.analysis.tuning_lead.crossings at the benchmark's margin."""
    return lead_crossings(table, margin)


def pooled_tuning_cost(rows: pd.DataFrame, cells_dir: Path, confidence: float,
                       beyond_seeds: str = "normal") -> pd.DataFrame:
    """One row per n: the headline cells' leads pooled over sources (mean, CI, new-source prediction), cut to the
    fewest trials any cell ran so that every n pools the same cells. attrs: left_out (cell, why), beyond_seeds."""
    headline = headline_cells(rows)
    headline = headline[headline["method"] == TUNED]
    leads, left_out = [], []
    for row in headline.itertuples():
        try:
            leads.append(cell_lead(Path(cells_dir) / row.cell, float(row.reference_test_mean), confidence,
                                   beyond_seeds).assign(cell=row.cell, source=row.source))
        except (OSError, ValueError, KeyError) as problem:  # a cell without its tables is named, not pooled
            left_out.append((row.cell, str(problem)))
    table = pd.DataFrame(columns=COLUMNS)
    if leads:
        length = min(len(lead) for lead in leads)
        every = pd.concat(leads, ignore_index=True)
        every = every[every["n"] <= length]
        table = pd.DataFrame([_pooled_at(n, part, confidence) for n, part in every.groupby("n")], columns=COLUMNS)
    table.attrs.update(left_out=left_out, beyond_seeds=beyond_seeds, confidence=confidence)
    return table


def _pooled_at(n: int, part: pd.DataFrame, confidence: float) -> dict:
    pooled = pool_across_sources(part["lead"], part["se"], part["source"], confidence=confidence)
    return {"n": int(n), **{key: float(pooled[key]) for key in COLUMNS[1:6]}, "sources": int(pooled["sources"]),
            "cells": int(pooled["configurations"]), "control_measured": bool(part["measured"].all())}


def _percent(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.1f}%"


def tuning_cost_sentences(table: pd.DataFrame, crossings: dict) -> list[str]:
    """Two sentences, every number from `table` and `crossings`: where the pooled lead crosses zero and the margin,
    and what it is at the last n with the new-source prediction beside it."""
    if table.empty:
        return ["No headline cell wrote a tuning curve, so the tuning cost is not pooled."]
    last, trials = table.iloc[-1], crossings["trials"]
    extrapolated = "" if bool(table["control_measured"].all()) else (
        f"; beyond n = {int(table.loc[table['control_measured'], 'n'].max())} the control is extrapolated "
        f"({table.attrs.get('beyond_seeds', 'normal')} seed scores)")
    zero = crossing_text("zero", crossings["zero"], trials)
    margin = crossing_text(f"the {_percent(crossings['margin_value'])} margin", crossings["margin"], trials)
    first = (f"Pooled over {int(last['sources'])} sources ({int(last['cells'])} cells), the search's expected lead "
             f"over as many Fixed AdaCos trainings (the best by val) {zero} and {margin}.")
    second = (f"At n = {int(last['n'])} it is {_percent(last['mean'])} of Fixed AdaCos's score "
              f"[{_percent(last['low'])}, {_percent(last['high'])}], and a new source may see "
              f"{_percent(last['prediction_low'])} to {_percent(last['prediction_high'])}{extrapolated}.")
    return [first, second]


@readable
def figure_tuning_price(table: pd.DataFrame, path: Path, dpi: int, margin: float = RELATIVE_MARGIN) -> Path:
    """The pooled lead against trainings n with its CI band and the new-source prediction, the zero and margin
    lines, and the price line p·(n − 1) (analysis.price_per_training for each training beyond one Fixed AdaCos run):
    where the lead clears it, the search pays at that price even against the best of n runs."""
    figure, (ax,) = new_figure()
    n, colour = table["n"].to_numpy(float), method_style(TUNED).colour
    percent = {column: 100 * table[column].to_numpy(float)  # an interval left open is None: drawn as a gap
               for column in ("mean", "low", "high", "prediction_low", "prediction_high")}
    ax.fill_between(n, percent["prediction_low"], percent["prediction_high"], color=colour, alpha=0.08,
                    linewidth=0, label="new source (prediction)")
    ax.fill_between(n, percent["low"], percent["high"], color=colour, alpha=0.25, linewidth=0,
                    label="mean over sources (CI)")
    ax.plot(n, percent["mean"], color=colour, marker="o", label="expected lead")
    ax.axhline(0.0, color="#555555", linewidth=0.9)
    ax.axhline(100 * margin, color="#555555", linewidth=0.9, linestyle="--", label=f"{_percent(margin)} margin")
    price = price_share(AnalysisConfig().price_per_training)
    ax.plot(n, 100 * price * (n - 1), color="#8c8c8c", linestyle=":", label=f"price {100 * price:g}% per training")
    measured = table.loc[table["control_measured"].astype(bool), "n"]
    if len(measured) < len(table):
        ax.axvspan(measured.max() if len(measured) else n.min(), n.max(), color="#f2f2f2", zorder=0,
                   label="control extrapolated")
    ax.set_xlabel("trainings n (ArcFace trials = Fixed AdaCos runs)")
    ax.set_ylabel("expected lead, % of Fixed AdaCos")
    legend_below(figure, ax)
    return save_figure(figure, path, dpi)
