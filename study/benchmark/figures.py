"""The benchmark's figures: every method against Fixed AdaCos with the margin (what a new source should expect), a
forest plot per searched loss (one row per configuration, grouped by source), and the tuners at equal training
iterations. Each method is drawn in its colour of study.report.palette, as in every study's report and DVC's plots,
at the width and text sizes of study.report.plotting, legible on a 420 px screen."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Polygon
from scipy import stats

from study.report import method_name, method_style, new_figure, readable, save_figure
from study.report.palette import REFERENCE, Style
from study.report.plotting import FIGURE_WIDTH, legend, small_multiples, unique_handles

FLOOR_COLOUR = "#8c8c8c"
# The tuners all search ArcFace: shades of ArcFace's colour, told apart by shade, dash pattern and marker.
TUNER_STYLES = (Style("#D55E00", (), "o"), Style("#7A3500", (3.7, 1.6), "s"), Style("#F0A46E", (1.0, 1.6), "^"))


def _percent(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{100 * value:+.1f}%"


# The methods figure spans this many margins either side of zero: the ±2% band is then a fifth of the axis, not the
# few pixels it was when the axis reached a loss 100% behind.
METHODS_WINDOW = 5


@readable
def figure_methods(pooled: pd.DataFrame, path: Path, dpi: int) -> Path:
    """One row per method: its pooled mean against Fixed AdaCos with its 95% CI (thick) and the 95% prediction
    interval for a new data source (thin), in % of Fixed AdaCos's score; grey: the ±margin band. The axis spans
    METHODS_WINDOW margins either side, so the band that decides is wide enough to read; what reaches beyond ends in
    an arrow, and a mean beyond is printed at the edge."""
    rows = pooled.reset_index(drop=True)
    figure, axes = new_figure(size=(FIGURE_WIDTH, 1.6 + 0.5 * len(rows)))
    ax = axes[0]
    margin = float(rows["margin"].iloc[0]) if len(rows) else math.nan
    edge = 100 * METHODS_WINDOW * (margin if math.isfinite(margin) else 0.02)
    if math.isfinite(margin):
        ax.axvspan(-100 * margin, 100 * margin, color="#dcdcdc", alpha=0.7, zorder=0,
                   label=f"±{100 * margin:.0f}% margin")
    ax.axvline(0.0, color=method_style(REFERENCE).colour, linewidth=1.2)
    positions = np.arange(len(rows), 0, -1)

    def clipped(low, high, y, colour, width, **style):
        ax.plot([min(max(low, -edge), edge), max(min(high, edge), -edge)], [y, y], color=colour, linewidth=width,
                **style)
        for value, end, marker in ((low, -edge, "<"), (high, edge, ">")):
            if (value < end) if marker == "<" else (value > end):
                ax.plot(end, y, marker=marker, color=colour, markersize=7, clip_on=False)

    for y, row in zip(positions, rows.itertuples()):
        colour = method_style(row.method).colour
        if math.isfinite(row.prediction_low):
            clipped(100 * row.prediction_low, 100 * row.prediction_high, y, colour, 1.2)
        if math.isfinite(row.low):
            clipped(100 * row.low, 100 * row.high, y, colour, 4.5, solid_capstyle="butt", gid=f"method:{row.method}")
        mean = 100 * row.mean
        if abs(mean) <= edge:
            ax.plot(mean, y, "o", color="white", markeredgecolor=colour, markersize=6, zorder=3)
        elif math.isfinite(mean):
            ax.annotate(f"mean {mean:+.0f}%", (math.copysign(edge, mean), y), xytext=(0, 7),
                        textcoords="offset points", ha="right" if mean > 0 else "left", va="bottom", color=colour)
        else:  # e.g. a loss searched only in short cells, drawn beside the converged pool: say why its row is empty
            ax.text(-edge, y, " no cell in this pool", ha="left", va="center", color="#666666",
                    gid=f"empty:{row.method}")
    ax.set_xlim(-edge * 1.04, edge * 1.04)
    ax.set_yticks(positions, labels=[method_name(method) for method in rows["method"]])
    ax.set_ylim(0.4, len(rows) + 0.6)
    ax.set_xlabel("method − Fixed AdaCos,\n% of Fixed AdaCos's test score")
    ax.plot([], [], color="#555555", linewidth=4.5, label="mean over sources, 95% CI")
    ax.plot([], [], color="#555555", linewidth=1.2, label="a new source, 95% prediction")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=1, frameon=False)
    return save_figure(figure, path, dpi)


@readable
def figure_forest(rows: pd.DataFrame, facts: dict, path: Path, dpi: int) -> Path:
    """Configurations as rows, grouped by source (each its cell's 95% interval over class splits, in % of Fixed
    AdaCos's score; hollow: near the floor, left out of the pool), the pooled mean over sources (diamond) and the
    prediction interval for a new source (bar); grey: the margin."""
    rows = rows.sort_values(["by_people", "source", "train_classes"],
                           ascending=[False, True, True]).reset_index(drop=True)
    count = len(rows)
    figure, axes = new_figure(size=(FIGURE_WIDTH, 2.1 + 0.42 * (count + 2)))
    colour = method_style(facts["method"]).colour
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
        shade = FLOOR_COLOUR if row.near_floor else colour
        low, high = 100 * (row.relative - spread), 100 * (row.relative + spread)
        ax.plot([max(low, left), min(high, right)], [y, y], color=shade, linewidth=1.4)
        for value, edge, marker in ((low, left, "<"), (high, right, ">")):
            if value < left or value > right:
                ax.plot(edge, y, marker=marker, color=shade, markersize=6)
        ax.plot(min(max(100 * row.relative, left), right), y, "s", color=shade, markersize=6,
                markerfacecolor="white" if row.near_floor else shade)
    labels = [f"{row.source}: {row.configuration}" + (" (near floor)" if row.near_floor else "")
              for row in rows.itertuples()]
    if math.isfinite(facts.get("low", math.nan)):
        diamond = [(100 * facts["low"], 1.0), (100 * facts["mean"], 1.3), (100 * facts["high"], 1.0),
                   (100 * facts["mean"], 0.7)]
        ax.add_patch(Polygon(diamond, closed=True, facecolor=colour, edgecolor="black", linewidth=0.6, zorder=3,
                             label="mean over sources, 95% CI"))
    if math.isfinite(facts.get("prediction_low", math.nan)):
        ax.plot([max(100 * facts["prediction_low"], left), min(100 * facts["prediction_high"], right)], [0.0, 0.0],
                color=colour, linewidth=2.2, solid_capstyle="butt", label="a new source, 95% prediction")
    ax.set_yticks([*positions, 1.0, 0.0], labels=[*labels, f"mean over {facts['sources']} sources",
                                                  "a new source"])
    ax.set_ylim(-0.8, (positions.max() if count else 2.0) + 0.8)
    ax.set_xlim(left, right)
    ax.set_xlabel(f"{method_name(facts['method'])} − Fixed AdaCos,\n% of Fixed AdaCos's test score")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=1, frameon=False)
    return save_figure(figure, path, dpi)


def _t(df: float) -> float:
    return float(stats.t.ppf(0.975, df)) if df and math.isfinite(df) and df > 0 else math.nan


@readable
def figure_tuners(tuners: pd.DataFrame, curves: dict[str, pd.DataFrame], labels: dict[str, str], path: Path,
                  dpi: int) -> Path:
    """Per configuration, one panel under the other (side by side they shrank to illegible on a phone): the expected
    test score of the trial val selects against training iterations per search, one line and band per tuner; dashed:
    Fixed AdaCos's mean test score of one run, in its colour; dotted: the common budget."""
    configurations = list(dict.fromkeys(tuners["configuration"]))
    figure, axes, _ = small_multiples(len(configurations), ncols=1, panel_height=2.6, extra_height=1.4)
    reference = method_style(REFERENCE)
    for ax, configuration in zip(axes, configurations):
        group = tuners[tuners["configuration"] == configuration]
        for index, row in enumerate(group.itertuples()):
            curve = curves.get(row.cell)
            if curve is None or curve.empty or not math.isfinite(row.iterations_per_trial):
                continue
            style = TUNER_STYLES[index % len(TUNER_STYLES)]
            x = curve["n"] * row.iterations_per_trial
            ax.plot(x, curve["expected_test"], **style.line(), markersize=3.5, linewidth=1.6, label=labels[row.cell],
                    gid=f"tuner:{row.cell}")
            valid = np.isfinite(curve["low"]) & np.isfinite(curve["high"])
            ax.fill_between(x[valid], curve["low"][valid], curve["high"][valid], color=style.colour, alpha=0.15,
                            linewidth=0)
        ax.axhline(group["reference_test_mean"].iloc[0], color=reference.colour, linestyle="--", linewidth=1.2,
                   label="Fixed AdaCos, one run")
        ax.axvline(group["iterations_budget"].iloc[0], color="grey", linestyle=":", linewidth=1,
                   label="common budget")
        ax.set_title(configuration)
        ax.set_ylabel("expected test score\nof the selected trial")
    axes[-1].set_xlabel("training iterations per search")
    handles, names = unique_handles(axes)
    legend(figure, handles, names, ncols=2)
    return save_figure(figure, path, dpi)
