"""The study's report: figures, tables, report.md, a self-contained report.html and metrics.json.

Everything is drawn from a `StudyAnalysis` (study/analysis.py); nothing is computed twice.
The report is built once as a list of sections (paragraphs, tables, figures) and rendered
to Markdown and to HTML from that one list. Figures use matplotlib's object-oriented API
(`Figure`, no pyplot), so no display and no global backend are involved.
"""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from study.analysis import (
    REFERENCE_METHOD,
    REPRODUCTION_SPREAD_STDS,
    TEST_PREFIX,
    StudyAnalysis,
    count_or_none,
    reproduction_table,
)
from study.config import StudyParams
from study.published import ADACOS_PAPER_CROSSOVER_ITERATIONS, PublishedSetup, published_setup
from study.results import tuned_method, write_csv, write_json

LOSS_NAMES = {"arcface": "ArcFace", "cosface": "CosFace", "normface": "NormFace", "softmax": "Softmax",
              "fixed_adacos": "Fixed AdaCos", "dynamic_adacos": "Dynamic AdaCos"}
METHOD_NAMES = {"fixed_adacos": "Fixed AdaCos", "dynamic_adacos": "Dynamic AdaCos", "softmax": "Softmax",
                "arcface_default": "ArcFace default"}
METRIC_NAMES = {"accuracy": "accuracy", "knn_accuracy": "1-NN accuracy", "precision_at_1": "precision@1",
                "r_precision": "R-precision", "map_at_r": "MAP@R", "roc_auc": "ROC AUC", "eer": "EER",
                "tar_at_far_1e-2": "TAR@FAR=1e-2", "tar_at_far_1e-3": "TAR@FAR=1e-3",
                "verification_accuracy": "verification accuracy"}
FIGURE_SIZE = (8.0, 5.6)
# Score differences on a symlog axis, linear within ±SYMLOG_LINEAR: ticks at 0, ±0.005 and 1, 3 × 10^k beyond.
SYMLOG_LINEAR = 0.01
SYMLOG_TICKS = sorted({sign * value for sign in (-1, 1) for value in (0.005, 0.01, 0.03, 0.1, 0.3, 1.0)} | {0.0})


# --- names and numbers as the reader sees them -------------------------------------------


def loss_name(loss: str) -> str:
    """A loss as written in prose: 'arcface' → 'ArcFace'."""
    return LOSS_NAMES.get(loss, loss)


def method_name(method: str) -> str:
    """A method as written in prose: 'arcface_tuned' → 'ArcFace tuned'."""
    if method in METHOD_NAMES:
        return METHOD_NAMES[method]
    if method.endswith("_tuned"):
        return f"{loss_name(method.removesuffix('_tuned'))} tuned"
    return method


def metric_name(metric: str) -> str:
    """A metric as written in prose, with or without the test_ prefix: 'test_map_at_r' → 'MAP@R'."""
    bare = metric.removeprefix(TEST_PREFIX)
    return METRIC_NAMES.get(bare, bare)


def _missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(value))


def _score(value) -> str:
    return "n/a" if _missing(value) else f"{value:.4f}"


def _signed(value) -> str:
    return "n/a" if _missing(value) else f"{value:+.4f}"


def _interval(low, high) -> str:
    return "[n/a]" if _missing(low) or _missing(high) else f"[{low:+.4f}, {high:+.4f}]"


def _seconds(value) -> str:
    if _missing(value):
        return "n/a"
    if value == 0:
        return "0 s"
    return f"{value:,.0f} s" if abs(value) >= 100 else f"{value:.1f} s"


def _count(value) -> str:
    return "n/a" if _missing(value) else f"{int(value)}"


def _iteration_number(value) -> str:
    """An iteration as written in prose, with thousands separators: 20000 → '20,000'; a median may fall
    between two evaluations: 1237.5 → '1,237.5'."""
    if _missing(value) or pd.isna(value):
        return "n/a"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def _iterations(value) -> str:
    """Iterations to a convergence target, where missing means the target was never reached."""
    return "not reached" if _missing(value) else _iteration_number(value)


def _p(value) -> str:
    return "n/a" if _missing(value) else f"{value:.3g}"


def _percent(value) -> str:
    return "n/a" if _missing(value) else f"{value:.2f}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# --- the verdict: sentences chosen by the numbers ----------------------------------------


def trials_interval(low, high, max_trials) -> str:
    """A break-even interval in trials; an end that is missing (never reached) reads "not within N"."""
    lower, upper = (f"not within {max_trials}" if count_or_none(end) is None else f"{count_or_none(end)}"
                    for end in (low, high))
    return f"[{lower}, {upper}]"


def _break_even_clause(even: dict, seconds_word: bool = True) -> str:
    """'after 5 trials (95% interval [2, 12]; about 40 s)' or 'not within 32 trials (…)'."""
    interval = trials_interval(even["trials_low"], even["trials_high"], even["max_trials"])
    if even["reached"]:
        cost = f"; about {_seconds(even['seconds'])} of device time" if seconds_word and even["seconds"] else ""
        return f"after {_plural(even['trials'], 'trial')} (bootstrap interval {interval}{cost})"
    return f"not within the {_plural(even['max_trials'], 'trial')} run (bootstrap interval {interval})"


def _comparison_clause(row: dict, confidence: float) -> str:
    """'+0.0030 (95% CI [-0.0016, +0.0076], paired over 10 seeds, p = 0.16 after Holm)'."""
    how = f"paired over {row['pairs']} seeds" if row["test"] == "paired" else "Welch, unpaired"
    return (f"{_signed(row['difference'])} ({confidence:.0%} CI {_interval(row['low'], row['high'])}, {how}, "
            f"p = {_p(row['p_holm'])} after Holm)")


def _judgement(row: dict) -> str:
    """Significant, equivalent within the margin, or neither."""
    if row["significant"]:
        return "significant"
    if row["equivalent"]:
        return f"equivalent within ±{row['margin']:g} (TOST p = {_p(row['tost_p_value'])})"
    if _missing(row["low"]):
        return "too few seeds to judge"
    return f"neither significant nor equivalent within ±{row['margin']:g}"


def verdict(analysis: StudyAnalysis) -> str:
    """The verdict: the recommendation and the numbers behind it, every clause chosen by the analysis's numbers."""
    return " ".join(verdict_sentences(analysis))


def verdict_sentences(analysis: StudyAnalysis) -> list[str]:
    """The verdict's sentences, the recommendation first."""
    facts = analysis.verdict_facts
    metric = metric_name(facts["metric"])
    searched = loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "the searched loss"
    tuned = f"tuned {searched}"
    row = facts["tuned"]
    confidence = analysis.confidence
    sentences = [_recommendation_sentences(facts, searched, metric, confidence)]

    even = facts["break_even"]
    if even and even["max_trials"]:
        reach = ("scores on test {metric} what one Fixed AdaCos run scores ({target}) {clause}" if even["reached"]
                 else "does not reach on test {metric} what one Fixed AdaCos run scores ({target}): {clause}")
        sentence = (f"What a search buys: the trial that val selects among n {searched} trials "
                    + reach.format(metric=metric, target=_score(even["target"]), clause=_break_even_clause(even))
                    + f"; the whole search of {_plural(even['max_trials'], 'trial')} buys "
                    f"{_signed(even['gain'])} ({confidence:.0%} interval {_interval(even['gain_low'], even['gain_high'])}"
                    ") over one Fixed AdaCos run.")
        control = facts["control"]
        if control:
            sentence += (f" For comparison, keeping the best of {control['seeds']} Fixed AdaCos seeds by val buys "
                         f"{_signed(control['gain'])} over one run, with no hyperparameter to tune.")
        if not _missing(even["old_val_gain"]) and even["old_val_gain"] > 0:
            old = (f"after {_plural(even['old_trials'], 'trial')}" if even["old_trials"] is not None
                   else f"not within {even['max_trials']}")
            sentence += (f" The classic expected-best val curve claims {_signed(even['old_val_gain'])} over Fixed "
                         f"AdaCos's mean val and a break-even {old}; it includes the maximum of n draws of seed "
                         "noise, so it is not what a user gets on held-out data.")
        elif not _missing(even["old_val_gain"]):
            sentence += (f" Even the classic expected-best val curve, which includes the maximum of seed noise, ends "
                         f"below Fixed AdaCos's mean val ({_signed(even['old_val_gain'])}).")
        sentences.append(sentence)

    if row and facts["other_metrics"]:
        sentences.append(_other_metrics_sentence(facts, tuned))

    default = facts["default"]
    if default:
        values = facts["default_hyperparameters"]
        where = (f" (s = {values['s']:g}, m = {values['m']:g} rad)" if {"s", "m"} <= set(values)
                 and not any(math.isnan(v) for v in values.values()) else "")
        clause = (f"{searched} at the usual defaults{where} scores {_score(facts['default_test_mean'])}, "
                  f"{_comparison_clause(default, confidence)} against Fixed AdaCos: {_judgement(default)}")
        if facts["default_diverged"]:
            clause += f"; {facts['default_diverged']} of its {facts['default_runs']} runs diverged"
        sentences.append(clause + ".")

    speed = facts["convergence"]
    if speed:
        fraction = f"{speed['fraction']:.0%}"
        if speed["faster"]:
            who = "Fixed AdaCos" if speed["faster"] == REFERENCE_METHOD else tuned
            verb = f"{who} converges faster"
        else:
            verb = "neither converges measurably faster"
        sentences.append(
            f"To reach {fraction} of its own final val score, {tuned} needs {_signed_iterations(speed['difference'])} "
            f"iterations against Fixed AdaCos in the median ({confidence:.0%} bootstrap interval "
            f"[{_signed_iterations(speed['low'])}, {_signed_iterations(speed['high'])}] over seeds): {verb}.")
    return sentences


def _signed_iterations(value) -> str:
    """A difference in iterations with its sign; ±inf where one side never reached the target."""
    if value is None or pd.isna(value):
        return "n/a"
    if np.isinf(value):
        return "+∞ (not reached)" if value > 0 else "−∞"
    return f"{value:+,.0f}"


def _recommendation_sentences(facts: dict, searched: str, metric: str, confidence: float) -> str:
    """The recommendation first, then the comparison that decides it, by the rule the sentence states."""
    row, reason = facts["tuned"], facts["reason"]
    tuned = f"tuned {searched}"
    if reason == "no_tuned_comparison":
        return (f"Recommendation: undecided. No {tuned} runs finished with a test {metric} to compare with Fixed "
                "AdaCos, so this study cannot say whether tuning pays.")
    comparison = f"On test {metric}, {tuned} − Fixed AdaCos = {_comparison_clause(row, confidence)}"
    if reason == "tuning_significantly_better":
        return (f"Recommendation: tune {searched}. {comparison}: a significant gain, so the search pays for "
                "itself on this data.")
    if reason == "adacos_significantly_better":
        return (f"Recommendation: use Fixed AdaCos. {comparison}: Fixed AdaCos is significantly better, and it "
                "costs no tuning.")
    if reason == "equivalent":
        return (f"Recommendation: use Fixed AdaCos. {comparison}: the two are equivalent within ±{row['margin']:g} "
                f"(two one-sided tests, p = {_p(row['tost_p_value'])}), and Fixed AdaCos costs no tuning.")
    if reason == "alternative_better_than_fixed_adacos":
        alternative = method_name(facts["recommendation"])
        return (f"Recommendation: use {alternative}. {comparison}: {_judgement(row)}; {alternative} is "
                f"significantly better than Fixed AdaCos on test {metric} and, like it, costs no tuning.")
    if _missing(row["low"]):
        return (f"Recommendation: undecided. {comparison}: with one seed per method nothing is known about "
                "seed-to-seed spread, so no difference can be judged; list more seeds in runs.seeds.")
    seeds = (f"about {row['seeds_to_resolve']:,} seeds would resolve a difference of this size (to significance or "
             "to equivalence)" if row["seeds_to_resolve"] else "no practical number of seeds would resolve it")
    detectable = ("n/a" if row["detectable"] is None else f"{row['detectable']:.4f}")
    return (f"Recommendation: undecided. {comparison}: neither a significant difference nor equivalence within "
            f"±{row['margin']:g} (TOST p = {_p(row['tost_p_value'])}). That is not \"no difference\": with "
            f"{row['pairs']} seeds the smallest difference this study detects with {facts.get('power', 0.8):.0%} "
            f"power is {detectable}, and {seeds}.")


def _listing(metrics: list[str]) -> str:
    names = [metric_name(metric) for metric in metrics]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _other_metrics_sentence(facts: dict, tuned: str) -> str:
    """Where the test metrics besides the objective disagree with it: significant differences either way."""
    better, worse = facts["tuned_better_metrics"], facts["tuned_worse_metrics"]
    total = facts["other_metrics"]
    objective = metric_name(facts["objective"])
    if not better and not worse:
        return (f"On none of the other {total} test metrics does {tuned} differ significantly from Fixed AdaCos "
                "(Holm-corrected).")
    parts = []
    if better:
        parts.append(f"significantly better than Fixed AdaCos on {_listing(better)}")
    if worse:
        parts.append(f"significantly worse {'' if better else 'than Fixed AdaCos '}on {_listing(worse)}")
    row = facts["tuned"]
    disagree = ""
    if row and ((row["significant"] and row["favours_method"] and worse)
                or (row["significant"] and not row["favours_method"] and better)
                or (not row["significant"] and (better or worse))):
        disagree = (f" The objective ({objective}) and these metrics disagree: if what you deploy is judged by "
                    "them, search on that metric (train.objective) before deciding.")
    return (f"Of the other {total} test metrics (Holm-corrected), {tuned} (tuned for val {objective}) is "
            + " and ".join(parts) + "." + disagree)


# --- the document: sections rendered to Markdown and HTML --------------------------------


@dataclass
class Table:
    """A table of already formatted cells, with an optional caption."""

    frame: pd.DataFrame
    caption: str = ""


@dataclass
class FigureRef:
    """A figure file (relative to the report folder) and what it shows."""

    path: str
    caption: str


@dataclass
class Bullets:
    """A bulleted list of short lines."""

    items: list[str]


@dataclass
class Section:
    """A heading and its blocks: paragraphs (str), Table, FigureRef or Bullets."""

    heading: str
    blocks: list = field(default_factory=list)


def _markdown_cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(title: str, sections: list[Section]) -> str:
    """The sections as a Markdown document; figures are linked by their relative paths."""
    lines = [f"# {title}", ""]
    for section in sections:
        lines += [f"## {section.heading}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                if block.caption:
                    lines += [f"*{block.caption}*", ""]
                header = [_markdown_cell(column) for column in block.frame.columns]
                lines.append("| " + " | ".join(header) + " |")
                lines.append("|" + "|".join("---" for _ in header) + "|")
                for row in block.frame.itertuples(index=False):
                    lines.append("| " + " | ".join(_markdown_cell(value) for value in row) + " |")
            elif isinstance(block, FigureRef):
                lines += [f"![{block.caption}]({block.path})", "", f"*{block.caption}*"]
            elif isinstance(block, Bullets):
                lines += [f"- {item}" for item in block.items]
            else:
                lines.append(str(block))
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _inline_html(text: str) -> str:
    """Escaped text with the two inline marks the report uses: **bold** and `code`."""
    escaped = html.escape(str(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 62rem; margin: 2rem auto;
       padding: 0 1rem; line-height: 1.5; color: #222; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3rem; }
h2 { margin-top: 2.2rem; border-bottom: 1px solid #eee; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .9rem; }
th, td { border: 1px solid #ccc; padding: .25rem .55rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
caption { caption-side: top; text-align: left; font-style: italic; padding-bottom: .3rem; }
figure { margin: 1rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-style: italic; font-size: .9rem; color: #555; }
code { background: #f5f5f5; padding: 0 .2rem; }
"""


def render_html(title: str, sections: list[Section], base_dir: Path) -> str:
    """The sections as one self-contained HTML page: figures inlined as base64 PNG, styles inline, no links out."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
             f"<h1>{html.escape(title)}</h1>"]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append("<table>")
                if block.caption:
                    parts.append(f"<caption>{_inline_html(block.caption)}</caption>")
                parts.append("<tr>" + "".join(f"<th>{_inline_html(c)}</th>" for c in block.frame.columns) + "</tr>")
                for row in block.frame.itertuples(index=False):
                    parts.append("<tr>" + "".join(f"<td>{_inline_html(value)}</td>" for value in row) + "</tr>")
                parts.append("</table>")
            elif isinstance(block, FigureRef):
                data = base64.b64encode((base_dir / block.path).read_bytes()).decode("ascii")
                caption = html.escape(block.caption)
                parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
                             f"<figcaption>{_inline_html(block.caption)}</figcaption></figure>")
            elif isinstance(block, Bullets):
                parts.append("<ul>" + "".join(f"<li>{_inline_html(item)}</li>" for item in block.items) + "</ul>")
            else:
                parts.append(f"<p>{_inline_html(block)}</p>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


# --- figures -----------------------------------------------------------------------------


def method_palette(analysis: StudyAnalysis, palette: str) -> dict[str, tuple]:
    """One colour per method, the same in every figure; a searched loss's curves take its tuned method's colour."""
    methods = list(dict.fromkeys([*analysis.methods, *(tuned_method(loss) for loss in analysis.searched_losses)]))
    colours = sns.color_palette(palette, n_colors=max(len(methods), 1))
    return {method: tuple(colour) for method, colour in zip(methods, colours)}


def _new_figure(ncols: int = 1, size=FIGURE_SIZE, **subplot_options):
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


def _plain_log_ticks(axis) -> None:
    """Log-scale ticks at 1, 2, 5 × 10^k written as plain numbers (20, 50, 100), not 2×10^1."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _focus_y(ax, values, pad_fraction: float = 0.15) -> None:
    """Y limits around `values` (the curves' means), so a wide few-seed band cannot flatten them; bands are clipped."""
    finite = np.asarray([v for v in values if not _missing(v)], dtype=float)
    if finite.size:
        low, high = finite.min(), finite.max()
        pad = max((high - low) * pad_fraction, 0.005)
        ax.set_ylim(low - pad, high + pad)


def _save(figure: Figure, path: Path, dpi: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def _draw_reference_bands(ax, analysis: StudyAnalysis, palette: dict, confidence_label: str) -> None:
    for row in analysis.reference_bands.itertuples():
        colour = palette.get(row.method, "grey")
        interval = f"mean ± {confidence_label} CI, {_plural(row.seeds, 'seed')}" if not _missing(row.low) else "1 seed"
        ax.axhline(row.mean, color=colour, linestyle="--", linewidth=1.4,
                   label=f"{method_name(row.method)} ({interval})")
        if not _missing(row.low):
            ax.axhspan(row.low, row.high, color=colour, alpha=0.12, linewidth=0)


def figure_tuning(analysis: StudyAnalysis, palette: dict, x: str, path: Path, dpi: int) -> Path:
    """What n tuning trials buy on test: the expected test score of the trial val selects among n (x='n') or
    against device-seconds (x='seconds'), beside the untuned methods' best-of-n-seeds controls."""
    confidence = f"{analysis.confidence:.0%}"
    figure, (ax,) = _new_figure()
    objective = metric_name(analysis.objective)
    curves = analysis.tuning_curves
    shown = []
    for (method, kind), curve in curves.groupby(["method", "kind"], sort=False):
        if kind == "control" and method not in ("fixed_adacos", "dynamic_adacos"):
            continue
        search = kind == "search"
        colour = palette.get(tuned_method(method) if search else method, "black")
        label = (f"{loss_name(method)}: test score of the trial val selects among n" if search
                 else f"{method_name(method)}: best of n seeds by val (no tuning)")
        ax.plot(curve[x], curve["expected_test"], color=colour, marker="o" if search else "s", markersize=3.5,
                linewidth=2.0 if search else 1.4, linestyle="-" if search else "--", label=label)
        if curve["low"].notna().any():
            ax.fill_between(curve[x], curve["low"], curve["high"], color=colour, alpha=0.15 if search else 0.08,
                            linewidth=0)
        shown += [*curve["expected_test"], *curve["low"].dropna(), *curve["high"].dropna()]
        if search:
            for even in analysis.break_even[(analysis.break_even["loss"] == method)
                                            & (analysis.break_even["reference"] == REFERENCE_METHOD)].itertuples():
                if even.reached:
                    point = curve[curve["n"] == even.trials].iloc[0]
                    low = even.trials_low if pd.notna(even.trials_low) else np.nan
                    high = even.trials_high if pd.notna(even.trials_high) else curve["n"].max()
                    text = f"break-even: {_plural(int(even.trials), 'trial')}"
                    if x == "n":
                        ax.errorbar(point["n"], point["expected_test"],
                                    xerr=[[point["n"] - low], [high - point["n"]]] if np.isfinite(low) else None,
                                    fmt="none", ecolor=colour, elinewidth=1.2, capsize=4)
                        text += f" ({confidence} interval {trials_interval(even.trials_low, even.trials_high, even.max_trials)})"
                    ax.plot(point[x], point["expected_test"], marker="*", markersize=15, color=colour,
                            markeredgecolor="black", linestyle="none", label=f"{loss_name(method)} {text}")
    target = curves[(curves["method"] == REFERENCE_METHOD) & (curves["kind"] == "control") & (curves["n"] == 1)]
    if len(target):
        ax.axhline(float(target["expected_test"].iloc[0]), color=palette.get(REFERENCE_METHOD, "grey"),
                   linestyle=":", linewidth=1.3, label="Fixed AdaCos, mean of one run: the break-even target")
    _focus_y(ax, shown)
    if x == "seconds":
        if (curves["seconds"] > 0).any():
            ax.set_xscale("log")
            _plain_log_ticks(ax.xaxis)
        ax.set_xlabel("device-seconds spent (log scale): trials, or seeds for the controls")
        ax.set_title(f"Test {objective} of the val-selected run against device-seconds")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("runs n: tuning trials, or seeds for the controls")
        ax.set_title(f"Test {objective} of the run val selects among n ({confidence} bootstrap bands)")
    ax.set_ylabel(f"expected test {objective}")
    _legend_below(figure, ax, ncols=1)
    return _save(figure, path, dpi)


def figure_expected_best_val(analysis: StudyAnalysis, palette: dict, path: Path, dpi: int) -> Path:
    """The classic curve, for contrast: the expected best val score of n trials against the untuned methods'
    mean val; it includes the maximum of seed noise, so it overstates what tuning buys."""
    confidence = f"{analysis.confidence:.0%}"
    figure, (ax,) = _new_figure()
    objective = metric_name(analysis.objective)
    searches = analysis.tuning_curves[analysis.tuning_curves["kind"] == "search"]
    for method, curve in searches.groupby("method", sort=False):
        ax.plot(curve["n"], curve["expected_val"], color=palette.get(tuned_method(method), "black"), marker="o",
                markersize=3, linewidth=1.8, label=f"{loss_name(method)}: expected best val of n trials")
    _draw_reference_bands(ax, analysis, palette, confidence)
    _focus_y(ax, [*searches["expected_val"], *analysis.reference_bands["mean"]])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tuning trials n")
    ax.set_ylabel(f"val {objective}")
    ax.set_title(f"Expected best val {objective} (includes the maximum of seed noise)")
    _legend_below(figure, ax)
    return _save(figure, path, dpi)


def figure_convergence(analysis: StudyAnalysis, palette: dict, path: Path, dpi: int) -> Path:
    """Val objective against iteration, mean over seeds with its band, and the convergence targets."""
    figure, (ax,) = _new_figure()
    objective = metric_name(analysis.objective)
    for method, curve in analysis.curves.groupby("method", sort=False):
        colour = palette.get(method, "grey")
        ax.plot(curve["iteration"], curve["mean"], color=colour, linewidth=1.8, label=method_name(method))
        ax.fill_between(curve["iteration"], curve["low"], curve["high"], color=colour, alpha=0.18, linewidth=0)
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
    return _save(figure, path, dpi)


def figure_crossings(analysis: StudyAnalysis, palette: dict, path: Path, dpi: int) -> Path | None:
    """AdaCos − ArcFace mean val score against iteration, one panel per ArcFace variant, one line per AdaCos variant."""
    crossings = analysis.crossings
    if crossings.empty:
        return None
    arcface_methods = list(dict.fromkeys(crossings["arcface_method"]))
    figure, axes = _new_figure(ncols=len(arcface_methods), size=(5.8 * len(arcface_methods), 4.4), sharey=True)
    means = analysis.curves.pivot(index="iteration", columns="method", values="mean")
    objective = metric_name(analysis.objective)
    for ax, arcface in zip(axes, arcface_methods):
        ax.axhline(0.0, color="black", linewidth=1.0)
        for pair in crossings[crossings["arcface_method"] == arcface].itertuples():
            both = means[[pair.adacos_method, arcface]].dropna(how="all")
            gap = both[pair.adacos_method] - both[arcface]
            colour = palette.get(pair.adacos_method, "grey")
            ax.plot(gap.index, gap.to_numpy(), color=colour, linewidth=1.8, marker="o", markersize=2.5,
                    label=f"{method_name(pair.adacos_method)} − {method_name(arcface)}")
            # Where the sign settles for good: AdaCos's lasting overtake, or ArcFace's lasting lead.
            settles = pair.crossing_iteration if pd.notna(pair.crossing_iteration) else pair.arcface_ahead_from
            if pd.notna(settles) and settles > pair.first_iteration:
                leader, trailer = ((pair.adacos_method, arcface) if pd.notna(pair.crossing_iteration)
                                   else (arcface, pair.adacos_method))
                ax.axvline(int(settles), color=colour, linestyle=":", linewidth=1.4,
                           label=f"{method_name(leader)} ahead of {method_name(trailer)} for good from "
                                 f"{_iteration_number(settles)}")
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
    return _save(figure, path, dpi)


def figure_angles(analysis: StudyAnalysis, palette: dict, path: Path, dpi: int) -> Path:
    """Median target angle and mean non-target cosine against iteration, one line per method."""
    figure, axes = _new_figure(ncols=2, size=(11.0, 4.4), sharex=True)
    panels = [("theta_med_deg", "median target angle θ (degrees)", "Median angle to the own class"),
              ("cos_nontarget_mean", "mean non-target cosine", "Mean cosine to other classes")]
    for ax, (column, label, title) in zip(axes, panels):
        for method, curve in analysis.angles.groupby("method", sort=False):
            curve = curve[np.isfinite(curve[column].astype(float))]
            if len(curve):
                ax.plot(curve["iteration"], curve[column], color=palette.get(method, "grey"), linewidth=1.8,
                        label=method_name(method))
        ax.set_xlabel("iteration")
        ax.set_ylabel(label)
        ax.set_title(title)
    _legend_below(figure, axes[0], ncols=6)
    return _save(figure, path, dpi)


def figure_dynamic_scale(analysis: StudyAnalysis, palette: dict, path: Path, dpi: int) -> Path | None:
    """Dynamic AdaCos's scale s against iteration with the fixed s_f for reference; None without such runs."""
    curve = analysis.angles[analysis.angles["method"] == "dynamic_adacos"]
    curve = curve[np.isfinite(curve["s"].astype(float))]
    if curve.empty:
        return None
    figure, (ax,) = _new_figure(size=(8.0, 4.2))
    ax.plot(curve["iteration"], curve["s"], color=palette.get("dynamic_adacos", "black"), linewidth=1.8,
            marker="o", markersize=3, label="Dynamic AdaCos s (mean over seeds)")
    if analysis.s_f is not None:
        ax.axhline(analysis.s_f, color=palette.get("fixed_adacos", "grey"), linestyle="--", linewidth=1.4,
                   label=f"s_f = √2·ln(C−1) = {analysis.s_f:.3f} (Fixed AdaCos, C = {analysis.num_classes})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("scale s")
    ax.set_title("Dynamic AdaCos's scale during training")
    _legend_below(figure, ax)
    return _save(figure, path, dpi)


def figure_landscape(analysis: StudyAnalysis, params: StudyParams, path: Path, dpi: int) -> Path | None:
    """Each searched loss's trials in the (s, m) plane, coloured by val score, with the best point and s_f."""
    losses = [loss for loss in analysis.searched_losses if (analysis.landscape["loss"] == loss).any()]
    if not losses:
        return None
    figure, axes = _new_figure(ncols=len(losses), size=(5.2 * len(losses) + 1.6, 4.4), sharey=False)
    complete = analysis.landscape[analysis.landscape["state"] == "COMPLETE"]
    values = complete["value"].astype(float)
    norm_limits = (values.min(), values.max()) if values.notna().any() else (0.0, 1.0)
    scatter = None
    for ax, loss in zip(axes, losses):
        trials = analysis.landscape[analysis.landscape["loss"] == loss]
        margins = trials["m"].astype(float).fillna(0.0)  # NormFace has no margin: its trials lie on m = 0
        done = trials["state"] == "COMPLETE"
        scatter = ax.scatter(trials.loc[done, "s"], margins[done], c=trials.loc[done, "value"], cmap="viridis",
                             vmin=norm_limits[0], vmax=norm_limits[1], s=45, edgecolors="white", linewidths=0.5,
                             label="completed trial")
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
        _plain_log_ticks(ax.xaxis)
        ax.set_xlabel("scale s (log scale)")
        ax.set_ylabel("margin m (radians)" + (", none for NormFace" if loss == "normface" else ""))
        ax.set_title(f"{loss_name(loss)} trials")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small", frameon=False, ncol=2)
    if scatter is not None:
        figure.colorbar(scatter, ax=list(axes), label=f"val {metric_name(analysis.objective)}")
    return _save(figure, path, dpi)


def figure_final_test(analysis: StudyAnalysis, palette: dict, path: Path, dpi: int) -> Path | None:
    """The test objective of every seed per method, with the mean ± std over seeds."""
    metric = f"{TEST_PREFIX}{analysis.objective}"
    runs_per_seed = analysis.run_scores
    if metric not in runs_per_seed.columns:
        return None
    figure, (ax,) = _new_figure(size=(max(6.0, 1.4 * len(analysis.methods) + 2.0), 4.6))
    tick_labels = []
    for position, method in enumerate(analysis.methods):
        values = runs_per_seed.loc[runs_per_seed["method"] == method, metric].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        offsets = np.linspace(-0.12, 0.12, finite.size) if finite.size > 1 else np.zeros(finite.size)
        ax.scatter(position - 0.1 + offsets, finite, color=palette.get(method, "grey"), s=28, alpha=0.85,
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
    return _save(figure, path, dpi)


# --- tables and metrics ------------------------------------------------------------------


def _final_test_table(analysis: StudyAnalysis) -> pd.DataFrame:
    return analysis.final.merge(analysis.costs[["method", "tuning_trials", "tuning_seconds", "run_seconds"]],
                                on="method", how="left")


def _curves_wide(analysis: StudyAnalysis) -> pd.DataFrame:
    """Mean val objective per iteration, one column per method (the layout `dvc plots` draws)."""
    wide = analysis.curves.pivot(index="iteration", columns="method", values="mean")
    return wide.reindex(columns=[m for m in analysis.methods if m in wide.columns]).reset_index()


def metrics_summary(analysis: StudyAnalysis, reproduction: pd.DataFrame | None = None) -> dict:
    """What `dvc metrics show` reads: the verdict with its numbers, the break-even of each searched loss with its
    interval, per method the objective's test mean and costs, the crossings and (when given) the reproduction.
    Per-seed scores of every run are in tables/run_scores.csv, every metric in tables/final_test.csv."""
    def number(value):
        return None if _missing(value) or pd.isna(value) else float(value)

    facts = analysis.verdict_facts
    row = facts["tuned"] or {}
    even = facts["break_even"] or {}
    summary = {"verdict": {
        "recommendation": facts["recommendation"], "reason": facts["reason"], "metric": facts["metric"],
        "margin": row.get("margin"), "seeds": row.get("pairs"), "difference": row.get("difference"),
        "low": row.get("low"), "high": row.get("high"), "test": row.get("test"), "p_holm": row.get("p_holm"),
        "equivalent": row.get("equivalent"), "tost_p_value": row.get("tost_p_value"),
        "detectable": row.get("detectable"), "seeds_to_resolve": row.get("seeds_to_resolve"),
        "search_gain": even.get("gain"), "search_gain_low": even.get("gain_low"),
        "search_gain_high": even.get("gain_high"), "estimator": facts["estimator_kind"],
        "estimator_exact": facts["estimator_exact"]}}
    summary["break_even"] = {
        loss: {reference.reference: {"trials": count_or_none(reference.trials),
                                     "low": count_or_none(reference.trials_low),
                                     "high": count_or_none(reference.trials_high),
                                     "seconds": number(reference.seconds), "reached": bool(reference.reached),
                                     "max_trials": int(reference.max_trials), "target": number(reference.target)}
               for reference in group.itertuples()}
        for loss, group in analysis.break_even.groupby("loss", sort=False)
    }
    metric = f"{TEST_PREFIX}{analysis.objective}"
    for method in analysis.methods:
        rows = analysis.final[(analysis.final["method"] == method) & (analysis.final["metric"] == metric)]
        entry = {metric: {"mean": number(row.mean), "std": number(row.std), "n": int(row.n)} for row in rows.itertuples()}
        cost = analysis.costs[analysis.costs["method"] == method]
        if len(cost):
            cost = cost.iloc[0]
            entry.update({"tuning_trials": number(cost["tuning_trials"]),
                          "tuning_seconds": number(cost["tuning_seconds"]),
                          "run_seconds": number(cost["run_seconds"]), "diverged_runs": int(cost["diverged"]),
                          "runs_at_chance": int(cost["at_chance"])})
        summary[method] = entry
    summary["crossings"] = {
        f"{row.adacos_method}_vs_{row.arcface_method}": {
            "crossing_iteration": None if pd.isna(row.crossing_iteration) else int(row.crossing_iteration),
            "arcface_ahead_from": None if pd.isna(row.arcface_ahead_from) else int(row.arcface_ahead_from),
            "gap_at_end": number(row.gap_at_end), "gap_significant": bool(row.gap_significant)}
        for row in analysis.crossings.itertuples()
    }
    if reproduction is not None:
        summary["reproduction"] = {
            "setup": reproduction["setup"].iloc[0] if len(reproduction) else None,
            "spread": f"mean ± {REPRODUCTION_SPREAD_STDS:g} std over seeds",
            "results": {row.method: {"published_label": row.published_label, "metric": row.metric,
                                     "published_percent": number(row.published_percent),
                                     "mean_percent": number(row.mean_percent), "std_percent": number(row.std_percent),
                                     "seeds": int(row.seeds), "difference_points": number(row.difference_points),
                                     "within_spread": None if pd.isna(row.within_spread) else bool(row.within_spread)}
                        for row in reproduction.itertuples()},
        }
    return summary


def _tuning_wide(analysis: StudyAnalysis) -> pd.DataFrame:
    """The expected test score of the val-selected run per n, one column per search or control (for `dvc plots`)."""
    curves = analysis.tuning_curves.assign(
        column=lambda frame: np.where(frame["kind"] == "search", frame["method"] + "_search", frame["method"]))
    return curves.pivot(index="n", columns="column", values="expected_test").reset_index()


# --- the sections ------------------------------------------------------------------------


def _setup_section(analysis: StudyAnalysis, params: StudyParams, manifest: dict) -> Section:
    train, search = params.train, params.search
    splits = manifest.get("splits", {})
    split_table = pd.DataFrame([{"split": name, "samples": entry.get("num_samples", "n/a"),
                                 "classes": entry.get("num_classes", "n/a")} for name, entry in splits.items()])
    budget = (f"budget {search.n_trials} trials per loss" + (f" in each of {search.repeats} independent repeats"
                                                             if search.repeats > 1 else "")
              + f", {search.sampler} sampler (seed {search.seed}), pruner {search.pruner}, "
              f"s log-uniform in [{search.s_range[0]:g}, {search.s_range[1]:g}]")
    ranges = ", ".join(f"m for {loss_name(loss)} in [{low:g}, {high:g}] rad"
                       for loss, (low, high) in search.m_range.items() if loss in search.losses)
    bullets = [
        f"Data: `{manifest.get('source', params.data.dataset)}`, {manifest.get('protocol', params.data.protocol)} "
        f"protocol, split seed {manifest.get('seed', params.data.seed)}, fractions "
        f"{', '.join(f'{f:g}' for f in manifest.get('fractions', params.data.fractions))} (train, val, test).",
        f"Model: `{params.model.name}`, {params.model.embedding_size}-d embedding"
        + (", pretrained" if params.model.pretrained else "") + ".",
        f"Training (identical for every loss): {train.optimizer}, lr {train.lr:g}, weight decay "
        f"{train.weight_decay:g}, {train.schedule} schedule, {train.epochs} epochs"
        + (f" capped at {train.max_iterations} iterations" if train.max_iterations else "")
        + f", batch {train.batch_size}, val evaluated every {train.eval_every} iterations.",
        f"Objective: val {metric_name(analysis.objective)} (`{analysis.objective}`) selects; final runs at seeds "
        f"{', '.join(map(str, params.runs.seeds))}, every method at the same seeds (same initialisation and data "
        "order, so the comparisons pair by seed). Each search trial trains at its own seed, derived from the search "
        "seed and the trial number and never one of these.",
        f"Search: {', '.join(loss_name(loss) for loss in search.losses)}; {budget}"
        + (f"; {ranges}" if ranges else "") + ".",
    ]
    if manifest.get("fallback_reason"):
        bullets.insert(1, f"`{manifest.get('requested_source')}` was asked for but could not be had, so this study "
                          f"ran on the fallback `{manifest.get('source')}` ({manifest['fallback_reason']}).")
    if analysis.num_classes is not None:
        bullets.append(f"Training classes C = {analysis.num_classes}, so AdaCos's fixed scale s_f = √2·ln(C−1) = "
                       + (f"{analysis.s_f:.3f}." if analysis.s_f is not None else "undefined (C < 3)."))
    blocks = [Bullets(bullets)]
    if len(split_table):
        blocks.append(Table(split_table, "Splits (from the prepare stage's manifest)"))
    if len(analysis.search_summary):
        table = pd.DataFrame({
            "loss": analysis.search_summary["loss"].map(loss_name),
            "repeats": analysis.search_summary["repeats"],
            "trials": analysis.search_summary["trials"],
            "completed": analysis.search_summary["complete"],
            "pruned": analysis.search_summary["pruned"],
            "failed": analysis.search_summary["failed"],
            "device-seconds": analysis.search_summary["seconds"].map(_seconds),
            "per trial": analysis.search_summary["seconds_per_trial"].map(_seconds),
            f"best val {metric_name(analysis.objective)}": analysis.search_summary["best_value"].map(_score),
            "best s": analysis.search_summary["best_s"].map(lambda v: "n/a" if _missing(v) else f"{v:.3g}"),
            "best m (rad)": analysis.search_summary["best_m"].map(lambda v: "n/a" if _missing(v) else f"{v:.3g}"),
        })
        blocks.append(Table(table, "The searches as run"))
    return Section("Setup", blocks)


def _tuning_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = metric_name(analysis.objective)
    confidence = f"{analysis.confidence:.0%}"
    blocks = [
        f"A practitioner who runs n tuning trials keeps the one val prefers and deploys it; what they get is that "
        f"trial's **test** {objective}. Each trial trained at its own seed and was scored on test once trained, "
        "recorded but never used to choose. Failed (diverged) trials enter at the metric's floor (a user pays for "
        "them), pruned ones are paid for but never selected. "
        f"Estimator: {analysis.estimator['text']}. Bands: {confidence} percentile bootstrap over "
        + ("trials." if analysis.estimator["kind"] == "pooled" else "repeats."),
        "The untuned methods get the same treatment over their seeds (train n seeds, keep the one val prefers): "
        "this budget-matched control separates what tuning s and m buys from what picking among n trainings buys.",
    ]
    blocks += [figures[name] for name in ("tuning_trials", "tuning_seconds") if name in figures]
    rows = []
    for row in analysis.break_even.itertuples():
        reached = bool(row.reached)
        interval = trials_interval(row.trials_low, row.trials_high, row.max_trials)
        rows.append({"searched loss": loss_name(row.loss), "reference": method_name(row.reference),
                     f"target: its mean test {objective} of one run": _score(row.target),
                     "break-even trials": _count(row.trials) if reached else f"not within {row.max_trials}",
                     f"{confidence} interval": interval,
                     "device-seconds": _seconds(row.seconds) if reached else "n/a",
                     f"gain of the whole search on test [{confidence}]":
                         f"{_signed(row.gain)} {_interval(row.gain_low, row.gain_high)}",
                     "old: expected best val − mean val": _signed(row.old_val_gain),
                     "old break-even": _count(row.old_trials) if count_or_none(row.old_trials) else
                     f"not within {row.max_trials}"})
    if rows:
        blocks.append(Table(pd.DataFrame(rows), "Break-even: the fewest trials whose val-selected test score reaches "
                                                "the reference's mean test score of one run"))
        blocks.append("The last two columns are the classic quantities, for contrast: the expected *maximum* of n val "
                      "scores against the reference's *mean* val score. The maximum includes the best of n draws of "
                      "seed noise, so it shows a gain and an early break-even even where tuning buys nothing on "
                      "held-out data.")
    else:
        blocks.append("No loss was searched, so there is no tuning curve.")
    if "tuning_val" in figures:
        blocks.append(figures["tuning_val"])
    return Section("Tuning cost versus accuracy", blocks)


def _difference_cell(row) -> str:
    if _missing(row["difference"]):
        return "n/a (no finished runs)"
    cell = f"{_signed(row['difference'])} {_interval(row['low'], row['high'])}"
    if row["significant"]:
        return cell
    return cell + (" (equivalent)" if row["equivalent"] else " (n.s.)")


def _final_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = f"{TEST_PREFIX}{analysis.objective}"
    final = analysis.final.set_index(["method", "metric"])
    differences = analysis.differences.set_index(["method", "metric"])
    costs = analysis.costs.set_index("method")
    ci = f"{analysis.confidence:.0%} CI"

    def mean_std(method, metric):
        if (method, metric) not in final.index:
            return "n/a"
        row = final.loc[(method, metric)]
        return "n/a" if row["n"] == 0 else f"{_score(row['mean'])} ± {_score(row['std'])}"

    headline = []
    for method in analysis.methods:
        cost = costs.loc[method] if method in costs.index else None
        n = int(final.loc[(method, objective), "n"]) if (method, objective) in final.index else 0
        notes = [f"{int(cost[key])} {word}" for key, word in (("diverged", "diverged"), ("at_chance", "at chance"))
                 if cost is not None and cost[key]]
        seeds = f"{n}" + (f" ({', '.join(notes)})" if notes else "")
        row = differences.loc[(method, objective)] if (method, objective) in differences.index else None
        headline.append({"method": method_name(method), f"test {metric_name(objective)} (mean ± std)":
                         mean_std(method, objective), "seeds": seeds,
                         f"− Fixed AdaCos [{ci}]": "reference" if method == REFERENCE_METHOD else
                         "n/a" if row is None else _difference_cell(row),
                         "p (Holm)": "" if row is None or _missing(row["p_holm"]) else f"{row['p_holm']:.3g}",
                         "detectable at 80% power": "" if row is None or _missing(row["detectable"]) else
                         f"{row['detectable']:.4f}",
                         "tuning trials": _count(cost["tuning_trials"]) if cost is not None else "n/a",
                         "tuning device-seconds": _seconds(cost["tuning_seconds"]) if cost is not None else "n/a",
                         "one run": _seconds(cost["run_seconds"]) if cost is not None else "n/a"})
    metrics = list(dict.fromkeys(analysis.final["metric"]))
    every_metric = pd.DataFrame([{"method": method_name(method),
                                  **{metric_name(metric): mean_std(method, metric) for metric in metrics}}
                                 for method in analysis.methods])
    every_difference = pd.DataFrame([{
        "method": method_name(row.method), "metric": metric_name(row.metric),
        "difference": _signed(row.difference), f"{ci} ({row.test})": _interval(row.low, row.high),
        "p": "n/a" if _missing(row.p_value) else f"{row.p_value:.3g}",
        "p (Holm)": "n/a" if _missing(row.p_holm) else f"{row.p_holm:.3g}",
        "Welch": f"{_signed(row.welch_difference)} {_interval(row.welch_low, row.welch_high)}",
        "margin": f"±{row.margin:g}",
        "TOST p": "n/a" if _missing(row.tost_p_value) else f"{row.tost_p_value:.3g}",
        "verdict": ("significant" if row.significant else "equivalent" if row.equivalent else "undecided"),
        "detectable": "n/a" if _missing(row.detectable) else f"{row.detectable:.4f}",
        "seeds to resolve": "n/a" if pd.isna(row.seeds_to_resolve) else f"{int(row.seeds_to_resolve):,}",
        "direction": "higher is better" if row.higher_is_better else "lower is better",
    } for row in analysis.differences.itertuples()])
    alpha = 1 - analysis.confidence
    blocks = [
        f"Every run of the final comparison evaluated once on test; every method ran at the same seeds, so each "
        f"difference to Fixed AdaCos is paired by seed (same initialisation and data order), with Welch's unpaired "
        f"interval beside it. Each method's differences on the {len(metrics)} test metrics are one family: p-values "
        f"are Holm-corrected and \"significant\" means Holm p < {alpha:.2g}. A difference that is not significant "
        f"is called equivalent only when two one-sided tests put it inside the metric's margin (analysis."
        f"equivalence_margin); otherwise it is undecided, and the table says the smallest difference these seeds "
        f"detect with 80% power and about how many seeds would resolve it. Diverged runs are left out of the means "
        "and counted. Tuning cost is the whole search behind a tuned method, failed and pruned trials included.",
        Table(pd.DataFrame(headline), f"Test {metric_name(objective)}, tuning cost and the difference to Fixed AdaCos"),
    ]
    at_chance = analysis.costs[analysis.costs["at_chance"] > 0]
    if len(at_chance):
        blocks.append(
            "Runs at chance: " + ", ".join(f"{method_name(row.method)} {row.at_chance} of {row.runs}"
                                           for row in at_chance.itertuples())
            + ". They finished without a NaN but ended with test ROC AUC 0.5: every test embedding scores every pair "
              "alike, the mark of a network collapsed to one output (dead ReLUs under a too large learning rate, "
              "for example). They stay in the means above, as what the method delivered on those seeds.")
    if "final_test" in figures:
        blocks.append(figures["final_test"])
    if len(metrics) > 1:
        blocks.append(Table(every_metric, "Every test metric (mean ± std over seeds; per-seed scores in "
                                          "tables/run_scores.csv)"))
    if len(every_difference):
        blocks.append(Table(every_difference, "Every test metric: method − Fixed AdaCos (for EER, lower is better, "
                                              "so a negative difference favours the method)"))
    return Section("Final comparison on test", blocks)


def _convergence_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = metric_name(analysis.objective)
    if not analysis.targets:
        return Section("Convergence", ["No run finished with a finite val score, so there are no targets."])
    confidence = f"{analysis.confidence:.0%}"
    best = (f"{_score(analysis.best_final_val)}, the mean final val {objective} of "
            f"{method_name(analysis.best_final_method)}")
    tables = []
    for basis, title in (("own", "of each method's own final val score"),
                         ("best", "of the best method's final val score (the same targets for every method)")):
        rows = []
        for method in analysis.methods:
            row = {"method": method_name(method)}
            for found in analysis.convergence[(analysis.convergence["method"] == method)
                                              & (analysis.convergence["basis"] == basis)].itertuples():
                column = f"to {found.fraction:.0%}" + (f" ({found.target:.4f})" if basis == "best" else "")
                row[column] = (f"{_iterations(found.median_iteration)} [{_iterations(found.low)}, "
                               f"{_iterations(found.high)}] ({found.seeds_reached}/{found.seeds} seeds)")
            speed = analysis.convergence_speed[(analysis.convergence_speed["method"] == method)
                                               & (analysis.convergence_speed["basis"] == basis)]
            for found in speed.itertuples():
                judged = "faster" if found.faster == method else "slower" if pd.notna(found.faster) else "n.s."
                row[f"− Fixed AdaCos at {found.fraction:.0%}"] = (
                    f"{_signed_iterations(found.difference)} [{_signed_iterations(found.low)}, "
                    f"{_signed_iterations(found.high)}] ({judged})")
            rows.append(row)
        tables.append(Table(pd.DataFrame(rows).fillna("—"), f"Median iterations to fractions {title}, with "
                                                            f"{confidence} bootstrap intervals over seeds"))
    blocks = [
        "Iterations to a target, per run the first evaluated iteration at or above it; per method the median over "
        "seeds with a percentile-bootstrap interval over seeds. A seed that never reached the target counts as "
        "slower than every seed that did, so a median is \"not reached\" when half the seeds or more missed it. "
        "Two kinds of target: fractions of each method's *own* mean final val score (how fast it gets near where it "
        f"ends), and fractions of the best method's ({best}). A method is called faster or slower than Fixed AdaCos "
        "only where the bootstrap interval of the difference of medians (seeds resampled together, since runs at "
        "one seed pair) excludes zero.",
        *tables,
    ]
    if "convergence" in figures:
        blocks.append(figures["convergence"])
    return Section("Convergence", blocks)


def _crossing_sentence(pair, objective: str) -> str:
    """What one (AdaCos, ArcFace) pair's curves show, from its row of `analysis.crossings`."""
    adacos, arcface = method_name(pair.adacos_method), method_name(pair.arcface_method)
    first, last = _iteration_number(pair.first_iteration), _iteration_number(pair.last_iteration)
    if not _missing(pair.gap_at_end) and not pair.gap_significant:
        return (f"{adacos} and {arcface} end level within seed noise: the final val gap {_signed(pair.gap_at_end)} "
                f"(CI {_interval(pair.gap_low, pair.gap_high)} over seeds) is not significant, so no lasting "
                "overtake is claimed either way.")
    if pd.isna(pair.crossing_iteration):
        if _missing(pair.gap_at_end):
            return (f"{adacos} does not overtake {arcface} for good within the run's {last} iterations: it has no "
                    "val score at the end (every seed diverged).")
        behind = f"behind by {-pair.gap_at_end:.4f} at the last evaluation"
        if pair.adacos_led_before:
            return (f"{adacos} leads {arcface} early, but {arcface} overtakes it for good at iteration "
                    f"{_iteration_number(pair.arcface_ahead_from)} of {last} and {adacos} ends {behind}: the "
                    "opposite order to the paper's figure, where AdaCos is the one that overtakes late.")
        return (f"{adacos} is never ahead of {arcface} (level at most, then behind for good from iteration "
                f"{_iteration_number(pair.arcface_ahead_from)}) and does not overtake it within the run's {last} "
                f"iterations; it ends {behind}.")
    gap = "" if _missing(pair.gap_at_end) else f" (ahead by {pair.gap_at_end:.4f} at the end)"
    if pair.ahead_from_start:
        return (f"{adacos} is at or above {arcface} at every evaluation from iteration {first} to the end of the run "
                f"at iteration {last}{gap}: ahead from the start, it never needs to overtake.")
    share = pair.crossing_iteration / pair.last_iteration if pair.last_iteration else math.nan
    return (f"{adacos} overtakes {arcface} for good at iteration {_iteration_number(pair.crossing_iteration)} of "
            f"{last} ({share:.0%} of the run) and stays at or above it to the end{gap}; before that its mean val "
            f"{objective} fell below {arcface}'s at least once.")


def _crossings_section(analysis: StudyAnalysis, figures: dict) -> Section:
    objective = metric_name(analysis.objective)
    paper = _iteration_number(ADACOS_PAPER_CROSSOVER_ITERATIONS)
    blocks = [
        f"The AdaCos paper's training curves suggest that AdaCos only overtakes ArcFace after about {paper} "
        f"iterations. For each AdaCos variant against each ArcFace variant run here, the mean val {objective} over "
        "seeds is compared at every iteration both were evaluated at; the crossing is where the final stretch "
        "begins in which AdaCos stays at or above ArcFace to the end of the run (a lead that is lost again does not "
        "count, and ties count as not behind). Where AdaCos ends behind, the reverse is reported: where ArcFace's "
        "final lead begins, and whether AdaCos led before it. A lead is claimed only where the final val gap is "
        "significant across seeds (paired by seed): mean curves that end a hair apart say nothing about who ends "
        "ahead."]
    crossings = analysis.crossings
    if crossings.empty:
        blocks.append("No Fixed or Dynamic AdaCos run and no tuned or default ArcFace run recorded val curves side "
                      "by side, so there is nothing to compare.")
        return Section("Convergence claim", blocks)
    rows = [{"AdaCos": method_name(row.adacos_method), "ArcFace": method_name(row.arcface_method),
             "overtakes for good at iteration": "not within the run" if pd.isna(row.crossing_iteration) else
             _iteration_number(row.crossing_iteration) + (" (ahead from the start)" if row.ahead_from_start else ""),
             "ahead from the start": "yes" if row.ahead_from_start else "no",
             "ArcFace ahead for good from": "—" if pd.isna(row.arcface_ahead_from) else
             _iteration_number(row.arcface_ahead_from) + (" (AdaCos led before)" if row.adacos_led_before else ""),
             "evaluated iterations": f"{_iteration_number(row.first_iteration)}–{_iteration_number(row.last_iteration)}",
             f"AdaCos − ArcFace at the end (val {objective}) [CI over seeds]":
                 f"{_signed(row.gap_at_end)} {_interval(row.gap_low, row.gap_high)}"
                 + ("" if row.gap_significant else " (n.s.: no lasting lead claimed)")}
            for row in crossings.itertuples()]
    blocks.append(Table(pd.DataFrame(rows), "Where AdaCos's mean val curve overtakes ArcFace's for good, or ArcFace's "
                                            "overtakes AdaCos's"))
    blocks.append(" ".join(_crossing_sentence(row, objective) for row in crossings.itertuples()))
    longest = int(crossings["last_iteration"].max())
    # Only a final gap that is significant across seeds supports a claim about who ends ahead.
    resolved = crossings[crossings["gap_significant"]]
    at_or_above = resolved[resolved["crossing_iteration"].notna()]
    reversed_order = int(resolved["adacos_led_before"].sum())
    summary = (f"{len(resolved)} of {_plural(len(crossings), 'pair')} end with a significant gap; "
               f"{len(at_or_above)} with AdaCos ahead"
               + (f", and in {reversed_order} ArcFace overtakes an early AdaCos lead" if reversed_order else ""))
    late = ADACOS_PAPER_CROSSOVER_ITERATIONS
    late_adacos = int(((~at_or_above["ahead_from_start"]) & (at_or_above["crossing_iteration"] >= late)).sum())
    # The mirror image of the paper's claim: ArcFace taking over an AdaCos lead only that late.
    late_arcface = int((resolved["adacos_led_before"] & (resolved["arcface_ahead_from"] >= late)).sum())
    if longest < late:
        blocks.append(f"These runs end by iteration {_iteration_number(longest)}, before the ~{paper} of the paper's "
                      f"figure, so they cannot show a crossing that late. Within them, {summary}.")
    else:
        blocks.append(f"These runs reach iteration {_iteration_number(longest)}, past the ~{paper} of the paper's "
                      f"figure: {summary}. In {late_adacos} of the {_plural(len(crossings), 'pair')} AdaCos overtakes "
                      f"ArcFace for good only at iteration {paper} or later, as in the paper's figure"
                      + (f"; in {late_arcface} ArcFace overtakes an AdaCos lead that late instead" if late_arcface
                         else "") + ".")
    if "crossings" in figures:
        blocks.append(figures["crossings"])
    return Section("Convergence claim", blocks)


def _reproduction_section(setup: PublishedSetup, reproduction: pd.DataFrame, manifest: dict) -> Section:
    """Published numbers beside ours for the same setup, what the published code computed, and how the data differ."""
    how = "; ".join(f"{evaluation} → our `{metric}`" for evaluation, metric in
                    dict.fromkeys(zip(reproduction["evaluation"], reproduction["metric"])))
    spread = f"mean ± {REPRODUCTION_SPREAD_STDS:g} std"
    blocks = [
        f"Seed 003 published test accuracies for {setup.description} ({setup.data}; {'; '.join(setup.protocol)}). "
        f"Each is set beside the run of ours that computes the same loss, as the mean ± std over our seeds (diverged "
        f"seeds left out) of the test metric that scores it the way seed 003 did ({how}), in percent. A published "
        f"number counts as within our seed-to-seed spread when it lies inside our {spread} (sample std over seeds); "
        "with fewer than two finished seeds there is no spread to judge by."]
    rows = []
    for row in reproduction.itertuples():
        ours = ("not run" if row.runs == 0 else "no finished seed" if row.seeds == 0 else
                f"{_percent(row.mean_percent)} ± {_percent(row.std_percent)} ({_plural(row.seeds, 'seed')}"
                + (f", {row.at_chance} at chance" if row.at_chance else "") + ")")
        within = ("n/a (not run)" if row.runs == 0 else "n/a (fewer than 2 seeds)" if pd.isna(row.within_spread)
                  else "yes" if row.within_spread else "no")
        rows.append({"published as": row.published_label, "published (%)": _percent(row.published_percent),
                     "our method": f"`{row.method}`", "scored by (ours)": f"{row.evaluation}: `{row.metric}`",
                     "ours (%, mean ± std)": ours, "ours − published (points)":
                     "n/a" if _missing(row.difference_points) else f"{row.difference_points:+.2f}",
                     f"our spread ({spread})": "n/a" if _missing(row.spread_low_percent) else
                     f"[{_percent(row.spread_low_percent)}, {_percent(row.spread_high_percent)}]",
                     "published within it": within})
    blocks.append(Table(pd.DataFrame(rows), f"Seed 003's published test accuracy against ours ({setup.name})"))

    judged = reproduction[reproduction["within_spread"].notna()]
    outside = judged[~judged["within_spread"].astype(bool)]
    sentence = (f"{len(judged) - len(outside)} of {len(judged)} published numbers that can be judged lie within our "
                f"spread" if len(judged) else "No published number can be judged against a spread of ours")
    if len(outside):
        sentence += "; outside it: " + ", ".join(
            f"{row.published_label} ({_percent(row.published_percent)} published, {_percent(row.mean_percent)} ours, "
            f"{row.difference_points:+.2f} points)" for row in outside.itertuples())
    sentences = [sentence + "."]
    collapsed = reproduction[reproduction["at_chance"] > 0]
    if len(collapsed):
        sentences.append("Some of our seeds ended at chance (test ROC AUC 0.5, a collapsed network) and widen our "
                         "spread: " + ", ".join(f"{row.published_label} {row.at_chance} of {row.runs}"
                                                 for row in collapsed.itertuples())
                         + "; a published number inside such a spread says little.")
    ranked = reproduction[reproduction["seeds"] > 0]
    if len(ranked) > 1:
        published_order = ranked.sort_values("published_percent", ascending=False, kind="stable")
        our_order = ranked.sort_values("mean_percent", ascending=False, kind="stable")
        same = list(published_order["method"]) == list(our_order["method"])
        sentences.append(f"Seed 003's order, best first: {', '.join(published_order['published_label'])}; ours: "
                         f"{', '.join(our_order['published_label'])}"
                         + (" (the same order)." if same else " (a different order)."))
    blocks.append(" ".join(sentences))

    computed = [f"**{result.label}** (published {result.accuracy_percent:.2f}): {result.computed}."
                for result in setup.results if result.computed]
    blocks += ["What seed 003's code really computed:", Bullets(computed)]

    splits = manifest.get("splits", {})
    counts = {name: entry.get("num_samples") for name, entry in splits.items()}
    total = sum(count for count in counts.values() if isinstance(count, int))
    classes = splits.get("train", {}).get("num_classes")
    ours = (f"{total:,} images: " + ", ".join(f"{count:,} {name}" for name, count in counts.items()
                                              if isinstance(count, int))
            + (f"; {classes} classes" if classes is not None else "")) if counts else "split sizes not recorded"
    source = manifest.get("source", "unknown")
    data = [f"Seed 003's numbers are on {setup.data}, with {setup.split}."]
    if manifest.get("fallback_reason"):
        reason = " ".join(str(manifest["fallback_reason"]).split()).rstrip(". ")  # one line, however it was wrapped
        data.append(f"This run used `{source}` ({ours}) because `{manifest.get('requested_source')}` could not be "
                    f"had: {reason}.")
    else:
        data.append(f"This run used `{source}` ({ours})" + (" as requested." if manifest.get("requested_source")
                                                             == source else "."))
    fractions = ", ".join(f"{f:g}" for f in manifest.get("fractions", []))
    if source in setup.same_data_sources:
        data.append(f"These are seed 003's images, but re-split by our prepare stage (train, val, test fractions "
                    f"{fractions or 'n/a'}) instead of {setup.split}, so the test images are not the same.")
    else:
        comparison = []
        train = counts.get("train")
        if setup.train_images and isinstance(train, int) and train:
            comparison.append(f"our training split has {train:,} images against its {setup.train_images:,}"
                              + (f" ({setup.train_images / train:.0f}× fewer)" if train < setup.train_images else ""))
        if total:
            comparison.append(f"{total:,} images and {classes if classes is not None else 'n/a'} classes in all "
                              f"against its {setup.images:,} and {setup.classes}")
        data.append("These are not the images seed 003 used, so the numbers are not expected to match exactly"
                    + (": " + "; ".join(comparison) if comparison else "") + ".")
    blocks += ["Data:", Bullets(data)]
    return Section("Reproduction", blocks)


def _angles_section(analysis: StudyAnalysis, figures: dict) -> Section:
    blocks = ["The median angle between each embedding and its own class weight, and the mean cosine to the other "
              "classes, over training (mean over seeds; measured on the training batch of the step before each "
              "evaluation). AdaCos's argument is that a well-chosen scale keeps the target angle falling steadily "
              "while the non-target cosines stay near zero."]
    blocks += [figures[name] for name in ("angles", "dynamic_scale") if name in figures]
    if "dynamic_scale" not in figures:
        blocks.append("No Dynamic AdaCos runs recorded their scale, so its scale curve is not shown.")
    return Section("Angle dynamics", blocks)


def _landscape_section(analysis: StudyAnalysis, figures: dict) -> Section:
    if "landscape" not in figures:
        return Section("The (s, m) landscape", ["No loss was searched."])
    s_f = f" AdaCos's s_f = {analysis.s_f:.3f} is the dashed vertical line." if analysis.s_f is not None else ""
    return Section("The (s, m) landscape", [
        f"Every finished trial of each search, coloured by its val {metric_name(analysis.objective)}; failed "
        f"(diverged) and pruned trials in grey, the best trial as a red star.{s_f}",
        figures["landscape"],
    ])


def _footer_section(environment: dict) -> Section:
    def describe(value) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{key} {item}" for key, item in value.items())
        if isinstance(value, (list, tuple)):
            return ", ".join(map(str, value))
        return str(value)

    items = [f"{key.replace('_', ' ')}: `{describe(value)}`" for key, value in environment.items()]
    return Section("Reproducibility", [Bullets(items or ["no environment recorded"])])


def _key_numbers(analysis: StudyAnalysis) -> pd.DataFrame:
    """The three to five numbers the recommendation rests on, each with its interval and what the interval covers."""
    facts = analysis.verdict_facts
    confidence = f"{analysis.confidence:.0%}"
    metric = metric_name(facts["metric"])
    searched = loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "searched loss"
    rows = []
    row = facts["tuned"]
    if row:
        rows.append({"number": f"tuned {searched} − Fixed AdaCos, test {metric}", "value": _signed(row["difference"]),
                     f"{confidence} interval": _interval(row["low"], row["high"]),
                     "what the interval covers": f"seed-to-seed variation, {row['test']} over {row['pairs']} seeds; "
                                                 f"{_judgement(row)}; Holm p = {_p(row['p_holm'])}"})
    even = facts["break_even"]
    if even and even["max_trials"]:
        rows.append({"number": f"{searched} trials until the val-selected trial matches one Fixed AdaCos run on test",
                     "value": _count(even["trials"]) if even["reached"] else f"not within {even['max_trials']}",
                     f"{confidence} interval": trials_interval(even["trials_low"], even["trials_high"],
                                                                even["max_trials"]),
                     "what the interval covers": "bootstrap over the search's trials and Fixed AdaCos's seeds"
                                                 + (f"; about {_seconds(even['seconds'])} of device time"
                                                    if even["reached"] and even["seconds"] else "")})
        rows.append({"number": f"test {metric} gain of the whole search ({_plural(even['max_trials'], 'trial')}) "
                               "over one Fixed AdaCos run", "value": _signed(even["gain"]),
                     f"{confidence} interval": _interval(even["gain_low"], even["gain_high"]),
                     "what the interval covers": "bootstrap over the search's trials and Fixed AdaCos's seeds"})
    if row and row["detectable"] is not None:
        rows.append({"number": f"smallest difference in test {metric} these {row['pairs']} seeds detect "
                               f"({facts['power']:.0%} power)", "value": f"{row['detectable']:.4f}",
                     f"{confidence} interval": "—",
                     "what the interval covers": f"paired t-test at {1 - analysis.confidence:.0%}"
                     + (f"; about {row['seeds_to_resolve']:,} seeds would resolve the observed difference"
                        if row["seeds_to_resolve"] and not (row["significant"] or row["equivalent"]) else "")})
    default = facts["default"]
    if default:
        rows.append({"number": f"{searched} at the usual defaults − Fixed AdaCos, test {metric}",
                     "value": _signed(default["difference"]),
                     f"{confidence} interval": _interval(default["low"], default["high"]),
                     "what the interval covers": f"seed-to-seed variation, {default['test']} over {default['pairs']} "
                                                 f"seeds; {_judgement(default)}"})
    return pd.DataFrame(rows)


def _answer_section(analysis: StudyAnalysis, figures: dict) -> Section:
    """The answer first: the recommendation, the figure that shows it, the numbers behind it, then the full verdict."""
    sentences = verdict_sentences(analysis)
    blocks = [f"**{sentences[0]}**"]
    if "tuning_trials" in figures:
        blocks.append(figures["tuning_trials"])
    numbers = _key_numbers(analysis)
    if len(numbers):
        blocks.append(Table(numbers, "The numbers behind the recommendation"))
    if len(sentences) > 1:
        blocks.append(" ".join(sentences[1:]))
    return Section("Verdict", blocks)


def _sections(analysis: StudyAnalysis, params: StudyParams, manifest: dict, environment: dict,
              figures: dict, reproduction: pd.DataFrame | None = None) -> list[Section]:
    objective = metric_name(analysis.objective)
    answers = (
        "ArcFace has two hyperparameters, the scale s and the margin m, that practitioners tune over many runs; "
        "AdaCos claims to need none (a fixed scale from the class count, or one that adapts every step). This report "
        f"measures, on this data, what a search of n trials buys on the held-out test split (the test {objective} of "
        "the trial val selects) and after how many trials it matches Fixed AdaCos, how tuned ArcFace retrained at "
        f"fresh seeds compares with Fixed AdaCos on every test metric (paired by seed, with "
        f"{analysis.confidence:.0%} intervals, Holm-corrected, and equivalence tests), how ArcFace at its usual "
        "defaults fares, and how many iterations each method needs to converge. Val selects; test only reports."
    )
    figures_after_answer = {name: figure for name, figure in figures.items() if name != "tuning_trials"}
    return [
        _answer_section(analysis, figures),
        Section("What this answers", [answers]),
        _setup_section(analysis, params, manifest),
        _tuning_section(analysis, figures_after_answer),
        _final_section(analysis, figures),
        _convergence_section(analysis, figures),
        _crossings_section(analysis, figures),
        _angles_section(analysis, figures),
        _landscape_section(analysis, figures),
        *([_reproduction_section(published_setup(params.report.reproduce), reproduction, manifest)]
          if params.report.reproduce and reproduction is not None else []),
        _footer_section(environment),
    ]


# --- the whole report --------------------------------------------------------------------


def write_report(analysis: StudyAnalysis, params: StudyParams, manifest: dict, environment: dict,
                 out_dir: Path) -> dict[str, Path]:
    """Write figures/, tables/, report.md, report.html (when params.report.html) and metrics.json; return their paths.

    `environment` is printed in the reproducibility footer as given (git revision, params hash, package
    versions, device...). The returned dict maps each file's path relative to out_dir to its full path.
    """
    out_dir = Path(out_dir)
    figures_dir, tables_dir = out_dir / "figures", out_dir / "tables"
    dpi = params.report.dpi
    palette = method_palette(analysis, params.report.palette)
    written: dict[str, Path] = {}

    figure_paths = {
        "tuning_trials": figure_tuning(analysis, palette, "n", figures_dir / "tuning_trials.png", dpi)
        if len(analysis.tuning_curves) else None,
        "tuning_seconds": figure_tuning(analysis, palette, "seconds", figures_dir / "tuning_seconds.png", dpi)
        if len(analysis.tuning_curves) else None,
        "tuning_val": figure_expected_best_val(analysis, palette, figures_dir / "expected_best_val.png", dpi)
        if (analysis.tuning_curves["kind"] == "search").any() else None,
        "convergence": figure_convergence(analysis, palette, figures_dir / "convergence.png", dpi),
        "crossings": figure_crossings(analysis, palette, figures_dir / "crossings.png", dpi),
        "angles": figure_angles(analysis, palette, figures_dir / "angles.png", dpi),
        "dynamic_scale": figure_dynamic_scale(analysis, palette, figures_dir / "dynamic_scale.png", dpi),
        "landscape": figure_landscape(analysis, params, figures_dir / "landscape.png", dpi),
        "final_test": figure_final_test(analysis, palette, figures_dir / "final_test.png", dpi),
    }
    captions = {
        "tuning_trials": "What n runs buy on held-out data: the expected test score of the run val selects among n "
                         "tuning trials (solid) or among n seeds of an untuned method (dashed, the budget-matched "
                         "control); bands are bootstrap intervals. The dotted line is Fixed AdaCos's mean test score "
                         "of one run, the star the break-even with its interval.",
        "tuning_seconds": "The same against the device-seconds those runs cost (log scale).",
        "tuning_val": "For contrast, the classic curve: the expected best val score of n trials against the untuned "
                      "methods' mean val (bands: their CI over seeds). It includes the maximum of n draws of seed "
                      "noise, so it overstates what tuning buys.",
        "convergence": "Val score against iteration, mean over seeds with its band; dotted lines: the targets.",
        "crossings": "AdaCos minus ArcFace, mean val score over seeds, against iteration (symlog: linear within ±0.01); "
                     "dotted lines mark where the lead settles for good, on whichever side.",
        "angles": "Median target angle θ and mean non-target cosine against iteration, mean over seeds.",
        "dynamic_scale": "Dynamic AdaCos's scale s against iteration, with Fixed AdaCos's s_f for reference.",
        "landscape": "The searched (s, m) plane: colour is the val score, the star the best trial, the dashed line "
                     "AdaCos's s_f.",
        "final_test": "Test score of every seed (points) and mean ± std over seeds (black) per method.",
    }
    figures = {}
    for name, path in figure_paths.items():
        if path is not None:
            written[f"figures/{path.name}"] = path
            figures[name] = FigureRef(f"figures/{path.name}", captions[name])

    tables = {
        "tuning_curves.csv": analysis.tuning_curves,
        "tuning_wide.csv": _tuning_wide(analysis),
        "break_even.csv": analysis.break_even,
        "run_scores.csv": analysis.run_scores,
        "convergence_speed.csv": analysis.convergence_speed,
        "final_test.csv": _final_test_table(analysis),
        "differences.csv": analysis.differences,
        "convergence.csv": analysis.convergence,
        "convergence_runs.csv": analysis.convergence_runs,
        "curves.csv": analysis.curves,
        "curves_wide.csv": _curves_wide(analysis),
        "angles.csv": analysis.angles,
        "landscape.csv": analysis.landscape,
        "reference_bands.csv": analysis.reference_bands,
        "search.csv": analysis.search_summary,
        "crossings.csv": analysis.crossings,
    }
    reproduction = (reproduction_table(analysis.run_scores, published_setup(params.report.reproduce))
                    if params.report.reproduce else None)
    if reproduction is not None:
        tables["reproduction.csv"] = reproduction
    for name, frame in tables.items():
        write_csv(frame, tables_dir / name)
        written[f"tables/{name}"] = tables_dir / name

    sections = _sections(analysis, params, manifest, environment, figures, reproduction)
    markdown_path = out_dir / "report.md"
    markdown_path.write_text(render_markdown(params.report.title, sections), encoding="utf-8")
    written["report.md"] = markdown_path
    if params.report.html:
        html_path = out_dir / "report.html"
        html_path.write_text(render_html(params.report.title, sections, out_dir), encoding="utf-8")
        written["report.html"] = html_path
    metrics_path = out_dir / "metrics.json"
    write_json(metrics_summary(analysis, reproduction), metrics_path)
    written["metrics.json"] = metrics_path
    return written
