"""The report's figures, drawn with matplotlib's object-oriented API (`Figure`, no pyplot): no display and no global
backend are involved."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from study.analysis import REFERENCE_METHOD, TEST_PREFIX, StudyAnalysis
from study.config import StudyParams
from study.published import ADACOS_PAPER_CROSSOVER_ITERATIONS
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name, trials_interval
from study.results import tuned_method


FIGURE_SIZE = (8.0, 5.6)


SYMLOG_LINEAR = 0.01
SYMLOG_TICKS = sorted({sign * value for sign in (-1, 1) for value in (0.005, 0.01, 0.03, 0.1, 0.3, 1.0)} | {0.0})


# Line styles and markers, one per method beside its colour, so curves that lie on one another stay tellable apart
# (and the figures read in grey print or for colour-blind readers).
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 1)), (0, (3, 1, 1, 1)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<")
# Seaborn's colour-blind palette reordered so that its two oranges only meet in studies of seven methods or more, and ArcFace at its
# defaults (fourth) is grey beside tuned ArcFace (fifth).
PALETTE_ORDER = (0, 1, 2, 7, 4, 5, 3, 9, 6, 8)


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


def _band(ax, x, low, high, style: Style, fill: float = 0.10) -> None:
    """An interval band as a light fill with edges in the method's own line style: where several bands overlap,
    their edges still say which is which."""
    ax.fill_between(x, low, high, color=style.colour, alpha=fill, linewidth=0)
    for edge in (low, high):
        ax.plot(x, edge, color=style.colour, linestyle=style.linestyle, linewidth=0.7, alpha=0.8)


def new_figure(ncols: int = 1, size=FIGURE_SIZE, **subplot_options):
    """A figure with one row of `ncols` axes, light grid lines drawn beneath the data."""
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots(1, ncols, squeeze=False, **subplot_options)[0]
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.8)
        ax.set_axisbelow(True)
    return figure, axes


def _legend_below(figure: Figure, ax, ncols: int = 2) -> None:
    """The legend of `ax` under the whole figure, where it cannot cover data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        figure.legend(handles, labels, loc="outside lower center", ncols=min(ncols, len(handles)),
                      fontsize="small", frameon=False)


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
        interval = f"mean ± {confidence_label} CI, {fmt.plural(row.seeds, 'seed')}" if not fmt.missing(row.low) else "1 seed"
        ax.axhline(row.mean, color=style.colour, linestyle=style.linestyle, linewidth=1.4,
                   label=f"{method_name(row.method)} ({interval})")
        if not fmt.missing(row.low):
            ax.errorbar(right_of + 1.0 + 0.9 * index, row.mean, yerr=[[row.mean - row.low], [row.high - row.mean]],
                        fmt=style.marker, color=style.colour, capsize=4, markersize=5, elinewidth=1.6)


def figure_tuning(analysis: StudyAnalysis, styles: dict, x: str, path: Path, dpi: int) -> Path:
    """What n tuning trials buy on test: the expected test score of the trial val selects among n (x='n') or
    against device-seconds (x='seconds'), beside the untuned methods' best-of-n-seeds controls."""
    confidence = f"{analysis.confidence:.0%}"
    figure, (ax,) = new_figure()
    objective = metric_name(analysis.objective)
    curves = analysis.tuning_curves
    shown = []
    for (method, kind), curve in curves.groupby(["method", "kind"], sort=False):
        if kind == "control" and method not in ("fixed_adacos", "dynamic_adacos"):
            continue
        search = kind == "search"
        style = styles.get(tuned_method(method) if search else method, GREY)
        colour = style.colour
        label = (f"{loss_name(method)}: test score of the trial val selects among n" if search
                 else f"{method_name(method)}: best of n seeds by val (no tuning)")
        ax.plot(curve[x], curve["expected_test"], **style.line(), markersize=3.5, linewidth=2.0 if search else 1.4,
                label=label)
        if curve["low"].notna().any():
            _band(ax, curve[x], curve["low"], curve["high"], style, fill=0.15 if search else 0.06)
        shown += [*curve["expected_test"], *curve["low"].dropna(), *curve["high"].dropna()]
        if search:
            for even in analysis.break_even[(analysis.break_even["loss"] == method)
                                            & (analysis.break_even["reference"] == REFERENCE_METHOD)].itertuples():
                if even.reached:
                    point = curve[curve["n"] == even.trials].iloc[0]
                    low = even.trials_low if pd.notna(even.trials_low) else np.nan
                    high = even.trials_high if pd.notna(even.trials_high) else curve["n"].max()
                    text = f"break-even: {fmt.plural(int(even.trials), 'trial')}"
                    if x == "n":
                        ax.errorbar(point["n"], point["expected_test"],
                                    xerr=[[point["n"] - low], [high - point["n"]]] if np.isfinite(low) else None,
                                    fmt="none", ecolor=colour, elinewidth=1.2, capsize=4)
                        text += f" ({confidence} interval {trials_interval(even.trials_low, even.trials_high, even.max_trials)})"
                    ax.plot(point[x], point["expected_test"], marker="*", markersize=15, color=colour,
                            markeredgecolor="black", linestyle="none", label=f"{loss_name(method)} {text}")
    target = curves[(curves["method"] == REFERENCE_METHOD) & (curves["kind"] == "control") & (curves["n"] == 1)]
    if len(target):
        ax.axhline(float(target["expected_test"].iloc[0]), color=styles.get(REFERENCE_METHOD, GREY).colour,
                   linestyle=":", linewidth=1.3, label="Fixed AdaCos, mean of one run: the break-even target")
    _focus_y(ax, shown)
    if x == "seconds":
        if (curves["seconds"] > 0).any():
            ax.set_xscale("log")
            plain_log_ticks(ax.xaxis)
        ax.set_xlabel("device-seconds spent (log scale): trials, or seeds for the controls")
        ax.set_title(f"Test {objective} of the val-selected run against device-seconds")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("runs n: tuning trials, or seeds for the controls")
        ax.set_title(f"Test {objective} of the run val selects among n ({confidence} bootstrap bands)")
    ax.set_ylabel(f"expected test {objective}")
    _legend_below(figure, ax, ncols=1)
    return save_figure(figure, path, dpi)


def figure_expected_best_val(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """The classic curve, for contrast: the expected best val score of n trials against the untuned methods'
    mean val; it includes the maximum of seed noise, so it overstates what tuning buys."""
    confidence = f"{analysis.confidence:.0%}"
    figure, (ax,) = new_figure()
    objective = metric_name(analysis.objective)
    searches = analysis.tuning_curves[analysis.tuning_curves["kind"] == "search"]
    for method, curve in searches.groupby("method", sort=False):
        ax.plot(curve["n"], curve["expected_val"], **styles.get(tuned_method(method), GREY).line(), markersize=3,
                linewidth=1.8, label=f"{loss_name(method)}: expected best val of n trials")
    last = float(searches["n"].max())
    _draw_reference_lines(ax, analysis, styles, confidence, right_of=last)
    _focus_y(ax, [*searches["expected_val"], *analysis.reference_bands["mean"]])
    ax.set_xticks([tick for tick in MaxNLocator(integer=True).tick_values(0, last) if 0 <= tick <= last])
    ax.set_xlabel(f"tuning trials n (right: the untuned methods' {confidence} CIs over seeds, side by side)")
    ax.set_ylabel(f"val {objective}")
    ax.set_title(f"Expected best val {objective} (includes the maximum of seed noise)")
    _legend_below(figure, ax)
    return save_figure(figure, path, dpi)


def figure_convergence(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """Val objective against iteration, mean over seeds with its band, and the convergence targets."""
    figure, (ax,) = new_figure()
    objective = metric_name(analysis.objective)
    for method, curve in analysis.curves.groupby("method", sort=False):
        style = styles.get(method, GREY)
        ax.plot(curve["iteration"], curve["mean"], **style.line(), markevery=max(len(curve) // 10, 1), markersize=4,
                linewidth=1.8, label=method_name(method))
        _band(ax, curve["iteration"], curve["low"], curve["high"], style)
    for index, (fraction, target) in enumerate(sorted(analysis.targets.items())):
        ax.axhline(target, color="#555555", linestyle=":", linewidth=1.2)
        # The lowest target's label goes under its line, the others above theirs, so close targets stay legible.
        ax.annotate(f"{fraction:.0%} of best final ({target:.4f})", xy=(1.0, target),
                    xycoords=("axes fraction", "data"), xytext=(-4, -3 if index == 0 else 3),
                    textcoords="offset points", ha="right", va="top" if index == 0 else "bottom",
                    fontsize="small", color="#333333")
    _focus_y(ax, [*analysis.curves["mean"], *analysis.targets.values()], pad_fraction=0.05)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"val {objective} (mean over seeds)")
    ax.set_title(f"Val {objective} during training ({analysis.confidence:.0%} band over seeds)")
    _legend_below(figure, ax)
    return save_figure(figure, path, dpi)


def figure_crossings(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """AdaCos − ArcFace mean val score against iteration, one panel per ArcFace variant, one line per AdaCos variant."""
    crossings = analysis.crossings
    if crossings.empty:
        return None
    arcface_methods = list(dict.fromkeys(crossings["arcface_method"]))
    figure, axes = new_figure(ncols=len(arcface_methods), size=(5.8 * len(arcface_methods), 4.4), sharey=True)
    means = analysis.curves.pivot(index="iteration", columns="method", values="mean")
    objective = metric_name(analysis.objective)
    for ax, arcface in zip(axes, arcface_methods):
        ax.axhline(0.0, color="black", linewidth=1.0)
        for pair in crossings[crossings["arcface_method"] == arcface].itertuples():
            both = means[[pair.adacos_method, arcface]].dropna(how="all")
            gap = both[pair.adacos_method] - both[arcface]
            style = styles.get(pair.adacos_method, GREY)
            colour = style.colour
            ax.plot(gap.index, gap.to_numpy(), **style.line(), linewidth=1.8, markersize=2.5,
                    label=f"{method_name(pair.adacos_method)} − {method_name(arcface)}")
            # Where the sign settles for good: AdaCos's lasting overtake, or ArcFace's lasting lead.
            settles = pair.crossing_iteration if pd.notna(pair.crossing_iteration) else pair.arcface_ahead_from
            if pd.notna(settles) and settles > pair.first_iteration:
                leader, trailer = ((pair.adacos_method, arcface) if pd.notna(pair.crossing_iteration)
                                   else (arcface, pair.adacos_method))
                ax.axvline(int(settles), color=colour, linestyle=":", linewidth=1.4,
                           label=f"{method_name(leader)} ahead of {method_name(trailer)} for good from "
                                 f"{fmt.iteration_number(settles)}")
        if crossings.loc[crossings["arcface_method"] == arcface, "last_iteration"].max() >= \
                ADACOS_PAPER_CROSSOVER_ITERATIONS:
            ax.axvline(ADACOS_PAPER_CROSSOVER_ITERATIONS, color="#888888", linestyle="--", linewidth=1.0,
                       label=f"the paper's crossing, ~{ADACOS_PAPER_CROSSOVER_ITERATIONS:,}")
        # Linear within ±0.01, logarithmic beyond: the early gaps (tenths) and the late ones (thousandths) both show.
        ax.set_yscale("symlog", linthresh=SYMLOG_LINEAR)
        ax.yaxis.set_major_locator(FixedLocator(SYMLOG_TICKS))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: "0" if value == 0 else f"{value:+g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("iteration")
        ax.set_ylabel(f"AdaCos − ArcFace, val {objective}\n(mean over seeds; symlog scale)")
        ax.set_title(f"Above 0: AdaCos ahead of {method_name(arcface)}", fontsize="medium")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small", frameon=False, ncol=1)
    return save_figure(figure, path, dpi)


def figure_angles(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """Median target angle and mean non-target cosine against iteration, one line per method."""
    figure, axes = new_figure(ncols=2, size=(11.0, 4.4), sharex=True)
    panels = [("theta_med_deg", "median target angle θ (degrees)", "Median angle to the own class"),
              ("cos_nontarget_mean", "mean non-target cosine", "Mean cosine to other classes")]
    for ax, (column, label, title) in zip(axes, panels):
        for method, curve in analysis.angles.groupby("method", sort=False):
            curve = curve[np.isfinite(curve[column].astype(float))]
            if len(curve):
                ax.plot(curve["iteration"], curve[column], **styles.get(method, GREY).line(),
                        markevery=max(len(curve) // 10, 1), markersize=4, linewidth=1.8,
                        label=method_name(method))
        ax.set_xlabel("iteration")
        ax.set_ylabel(label)
        ax.set_title(title)
    _legend_below(figure, axes[0], ncols=6)
    return save_figure(figure, path, dpi)


def figure_dynamic_scale(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """Dynamic AdaCos's scale s against iteration with the fixed s_f for reference; None without such runs."""
    curve = analysis.angles[analysis.angles["method"] == "dynamic_adacos"]
    curve = curve[np.isfinite(curve["s"].astype(float))]
    if curve.empty:
        return None
    figure, (ax,) = new_figure(size=(8.0, 4.2))
    ax.plot(curve["iteration"], curve["s"], color=styles.get("dynamic_adacos", GREY).colour, linewidth=1.8,
            marker="o", markersize=3, label="Dynamic AdaCos s (mean over seeds)")
    if analysis.s_f is not None:
        ax.axhline(analysis.s_f, color=styles.get("fixed_adacos", GREY).colour, linestyle="--", linewidth=1.4,
                   label=f"s_f = √2·ln(C−1) = {analysis.s_f:.3f} (Fixed AdaCos, C = {analysis.num_classes})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("scale s")
    ax.set_title("Dynamic AdaCos's scale during training")
    _legend_below(figure, ax)
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


def figure_landscape(analysis: StudyAnalysis, params: StudyParams, path: Path, dpi: int) -> Path | None:
    """Each searched loss's trials in the (s, m) plane, coloured by val score, with the best point and s_f."""
    losses = [loss for loss in analysis.searched_losses if (analysis.landscape["loss"] == loss).any()]
    if not losses:
        return None
    figure, axes = new_figure(ncols=len(losses), size=(5.2 * len(losses) + 1.6, 4.4), sharey=False)
    complete = analysis.landscape[analysis.landscape["state"] == "COMPLETE"]
    low, high = robust_colour_range(complete["value"].astype(float))
    scatter = None
    for ax, loss in zip(axes, losses):
        trials = analysis.landscape[analysis.landscape["loss"] == loss]
        margins = trials["m"].astype(float).fillna(0.0)  # NormFace has no margin: its trials lie on m = 0
        done = trials["state"] == "COMPLETE"
        values = trials["value"].astype(float)
        inside = done & values.between(low, high)
        scatter = ax.scatter(trials.loc[inside, "s"], margins[inside], c=values[inside], cmap="viridis",
                             vmin=low, vmax=high, s=45, edgecolors="white", linewidths=0.5, label="completed trial")
        # Outliers keep the colour of the end they pass and a marker pointing the way they lie.
        for outside, marker, word, end in ((done & (values < low), "v", "below", low),
                                           (done & (values > high), "^", "above", high)):
            if outside.any():
                ax.scatter(trials.loc[outside, "s"], margins[outside], c=[end] * int(outside.sum()), cmap="viridis",
                           vmin=low, vmax=high, marker=marker, s=70, edgecolors="black", linewidths=0.8,
                           label=f"{fmt.plural(int(outside.sum()), 'trial')} {word} the colour range "
                                 f"({', '.join(f'{v:.3g}' for v in sorted(values[outside])[:5])}"
                                 + (", …)" if outside.sum() > 5 else ")"))
        failed, pruned = trials["state"] == "FAIL", trials["state"] == "PRUNED"
        if failed.any():
            ax.scatter(trials.loc[failed, "s"], margins[failed], marker="x", s=35, color="#888888",
                       label="failed (diverged) trial")
        if pruned.any():
            ax.scatter(trials.loc[pruned, "s"], margins[pruned], marker="o", s=35, facecolors="none",
                       edgecolors="#888888", label="pruned trial")
        best = trials[trials["best"]]
        if len(best):
            where = f"s = {best['s'].iloc[0]:.3g}" + (
                "" if loss == "normface" else f", m = {margins[best.index[0]]:.3g}")
            ax.scatter(best["s"], margins[best.index], marker="*", s=260, color="red", edgecolors="black",
                       linewidths=0.8, label=f"best trial ({where})", zorder=3)
        for name, run in params.runs.fixed.items():
            fixed = run.hyperparameters()
            if run.loss == loss and name in params.runs.methods and "s" in fixed:
                ax.scatter([fixed["s"]], [fixed.get("m", 0.0)], marker="P", s=110, color="black",
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
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small", frameon=False, ncol=2)
    if scatter is not None:
        values = complete["value"].astype(float)
        extend = {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[
            (bool((values < low).any()), bool((values > high).any()))]
        figure.colorbar(scatter, ax=list(axes), extend=extend, label=f"val {metric_name(analysis.objective)} "
                        "(central range of the trials; outliers marked ▼ ▲)")
    return save_figure(figure, path, dpi)


def figure_final_test(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """The test objective of every seed per method, with the mean ± std over seeds."""
    metric = f"{TEST_PREFIX}{analysis.objective}"
    runs_per_seed = analysis.run_scores
    if metric not in runs_per_seed.columns:
        return None
    figure, (ax,) = new_figure(size=(max(6.0, 1.4 * len(analysis.methods) + 2.0), 4.6))
    tick_labels = []
    for position, method in enumerate(analysis.methods):
        values = runs_per_seed.loc[runs_per_seed["method"] == method, metric].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        offsets = np.linspace(-0.12, 0.12, finite.size) if finite.size > 1 else np.zeros(finite.size)
        ax.scatter(position - 0.1 + offsets, finite, color=styles.get(method, GREY).colour,
                   marker=styles.get(method, GREY).marker, s=28, alpha=0.85,
                   edgecolors="black", linewidths=0.4)
        if finite.size:
            spread = finite.std(ddof=1) if finite.size > 1 else 0.0
            ax.errorbar(position + 0.18, finite.mean(), yerr=spread, fmt="o", color="black", capsize=5,
                        markersize=6, label="mean ± std over seeds" if position == 0 else None)
        label = method_name(method)
        if values.size > finite.size:
            label += f"\n({values.size - finite.size} of {values.size} diverged)"
        chance = int(analysis.costs.loc[analysis.costs["method"] == method, "at_chance"].sum())
        if chance:
            label += f"\n({chance} of {values.size} at chance)"
        tick_labels.append(label)
    ax.scatter([], [], color="#999999", s=28, edgecolors="black", linewidths=0.4, label="one seed (method's colour)")
    ax.set_xticks(range(len(analysis.methods)), tick_labels, rotation=20, ha="right")
    ax.set_xlabel("method")
    ax.set_ylabel(f"test {metric_name(metric)}")
    ax.set_title(f"Test {metric_name(metric)} per method")
    _legend_below(figure, ax)
    return save_figure(figure, path, dpi)
