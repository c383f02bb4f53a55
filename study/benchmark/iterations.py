"""The suite's founding question, pooled: does Fixed AdaCos, with its fixed scale, need as many iterations as tuned
ArcFace to converge? Per run, the iterations to 95% and 99% of that run's own best val score (computed from the
cell's learning curves, so no run is censored: every run reaches a share of its own best); per headline cell, each
method's mean log ratio to Fixed AdaCos paired by split and seed; pooled over data sources, not cells, as the
benchmark pools its score differences (pool_across_sources), and read as a ratio (the exp of the pooled log).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from study.analysis.common import REFERENCE_METHOD
from study.analysis.iteration_ratios import (COLUMNS, EQUIVALENCE_BAND, LEVELS, cell_log_ratios,  # noqa: F401
                                             equivalence, iterations_to_own_best)
from study.analysis.headline import headline_cells
from study.analysis.pooling import pool_across_sources
from study.benchmark.trained_on import results_beside, with_longer_curves
from study.report import method_name, method_style, new_figure, readable, save_figure
from study.report.plotting import FIGURE_WIDTH, legend_below

CURVES_TABLE = Path("reports") / "tables" / "learning_curves.csv"


def headline_log_ratios(rows: pd.DataFrame, cells_dir: Path, levels=LEVELS) -> pd.DataFrame:
    """cell_log_ratios of every headline cell (the cells the score headline pools, headline_cells), for the methods
    the headline reads there and Fixed AdaCos, with the cell's source and whether the method was still improving."""
    headline = headline_cells(rows)
    tables = []
    for cell, group in headline.groupby("cell", sort=True):
        path = Path(cells_dir) / cell / CURVES_TABLE
        if not path.exists():
            raise FileNotFoundError(f"{path}: the headline cell {cell} has no learning curves to count iterations on")
        # a method trained on to convergence counts its iterations on the longer runs its scores come from
        table = cell_log_ratios(with_longer_curves(pd.read_csv(path), group, results_beside(cells_dir)), levels)
        improving = dict(zip(group["method"], group["still_improving"].astype(bool)))
        table = table[table["method"].isin({*improving, REFERENCE_METHOD})]
        tables.append(table.assign(cell=cell, source=group["source"].iloc[0],
                                   still_improving=table["method"].map(improving).fillna(False).astype(bool)))
    if not tables:  # no headline cell: nothing to count (the report says so)
        return pd.DataFrame(columns=["method", "level", "median_iterations", "log_ratio", "standard_error", "df",
                                     "pairs", "cell", "source", "still_improving"])
    return pd.concat(tables, ignore_index=True)


def pooled_iterations(rows: pd.DataFrame, cells_dir: Path, confidence: float) -> pd.DataFrame:
    """Per method and level (0.95, 0.99): the median over headline cells of its median iterations to that share of
    its own best val, and its ratio of iterations to Fixed AdaCos's, pooled over data sources (pool_across_sources on
    the log ratios: a configuration of one source is no independent replicate) with the CI of the mean over sources
    and the prediction interval for a new configuration from a new source, exp'd; the ratio's reading against
    EQUIVALENCE_BAND reads the CI (what a user should expect)."""
    cells = headline_log_ratios(rows, cells_dir)
    table = []
    for (method, level), group in cells.groupby(["method", "level"], sort=False):
        usable = group[np.isfinite(group["log_ratio"]) & np.isfinite(group["standard_error"])]
        row = {"method": method, "level": level, "median_iterations": float(group["median_iterations"].median()),
               "sources": int(group["source"].nunique()), "cells": len(group),
               "still_improving_cells": int(group["still_improving"].sum()), "confidence": confidence}
        if method == REFERENCE_METHOD:
            row.update(ratio=1.0, ratio_low=math.nan, ratio_high=math.nan, prediction_low=math.nan,
                       prediction_high=math.nan, equivalence="reference")
        elif usable.empty:
            row.update(ratio=math.nan, ratio_low=math.nan, ratio_high=math.nan, prediction_low=math.nan,
                       prediction_high=math.nan, equivalence="undetermined", sources=0, cells=0)
        else:
            pooled = pool_across_sources(usable["log_ratio"], usable["standard_error"], usable["source"],
                                         confidence=confidence, degrees_of_freedom=usable["df"])
            row.update({key: math.exp(pooled[name]) for key, name in
                        (("ratio", "mean"), ("ratio_low", "low"), ("ratio_high", "high"),
                         ("prediction_low", "prediction_low"), ("prediction_high", "prediction_high"))})
            row.update(sources=pooled.sources, cells=pooled.configurations,
                       equivalence=equivalence(row["ratio_low"], row["ratio_high"]))
        table.append(row)
    frame = pd.DataFrame(table, columns=COLUMNS)
    methods = list(dict.fromkeys([REFERENCE_METHOD, "arcface_tuned", *frame["method"]]))
    frame["method"] = pd.Categorical(frame["method"], categories=methods, ordered=True)
    frame = frame.sort_values(["method", "level"], kind="stable").reset_index(drop=True)
    return frame.assign(method=frame["method"].astype(str))


def _inverted(row: pd.Series) -> tuple[float, float, float, float, float]:
    """Fixed AdaCos against the method: the reciprocal ratio and its bounds, low and high swapped."""
    return (1.0 / row["ratio"], 1.0 / row["ratio_high"], 1.0 / row["ratio_low"], 1.0 / row["prediction_high"],
            1.0 / row["prediction_low"])


def _interval(low: float, high: float) -> str:
    return f"[{low:.2f}, {high:.2f}]" if math.isfinite(low) and math.isfinite(high) else "[n/a]"


def iterations_sentence(table: pd.DataFrame, against: str = "arcface_tuned") -> str:
    """One plain sentence answering the founding question from pooled_iterations' table: Fixed AdaCos's iterations
    as a multiple of tuned ArcFace's at each level, with the CI, the new-source prediction and the band's reading."""
    rows = table[(table["method"] == against) & np.isfinite(table["ratio"].astype(float))].set_index("level")
    if rows.empty:
        return f"No headline cell pairs Fixed AdaCos with {against} on iterations to its own best val."
    parts, readings = [], []
    for index, (level, row) in enumerate(rows.iterrows()):
        ratio, low, high, new_low, new_high = _inverted(row)
        needs = " the iterations tuned ArcFace needs" if index == 0 else ""
        parts.append(f"{level:.0%}{' of its own best val' if index == 0 else ''} in {ratio:.2f}× "
                     f"{_interval(low, high)}{needs} (a new source: {_interval(new_low, new_high)})")
        readings.append(f"{equivalence(low, high)} at {level:.0%}")
    first = rows.iloc[0]
    improving = int(rows["still_improving_cells"].max())
    converged = ("both converged in each" if improving == 0 else f"tuned ArcFace still improving in {improving}")
    return (f"With its fixed scale, Fixed AdaCos reaches {' and '.join(parts)}, {first['confidence']:.0%} CIs pooled "
            f"over {int(first['sources'])} data sources ({int(first['cells'])} headline cells, {converged}); "
            f"against the {EQUIVALENCE_BAND[0]}–{EQUIVALENCE_BAND[1]}× band of equal iterations: "
            f"{', '.join(readings)}.")


@readable
def figure_iterations(table: pd.DataFrame, path: Path, dpi: int) -> Path:
    """One row per method: its iterations to 95% (circle) and 99% (square) of its own best val as a multiple of
    Fixed AdaCos's, pooled over sources, with the CI (thick) and a new source's prediction (thin) on a log axis; grey:
    the EQUIVALENCE_BAND of "as many iterations"."""
    rows = table[(table["method"] != REFERENCE_METHOD) & np.isfinite(table["ratio"].astype(float))]
    methods = list(dict.fromkeys(rows["method"]))
    figure, (ax,) = new_figure(size=(FIGURE_WIDTH, 1.8 + 0.55 * len(methods)))
    ax.axvspan(*EQUIVALENCE_BAND, color="#dcdcdc", alpha=0.7, zorder=0,
               label=f"{EQUIVALENCE_BAND[0]}–{EQUIVALENCE_BAND[1]}× (as many)")
    ax.axvline(1.0, color=method_style(REFERENCE_METHOD).colour, linewidth=1.2)
    for y, method in zip(range(len(methods), 0, -1), methods):
        colour = method_style(method).colour
        for offset, marker, row in zip((0.15, -0.15), ("o", "s"), rows[rows["method"] == method].itertuples()):
            ax.plot([row.prediction_low, row.prediction_high], [y + offset] * 2, color=colour, linewidth=1.2)
            ax.plot([row.ratio_low, row.ratio_high], [y + offset] * 2, color=colour, linewidth=4.5,
                    solid_capstyle="butt", gid=f"iterations:{method}:{row.level:g}")
            ax.plot(row.ratio, y + offset, marker, color="white", markeredgecolor=colour, markersize=6, zorder=3)
    ax.set_xscale("log")
    ax.set_yticks(range(len(methods), 0, -1), labels=[method_name(method) for method in methods])
    ax.set_ylim(0.4, len(methods) + 0.6)
    ax.set_xlabel("iterations to its own best val,\n× Fixed AdaCos's (log scale)")
    for marker, level in zip(("o", "s"), LEVELS):
        ax.plot([], [], marker, color="white", markeredgecolor="#555555", label=f"to {level:.0%}")
    ax.plot([], [], color="#555555", linewidth=4.5, label="mean over sources, 95% CI")
    ax.plot([], [], color="#555555", linewidth=1.2, label="a new source, 95% prediction")
    legend_below(figure, ax)
    return save_figure(figure, path, dpi)
