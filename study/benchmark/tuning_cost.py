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

from study.analysis import pool_across_sources, standard_error_from_interval
from study.analysis.headline import headline_cells
from study.analysis.tuning import MAX_STUDENTISED_DF, first_reaching
from study.benchmark.cells import TABLES
from study.benchmark.meta import RELATIVE_MARGIN
from study.config import AnalysisConfig, price_share
from study.report import new_figure, readable, save_figure
from study.report.palette import method_style
from study.report.plotting import legend_below
from study.statistics import expected_maximum

TUNED, LOSS, REFERENCE = "arcface_tuned", "arcface", "fixed_adacos"
COLUMNS = ["n", "mean", "low", "high", "prediction_low", "prediction_high", "sources", "cells", "control_measured"]
# How the control is read beyond the runs a cell trained per split (R): "normal" takes (val, test) bivariate normal
# over seeds, so that the best of n by val is μ + ρσ·eₙ (eₙ the expected maximum of n standard normals) and the
# measured rise c(R) − c(1) fixes ρσ; "flat" holds c(R), which can only flatter the search.
BEYOND_SEEDS = ("normal", "flat")


def expected_maximum_of_normals(count: int) -> np.ndarray:
    """eₙ = E[max of n independent N(0, 1)] for n = 1…count (e₂ = 1/√π)."""
    return np.array([expected_maximum(n) for n in range(1, count + 1)])


def control_curve(measured, length: int, beyond_seeds: str = "normal") -> np.ndarray:
    """The best of n Fixed AdaCos runs by val, n = 1…length: the cell's measured curve up to its R runs, beyond them
    c(n) = c(1) + (c(R) − c(1))·eₙ/e_R ("normal", exact for bivariate-normal seed scores) or c(R) ("flat")."""
    if beyond_seeds not in BEYOND_SEEDS:
        raise ValueError(f"beyond_seeds must be one of {BEYOND_SEEDS}, got {beyond_seeds!r}")
    measured = np.asarray(measured, dtype=float)
    runs = measured.size
    if runs >= length:
        return measured[:length]
    e = expected_maximum_of_normals(length)
    rise = measured[-1] - measured[0] if beyond_seeds == "normal" and runs > 1 else 0.0
    beyond = measured[-1] + rise * (e[runs:] - e[runs - 1]) / (e[runs - 1] if runs > 1 else 1.0)
    return np.concatenate([measured, beyond])


def cell_lead(directory: Path, reference_mean: float, confidence: float, beyond_seeds: str = "normal") -> pd.DataFrame:
    """One cell's lead at n = 1…its trials per split, in a share of Fixed AdaCos's test mean, with its standard
    error where the cell wrote a band on its search curve (the band's t on at most MAX_STUDENTISED_DF df, the
    control's seed noise not in it) and 0 where it wrote none; and whether its control was measured at n."""
    curves = pd.read_csv(Path(directory) / TABLES / "tuning_curves.csv")
    search = curves[(curves["method"] == LOSS) & (curves["kind"] == "search")].sort_values("n")
    control = curves[(curves["method"] == REFERENCE) & (curves["kind"] == "control")].sort_values("n")
    if search.empty or control.empty:
        raise ValueError(f"{directory}: tuning_curves.csv holds no {LOSS} search or {REFERENCE} control curve")
    length = len(search)
    lead = (search["expected_test"].to_numpy(float) - control_curve(control["expected_test"], length, beyond_seeds))
    se = [standard_error_from_interval(low, high, confidence, MAX_STUDENTISED_DF)
          for low, high in zip(search["low"].astype(float), search["high"].astype(float))]
    return pd.DataFrame({"n": np.arange(1, length + 1), "lead": lead / reference_mean,
                         "se": np.nan_to_num(np.asarray(se, float) / reference_mean, nan=0.0),
                         "measured": np.arange(1, length + 1) <= len(control)})


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


def _first(values: np.ndarray, target: float) -> int | None:
    found = first_reaching(values, target)[0]
    return int(found) if np.isfinite(found) else None


def crossings(table: pd.DataFrame, margin: float = RELATIVE_MARGIN) -> dict:
    """The first n where the pooled mean reaches zero and the margin, each with an interval by inverting the CI:
    from the first n whose upper bound reaches it to the first whose lower bound does (None: not within N)."""
    facts = {"trials": int(table["n"].max()) if len(table) else 0, "margin_value": float(margin)}
    for name, target in (("zero", 0.0), ("margin", float(margin))):
        facts[name] = {key: _first(table[column].to_numpy(float), target) if len(table) else None
                       for key, column in (("n", "mean"), ("low", "high"), ("high", "low"))}
    return facts


def _percent(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.1f}%"


def _crossing_text(what: str, facts: dict, trials: int) -> str:
    if facts["n"] is None:
        reach = f" (its CI allows it from n = {facts['low']})" if facts["low"] is not None else ""
        return f"never reaches {what} within {trials} trials{reach}"
    upper = facts["high"] if facts["high"] is not None else f"not shown within {trials}"
    return f"crosses {what} at n = {facts['n']} [{facts['low']}, {upper}] trials"


def tuning_cost_sentences(table: pd.DataFrame, crossings: dict) -> list[str]:
    """Two sentences, every number from `table` and `crossings`: where the pooled lead crosses zero and the margin,
    and what it is at the last n with the new-source prediction beside it."""
    if table.empty:
        return ["No headline cell wrote a tuning curve, so the tuning cost is not pooled."]
    last, trials = table.iloc[-1], crossings["trials"]
    extrapolated = "" if bool(table["control_measured"].all()) else (
        f"; beyond n = {int(table.loc[table['control_measured'], 'n'].max())} the control is extrapolated "
        f"({table.attrs.get('beyond_seeds', 'normal')} seed scores)")
    zero = _crossing_text("zero", crossings["zero"], trials)
    margin = _crossing_text(f"the {_percent(crossings['margin_value'])} margin", crossings["margin"], trials)
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
