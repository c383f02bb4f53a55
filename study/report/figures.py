"""The report's figures of training and of the final runs: val score against iteration, AdaCos − ArcFace, the angles,
Dynamic AdaCos's scale, the searched (s, m) plane and the test score per method. The tuning-curve figures are in
study.report.tuning_figures, what every figure shares in study.report.plotting and each method's colour, line style
and marker in study.report.palette.

Where curves could lie on one another they get panels of their own (small multiples, the other curves in grey behind
for comparison) or markers staggered along the line, Fixed AdaCos drawn last, so that no method hides another. Bands
are the analysis's own intervals, drawn only where they exist; seaborn's relplot would compute intervals of its own
from raw rows, so the panels are laid out here. Words a panel needs (where a lead settles, the targets) go in its
title, the legend or the margin, never over a curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

from study.analysis import TEST_PREFIX, StudyAnalysis
from study.config import StudyParams
from study.published import ADACOS_PAPER_CROSSOVER_ITERATIONS
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name
from study.report.palette import CONTEXT, GREY, drawing_order
from study.report.plotting import (FIGURE_WIDTH, band, focus_y, label_bottom, legend, legend_below, legend_with_band,
                                   new_figure, plain_log_ticks, readable, save_figure, small_multiples,
                                   staggered_markers, unique_handles)

SYMLOG_LINEAR = 0.01
SYMLOG_TICKS = sorted({sign * value for sign in (-1, 1) for value in (0.005, 0.01, 0.03, 0.1, 0.3, 1.0)} | {0.0})
# One marker per class split in the landscape (▼ ▲ mark the colour scale's outliers there).
SPLIT_MARKERS = ("o", "s", "D", "h", "p", "8")


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
        band(ax, curve["iteration"], curve["low"], curve["high"], style, fill=0.22)
        targets = sorted(analysis.targets.items(), key=lambda item: item[1])
        for rank, (fraction, target) in enumerate(targets):
            ax.axhline(target, color="#555555", linestyle=":", linewidth=1.1, zorder=3,
                       label="targets: " + ", ".join(f"{f:.0%} ({t:.4f})" for f, t in sorted(analysis.targets.items()))
                             + "\nof the best final val")
            # In the margin right of the panel, where no curve runs (the curves meet the targets at the right end);
            # the lowest hangs below its line and the highest stands above it, so that close targets stay apart.
            place = {0: "top", len(targets) - 1: "bottom"}.get(rank, "center") if len(targets) > 1 else "center"
            ax.annotate(f"{fraction:.0%}", xy=(1.0, target), xycoords=("axes fraction", "data"), xytext=(2, 0),
                        textcoords="offset points", ha="left", va=place, fontsize=9, color="#333333",
                        annotation_clip=False, gid=f"target:{fraction:g}")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.set_title(method_name(method))
    if axes:
        focus_y(axes[0], [*curves["mean"], *analysis.targets.values()], pad_fraction=0.05)
    figure.suptitle(f"Val {objective} during training, one panel per method")
    label_bottom(axes, "iteration")
    figure.supylabel(f"val {objective}, mean over seeds")
    legend_with_band(figure, axes, spare, f"{analysis.confidence:.0%} band over seeds")
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
        # Where the sign settles for good: AdaCos's lasting overtake, or ArcFace's lasting lead; said in the title.
        settles = pair.crossing_iteration if pd.notna(pair.crossing_iteration) else pair.arcface_ahead_from
        leader = "AdaCos" if pd.notna(pair.crossing_iteration) else "ArcFace"
        lead = ""
        if pd.notna(settles) and settles > pair.first_iteration:
            ax.axvline(int(settles), color=style.colour, linestyle=":", linewidth=1.6,
                       label="where the lead settles for good")
            lead = f"\n{leader} ahead from {fmt.iteration_number(settles)}"
        elif pd.notna(settles):  # the lead held from the first evaluation: nothing settles, say so
            lead = f"\n{leader} ahead throughout"
        if pair.last_iteration >= ADACOS_PAPER_CROSSOVER_ITERATIONS:
            ax.axvline(ADACOS_PAPER_CROSSOVER_ITERATIONS, color="#888888", linestyle="--", linewidth=1.0,
                       label=f"the paper's crossing, ~{ADACOS_PAPER_CROSSOVER_ITERATIONS:,}")
        # Linear within ±0.01, logarithmic beyond: the early gaps (tenths) and the late ones (thousandths) both show.
        ax.set_yscale("symlog", linthresh=SYMLOG_LINEAR)
        ax.yaxis.set_major_locator(FixedLocator(SYMLOG_TICKS))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: "0" if value == 0 else f"{value:+g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.set_title(f"{method_name(pair.adacos_method)} −\n{method_name(arcface)}{lead}")
    figure.suptitle(f"AdaCos − ArcFace, val {objective}\n(mean over seeds; above 0: AdaCos ahead;\nsymlog scale)")
    label_bottom(axes, "iteration")
    handles, labels = unique_handles(axes)
    legend(figure, handles, labels, spare, ncols=1)
    return save_figure(figure, path, dpi)


@readable
def figure_angles(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path:
    """Median target angle and mean non-target cosine against iteration, one line per method, each method's markers
    at other iterations, so lines that lie on one another still show each."""
    figure, axes, _ = small_multiples(2, ncols=1, panel_height=2.7, sharex=True)
    panels = [("theta_med_deg", "median target\nangle θ (degrees)", "Median angle to the own class"),
              ("cos_nontarget_mean", "mean non-target\ncosine", "Mean cosine to other classes")]
    methods = drawing_order(analysis.angles["method"])  # Fixed AdaCos last, on top of the rest
    for ax, (column, label, title) in zip(axes, panels):
        for index, method in enumerate(methods):
            curve = analysis.angles[analysis.angles["method"] == method]
            curve = curve[np.isfinite(curve[column].astype(float))]
            if len(curve):
                # Nested: each line narrower than the ones drawn before it, their markers hollow and larger, Fixed
                # AdaCos last and narrowest on top, so that curves lying on one another each still show around it.
                below = len(methods) - 1 - index  # lines drawn after this one
                ax.plot(curve["iteration"], curve[column], **styles.get(method, GREY).line(),
                        markevery=staggered_markers(index, len(methods), len(curve)), markersize=4 + 1.3 * below,
                        markerfacecolor=None if below == 0 else "none", markeredgewidth=1.2,
                        linewidth=1.4 + 0.5 * below, zorder=2 + index / len(methods), label=method_name(method),
                        gid=f"angle:{column}:{method}")
        ax.set_ylabel(label)
        ax.set_title(title)
    axes[-1].set_xlabel("iteration")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = dict(zip(*reversed(axes[0].get_legend_handles_labels())))
    in_study_order = [method_name(m) for m in dict.fromkeys(analysis.angles["method"]) if method_name(m) in handles]
    legend(figure, [handles[label] for label in in_study_order], in_study_order, ncols=3)
    return save_figure(figure, path, dpi)


@readable
def figure_dynamic_scale(analysis: StudyAnalysis, styles: dict, path: Path, dpi: int) -> Path | None:
    """Dynamic AdaCos's scale s against iteration with the fixed s_f for reference; None without such runs."""
    curve = analysis.angles[analysis.angles["method"] == "dynamic_adacos"]
    curve = curve[np.isfinite(curve["s"].astype(float))]
    if curve.empty:
        return None
    figure, (ax,) = new_figure(size=(FIGURE_WIDTH, 3.6))
    ax.plot(curve["iteration"], curve["s"], **styles.get("dynamic_adacos", GREY).line(), linewidth=1.8, markersize=3,
            label="Dynamic AdaCos s (mean over seeds)")
    if analysis.s_f is not None:
        ax.axhline(analysis.s_f, color=styles.get("fixed_adacos", GREY).colour, linestyle="--", linewidth=1.4,
                   label=f"s_f = √2·ln(C−1) = {analysis.s_f:.3f} (Fixed AdaCos, C = {analysis.num_classes})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("scale s")
    ax.set_title("Dynamic AdaCos's scale during training")
    legend_below(figure, ax, ncols=1)
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
    handles, labels = unique_handles(axes)
    legend(figure, handles, labels, spare, ncols=1)
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
            # Hollow, so that the mean never reads as one of Softmax's black seeds.
            ax.errorbar(position + 0.2, finite.mean(), yerr=spread, fmt="o", color="black", capsize=5,
                        markersize=6.5, markerfacecolor="white", markeredgewidth=1.4,
                        label="mean ± std over seeds" if position == 0 else None)
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
    legend_below(figure, ax)
    return save_figure(figure, path, dpi)


@readable
def figure_learning_curves(curves: pd.DataFrame, differences: pd.DataFrame, reference_score: float, margin: float,
                           styles: dict, path: Path, dpi: int, objective: str = "map_at_r") -> Path | None:
    """The final runs' test objective against iterations (log x; the mean over runs, the band every run's range), and
    each method − Fixed AdaCos along them with its interval, the margin's band around zero; None without test
    curves."""
    curves = curves[curves["test"].notna()]
    if curves.empty:
        return None
    figure, (scores, gaps) = new_figure(ncols=2, size=(1.6 * FIGURE_WIDTH, 4.2))
    name = metric_name(objective)
    for method in drawing_order(list(dict.fromkeys(curves["method"]))):
        runs, style = curves[curves["method"] == method].groupby("iteration")["test"], styles.get(method, GREY)
        mean = runs.mean()
        scores.plot(mean.index, mean.to_numpy(), **style.line(), markersize=3, label=method_name(method))
        band(scores, mean.index, runs.min().to_numpy(), runs.max().to_numpy(), style)
    scores.set(xscale="log", xlabel="training iteration", ylabel=f"test {name} (band: every run)",
               title=f"Test {name} along training")
    for method in drawing_order(list(dict.fromkeys(differences["method"]))):
        rows, style = differences[differences["method"] == method], styles.get(method, GREY)
        gaps.plot(rows["iteration"], rows["difference"], **style.line(), markersize=3, label=method_name(method))
        band(gaps, rows["iteration"], rows["low"], rows["high"], style)
    if np.isfinite(reference_score * margin):
        gaps.axhspan(-margin * reference_score, margin * reference_score, color="0.88", zorder=0)
    gaps.axhline(0, color="0.3", linewidth=0.8)
    gaps.set(xscale="log", xlabel="training iteration", ylabel="method − Fixed AdaCos (95% interval)",
             title="Against Fixed AdaCos" + (f" (grey: ±{100 * margin:.0f}%)" if np.isfinite(margin) else ""))
    # On the means and the margin: a band over two or three class splits can be far wider (t on 1 or 2 df), and
    # runs off the panel rather than flatten every curve.
    focus_y(gaps, [*differences["difference"], 0.0, *(margin * reference_score * np.array([-1, 1]))])
    decades = np.log10(max(curves["iteration"].max(), 1)) - np.log10(max(curves["iteration"][curves["iteration"] > 0]
                                                                          .min(), 1)) > 2.5
    for ax in (scores, gaps):
        plain_log_ticks(ax.xaxis, decades_only=decades)
    handles, labels = unique_handles([scores])
    figure.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4), frameon=False)
    return save_figure(figure, path, dpi)
