"""The figures of what a search buys: the expected test score of the run val selects among n trials (or n seeds of
an untuned method) against n or device-seconds, with the break-even against Fixed AdaCos, and the classic expected
best val curve for contrast.

Curves that could lie on one another get panels of their own (small multiples, the other curves in grey behind for
comparison). Bands are the analysis's own intervals, drawn only where they exist. What a panel says in words (the
break-even and its interval, where a band stops) is in its title or the legend, never over a curve."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from study.analysis import REFERENCE_METHOD, StudyAnalysis, count_or_none
from study.config import StudyParams
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name, trials_interval
from study.report.palette import CONTEXT, GREY, drawing_order
from study.report.plotting import (FIGURE_WIDTH, band, focus_y, label_bottom, legend_below, legend_with_band,
                                   new_figure, plain_log_ticks, readable, save_figure, small_multiples)
from study.results import tuned_method

# The untuned methods whose best-of-n-seeds control the tuning figure draws beside the searches.
TUNING_CONTROLS = ("fixed_adacos", "dynamic_adacos")


def measurement_conditions(params: StudyParams, environment: dict) -> str:
    """Where the device-seconds were measured: the device and how many runs shared it. What else loaded the machine
    is not recorded, so the seconds are comparable within one study only."""
    device = environment.get("devices") or environment.get("device") or params.train.device
    parallel = params.train.parallel
    packed = "runs packed at once by train.parallel: auto" if parallel == "auto" else (
        f"{fmt.plural(parallel, 'run')} at once (train.parallel)")
    threads = "" if params.train.threads is None else f", {fmt.plural(params.train.threads, 'thread')} each"
    return f"{device}, {packed}{threads}; other load on the machine not recorded"


def _tuning_panels(curves: pd.DataFrame) -> list[tuple[str, str]]:
    """The tuning figure's curves as (method, kind), one panel each: every search, then the AdaCos controls."""
    keys = list(dict.fromkeys(zip(curves["method"], curves["kind"])))
    return [key for key in keys if key[1] == "search"] + [(m, "control") for m in TUNING_CONTROLS
                                                           if (m, "control") in keys]


def _reference_break_even(analysis: StudyAnalysis, loss: str | None = None) -> pd.DataFrame:
    """The break-even rows against Fixed AdaCos, of one searched loss or of all."""
    even = analysis.break_even
    rows = even[even["reference"] == REFERENCE_METHOD]
    return rows if loss is None else rows[rows["loss"] == loss]


def break_even_note(analysis: StudyAnalysis) -> str:
    """What the tuning figure shows of the break-even, for its caption: a star where reached, words where not."""
    rows = _reference_break_even(analysis)
    reached = rows["reached"].astype(bool)
    if reached.empty:
        return ""
    if reached.all():
        return "The star marks the break-even (its interval in the legend)."
    if not reached.any():
        most = int(rows["max_trials"].max())
        return (f"The break-even is not reached within {fmt.plural(most, 'trial')}: the search's panel says "
                "\"not reached\", and there is no star.")
    return ("A star marks the break-even where a search reaches it; a search panel that does not reach it says "
            "\"not reached\".")


def _valid_band_note(curve: pd.DataFrame) -> str:
    """Up to which n a curve's band is drawn, for its panel title."""
    valid = curve["low"].notna() & curve["high"].notna()
    if valid.all():
        return ""
    if not valid.any():
        return "too few runs for a band"
    return f"band for n ≤ {int(curve.loc[valid, 'n'].max())} only"


def _mark_break_even(ax, analysis: StudyAnalysis, loss: str, curve: pd.DataFrame, x: str, colour) -> list[str]:
    """The break-even against Fixed AdaCos in a search's panel: a star with its interval as a bar where reached, its
    numbers in the legend; where not reached, a legend entry with the interval in trials. Returns what the panel's
    title says of it."""
    confidence = f"{analysis.confidence:.0%}"
    said = []
    for even in _reference_break_even(analysis, loss).itertuples():
        valid = getattr(even, "valid_trials", None)
        interval = trials_interval(even.trials_low, even.trials_high, even.max_trials, valid)
        if not even.reached:
            ax.plot([], [], linestyle="none", marker="*", markersize=12, markerfacecolor="none",
                    markeredgecolor=colour, gid="break-even not reached",
                    label=f"{loss_name(loss)}: break-even not reached\nwithin "
                          f"{fmt.plural(int(even.max_trials), 'trial')}, {confidence} interval {interval}")
            said.append("break-even not reached")
            continue
        point = curve[curve["n"] == even.trials].iloc[0]
        low, high = count_or_none(even.trials_low), count_or_none(even.trials_high)
        if x == "n" and low is not None:
            end = high if high is not None else (count_or_none(valid) or int(even.max_trials))
            ax.errorbar(point["n"], point["expected_test"], xerr=[[point["n"] - low], [max(end - point["n"], 0)]],
                        fmt="none", ecolor=colour, elinewidth=1.4, capsize=4, zorder=5)
        ax.plot(point[x], point["expected_test"], marker="*", markersize=16, color=colour, markeredgecolor="black",
                linestyle="none", zorder=6, gid="break-even",
                label=f"{loss_name(loss)} break-even (star): {fmt.plural(int(even.trials), 'trial')},\n"
                      f"{confidence} interval {interval} (bar)")
    return said


@readable
def figure_tuning(analysis: StudyAnalysis, styles: dict, x: str, path: Path, dpi: int,
                  measured_on: str = "") -> Path:
    """What n tuning trials buy on test: the expected test score of the trial val selects among n (x='n') or
    against device-seconds (x='seconds'), beside the untuned methods' best-of-n-seeds controls."""
    return save_figure(draw_tuning(analysis, styles, x, measured_on), path, dpi)


def draw_tuning(analysis: StudyAnalysis, styles: dict, x: str, measured_on: str = "") -> Figure:
    """The tuning figure: one panel per search and per AdaCos control, so that curves with the same values still show
    each; each panel's band only where its interval is valid; Fixed AdaCos's one-run mean as the target line; the
    break-even starred in its search's panel, or said to be not reached."""
    curves = analysis.tuning_curves
    panels = _tuning_panels(curves)
    figure, axes, spare = small_multiples(len(panels), sharex=True, sharey=True)
    even = _reference_break_even(analysis)
    reference = curves[(curves["method"] == REFERENCE_METHOD) & (curves["kind"] == "control") & (curves["n"] == 1)]
    target = (float(even["target"].iloc[0]) if len(even) else
              float(reference["expected_test"].iloc[0]) if len(reference) else None)
    shown = [] if target is None else [target]
    for ax, (method, kind) in zip(axes, panels):
        for other in panels:
            if other != (method, kind):
                context = curves[(curves["method"] == other[0]) & (curves["kind"] == other[1])]
                ax.plot(context[x], context["expected_test"], **CONTEXT, label="the other panels' curves")
        curve = curves[(curves["method"] == method) & (curves["kind"] == kind)]
        search = kind == "search"
        style = styles.get(tuned_method(method) if search else method, GREY)
        ax.plot(curve[x], curve["expected_test"], **style.line(), markersize=4, linewidth=2.0, zorder=4,
                gid=f"{kind}:{method}")
        band(ax, curve[x], curve["low"], curve["high"], style, fill=0.18)
        if target is not None:
            ax.axhline(target, color=styles.get(REFERENCE_METHOD, GREY).colour, linestyle=":", linewidth=1.4,
                       zorder=3, label="target: Fixed AdaCos, one run")
        notes = _mark_break_even(ax, analysis, method, curve, x, style.colour) if search else []
        title = (f"{loss_name(method)}: the trial val\nselects among n" if search
                 else f"{method_name(method)}: the best\nof n seeds by val")
        notes.append(_valid_band_note(curve))
        ax.set_title("\n".join([title, *(f"({note})" for note in notes if note)]))
        shown += [*curve["expected_test"], *curve["low"].dropna(), *curve["high"].dropna()]
    if axes:
        focus_y(axes[0], shown)
    objective = metric_name(analysis.objective)
    confidence = f"{analysis.confidence:.0%}"
    if x == "seconds":
        if (curves["seconds"] > 0).any():
            for ax in axes:
                ax.set_xscale("log")
                plain_log_ticks(ax.xaxis)
        conditions = measured_on.replace("; ", ";\n").replace(", runs", ",\nruns")  # the device, then its load
        figure.suptitle(f"Test {objective} of the val-selected run\nagainst device-seconds"
                        + (f"\nmeasured on {conditions}" if measured_on else ""))
        label_bottom(axes, "device-seconds (log scale)")
    else:
        for ax in axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        figure.suptitle(f"Test {objective} of the run val selects among n")
        label_bottom(axes, "n: trials, or seeds")
    figure.supylabel(f"expected test {objective}")
    legend_with_band(figure, axes, spare, f"{confidence} studentised interval, only where valid")
    return figure


def _draw_reference_lines(ax, analysis: StudyAnalysis, styles: dict, confidence_label: str, right_of: float) -> None:
    """Each untuned method's mean as a horizontal line in its own style, Fixed AdaCos's last and on top, and its
    interval as an error bar of its own right of the curves (`right_of`), side by side: overlapping translucent bands
    would merge into one smear."""
    bands = analysis.reference_bands.set_index("method", drop=False)
    for index, method in enumerate(drawing_order(bands.index)):
        row = bands.loc[method]
        style = styles.get(method, GREY)
        interval = ("1 seed" if fmt.missing(row["low"]) else
                    f"± {confidence_label} CI, {fmt.plural(row['seeds'], 'seed')}")
        on_top = 3 if method == REFERENCE_METHOD else 2
        ax.axhline(row["mean"], color=style.colour, linestyle=style.linestyle, linewidth=1.4, zorder=on_top,
                   label=f"{method_name(method)} (mean {interval})")
        if not fmt.missing(row["low"]):
            ax.errorbar(right_of + 1.0 + 0.9 * index, row["mean"],
                        yerr=[[row["mean"] - row["low"]], [row["high"] - row["mean"]]], fmt=style.marker,
                        color=style.colour, capsize=4, markersize=5, elinewidth=1.6, zorder=on_top)


@readable
def figure_expected_best_val(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """The classic curve, for contrast: the expected best val score of n trials against the untuned methods'
    mean val; it includes the maximum of seed noise, so it overstates what tuning buys."""
    confidence = f"{analysis.confidence:.0%}"
    figure, (ax,) = new_figure(size=(FIGURE_WIDTH, 5.6))
    objective = metric_name(analysis.objective)
    searches = analysis.tuning_curves[analysis.tuning_curves["kind"] == "search"]
    for method, curve in searches.groupby("method", sort=False):
        ax.plot(curve["n"], curve["expected_val"], **styles.get(tuned_method(method), GREY).line(), markersize=3,
                linewidth=1.8, label=f"{loss_name(method)}: expected best val of n trials")
    last = float(searches["n"].max())
    _draw_reference_lines(ax, analysis, styles, confidence, right_of=last)
    focus_y(ax, [*searches["expected_val"], *analysis.reference_bands["mean"]])
    ax.set_xticks([tick for tick in MaxNLocator(integer=True).tick_values(0, last) if 0 <= tick <= last])
    ax.set_xlabel(f"tuning trials n\n(right: the untuned methods' {confidence} CIs\nover seeds, side by side)")
    ax.set_ylabel(f"val {objective}")
    ax.set_title(f"Expected best val {objective}\n(includes the maximum of seed noise)")
    legend_below(figure, ax, ncols=1)
    return save_figure(figure, path, dpi)
