"""The benchmark's report: the answer for a new data source first (every method against Fixed AdaCos, pooled over
sources, judged on the prediction interval against a relative margin), then what tuning costs and finds, trends,
training length, tuners and every cell, as Markdown and HTML."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path

import pandas as pd

import study.report.formats as fmt
from study.analysis import SOURCES_METHOD
from study.analysis.scale_bands import STALLED, scale_bands
from study.benchmark.cells import cell_rows, convergence_iterations, learning_curves, search_trials, tuning_curve
from study.analysis import published_beside_prediction
from study.analysis.design import design_limits
from study.analysis.headline import headline_cells
from study.benchmark.figures import figure_forest, figure_methods, figure_tuners
from study.benchmark.long_cell import LEARNING_CURVE_CELL, LEARNING_CURVE_CELL_ON_GPU, overtaking_sentences
from study.benchmark.fingerprint import CellReportError, check_cell, report_as_locked, reported
from study.benchmark.pipelines import REPORT_OUTS, cell_finished
from study.benchmark.cost import (benchmark_seconds, budget_sentences, cost_table, plateau_stop_sentences,
                                  plateau_stop_summary, plateau_stop_table)
from study.benchmark.meta import (RELATIVE_MARGIN, UNTUNED, best_untuned,
                                  longer_table, pooled_coverage, pooled_table, trend_in_classes,
                                  tuner_table, wins_beyond_short_training)
from study.benchmark.card import benchmark_card, exchange_rate, extra_trainings
from study.benchmark.learning_rate import learning_rate_sentences
from study.benchmark.trained_on import results_beside, with_longer_runs
from study.benchmark.shown import (absolute_by_source, absolute_shown, cells_shown, convergence_shown, cost_shown, findings_shown,
                                   length_shown, methods_shown, moderators_shown, plateau_stop_shown, published_shown,
                                   scale_bands_shown, sources_shown, trained_on_shown, tuners_shown)
from study.report.benchmark_form import iterations_shown, tuning_cost_shown
from study.analysis.moderators import moderator_sentence, with_images_per_class
from study.analysis.moderators import moderator_table as moderators_of
from study.benchmark.iterations import figure_iterations, iterations_sentence, pooled_iterations
from study.benchmark.replay import advice_replay, replay_shown, replay_sentences
from study.benchmark.tuning_cost import crossings, figure_tuning_price, pooled_tuning_cost, tuning_cost_sentences
from study.benchmark.sentences import (cost_sentences, forest_pool, lead_sentence, longer_sentences, method_sentence,
                                       rate_edge_sentences, real_budget_sentences, scope_sentence, slope_sentence,
                                       tuner_label)
from study.report.answer_card import card_blocks
from study.report import Bullets, FigureRef, Section, Table, method_name, metric_name, render_html, render_markdown
from study.report.writer import write_staged
from study.results import REPORT_DIR, write_csv, write_json




# The cells' order in every table, figure and sentence, whatever the plan's: by source, protocol and class count, the
# data a cell trains (a longer cell beside its short one), training length, tuner and name; a cell's rows in its own
# method order. The same cells give the same report, byte for byte.
CELL_ORDER = ("source", "protocol", "train_classes", "data", "iterations", "tuner", "cell")


def read_cells(plan: dict, cells_dir: Path, label: str | None = None) -> pd.DataFrame:
    """Every finished cell's rows (its committed report is its current study's), one per method against Fixed AdaCos,
    in CELL_ORDER. A cell whose files the aggregate reads are not whole or not those its fingerprint records is
    refused in one line (`check_cell`; `label` names the cells' folder there), never pooled or left out in silence:
    one that is finished, or whose report is not the one its dvc.lock records."""
    rows = []
    for cell in plan["cells"]:
        directory = cells_dir / cell["name"]
        finished = cell_finished(directory)
        if finished or reported(directory) and not report_as_locked(directory):
            check_cell(directory, Path(label) / cell["name"] if label else None)
        if finished:
            rows += cell_rows(cell, directory)
    if not rows:
        return pd.DataFrame()
    # A method the declared rule trained on to convergence reads those runs (benchmarks/results beside the cells).
    rows = with_longer_runs(pd.DataFrame(rows), cells_dir, results_beside(cells_dir))
    data = rows["longer_of"].where(rows["longer_of"].notna(), rows["configuration"])
    return (rows.assign(data=data).sort_values(list(CELL_ORDER), kind="stable", na_position="last")
            .drop(columns="data").reset_index(drop=True))


def method_bullets(plan: dict, rows: pd.DataFrame, seconds: dict, coverage: pd.DataFrame, label: str
                   ) -> list[str]:
    """How the numbers are computed, and what the benchmark cost."""
    read = coverage[coverage["read"].astype(bool)] if len(coverage) else coverage
    worst = f"{read['coverage'].min():.1%}" if len(read) else "not simulated"
    return [
        f"Each cell is one whole study (its own `dvc repro` under `{label}/<cell>/`, with its own report); each "
        "configuration's first tuner's cell enters the short regime's pool; the headline pools, per configuration, "
        "its longest cell in which Fixed AdaCos and the method converged (best val rose under 1% over the second "
        "half of training, declared before the converged runs), a cell that chose each method's learning rate by "
        "val before one at a shared rate; the other tuners' cells enter only the tuner comparison.",
        "A cell's difference is the mean over its class splits of the paired (same split and seed) differences; its "
        "standard error is the one over splits (k − 1 df), or, where that falls below it, the floor the seed noise "
        "within splits implies (√(s²_within / (splits·seeds)), on the within df).",
        f"Pooling: {SOURCES_METHOD} (`study.analysis.pool_across_sources`), on the difference as a share "
        "of the cell's Fixed AdaCos score. Its coverage was simulated with these cells' standard errors on their "
        "degrees of freedom, in worlds with a source effect from none to 4× the configuration spread "
        f"(tables/pooled_coverage.csv): worst {worst} at nominal 95%. "
        "DerSimonian–Laird over configurations, which treats configurations of one source as independent, is "
        "printed beside it and not read.",
        f"The margin is ±{100 * RELATIVE_MARGIN:.0f}% of Fixed AdaCos's score, fixed before the cells ran: a share "
        "of the score reads the same on every data set, where an absolute margin is a different share of a high and "
        "of a near-floor score. The verdict reads the prediction interval for a new source against it; "
        "'equivalent from' is the smallest margin at which that interval shows equivalence.",
        "The budget-matched control is the best of n Fixed AdaCos runs picked by val, n the seeds per split: the same "
        "number of trainings as a search of n trials. A break-even is counted only where its interval shows it.",
        "Tuners are compared at equal trials and at equal training iterations (a pruned trial costs the iterations "
        "it ran); TPE's random start-up trials are a quarter of its budget. Device-seconds are shown as measured and "
        "never used to rank tuners run at different times.",
        f"Device-seconds trained: {fmt.seconds(seconds['trained'])} ({fmt.seconds(seconds['short'])} in the short "
        f"regime, {fmt.seconds(seconds['longer'])} in longer cells; untuned runs that a configuration's tuners share "
        f"count once); {len(plan['cells'])} cells declared, {rows['cell'].nunique()} finished.",
    ]


def _linked(sentences: list[str], cells_dir: Path, report_dir: Path) -> list[str]:
    """The learning-curve cell's sentences, its name linked to its report."""
    if not sentences:
        return []
    link = Path(os.path.relpath(cells_dir / LEARNING_CURVE_CELL / REPORT_DIR / "report.md", report_dir)).as_posix()
    return [sentences[0] + f" ([report]({link}))", *sentences[1:]]


def _learning_curve_figure(cell: Path, out_dir: Path) -> list:
    """The 20,000-iteration cell's learning curves, copied beside the report (its HTML embeds its own figures)."""
    source = cell / REPORT_DIR / "figures" / "learning_curves.png"
    if not source.is_file():
        return []
    target = out_dir / "figures" / "learning_curves_20k.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())
    return [FigureRef("figures/learning_curves_20k.png", f"{cell.name}: each method's test score along 20,000 "
                      "iterations (band: every run), and each method − Fixed AdaCos with its 95% interval.")]


def _published_blocks(pooled: pd.DataFrame) -> list:
    table, pool, power = published_shown(pooled)
    inside = int((table["inside: defaults"] == "yes").sum())
    top = published_beside_prediction(-math.inf, math.inf).sort_values("adacos").iloc[-1]  # the nearest to 100%
    test = ("n/a (no prediction interval)" if fmt.missing(power.chance) else
            f"Counting them is {'a test' if power.is_a_test else 'no test'} at this width "
            f"({power.width:.1f} points): rows as spread as the published ones (sd {power.spread:.1f} points) but drawn "
            f"from another distribution, centred on the interval, would show {power.inside} of {power.rows} inside "
            f"with chance {power.chance:.0%}; {power.rows} of {power.rows} would be a test at "
            f"{power.alpha:.0%} only for an interval narrower than {power.width_for_a_test:.1f} points, and narrower "
            f"still counting the rows that share one training as one draw.")
    return [f"Others' same-setup comparisons of ArcFace at its defaults with AdaCos (their numbers, checked against "
            f"their repositories; `study.published`), beside this benchmark's prediction for a new source of ArcFace "
            f"at its defaults ({pool} pool): {inside} of {len(table)} fall inside it. {test} Near 100% the "
            f"remaining errors tell more than the difference: {top['benchmark']}'s {top['difference_percent']:+.2f}% "
            f"is {top['error_ratio'] - 1:+.0%} errors.",
            Table(table, "Published ArcFace − AdaCos, in % of AdaCos's score, and whether each falls inside this "
                         "benchmark's 95% prediction interval for a new source of ArcFace at its defaults")]


def aggregate_benchmark(plan_path: str | Path, report_dir: str | Path, *, label: str = ".", dpi: int = 120
                        ) -> dict[str, Path]:
    """The aggregate stage: every finished cell of plan.json read from its committed report (each checked against its
    fingerprint first), pooled over sources and written to report_dir: report.md, report.html, benchmark.json,
    tables/ and figures/, swapped in whole once all of them are written (a run stopped before leaves the previous
    report as it was)."""
    plan_path, report_dir = Path(plan_path), Path(report_dir)
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    cells_dir = plan_path.parent
    rows = read_cells(plan, cells_dir, label)
    if rows.empty:
        raise CellReportError(f"no cell of {plan_path} is finished yet, so there is nothing to pool; `study benchmark` "
                              "runs them (`study benchmark --list` shows each cell's state)")
    written = write_staged(report_dir, lambda staging: _write_benchmark_report(plan, rows, cells_dir, report_dir,
                                                                               staging, label, dpi), REPORT_OUTS)
    return {name: report_dir / path for name, path in written.items()}


DETAILS = "details"  # the page that holds everything the main page links to rather than shows


def _main_sections(card: list, drawn_words: str, rows: pd.DataFrame, absolute: pd.DataFrame,
                   confidence: float, tuning: tuple, iterations: pd.DataFrame, moderators: tuple, cost: list,
                   links: dict, pooled_cells: list[str]) -> list[Section]:
    """The page a reader finishes (≤ 3,000 words): the decision and how sure, the methods figure, one absolute-score
    table per source from the pooled cells, what tuning costs, how fast each loss converges, where tuning pays, what
    the benchmark cost, and links to the details and each cell's own report."""
    metric = metric_name(rows["metric"].iloc[0].removeprefix("test_"))
    by_source = [Table(table, f"{source}: test {metric}, mean [{confidence:.0%} interval over class splits, on the "
                       "logit scale] (its difference in % of Fixed AdaCos's score)")
                 for source, table in absolute_by_source(absolute, metric).items()] if len(absolute) else []
    table, sentences, exchange = tuning
    moderator_table, moderator_sentence = moderators
    return [
        Section("The answer in a minute", card),
        Section("Which loss to use", [FigureRef("figures/methods.png", "Each method − Fixed AdaCos, % of its test "
                                                "score: mean over sources (thick, 95% CI), a new source (thin, 95% "
                                                f"prediction); grey: the ±{100 * RELATIVE_MARGIN:.0f}% margin." + drawn_words)]),
        Section("Absolute scores, from the cells the answer pools", by_source),
        Section("What tuning costs against what it buys", [
            *sentences, FigureRef("figures/tuning_price.png", "Tuned ArcFace's val-selected trial − the best of as "
                                  "many Fixed AdaCos trainings by val, % of Fixed AdaCos's score, pooled over sources "
                                  "(band: 95% CI); read a price off it: the dashed line is what the search's extra "
                                  "trainings cost at analysis.price_per_training."),
            *([f"{exchange}."] if exchange else []),
            Table(tuning_cost_shown(table), "The pooled tuning curve (tables/tuning_cost.csv)")]),
        Section("How fast each loss converges", [
            iterations_sentence(iterations),
            FigureRef("figures/convergence_iterations.png", "Iterations to 95% (circle) and 99% (square) of each "
                      "run's own best val, × Fixed AdaCos's in the same cell, pooled over sources (thick: 95% CI; "
                      "thin: a new source); grey: as many iterations."),
            Table(iterations_shown(iterations), "Iterations to reach 95% and 99% of each run's own best val, against "
                                                "Fixed AdaCos's in the same cell, pooled over sources "
                                                "(tables/convergence_iterations.csv)")]),
        Section("Where tuning pays", [moderator_sentence, Table(moderators_shown(moderator_table), "Moderators of "
                                      "tuned ArcFace − Fixed AdaCos, declared in docs/analysis.md before the "
                                      "analysis (tables/moderators.csv)")]),
        Section("What the benchmark cost", cost),
        Section("Details", [Bullets([f"[Every method, every pooled and sensitivity number, the tuners, the advice "
                                     f"replayed, every cell and how the numbers are computed]({DETAILS}.md)",
                                     "The cells the answer pools, each with its own report: " + ", ".join(
                                         f"[{cell}]({links[cell]})" for cell in pooled_cells) + "."])]),
    ]


def _write_benchmark_report(plan: dict, rows: pd.DataFrame, cells_dir: Path, report_dir: Path, out_dir: Path,
                            label: str, dpi: int) -> dict[str, Path]:
    """Every file of the benchmark's report written into `out_dir` (links made for its place, `report_dir`); their
    paths relative to it: the main page (report.md, .html), the details page (details.md, .html), benchmark.json,
    tables/ and figures/."""
    confidence = float(rows["confidence"].iloc[0])
    pooled = pooled_table(rows, confidence)
    arcface = pooled[pooled["method"] == "arcface_tuned"].iloc[0].to_dict()
    # The untuned losses are ranked in the pool the headline can read: the converged cells once they predict a new
    # source, the short regime until then.
    best = best_untuned(pooled, "" if math.isfinite(arcface.get("prediction_low", math.nan)) else "short_")
    slope = trend_in_classes(rows, confidence)
    tuner_cells = rows[rows["method"] == "arcface_tuned"]
    curves = {cell: tuning_curve(cells_dir / cell, "arcface") for cell in tuner_cells["cell"]}
    tuners = tuner_table(rows, curves)
    labels = {row.cell: tuner_label(row.sampler, row.repeats, row.pruner) for row in tuner_cells.itertuples()}
    convergence = {cell: convergence_iterations(cells_dir / cell) for cell in rows["cell"].unique()}
    longer = longer_table(rows, convergence, confidence)
    seconds = benchmark_seconds(rows)
    coverage = pooled_coverage(rows)
    replayed = advice_replay(rows, cells_dir)
    costs = cost_table(rows)
    learning = {cell: learning_curves(cells_dir / cell) for cell in costs.loc[costs["headline"].astype(bool), "cell"]}
    stops = plateau_stop_table({cell: table for cell, table in learning.items() if table is not None})
    stopping = plateau_stop_summary(stops, costs)
    headline = headline_cells(rows)
    tuned_headline = headline[headline["method"] == "arcface_tuned"]
    pooled_curve = pooled_tuning_cost(rows, cells_dir, confidence)
    iterations = pooled_iterations(rows, cells_dir, confidence)
    moderated = with_images_per_class(tuned_headline, cells_dir)
    moderator_table = moderators_of(moderated, confidence)
    scales = scale_bands(search_trials(rows, cells_dir, "arcface"), confidence)
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    tables = {"cells": rows, "pooled": pooled, "tuners": tuners, "longer": longer, "pooled_coverage": coverage,
              "advise_replay": replayed, "costs": costs, "plateau_stop": stops, "tuning_cost": pooled_curve,
              "convergence_iterations": iterations, "moderators": moderator_table, "scale_bands": scales}
    written = {name: Path("tables") / f"{name}.csv" for name in tables}
    for name, table in tables.items():
        write_csv(table, out_dir / written[name])
    # The figures draw the pool the answer reads: the converged cells once they predict a new source, else the short
    # regime's (labelled as such in the captions).
    drawn = "" if math.isfinite(arcface.get("prediction_low", math.nan)) else "short_"
    drawn_words = "" if not drawn else " Drawn for the short regime (a sensitivity row): the converged cells do not " \
                                       "yet predict a new source."
    view = pooled.assign(**{key: pooled[f"{drawn}{key}"] for key in
                            ("mean", "low", "high", "prediction_low", "prediction_high", "sources")})
    figures = {"methods": figure_methods(view, out_dir / "figures" / "methods.png", dpi),
               "tuning_price": figure_tuning_price(pooled_curve, out_dir / "figures" / "tuning_price.png", dpi),
               "convergence_iterations": figure_iterations(iterations, out_dir / "figures" /
                                                           "convergence_iterations.png", dpi)}
    forest_words = {}
    for facts in pooled[pooled["tuned"].astype(bool)].to_dict("records"):
        method_rows, facts, forest_words[facts["method"]] = forest_pool(rows, facts)
        figures[facts["method"]] = figure_forest(method_rows, facts, out_dir / "figures" /
                                                 f"forest_{facts['method']}.png", dpi)
    if len(tuners):
        figures["tuners"] = figure_tuners(tuners, curves, labels, out_dir / "figures" / "tuners.png", dpi)
    links = {cell: Path(os.path.relpath(cells_dir / cell / REPORT_DIR / "report.md", report_dir)).as_posix()
             for cell in rows["cell"].unique()}
    metric = metric_name(arcface["metric"].removeprefix("test_"))
    wins = wins_beyond_short_training(rows, UNTUNED)
    design = (asdict(design_limits(tuned_headline["relative"], tuned_headline["relative_se"], tuned_headline["source"],
                                   confidence)) if tuned_headline["source"].nunique() >= 3 else None)
    default = pooled.set_index("method").loc["arcface_default"].to_dict() if (
        pooled["method"] == "arcface_default").any() else None
    card = card_blocks(benchmark_card(arcface, wins, rows, default, design),
                       f"[The details]({DETAILS}.md) give every method, the intervals and the cells behind it.")
    search_cost = extra_trainings(rows)  # the price read off the figure, as the card states it
    exchange = (exchange_rate(arcface, search_cost["extra"])
                if search_cost and math.isfinite(arcface.get("mean", math.nan)) else "")
    unfinished = [cell["name"] for cell in plan["cells"] if cell["name"] not in set(rows["cell"])]
    cost = budget_sentences(seconds, costs, unfinished, cells_dir / LEARNING_CURVE_CELL,
                            cells_dir / LEARNING_CURVE_CELL_ON_GPU)
    absolute = absolute_shown(rows, cells_dir, confidence)
    main = _main_sections(card, drawn_words, rows, absolute, confidence,
                          (pooled_curve, tuning_cost_sentences(pooled_curve, crossings(pooled_curve)), exchange),
                          iterations,
                          (moderator_table, moderator_sentence(moderator_table, moderated)), cost, links,
                          list(dict.fromkeys(headline["cell"])))
    answer = [lead_sentence(arcface, best, wins).strip("*"), method_sentence(arcface),
              # Right after the answer: how the difference moves along training, on the longest cell.
              *_learning_curve_figure(cells_dir / LEARNING_CURVE_CELL, out_dir),
              Table(methods_shown(pooled), "Which loss should I use: every method against Fixed AdaCos, pooled over "
                                           "data sources"),
              *[method_sentence(facts) for facts in pooled.to_dict("records")[1:]], scope_sentence(plan, rows)]
    details = [Section("The evidence behind the answer", answer),
               Section("Absolute scores", [Table(absolute.drop(columns=["source", "pooled"]),
                                                 "Absolute test scores per configuration (the cell the answer pools, "
                                                 f"else its longest), mean [{confidence:.0%} interval over class "
                                                 "splits, on the logit scale], and the difference in % of Fixed "
                                                 "AdaCos's score", summary="Show each method's precision@1, "
                                                 "R-precision and MAP@R per configuration")]),
               Section("Sources", [Table(sources_shown(rows, cells_dir), "The independent data sources pooled "
                                                                         "over, and how far each reaches")]),
               Section("What tuning costs, cell by cell", [
                   *cost_sentences(arcface),
                   *real_budget_sentences(cells_dir.resolve().parent / "results" / "budget_matched"),
                   FigureRef("figures/forest_arcface_tuned.png", "Tuned ArcFace − Fixed AdaCos per configuration, "
                             "grouped by source (each its cell's 95% interval; hollow: near the floor), the mean over "
                             f"sources and the prediction interval for a new source ({metric})."
                             + forest_words["arcface_tuned"]),
                   *[FigureRef(f"figures/forest_{method}.png", f"{method_name(method)} − Fixed AdaCos per "
                               "configuration, as above." + forest_words[method])
                     for method in figures if method.endswith("_tuned") and method != "arcface_tuned"]]),
               Section("What tuning finds", [
                   "Where the tuned scale lands against AdaCos's s_f = √2·ln(C − 1), and how much of the val score's "
                   "variance s explains against m. The MLRC rows are Musgrave et al. (2020)'s published ArcFace "
                   "values (ImageNet-pretrained BN-Inception, 128-d embeddings), for whether tuning moves s the same "
                   "way here.",
                   Table(findings_shown(rows), "ArcFace's best (s, m) per configuration"),
                   Table(scale_bands_shown(scales, confidence), "Every trial of the random ArcFace searches by its s "
                         f"in units of s_f at its cell's class count: how many stalled, ending below "
                         f"{STALLED:.0%} of the best val of its class split's search (tables/scale_bands.csv), "
                         "with an interval that allows for stalls clustering in a few cells (its coverage in "
                         "simulated benchmarks clustered as these cells are: "
                         "benchmarks/results/scale_bands_coverage.csv)")]),
               Section("Trends and training length", [
                   slope_sentence(slope), *longer_sentences(longer),
                   *learning_rate_sentences(cells_dir.resolve().parent / "results"), *rate_edge_sentences(rows),
                   *_linked(overtaking_sentences(cells_dir / LEARNING_CURVE_CELL), cells_dir, report_dir),
                   Table(length_shown(rows), "Training length as a moderator: tuned ArcFace − Fixed AdaCos in % "
                                             "of Fixed AdaCos's score per source, short regime against converged "
                                             "cells (means over each source's configurations)"),
                   Table(convergence_shown(rows), "Convergence per cell by the plateau rule of docs/analysis.md "
                                                  "(declared before the converged runs)"),
                   Table(trained_on_shown(rows), "Methods still improving in a headline cell, trained on alone at "
                                                 "its splits, seeds and val-chosen rates as docs/analysis.md "
                                                 "declares (2×, then at most 4× its iterations): the pooled rows "
                                                 "read the longer runs")]),
               Section("Published comparisons", _published_blocks(pooled))]
    if len(tuners):
        details.append(Section("Tuners at equal trials and iterations", [
            FigureRef("figures/tuners.png", "Expected test score of the trial val selects against training "
                      "iterations per search, with its band; dashed: one Fixed AdaCos run; dotted: the budget every "
                      "tuner reached."), Table(tuners_shown(tuners, labels), "ArcFace's search under each tuner")]))
    details.append(Section("When to stop tuning: the advice replayed", [
        *replay_sentences(replayed),
        Table(replay_shown(replayed), "The advice read after every round of each cell, as if live: where it "
                                      "stopped, what it said, and the cell's full-design verdict")]))
    details.append(Section("What each cell cost", [
        Table(cost_shown(costs[costs["regime"] == "long"]), "What each longer cell trained (search trials and final "
                                                            "runs, every learning rate val chose among)"),
        *plateau_stop_sentences(stopping, seconds["headline"]),
        *([Table(plateau_stop_shown(stopping), "Had each final run of the converged answer stopped at its plateau: "
                                               "per floor under the stop, what it would have kept, saved and changed")]
          if len(stopping) else [])]))
    details.append(Section("Cells", [Table(cells_shown(rows, links), f"Every finished cell of `{label}`: each "
                                                                     "method against Fixed AdaCos")]))
    details.append(Section("How these numbers are computed", [Bullets(method_bullets(plan, rows, seconds, coverage,
                                                                                     label))]))
    title = plan["title"]
    written["benchmark.json"] = Path("benchmark.json")
    write_json({"title": title, "confidence": confidence, "margin": RELATIVE_MARGIN,
                "method": SOURCES_METHOD, "best_untuned": best, "slope_within_source": slope,
                "pooled": {row["method"]: row for row in pooled.to_dict("records")}, "device_seconds": seconds,
                "design": design, "tuning_cost": crossings(pooled_curve)},
               out_dir / written["benchmark.json"])
    for name, page_title, sections in (("report", title, main), (DETAILS, f"{title}: the details", details)):
        written[f"{name}.md"], written[f"{name}.html"] = Path(f"{name}.md"), Path(f"{name}.html")
        (out_dir / f"{name}.md").write_text(render_markdown(page_title, sections), encoding="utf-8")
        # The HTML pages link to each other's HTML (and the cells' own), the Markdown to the Markdown.
        html = render_html(page_title, sections, out_dir).replace(".md\"", ".html\"")
        (out_dir / f"{name}.html").write_text(html, encoding="utf-8")
    return written | {f"figure {name}": path.relative_to(out_dir) for name, path in figures.items()}
