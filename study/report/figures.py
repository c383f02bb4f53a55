"""The report's figures, drawn with matplotlib's object-oriented API (`Figure`, no pyplot): no display and no global
backend are involved.

Where curves could lie on one another they get panels of their own (small multiples, the other curves in grey behind
for comparison) or markers staggered along the line, so that no method hides another. Bands are the analysis's own
intervals, drawn only where they exist; seaborn's relplot would compute intervals of its own from raw rows, so the
panels are laid out here. Every figure is at most FIGURE_WIDTH inches wide with text sized to stay legible when the
HTML report shrinks it to a 420 px screen."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from study.analysis import REFERENCE_METHOD, TEST_PREFIX, StudyAnalysis, count_or_none
from study.config import StudyParams
from study.published import ADACOS_PAPER_CROSSOVER_ITERATIONS
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name, trials_interval
from study.results import tuned_method


# The HTML report shows a figure at most at its natural width and shrinks it to the screen: at 6.2 inches and 120 dpi
# a 420 px screen (a 390 px image) keeps 11 pt legend text about 9 px high, where the earlier 8-inch figures with
# small legends left 5 px.
FIGURE_WIDTH = 6.2
FIGURE_SIZE = (FIGURE_WIDTH, 4.6)
PANEL_HEIGHT = 2.5
TEXT_SIZES = {"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "figure.titlesize": 12,
              "figure.labelsize": 11, "legend.fontsize": 10.5, "xtick.labelsize": 10, "ytick.labelsize": 10}


SYMLOG_LINEAR = 0.01
SYMLOG_TICKS = sorted({sign * value for sign in (-1, 1) for value in (0.005, 0.01, 0.03, 0.1, 0.3, 1.0)} | {0.0})


# Line styles and markers, one per method beside its colour, so curves that lie on one another stay tellable apart
# (and the figures read in grey print or for colour-blind readers).
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 1)), (0, (3, 1, 1, 1)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<")
# Seaborn's colour-blind palette reordered so that its two oranges only meet in studies of seven methods or more, and
# ArcFace at its defaults (fourth) is grey beside tuned ArcFace (fifth).
PALETTE_ORDER = (0, 1, 2, 7, 4, 5, 3, 9, 6, 8)
# The other panels' curves behind a small multiple's own: light enough that the panel's own curve and band stay on top.
CONTEXT = {"color": "#c9c9c9", "linewidth": 1.1, "zorder": 1}
# The untuned methods whose best-of-n-seeds control the tuning figure draws beside the searches.
TUNING_CONTROLS = ("fixed_adacos", "dynamic_adacos")
# One marker per class split in the landscape (▼ ▲ mark the colour scale's outliers there).
SPLIT_MARKERS = ("o", "s", "D", "h", "p", "8")


@dataclass(frozen=True)
class Style:
    """How one method is drawn in every figure."""

    colour: tuple
    linestyle: object
    marker: str

    def line(self) -> dict:
        """Matplotlib keyword arguments for the method's line."""
        return {"color": self.colour, "linestyle": self.linestyle, "marker": self.marker}


GREY = Style((0.5, 0.5, 0.5), "-", "o")


def method_styles(analysis: StudyAnalysis, palette: str) -> dict[str, Style]:
    """One colour, line style and marker per method, the same in every figure; a searched loss's curves take its
    tuned method's style."""
    methods = list(dict.fromkeys([*analysis.methods, *(tuned_method(loss) for loss in analysis.searched_losses)]))
    colours = sns.color_palette(palette, n_colors=max(len(PALETTE_ORDER), len(methods)))
    order = [*PALETTE_ORDER, *range(len(PALETTE_ORDER), len(colours))]
    return {method: Style(tuple(colours[order[index]]), LINE_STYLES[index % len(LINE_STYLES)],
                          MARKERS[index % len(MARKERS)]) for index, method in enumerate(methods)}


def readable(draw):
    """Draw (and save) a figure with the report's text sizes, restored afterwards."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with matplotlib.rc_context(TEXT_SIZES):
            return draw(*args, **kwargs)
    return drawn


def _band(ax, x, low, high, style: Style, fill: float = 0.16) -> bool:
    """An interval band as a light fill with thin edges in the method's own line style, drawn only where both ends
    exist (an interval that is not valid at some n is missing there, not zero); False when there is none."""
    valid = np.isfinite(np.asarray(low, dtype=float)) & np.isfinite(np.asarray(high, dtype=float))
    if not valid.any():
        return False
    x, low, high = (np.asarray(values, dtype=float)[valid] for values in (x, low, high))
    ax.fill_between(x, low, high, color=style.colour, alpha=fill, linewidth=0, zorder=2)
    for edge in (low, high):
        ax.plot(x, edge, color=style.colour, linestyle=style.linestyle, linewidth=0.7, alpha=0.8, zorder=2)
    return True


def _staggered(index: int, count: int, points: int, marks: int = 8):
    """`markevery` for the index-th of `count` lines of `points` points: about `marks` markers each, every line's at
    other points, so lines that lie on one another still show each one's markers."""
    step = max(points // marks, 1)
    return (index * step // max(count, 1)) % step, step


def new_figure(ncols: int = 1, size=FIGURE_SIZE, **subplot_options):
    """A figure with one row of `ncols` axes, light grid lines drawn beneath the data."""
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(1, ncols, squeeze=False, **subplot_options)[0]
    for ax in axes:
        _grid_lines(ax)
    return figure, axes


def _grid_lines(ax) -> None:
    ax.grid(True, color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)


def small_multiples(panels: int, ncols: int = 2, panel_height: float = PANEL_HEIGHT, width: float = FIGURE_WIDTH,
                    extra_height: float = 0.8, **subplot_options):
    """A figure of `panels` small multiples, `ncols` to a row (`extra_height` inches for titles, legend and colour
    bar): the figure, the panels' axes, and the last row's spare axes (blank, free for the legend)."""
    ncols = max(1, min(ncols, panels))
    nrows = math.ceil(panels / ncols)
    figure = Figure(figsize=(width, panel_height * nrows + extra_height), layout="constrained")
    grid = figure.subplots(nrows, ncols, squeeze=False, **subplot_options)
    axes = list(grid.ravel())
    for ax in axes[:panels]:
        _grid_lines(ax)
    for index, ax in enumerate(axes[panels:], start=panels):
        ax.set_axis_off()
        if nrows > 1:  # the panel above a blank slot keeps its x tick labels, which sharex would hide
            grid[nrows - 2, index % ncols].xaxis.set_tick_params(labelbottom=True)
    return figure, axes[:panels], axes[panels:]


def _label_bottom(axes, label: str) -> None:
    """`label` as the x label of every panel with none below it (matplotlib's supxlabel would collide with a legend
    under the figure)."""
    places = [(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start) for ax in axes]
    for ax, (row, column) in zip(axes, places):
        if not any(other_column == column and other_row > row for other_row, other_column in places):
            ax.set_xlabel(label)


def _legend(figure: Figure, handles, labels, spare=(), ncols: int = 1) -> None:
    """A legend in the first blank panel, or under the whole figure where it cannot cover data."""
    if not handles:
        return
    if spare:
        spare[0].legend(handles, labels, loc="center", frameon=False, borderaxespad=0)
    else:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(ncols, len(handles)), frameon=False)


def _legend_below(figure: Figure, ax, ncols: int = 2) -> None:
    """The legend of `ax` under the whole figure, where it cannot cover data."""
    handles, labels = ax.get_legend_handles_labels()
    _legend(figure, handles, labels, ncols=ncols)


def plain_log_ticks(axis) -> None:
    """Log-scale ticks at 1, 2, 5 × 10^k written as plain numbers (20, 50, 100), not 2×10^1."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _focus_y(ax, values, pad_fraction: float = 0.15) -> None:
    """Y limits around `values` (the curves' means), so a wide few-seed band cannot flatten them; bands are clipped."""
    finite = np.asarray([v for v in values if not fmt.missing(v)], dtype=float)
    if finite.size:
        low, high = finite.min(), finite.max()
        pad = max((high - low) * pad_fraction, 0.005)
        ax.set_ylim(low - pad, high + pad)


def save_figure(figure: Figure, path: Path, dpi: int) -> Path:
    """Write the figure as PNG, its folder made if missing; return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def _draw_reference_lines(ax, analysis: StudyAnalysis, styles: dict, confidence_label: str, right_of: float) -> None:
    """Each untuned method's mean as a horizontal line in its own style, and its interval as an error bar of its own
    right of the curves (`right_of`), side by side: overlapping translucent bands would merge into one smear."""
    for index, row in enumerate(analysis.reference_bands.itertuples()):
        style = styles.get(row.method, GREY)
        interval = ("1 seed" if fmt.missing(row.low) else
                    f"± {confidence_label} CI, {fmt.plural(row.seeds, 'seed')}")
        ax.axhline(row.mean, color=style.colour, linestyle=style.linestyle, linewidth=1.4,
                   label=f"{method_name(row.method)} (mean {interval})")
        if not fmt.missing(row.low):
            ax.errorbar(right_of + 1.0 + 0.9 * index, row.mean, yerr=[[row.mean - row.low], [row.high - row.mean]],
                        fmt=style.marker, color=style.colour, capsize=4, markersize=5, elinewidth=1.6)


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
        return "The star marks the break-even, its bar the interval in trials."
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
        return "no valid band"
    return f"band for n ≤ {int(curve.loc[valid, 'n'].max())} only"


def _mark_break_even(ax, analysis: StudyAnalysis, loss: str, curve: pd.DataFrame, x: str, colour) -> None:
    """The break-even against Fixed AdaCos in a search's panel: a star with its interval where reached, else the words
    "not reached" and the interval in trials."""
    confidence = f"{analysis.confidence:.0%}"
    for even in _reference_break_even(analysis, loss).itertuples():
        valid = getattr(even, "valid_trials", None)
        interval = trials_interval(even.trials_low, even.trials_high, even.max_trials, valid)
        if not even.reached:
            ax.text(0.97, 0.05, f"break-even not reached\nwithin {fmt.plural(int(even.max_trials), 'trial')}\n"
                                f"{confidence} interval {interval}", transform=ax.transAxes, ha="right", va="bottom",
                    fontsize=9.5, gid="break-even not reached", zorder=5,
                    bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "#999999", "alpha": 0.9})
            continue
        point = curve[curve["n"] == even.trials].iloc[0]
        low, high = count_or_none(even.trials_low), count_or_none(even.trials_high)
        if x == "n" and low is not None:
            end = high if high is not None else (count_or_none(valid) or int(even.max_trials))
            ax.errorbar(point["n"], point["expected_test"], xerr=[[point["n"] - low], [max(end - point["n"], 0)]],
                        fmt="none", ecolor=colour, elinewidth=1.4, capsize=4, zorder=5)
        ax.plot(point[x], point["expected_test"], marker="*", markersize=16, color=colour, markeredgecolor="black",
                linestyle="none", zorder=6, gid="break-even", label="break-even, bar: its interval")
        right = even.trials > curve["n"].max() / 2  # the words go left of a star in the right half, to stay inside
        ax.annotate(f"break-even: {fmt.plural(int(even.trials), 'trial')}\n{confidence} interval {interval}",
                    xy=(point[x], point["expected_test"]), xytext=(-8 if right else 8, -8), textcoords="offset points",
                    ha="right" if right else "left", va="top", fontsize=9.5, zorder=6)


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
        _band(ax, curve[x], curve["low"], curve["high"], style, fill=0.18)
        if target is not None:
            ax.axhline(target, color=styles.get(REFERENCE_METHOD, GREY).colour, linestyle=":", linewidth=1.4,
                       zorder=3, label="target: Fixed AdaCos, one run")
        if search:
            _mark_break_even(ax, analysis, method, curve, x, style.colour)
        title = f"{loss_name(method)} tuned, n trials" if search else f"{method_name(method)}, best of n seeds"
        note = _valid_band_note(curve)
        ax.set_title(title + (f"\n({note})" if note else ""))
        shown += [*curve["expected_test"], *curve["low"].dropna(), *curve["high"].dropna()]
    if axes:
        _focus_y(axes[0], shown)
    objective = metric_name(analysis.objective)
    confidence = f"{analysis.confidence:.0%}"
    if x == "seconds":
        if (curves["seconds"] > 0).any():
            for ax in axes:
                ax.set_xscale("log")
                plain_log_ticks(ax.xaxis)
        conditions = measured_on.replace("; ", ";\n")  # the device, then what else loaded it
        figure.suptitle(f"Test {objective} of the val-selected run against device-seconds"
                        + (f"\nmeasured on {conditions}" if measured_on else ""))
        _label_bottom(axes, "device-seconds (log scale)")
    else:
        for ax in axes:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        figure.suptitle(f"Test {objective} of the run val selects among n")
        _label_bottom(axes, "n: trials, or seeds")
    figure.supylabel(f"expected test {objective}")
    _legend_with_band(figure, axes, spare, f"{confidence} studentised interval,\nonly where valid")
    return figure


def _unique_handles(axes) -> tuple[list, list]:
    """The legend entries of several panels, each label once."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return list(entries.values()), list(entries)


def _legend_with_band(figure: Figure, axes, spare, band: str) -> None:
    """The panels' legend entries, each once, and a grey swatch that stands for every panel's band."""
    handles, labels = _unique_handles(axes)
    handles.append(Patch(facecolor="#888888", alpha=0.3, edgecolor="#555555", linewidth=0.7))
    labels.append(band)
    _legend(figure, handles, labels, spare, ncols=2)


@readable
def figure_expected_best_val(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """The classic curve, for contrast: the expected best val score of n trials against the untuned methods'
    mean val; it includes the maximum of seed noise, so it overstates what tuning buys."""
    confidence = f"{analysis.confidence:.0%}"
    figure, (ax,) = new_figure(size=(FIGURE_WIDTH, 5.8))
    objective = metric_name(analysis.objective)
    searches = analysis.tuning_curves[analysis.tuning_curves["kind"] == "search"]
    for method, curve in searches.groupby("method", sort=False):
        ax.plot(curve["n"], curve["expected_val"], **styles.get(tuned_method(method), GREY).line(), markersize=3,
                linewidth=1.8, label=f"{loss_name(method)}: expected best val of n trials")
    last = float(searches["n"].max())
    _draw_reference_lines(ax, analysis, styles, confidence, right_of=last)
    _focus_y(ax, [*searches["expected_val"], *analysis.reference_bands["mean"]])
    ax.set_xticks([tick for tick in MaxNLocator(integer=True).tick_values(0, last) if 0 <= tick <= last])
    ax.set_xlabel(f"tuning trials n\n(right: the untuned methods' {confidence} CIs over seeds, side by side)")
    ax.set_ylabel(f"val {objective}")
    ax.set_title(f"Expected best val {objective}\n(includes the maximum of seed noise)")
    _legend_below(figure, ax, ncols=1)
    return save_figure(figure, path, dpi)


@readable
def figure_convergence(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """Val objective against iteration, one panel per method, with the convergence targets."""
    return save_figure(draw_convergence(analysis, styles), path, dpi)


def draw_convergence(analysis: StudyAnalysis, styles: dict) -> Figure:
    """Val objective against iteration, one panel per method: its mean over seeds with its band, the other methods'
    means in grey behind, and the convergence targets. Overlaid, several bands mix into one brown smear and lines
    that lie on one another hide; apart, each band is its own colour."""
    curves = analysis.curves
    methods = list(dict.fromkeys(curves["method"]))
    figure, axes, spare = small_multiples(len(methods), sharex=True, sharey=True)
    objective = metric_name(analysis.objective)
    for ax, method in zip(axes, methods):
        for other, context in curves.groupby("method", sort=False):
            if other != method:
                ax.plot(context["iteration"], context["mean"], **CONTEXT, label="the other methods' means")
        curve = curves[curves["method"] == method]
        style = styles.get(method, GREY)
        ax.plot(curve["iteration"], curve["mean"], **style.line(), markevery=max(len(curve) // 8, 1), markersize=4,
                linewidth=1.8, zorder=4, gid=f"curve:{method}")
        _band(ax, curve["iteration"], curve["low"], curve["high"], style, fill=0.22)
        for fraction, target in sorted(analysis.targets.items()):
            ax.axhline(target, color="#555555", linestyle=":", linewidth=1.1, zorder=3,
                       label="targets: " + ", ".join(f"{f:.0%} ({t:.4f})" for f, t in sorted(analysis.targets.items()))
                             + "\nof the best final val")
            ax.annotate(f"{fraction:.0%}", xy=(1.0, target), xycoords=("axes fraction", "data"), xytext=(-2, 1),
                        textcoords="offset points", ha="right", va="bottom", fontsize=8.5, color="#333333")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.set_title(method_name(method))
    if axes:
        _focus_y(axes[0], [*curves["mean"], *analysis.targets.values()], pad_fraction=0.05)
    figure.suptitle(f"Val {objective} during training, one panel per method")
    _label_bottom(axes, "iteration")
    figure.supylabel(f"val {objective}, mean over seeds")
    _legend_with_band(figure, axes, spare, f"{analysis.confidence:.0%} band over seeds")
    return figure


@readable
def figure_crossings(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """AdaCos − ArcFace mean val score against iteration, one panel per pair (AdaCos variant by row, ArcFace variant
    by column), so that pairs with the same gap still show each; where the lead settles for good is marked and said."""
    crossings = analysis.crossings
    if crossings.empty:
        return None
    arcface_methods = list(dict.fromkeys(crossings["arcface_method"]))
    pairs = list(crossings.sort_values("adacos_method", key=lambda column: column.map(
        {m: i for i, m in enumerate(dict.fromkeys(crossings["adacos_method"]))})).itertuples())
    figure, axes, spare = small_multiples(len(pairs), ncols=min(len(arcface_methods), 2), panel_height=2.6,
                                          sharex=True, sharey=True)
    means = analysis.curves.pivot(index="iteration", columns="method", values="mean")
    objective = metric_name(analysis.objective)
    for ax, pair in zip(axes, pairs):
        arcface = pair.arcface_method
        ax.axhline(0.0, color="black", linewidth=1.0)
        both = means[[pair.adacos_method, arcface]].dropna(how="all")
        gap = both[pair.adacos_method] - both[arcface]
        style = styles.get(pair.adacos_method, GREY)
        ax.plot(gap.index, gap.to_numpy(), **style.line(), markevery=max(len(gap) // 8, 1), linewidth=1.8,
                markersize=3.5, gid=f"gap:{pair.adacos_method}:{arcface}")
        # Where the sign settles for good: AdaCos's lasting overtake, or ArcFace's lasting lead.
        settles = pair.crossing_iteration if pd.notna(pair.crossing_iteration) else pair.arcface_ahead_from
        if pd.notna(settles) and settles > pair.first_iteration:
            leader = "AdaCos" if pd.notna(pair.crossing_iteration) else "ArcFace"
            ax.axvline(int(settles), color=style.colour, linestyle=":", linewidth=1.6,
                       label="where the lead settles for good")
            right = settles > (pair.first_iteration + pair.last_iteration) / 2
            ax.annotate(f"{leader} ahead\nfrom {fmt.iteration_number(settles)}", xy=(int(settles), 0.97),
                        xycoords=("data", "axes fraction"), xytext=(-4 if right else 4, 0), textcoords="offset points",
                        ha="right" if right else "left", va="top", fontsize=9, color="#222222")
        elif pd.notna(settles):  # the lead held from the first evaluation: nothing settles, say so
            leader = "AdaCos" if pd.notna(pair.crossing_iteration) else "ArcFace"
            ax.text(0.03, 0.97, f"{leader} ahead\nfrom the start", transform=ax.transAxes, ha="left", va="top",
                    fontsize=9, color="#222222")
        if pair.last_iteration >= ADACOS_PAPER_CROSSOVER_ITERATIONS:
            ax.axvline(ADACOS_PAPER_CROSSOVER_ITERATIONS, color="#888888", linestyle="--", linewidth=1.0,
                       label=f"the paper's crossing, ~{ADACOS_PAPER_CROSSOVER_ITERATIONS:,}")
        # Linear within ±0.01, logarithmic beyond: the early gaps (tenths) and the late ones (thousandths) both show.
        ax.set_yscale("symlog", linthresh=SYMLOG_LINEAR)
        ax.yaxis.set_major_locator(FixedLocator(SYMLOG_TICKS))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: "0" if value == 0 else f"{value:+g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.set_title(f"{method_name(pair.adacos_method)} − {method_name(arcface)}", fontsize=10.5)
    figure.suptitle(f"AdaCos − ArcFace, val {objective} (mean over seeds)\nabove 0: AdaCos ahead; symlog scale")
    _label_bottom(axes, "iteration")
    handles, labels = _unique_handles(axes)
    _legend(figure, handles, labels, spare, ncols=1)
    return save_figure(figure, path, dpi)


@readable
def figure_angles(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """Median target angle and mean non-target cosine against iteration, one line per method, each method's markers
    at other iterations, so lines that lie on one another still show each."""
    figure, axes, _ = small_multiples(2, ncols=1, panel_height=2.7, sharex=True)
    panels = [("theta_med_deg", "median target\nangle θ (degrees)", "Median angle to the own class"),
              ("cos_nontarget_mean", "mean non-target\ncosine", "Mean cosine to other classes")]
    methods = list(dict.fromkeys(analysis.angles["method"]))
    for ax, (column, label, title) in zip(axes, panels):
        for index, method in enumerate(methods):
            curve = analysis.angles[analysis.angles["method"] == method]
            curve = curve[np.isfinite(curve[column].astype(float))]
            if len(curve):
                ax.plot(curve["iteration"], curve[column], **styles.get(method, GREY).line(),
                        markevery=_staggered(index, len(methods), len(curve)), markersize=5, linewidth=1.8,
                        label=method_name(method))
        ax.set_ylabel(label)
        ax.set_title(title)
    axes[-1].set_xlabel("iteration")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_below(figure, axes[0], ncols=3)
    return save_figure(figure, path, dpi)


@readable
def figure_dynamic_scale(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """Dynamic AdaCos's scale s against iteration with the fixed s_f for reference; None without such runs."""
    curve = analysis.angles[analysis.angles["method"] == "dynamic_adacos"]
    curve = curve[np.isfinite(curve["s"].astype(float))]
    if curve.empty:
        return None
    figure, (ax,) = new_figure(size=(FIGURE_WIDTH, 3.6))
    ax.plot(curve["iteration"], curve["s"], color=styles.get("dynamic_adacos", GREY).colour, linewidth=1.8,
            marker="o", markersize=3, label="Dynamic AdaCos s (mean over seeds)")
    if analysis.s_f is not None:
        ax.axhline(analysis.s_f, color=styles.get("fixed_adacos", GREY).colour, linestyle="--", linewidth=1.4,
                   label=f"s_f = √2·ln(C−1) = {analysis.s_f:.3f} (Fixed AdaCos, C = {analysis.num_classes})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("scale s")
    ax.set_title("Dynamic AdaCos's scale during training")
    _legend_below(figure, ax, ncols=1)
    return save_figure(figure, path, dpi)


def robust_colour_range(values: pd.Series, whisker: float = 1.5) -> tuple[float, float]:
    """The colour scale of a scatter: from the lowest to the highest value inside Tukey's fences (`whisker`
    interquartile ranges beyond the quartiles), so one outlier cannot give every other point the same colour."""
    finite = values[np.isfinite(values)]
    if finite.empty:
        return 0.0, 1.0
    q1, q3 = np.percentile(finite, [25, 75])
    inside = finite[finite.between(q1 - whisker * (q3 - q1), q3 + whisker * (q3 - q1))]
    low, high = float(inside.min()), float(inside.max())
    return (low, high) if high > low else (low - 0.01, high + 0.01)  # every trial scored alike


@readable
def figure_landscape(analysis: StudyAnalysis, params: StudyParams, path: Path, dpi: int) -> Path | None:
    """Each searched loss's trials in the (s, m) plane, coloured by val score, with each split's best point and s_f.
    Class splits search the same (s, m) points: each split has its own marker, set a little apart in s so that no
    split's trial hides under another's."""
    losses = [loss for loss in analysis.searched_losses if (analysis.landscape["loss"] == loss).any()]
    if not losses:
        return None
    figure, axes, spare = small_multiples(len(losses), panel_height=3.4, extra_height=2.8, sharey=False)
    landscape = analysis.landscape
    splits = list(dict.fromkeys(landscape["split"])) if "split" in landscape.columns else [None]
    complete = landscape[landscape["state"] == "COMPLETE"]
    low, high = robust_colour_range(complete["value"].astype(float))
    scatter = None
    for ax, loss in zip(axes, losses):
        searched = landscape[landscape["loss"] == loss]
        for index, split in enumerate(splits):
            trials = searched if split is None else searched[searched["split"] == split]
            named = f", split {split}" if len(splits) > 1 else ""
            marker = SPLIT_MARKERS[index % len(SPLIT_MARKERS)]
            # Splits side by side in s (a log axis: a factor), centred on the trial's own s.
            scale = trials["s"].astype(float) * 1.07 ** (index - (len(splits) - 1) / 2)
            margins = trials["m"].astype(float).fillna(0.0)  # NormFace has no margin: its trials lie on m = 0
            done = trials["state"] == "COMPLETE"
            values = trials["value"].astype(float)
            inside = done & values.between(low, high)
            scatter = ax.scatter(scale[inside], margins[inside], c=values[inside], cmap="viridis", vmin=low,
                                 vmax=high, s=40, marker=marker, edgecolors="white", linewidths=0.5,
                                 label=f"completed trial{named}")
            # Outliers keep the colour of the end they pass and a marker pointing the way they lie.
            for outside, pointer, word, end in ((done & (values < low), "v", "below", low),
                                                (done & (values > high), "^", "above", high)):
                if outside.any():
                    ax.scatter(scale[outside], margins[outside], c=[end] * int(outside.sum()), cmap="viridis",
                               vmin=low, vmax=high, marker=pointer, s=65, edgecolors="black", linewidths=0.8,
                               label=f"{fmt.plural(int(outside.sum()), 'trial')} {word} the colour range{named} "
                                     f"({', '.join(f'{v:.3g}' for v in sorted(values[outside])[:4])}"
                                     + (", …)" if outside.sum() > 4 else ")"))
            failed, pruned = trials["state"] == "FAIL", trials["state"] == "PRUNED"
            if failed.any():
                ax.scatter(scale[failed], margins[failed], marker="x", s=35, color="#888888",
                           label="failed (diverged) trial")
            if pruned.any():
                ax.scatter(scale[pruned], margins[pruned], marker="o", s=35, facecolors="none",
                           edgecolors="#888888", label="pruned trial")
            best = trials[trials["best"].astype(bool)]
            if len(best):
                where = f"s = {best['s'].iloc[0]:.3g}" + (
                    "" if loss == "normface" else f", m = {margins[best.index[0]]:.3g}")
                ax.scatter(scale[best.index], margins[best.index], marker="*", s=240, color="red", edgecolors="black",
                           linewidths=0.8, label=f"best trial{named} ({where})", zorder=3, gid=f"best:{loss}:{split}")
                if len(splits) > 1:
                    ax.annotate(f"{split}", xy=(scale[best.index[0]], margins[best.index[0]]), xytext=(7, 5),
                                textcoords="offset points", fontsize=9, fontweight="bold")
        for name, run in params.runs.fixed.items():
            fixed = run.hyperparameters()
            if run.loss == loss and name in params.runs.methods and "s" in fixed:
                ax.scatter([fixed["s"]], [fixed.get("m", 0.0)], marker="P", s=100, color="black",
                           edgecolors="black", label=f"{method_name(name)} (s = {fixed['s']:g}, "
                                                     f"m = {fixed.get('m', 0.0):.3g})", zorder=3)
        if analysis.s_f is not None:
            ax.axvline(analysis.s_f, color="#444444", linestyle="--", linewidth=1.2,
                       label=f"AdaCos s_f = {analysis.s_f:.3f}")
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel("scale s (log scale)")
        ax.set_ylabel({"normface": "margin m: none for NormFace", "sphereface": "margin m (multiplies the angle)"}.get(
            loss, "margin m (radians)"))
        ax.set_title(f"{loss_name(loss)} trials")
    if scatter is not None:
        values = complete["value"].astype(float)
        extend = {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[
            (bool((values < low).any()), bool((values > high).any()))]
        outliers = " (outliers ▼ ▲)" if extend != "neither" else ""
        figure.colorbar(scatter, ax=axes, extend=extend, location="bottom", shrink=0.8, aspect=30,
                        label=f"val {metric_name(analysis.objective)}, central range of the trials{outliers}")
    handles, labels = _unique_handles(axes)
    _legend(figure, handles, labels, spare, ncols=1)
    return save_figure(figure, path, dpi)


@readable
def figure_final_test(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """The test objective of every seed per method, with the mean ± std over seeds."""
    metric = f"{TEST_PREFIX}{analysis.objective}"
    runs_per_seed = analysis.run_scores
    if metric not in runs_per_seed.columns:
        return None
    figure, (ax,) = new_figure(size=(FIGURE_WIDTH, 4.4))
    tick_labels = []
    for position, method in enumerate(analysis.methods):
        values = runs_per_seed.loc[runs_per_seed["method"] == method, metric].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        offsets = np.linspace(-0.14, 0.14, finite.size) if finite.size > 1 else np.zeros(finite.size)
        ax.scatter(position - 0.12 + offsets, finite, color=styles.get(method, GREY).colour,
                   marker=styles.get(method, GREY).marker, s=26, alpha=0.85,
                   edgecolors="black", linewidths=0.4)
        if finite.size:
            spread = finite.std(ddof=1) if finite.size > 1 else 0.0
            ax.errorbar(position + 0.2, finite.mean(), yerr=spread, fmt="o", color="black", capsize=5,
                        markersize=6, label="mean ± std over seeds" if position == 0 else None)
        label = method_name(method)
        if values.size > finite.size:
            label += f"\n({values.size - finite.size} of {values.size} diverged)"
        chance = int(analysis.costs.loc[analysis.costs["method"] == method, "at_chance"].sum())
        if chance:
            label += f"\n({chance} of {values.size} at chance)"
        tick_labels.append(label)
    ax.scatter([], [], color="#999999", s=26, edgecolors="black", linewidths=0.4, label="one seed (method's colour)")
    ax.set_xticks(range(len(analysis.methods)), tick_labels, rotation=25, ha="right")
    ax.set_ylabel(f"test {metric_name(metric)}")
    ax.set_title(f"Test {metric_name(metric)} per method")
    _legend_below(figure, ax)
    return save_figure(figure, path, dpi)
