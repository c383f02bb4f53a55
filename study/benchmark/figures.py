"""The benchmark's figures: every method against Fixed AdaCos with the margin (what a new source should expect), a
forest plot per searched loss (one row per configuration, grouped by source), and the tuners at equal training
iterations."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Polygon
from scipy import stats

from study.report import method_name, new_figure, save_figure

POOLED_COLOUR, CELL_COLOUR, FLOOR_COLOUR = "#c0392b", "#1f5fa8", "#8c8c8c"


def _percent(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.1f}%"


def figure_methods(pooled: pd.DataFrame, path: Path, dpi: int) -> Path:
    """One row per method: its pooled mean against Fixed AdaCos with its 95% CI (thick) and the 95% prediction
    interval for a new data source (thin), in % of Fixed AdaCos's score; grey: the ±margin band."""
    rows = pooled.reset_index(drop=True)
    figure, axes = new_figure(size=(6.4, 1.4 + 0.5 * len(rows)))
    ax = axes[0]
    margin = float(rows["margin"].iloc[0]) if len(rows) else math.nan
    if math.isfinite(margin):
        ax.axvspan(-100 * margin, 100 * margin, color="#dcdcdc", alpha=0.7, zorder=0,
                   label=f"±{100 * margin:.0f}% margin")
    ax.axvline(0.0, color="black", linewidth=0.9)
    positions = np.arange(len(rows), 0, -1)
    for y, row in zip(positions, rows.itertuples()):
        if math.isfinite(row.prediction_low):
            ax.plot([100 * row.prediction_low, 100 * row.prediction_high], [y, y], color=POOLED_COLOUR, linewidth=1.2)
        if math.isfinite(row.low):
            ax.plot([100 * row.low, 100 * row.high], [y, y], color=POOLED_COLOUR, linewidth=4.5,
                    solid_capstyle="butt")
        ax.plot(100 * row.mean, y, "o", color="white", markeredgecolor=POOLED_COLOUR, markersize=6, zorder=3)
    ax.set_yticks(positions, labels=[method_name(method) for method in rows["method"]])
    ax.set_ylim(0.4, len(rows) + 0.6)
    ax.set_xlabel("method − Fixed AdaCos, % of Fixed AdaCos's test score")
    ax.plot([], [], color=POOLED_COLOUR, linewidth=4.5, label="mean over sources, 95% CI")
    ax.plot([], [], color=POOLED_COLOUR, linewidth=1.2, label="a new source, 95% prediction")
    ax.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False)
    return save_figure(figure, path, dpi)


def figure_forest(rows: pd.DataFrame, facts: dict, path: Path, dpi: int) -> Path:
    """Configurations as rows, grouped by source (each its cell's 95% interval over class splits, in % of Fixed
    AdaCos's score; hollow: near the floor, left out of the pool), the pooled mean over sources (diamond) and the
    prediction interval for a new source (bar); grey: the margin."""
    rows = rows.sort_values(["real", "source", "train_classes"], ascending=[False, True, True]).reset_index(drop=True)
    count = len(rows)
    figure, axes = new_figure(size=(6.4, 1.9 + 0.42 * (count + 2)))
    ax = axes[0]
    margin = facts["margin"]
    ax.axvspan(-100 * margin, 100 * margin, color="#dcdcdc", alpha=0.7, zorder=0, label=f"±{100 * margin:.0f}% margin")
    ax.axvline(0.0, color="black", linewidth=0.9)
    positions = np.arange(count, 0, -1) + 2.0
    half = rows["relative_se"] * rows["df"].map(lambda df: _t(df))
    values = np.concatenate([100 * (rows["relative"] - half), 100 * (rows["relative"] + half),
                             [100 * facts.get("prediction_low", 0), 100 * facts.get("prediction_high", 0), 0.0]])
    values = values[np.isfinite(values)]
    left, right = np.percentile(values, [2, 98]) if values.size else (-5, 5)
    span = max(right - left, 2 * 100 * margin)
    left, right = min(left, -100 * margin) - 0.1 * span, max(right, 100 * margin) + 0.1 * span
    for y, row, spread in zip(positions, rows.itertuples(), half):
        colour = FLOOR_COLOUR if row.near_floor else CELL_COLOUR
        low, high = 100 * (row.relative - spread), 100 * (row.relative + spread)
        ax.plot([max(low, left), min(high, right)], [y, y], color=colour, linewidth=1.4)
        for value, edge, marker in ((low, left, "<"), (high, right, ">")):
            if value < left or value > right:
                ax.plot(edge, y, marker=marker, color=colour, markersize=6)
        ax.plot(min(max(100 * row.relative, left), right), y, "s", color=colour, markersize=6,
                markerfacecolor="white" if row.near_floor else colour)
    labels = [f"{row.source}: {row.configuration}" + (" (near floor)" if row.near_floor else "")
              for row in rows.itertuples()]
    if math.isfinite(facts.get("low", math.nan)):
        diamond = [(100 * facts["low"], 1.0), (100 * facts["mean"], 1.3), (100 * facts["high"], 1.0),
                   (100 * facts["mean"], 0.7)]
        ax.add_patch(Polygon(diamond, closed=True, color=POOLED_COLOUR, zorder=3, label="mean over sources, 95% CI"))
    if math.isfinite(facts.get("prediction_low", math.nan)):
        ax.plot([max(100 * facts["prediction_low"], left), min(100 * facts["prediction_high"], right)], [0.0, 0.0],
                color=POOLED_COLOUR, linewidth=2.2, solid_capstyle="butt", label="a new source, 95% prediction")
    ax.set_yticks([*positions, 1.0, 0.0], labels=[*labels, f"mean over {facts['sources']} sources",
                                                  "a new source"])
    ax.set_ylim(-0.8, (positions.max() if count else 2.0) + 0.8)
    ax.set_xlim(left, right)
    ax.set_xlabel(f"{method_name(facts['method'])} − Fixed AdaCos, % of Fixed AdaCos's test score")
    ax.legend(fontsize="small", loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False)
    return save_figure(figure, path, dpi)


def _t(df: float) -> float:
    return float(stats.t.ppf(0.975, df)) if df and math.isfinite(df) and df > 0 else math.nan


def figure_tuners(tuners: pd.DataFrame, curves: dict[str, pd.DataFrame], labels: dict[str, str], path: Path,
                  dpi: int) -> Path:
    """Per configuration: the expected test score of the trial val selects against training iterations per search,
    one line and band per tuner; dashed: Fixed AdaCos's mean test score of one run; dotted: the common budget."""
    configurations = list(dict.fromkeys(tuners["configuration"]))
    figure, axes = new_figure(ncols=len(configurations), size=(4.6 * max(1, len(configurations)), 4.0))
    for ax, configuration in zip(axes, configurations):
        group = tuners[tuners["configuration"] == configuration]
        for index, row in enumerate(group.itertuples()):
            curve = curves.get(row.cell)
            if curve is None or curve.empty or not math.isfinite(row.iterations_per_trial):
                continue
            x = curve["n"] * row.iterations_per_trial
            ax.plot(x, curve["expected_test"], "-o", color=f"C{index}", markersize=3, label=labels[row.cell])
            valid = np.isfinite(curve["low"]) & np.isfinite(curve["high"])
            ax.fill_between(x[valid], curve["low"][valid], curve["high"][valid], color=f"C{index}", alpha=0.15,
                            linewidth=0)
        ax.axhline(group["reference_test_mean"].iloc[0], color="black", linestyle="--", linewidth=1,
                   label="Fixed AdaCos, one run")
        ax.axvline(group["iterations_budget"].iloc[0], color="grey", linestyle=":", linewidth=1,
                   label="common budget")
        ax.set_title(configuration, fontsize="medium")
        ax.set_xlabel("training iterations per search")
    axes[0].set_ylabel("expected test score of the selected trial")
    axes[0].legend(fontsize="small", loc="lower right")
    return save_figure(figure, path, dpi)
