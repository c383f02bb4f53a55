"""The benchmark's report: the answer for a new data source first (every method against Fixed AdaCos, pooled over
sources, judged on the prediction interval against a relative margin), then what tuning costs and finds, trends,
training length, tuners and every cell, as Markdown and self-contained HTML."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

import study.report.formats as fmt
from study.analysis import SOURCES_METHOD
from study.benchmark.cells import (NEAR_FLOOR_SCORE, cell_rows, convergence_iterations, learning_curves,
                                   tuning_curve)
from study.analysis import published_beside_prediction
from study.benchmark.figures import figure_forest, figure_methods, figure_tuners
from study.benchmark.long_cell import LEARNING_CURVE_CELL, LEARNING_CURVE_CELL_ON_GPU, overtaking_sentences
from study.benchmark.fingerprint import CellReportError, check_cell, report_as_locked, reported
from study.benchmark.pipelines import REPORT_OUTS, cell_finished
from study.benchmark.cost import (benchmark_seconds, budget_sentences, cost_table, plateau_stop_sentences,
                                  plateau_stop_summary, plateau_stop_table)
from study.benchmark.meta import (RELATIVE_MARGIN, UNTUNED, best_untuned, beyond_margin_from, converged_cells,
                                  longer_table, pooled_coverage, pooled_table, rate_chosen, trend_in_classes,
                                  tuner_table)
from study.benchmark.card import benchmark_card, pct, pct_interval
from study.benchmark.learning_rate import learning_rate_sentences
from study.benchmark.shown import (absolute_shown, cells_shown, convergence_shown, cost_shown, findings_shown,
                                   length_shown, methods_shown, plateau_stop_shown, published_shown, sources_shown,
                                   tuners_shown)
from study.benchmark.replay import advice_replay, replay_shown, replay_sentences
from study.report.answer_card import card_blocks
from study.report import Bullets, FigureRef, Section, Table, method_name, metric_name, render_html, render_markdown
from study.report.writer import write_staged
from study.results import REPORT_DIR, write_csv, write_json

TUNER_WORDS = {"random": "random search", "tpe": "TPE", "qmc": "QMC", "grid": "grid search"}
JUDGEMENT_WORDS = {"better": "better by more than the margin", "worse": "worse by more than the margin",
                   "equivalent": "equivalent within the margin", "slightly better": "better, by less than the margin",
                   "slightly worse": "worse, by less than the margin",
                   "open": "not resolved: the interval covers zero and reaches beyond the margin",
                   "n/a": "not estimable (fewer than 3 sources)"}


def tuner_label(sampler: str, repeats: int, pruner: str) -> str:
    """A tuner as the reader sees it: 'TPE + median pruner (3 repeats)'."""
    label = TUNER_WORDS.get(sampler, sampler) + ("" if pruner in (None, "none") else f" + {pruner} pruner")
    return label + (f" ({int(repeats)} repeats)" if repeats and repeats > 1 else "")


# --- words --------------------------------------------------------------------------------------------------


def lead_sentence(arcface: dict, best: dict, wins: list[dict]) -> str:
    """The answer in plain order: what a user who trains to convergence should expect from tuning ArcFace, what the
    short regime says (models stopped early: a sensitivity row), and the best choice that needs no tuning, with the
    class counts where another untuned loss beats Fixed AdaCos beyond the margin."""
    margin = f"±{100 * RELATIVE_MARGIN:.0f}% of the score"
    converged = arcface["converged_cells"]
    if math.isfinite(arcface.get("prediction_low", math.nan)):
        at_convergence = (f"At convergence, tuned ArcFace − Fixed AdaCos on a new data source is expected in "
                          f"{pct_interval(arcface['prediction_low'], arcface['prediction_high'])} of Fixed AdaCos's "
                          f"score ({arcface['sources']} sources): {JUDGEMENT_WORDS[arcface['judgement']]} of {margin}")
    else:
        at_convergence = (f"At convergence, not yet answered: Fixed AdaCos and tuned ArcFace converged in "
                          f"{len(converged)} cell{'' if len(converged) == 1 else 's'}"
                          + (" (" + "; ".join(f"{cell['cell']}: {pct(cell['relative'])} "
                                              f"{pct_interval(cell['low'], cell['high'])}" for cell in converged) + ")"
                             if converged else "")
                          + ", too few sources to predict a new one")
    converged_short = ("none" if not arcface["short_converged"] else str(arcface["short_converged"]))
    short = (f"Trained short ({converged_short} of the {arcface['short_configurations']} short cells converged), a new source "
             f"should expect {pct_interval(arcface['short_prediction_low'], arcface['short_prediction_high'])}: "
             f"{JUDGEMENT_WORDS[arcface['short_judgement']]} of {margin}")
    pool = "at convergence" if best["pool"] == "converged" else "trained short"
    if best["method"] == "fixed_adacos":
        untuned = f"Of the losses that need no tuning, none beats Fixed AdaCos on average {pool}"
    elif not best["distinct"]:  # the highest mean, but its interval covers Fixed AdaCos's
        untuned = (f"Of the losses that need no tuning, none is told apart from Fixed AdaCos on average {pool} (the "
                   f"highest, {method_name(best['method'])}: {pct(best['mean'])} "
                   f"{pct_interval(best['low'], best['high'])})")
    else:
        untuned = (f"Of the losses that need no tuning, {method_name(best['method'])} scores highest on average "
                   f"{pool} ({pct(best['mean'])} {pct_interval(best['low'], best['high'])})")
    for win in wins:
        untuned += (f", but {method_name(win['method'])} beats it by more than the margin at C ≥ "
                    f"{win['from_classes']:,} ({win['source']}, {win['regime']} training: "
                    f"{', '.join(pct(value) for value in win['relative'])})")
        if win.get("longer_behind"):
            longer = zip(win["longer_cells"], win["longer_relative"])
            untuned += (f", and falls behind it by more than the margin trained longer ("
                        f"{', '.join(f'{cell}: {pct(value)}' for cell, value in longer)})")
    if max(arcface["sources"], arcface["short_sources"]) <= 1:  # one source: there is nothing to pool across
        at_convergence = ("These cells come from one data source only, so nothing is pooled across sources and no "
                          "interval for a new source is estimated; each cell's own difference is in the Cells table. "
                          + at_convergence)
    return f"**{at_convergence}. {short}. {untuned}.**"


def method_sentence(facts: dict) -> str:
    """One method against Fixed AdaCos: the average over sources, a new source, real and synthetic apart."""
    name = method_name(facts["method"])
    if not math.isfinite(facts.get("prediction_low", math.nan)):  # the converged cells do not predict yet
        converged = (f"{pct(facts['mean'])} over {fmt.plural(facts['configurations'], 'converged cell')}"
                     if facts["configurations"] else "no converged cell yet")
        return (f"**{name}** − Fixed AdaCos: {converged}. Trained short: {pct(facts['short_mean'])} "
                f"{pct_interval(facts['short_low'], facts['short_high'])} on average over "
                f"{facts['short_sources']} sources; on a new source "
                f"{pct_interval(facts['short_prediction_low'], facts['short_prediction_high'])}, "
                f"{JUDGEMENT_WORDS[facts['short_judgement']]}.")
    text = (f"**{name}** − Fixed AdaCos: {pct(facts['mean'])} {pct_interval(facts['low'], facts['high'])} on average "
            f"over {facts['sources']} sources ({facts['configurations']} configurations); on a new source "
            f"{pct_interval(facts['prediction_low'], facts['prediction_high'])}, "
            f"{JUDGEMENT_WORDS[facts['judgement']]}")
    if math.isfinite(facts.get("equivalent_from", math.nan)):
        text += f"; equivalent for any margin beyond ±{100 * facts['equivalent_from']:.1f}%"
    if math.isfinite(facts.get("reliable_gain", math.nan)):
        text += f"; it reliably gains at least {pct(facts['reliable_gain'])}"
    scopes = [f"{label} {pct(facts[f'{prefix}mean'])} {pct_interval(facts[f'{prefix}low'], facts[f'{prefix}high'])} "
              f"({facts[f'{prefix}sources']} sources)" for prefix, label in (("real_", "real images"),
                                                                              ("synthetic_", "synthetic"))
              if facts[f"{prefix}sources"]]
    text += f". Apart: {'; '.join(scopes)}." if scopes else "."
    if facts.get("rate_chosen_cells"):  # the protocol's cells lead; the shared-rate pool is what it replaced
        text += sensitivity_clause(facts, "shared_rate_", "With every method at one shared learning rate instead")
    if facts.get("still_improving_cells"):  # what the plateau rule keeps out, pooled in
        text += sensitivity_clause(facts, "long_", "With the long cells still improving too "
                                                   f"({', '.join(facts['still_improving_cells'])})")
    return text


def sensitivity_clause(facts: dict, prefix: str, lead: str) -> str:
    """A sensitivity pool (`prefix`) after the headline's sentence: its mean with CI and a new source's prediction."""
    return (f" {lead}: {pct(facts[f'{prefix}mean'])} {pct_interval(facts[f'{prefix}low'], facts[f'{prefix}high'])}, "
            f"a new source {pct_interval(facts[f'{prefix}prediction_low'], facts[f'{prefix}prediction_high'])} "
            f"({fmt.plural(int(facts[f'{prefix}sources']), 'source')}; sensitivity).")


def cost_sentences(facts: dict) -> list[str]:
    """What the ArcFace search costs, against the budget-matched control and the one-run target, and its seed luck."""
    n = int(facts["matched_n"])
    return [
        f"At the same number of trainings ({n}), the trial val selects among {n} ArcFace trials scores "
        f"{fmt.signed(facts['matched_gap'])} {fmt.interval(facts['matched_low'], facts['matched_high'])} on test "
        f"against the best of {n} Fixed AdaCos runs picked by val (mean over configurations, 95% CI); the search "
        f"was ahead on {int(facts['matched_search_ahead'])} of {int(facts['matched_configurations'])} "
        "configurations.",
        f"Against one Fixed AdaCos run, the search's point estimate reached it within the search on "
        f"{int(facts['break_even_point'])} configurations, and its interval showed it on "
        f"{int(facts['break_even_shown'])}"
        + (f" (median {fmt.count(facts['break_even_trials_median'])} trials)." if facts["break_even_shown"] else "."),
        f"Seed luck: the trial val selected scored {fmt.signed(facts['seed_luck'])} "
        f"{fmt.interval(facts['seed_luck_low'], facts['seed_luck_high'])} on test above its own (s, m) retrained at "
        "fresh seeds (mean over configurations): that much of what a search reports is the selected trial's seed.",
    ]


def real_budget_sentences(results: Path) -> list[str]:
    """The budget-matched control at the search's real budget (benchmarks/budget_matched.py), per configuration where
    it was measured: the val-selected trial among n against the best of n Fixed AdaCos runs by val, up to n = N."""
    sentences = []
    for path in sorted(results.glob("*_gap.csv")):
        gaps = pd.read_csv(path)
        last = gaps.iloc[-1]
        shown = gaps[gaps["low"] > 0]
        sentences.append(
            f"On {last['cell']}, at the search's real budget: with {int(last['n'])} trainings each, the val-selected "
            f"ArcFace trial − the best of {int(last['n'])} Fixed AdaCos runs by val is {fmt.signed(last['gap'])} "
            f"{fmt.interval(last['low'], last['high'])} (over {int(last['splits'])} class splits); the search's point "
            f"estimate is ahead at {int((gaps['gap'] > 0).sum())} of {len(gaps)} n, its interval at "
            + (f"{len(shown)}, from n = {int(shown['n'].iloc[0])}." if len(shown) else "none."))
    return sentences


def slope_sentence(slope: dict) -> str:
    if not math.isfinite(slope["slope"]):
        return "No source has 3 or more class counts under the open protocol, so no trend in C is estimated."
    resolved = slope["low"] > 0 or slope["high"] < 0
    return (f"Within {slope['source']} (C = {', '.join(f'{c:,}' for c in slope['classes'])}), tuned ArcFace − Fixed "
            f"AdaCos moves by {fmt.signed(slope['slope'])} {fmt.interval(slope['low'], slope['high'])} per tenfold C "
            f"(least squares, t on {slope['k'] - 2} df){'' if resolved else '; not resolved'}. The slope is estimated "
            "within one source only: across sources C moves with the source.")


def longer_sentences(longer: pd.DataFrame) -> list[str]:
    """Seed 000's claim (AdaCos overtakes ArcFace only after about 20,000 iterations): does the difference, or the
    iterations each loss needs, change with training length?"""
    if longer.empty:
        return ["No long-regime cell has finished: training length is not yet answered."]
    sentences = []
    for (configuration, _), group in longer.groupby(["configuration", "long_cell"], sort=False):  # each longer cell
        tuned = group[group["method"] == "arcface_tuned"]
        if tuned.empty:
            continue
        row = tuned.iloc[0]
        resolved = row.change_low > 0 or row.change_high < 0
        sentences.append(
            f"On **{configuration}**, training {fmt.iterations(row.long_iterations)} iterations instead of "
            f"{fmt.iterations(row.short_iterations)}"
            + (" with each method at its val-chosen learning rate" if row.get("rate_chosen", False) else "")
            + ", tuned ArcFace − Fixed AdaCos moves from "
            f"{fmt.signed(row.short_difference)} to {fmt.signed(row.long_difference)} (change "
            f"{fmt.signed(row.change)} {fmt.interval(row.change_low, row.change_high)}"
            f"{'' if resolved else ', not resolved'}); 95% of its own best val score is reached, in the short and the "
            f"long regime, by Fixed AdaCos {_reached(row.reference_short_converged_at, row.reference_long_converged_at)}"
            f", by tuned ArcFace {_reached(row.short_converged_at, row.long_converged_at)}.")
    return sentences


def forest_pool(rows: pd.DataFrame, facts: dict) -> tuple[pd.DataFrame, dict, str]:
    """What a tuned method's forest draws: the cells its summary pools, with that summary, and a caption's words. The
    converged headline's cells where the method has a converged pool, else the short regime's (a sensitivity)."""
    own = rows[rows["method"] == facts["method"]]
    converged = converged_cells(own)
    shown = "" if math.isfinite(facts["prediction_low"]) and len(converged) else "short_"
    summary = facts | {key: facts[f"{shown}{key}"] for key in ("mean", "low", "high", "prediction_low",
                                                               "prediction_high", "sources")}
    if not shown:
        return converged, summary, " Drawn for the converged cells the headline pools."
    return (own[own["primary"].astype(bool)], summary,
            " Drawn for the short regime (a sensitivity row): no converged pool yet.")


def rate_edge_sentences(rows: pd.DataFrame) -> list[str]:
    """Per cell that chose the learning rate by val from a grid: the untuned methods for which val chose the grid's
    largest or smallest rate, on how many class splits (beyond that edge a rate may score higher still)."""
    sentences = []
    for cell, group in rows[rate_chosen(rows)].groupby("cell", sort=False):
        first = group.iloc[0]
        counts = [("fixed_adacos", first["reference_rate_top"], first["reference_rate_bottom"],
                   first["reference_rate_splits"])]
        counts += [(row.method, row.rate_top, row.rate_bottom, row.rate_splits) for row in group.itertuples()]
        edges = {edge: [f"{method_name(method)} on {int(at[index])} of {int(splits)}"
                        for method, *at, splits in counts if not fmt.missing(at[index]) and at[index] > 0]
                 for index, edge in enumerate(("largest", "smallest"))}
        if not edges["largest"] and not edges["smallest"]:
            sentences.append(f"On {cell}, val chose a learning rate inside its grid for every untuned method on "
                             "every class split.")
            continue
        said = "; ".join(f"its {edge} for {', '.join(methods)} class splits" for edge, methods in edges.items()
                         if methods)
        sentences.append(f"On {cell}, val chose the learning-rate grid's edge: {said}.")
    if any("grid's edge" in sentence for sentence in sentences):
        sentences.append("Beyond an edge a rate may score higher still: there the grid may hold those methods back. "
                         "`python benchmarks/rate_edges.py` trains each of them one grid step beyond and pools the "
                         "headline again (benchmarks/results/rate_edges.md).")
    return sentences


def _reached(short, long) -> str:
    """Iterations to a convergence target in the short and the long regime, as read: 'after 50 and 80 iterations',
    'in neither', 'only in the long one, after 880 iterations'."""
    if fmt.missing(short) and fmt.missing(long):
        return "in neither"
    if fmt.missing(short) or fmt.missing(long):
        return (f"only in the {'long' if fmt.missing(short) else 'short'} one, after "
                f"{fmt.iterations(long if fmt.missing(short) else short)} iterations")
    return f"after {fmt.iterations(short)} and {fmt.iterations(long)} iterations"


def scope_sentence(plan: dict, rows: pd.DataFrame) -> str:
    """How far this carries, computed from the plan's finished cells: the converged cells the headline pools, then the
    short regime's primary cells."""
    declared = {cell["name"]: cell for cell in plan["cells"]}
    cells = [declared[name] for name in dict.fromkeys(rows["cell"]) if declared[name]["primary"]]  # in CELL_ORDER
    sources = list(dict.fromkeys(cell["source"] for cell in cells))
    real = sorted({row.source for row in rows.itertuples() if row.real})
    floor = sorted(set(rows.loc[rows["near_floor"].astype(bool) & rows["primary"].astype(bool), "configuration"]))
    iterations = [cell.get("iterations") for cell in cells if cell.get("iterations")]
    pending = sorted(set(declared) - set(rows["cell"]))
    trained = f" trained {min(iterations):,}–{max(iterations):,} iterations per run" if iterations else ""
    classes = [cell["train_classes"] for cell in cells] or list(rows["train_classes"])
    pooled = [declared[name] for name in dict.fromkeys(
        converged_cells(rows).query("method == 'arcface_tuned'")["cell"])]
    chosen = sum(bool(c.get("learning_rates")) for c in pooled)
    rates = (f"; {chosen} of them with each method at its val-chosen learning rate, the protocol's, the others at one "
             "shared rate" if 0 < chosen < len(pooled) else "; each method at its val-chosen learning rate" if chosen
             else "; every method at one shared learning rate")
    converged = (f"The headline pools {len(pooled)} converged cells of {len({c['source'] for c in pooled})} sources "
                 f"(C = {min(c['train_classes'] for c in pooled):,}–{max(c['train_classes'] for c in pooled):,}, "
                 f"{min(c['iterations'] for c in pooled):,}–{max(c['iterations'] for c in pooled):,} iterations per "
                 f"run{rates}). " if pooled else "No cell has converged yet, so the headline pools none. ")
    return (f"How far this carries: {converged}The short regime: {len(cells)} configurations from {len(sources)} "
            f"independent sources ({', '.join(sources) or 'none'}; real images: {', '.join(real) or 'none'}), C = "
            f"{min(classes):,}–{max(classes):,} training classes, one small CNN{trained}. Configurations of one source "
            "are not independent evidence: the intervals are over sources. The headline pools the cells where Fixed "
            "AdaCos and the method converged (the plateau rule of docs/analysis.md); no cell is left out for its "
            "score: the short regime's pool is a sensitivity row, "
            f"and so is that pool without the cells where Fixed AdaCos scores below {NEAR_FLOOR_SCORE} "
            f"({', '.join(floor) or 'none'}). Other architectures, pretrained backbones, larger images and C beyond "
            "these are outside it."
            + (f" Declared but not finished, so not in these numbers: {', '.join(pending)}." if pending else ""))


# --- the whole report ---------------------------------------------------------------------------------------


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
    rows = pd.DataFrame(rows)
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
    table, pool = published_shown(pooled)
    inside = int((table["inside: defaults"] == "yes").sum())
    top = published_beside_prediction(-math.inf, math.inf).sort_values("adacos").iloc[-1]  # the nearest to 100%
    return [f"Others' same-setup comparisons of ArcFace at its defaults with AdaCos (their numbers, checked against "
            f"their repositories; `study.published`), beside this benchmark's prediction for a new source ({pool} "
            f"pool): {inside} of {len(table)} fall inside the prediction for ArcFace at its defaults. Near 100% the "
            f"remaining errors tell more than the difference: {top['benchmark']}'s {top['difference_percent']:+.2f}% "
            f"is {top['error_ratio'] - 1:+.0%} errors.",
            Table(table, "Published ArcFace − AdaCos, in % of AdaCos's score, and whether each falls inside this "
                         "benchmark's 95% prediction interval for a new source")]


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


def _write_benchmark_report(plan: dict, rows: pd.DataFrame, cells_dir: Path, report_dir: Path, out_dir: Path,
                            label: str, dpi: int) -> dict[str, Path]:
    """Every file of the benchmark's report written into `out_dir` (links made for its place, `report_dir`); their
    paths relative to it."""
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
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    written = {name: Path("tables") / f"{name}.csv" for name in ("cells", "pooled", "tuners", "longer",
                                                                  "pooled_coverage", "advise_replay", "costs",
                                                                  "plateau_stop")}
    for name, table in (("cells", rows), ("pooled", pooled), ("tuners", tuners), ("longer", longer),
                        ("pooled_coverage", coverage), ("advise_replay", replayed), ("costs", costs),
                        ("plateau_stop", stops)):
        write_csv(table, out_dir / written[name])
    # The figures draw the pool the answer reads: the converged cells once they predict a new source, else the short
    # regime's (labelled as such in the captions).
    drawn = "" if math.isfinite(arcface.get("prediction_low", math.nan)) else "short_"
    drawn_words = "" if not drawn else " Drawn for the short regime (a sensitivity row): the converged cells do not " \
                                       "yet predict a new source."
    view = pooled.assign(**{key: pooled[f"{drawn}{key}"] for key in
                            ("mean", "low", "high", "prediction_low", "prediction_high", "sources")})
    figures = {"methods": figure_methods(view, out_dir / "figures" / "methods.png", dpi)}
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
    wins = [win for method in UNTUNED if (win := beyond_margin_from(rows, method))]
    answer = [lead_sentence(arcface, best, wins), method_sentence(arcface),
              FigureRef("figures/methods.png", f"Each method − Fixed AdaCos, % of its test {metric}: mean over "
                        "sources (thick, 95% CI), a new source (thin, 95% prediction); grey: the margin."
                        + drawn_words),
              # Right after the answer: how the difference moves along training, on the longest cell.
              *_learning_curve_figure(cells_dir / LEARNING_CURVE_CELL, out_dir),
              Table(methods_shown(pooled), "Which loss should I use: every method against Fixed AdaCos, pooled over "
                                           "data sources"),
              *[method_sentence(facts) for facts in pooled.to_dict("records")[1:]], scope_sentence(plan, rows)]
    sections = [Section("The answer in a minute", card_blocks(benchmark_card(arcface, wins, rows),
                                                              "The answer below gives every method, the intervals "
                                                              "and the cells behind it.")),
                Section("Absolute scores", [Table(absolute_shown(rows, cells_dir, confidence),
                                                  "Absolute test scores per configuration (its longest cell), mean "
                                                  f"[{confidence:.0%} t interval over class splits], and the "
                                                  "difference in % of Fixed AdaCos's score",
                                                  summary="Show each method's precision@1, R-precision and MAP@R "
                                                          "per configuration")]),
                Section("Answer", answer),
                Section("Sources", [Table(sources_shown(rows, cells_dir), "The independent data sources pooled "
                                                                          "over, and how far each reaches")]),
                Section("What tuning costs", [*cost_sentences(arcface),
                                              *real_budget_sentences(cells_dir.resolve().parent / "results"
                                                                     / "budget_matched"),
                                              FigureRef(
                    "figures/forest_arcface_tuned.png", "Tuned ArcFace − Fixed AdaCos per configuration, grouped "
                    "by source (each its cell's 95% interval; hollow: near the floor), the mean over sources and the "
                    "prediction interval for a new source." + forest_words["arcface_tuned"]),
                                              *[FigureRef(f"figures/forest_{method}.png", f"{method_name(method)} − "
                                                          "Fixed AdaCos per configuration, as above."
                                                          + forest_words[method])
                                                for method in figures if method.endswith("_tuned")
                                                and method != "arcface_tuned"]]),
                Section("What tuning finds", [
                    "Where the tuned scale lands against AdaCos's s_f = √2·ln(C − 1), and how much of the val score's "
                    "variance s explains against m. The MLRC rows are Musgrave et al. (2020)'s published ArcFace "
                    "values (ImageNet-pretrained BN-Inception, 128-d embeddings), for whether tuning moves s the same "
                    "way here.",
                    Table(findings_shown(rows), "ArcFace's best (s, m) per configuration")]),
                Section("Trends and training length", [
                    slope_sentence(slope), *longer_sentences(longer),
                    *learning_rate_sentences(cells_dir.resolve().parent / "results"), *rate_edge_sentences(rows),
                    *_linked(overtaking_sentences(cells_dir / LEARNING_CURVE_CELL), cells_dir, report_dir),
                    Table(length_shown(rows), "Training length as a moderator: tuned ArcFace − Fixed AdaCos in % "
                                              "of Fixed AdaCos's score per source, short regime against converged "
                                              "cells (means over each source's configurations)"),
                    Table(convergence_shown(rows), "Convergence per cell by the plateau rule of docs/analysis.md "
                                                   "(declared before the converged runs)")]),
                Section("Published comparisons", _published_blocks(pooled))]
    if len(tuners):
        sections.append(Section("Tuners at equal trials and iterations", [
            FigureRef("figures/tuners.png", "Expected test score of the trial val selects against training "
                      "iterations per search, with its band; dashed: one Fixed AdaCos run; dotted: the budget every "
                      "tuner reached."), Table(tuners_shown(tuners, labels), "ArcFace's search under each tuner")]))
    sections.append(Section("When to stop tuning: the advice replayed", [
        *replay_sentences(replayed),
        Table(replay_shown(replayed), "The advice read after every round of each cell, as if live: where it "
                                      "stopped, what it said, and the cell's full-design verdict")]))
    unfinished = [cell["name"] for cell in plan["cells"] if cell["name"] not in set(rows["cell"])]
    sections.append(Section("What the benchmark cost", [
        *budget_sentences(seconds, costs, unfinished, cells_dir / LEARNING_CURVE_CELL,
                         cells_dir / LEARNING_CURVE_CELL_ON_GPU),
        Table(cost_shown(costs[costs["regime"] == "long"]), "What each longer cell trained (search trials and final "
                                                            "runs, every learning rate val chose among)"),
        *plateau_stop_sentences(stopping, seconds["headline"]),
        *([Table(plateau_stop_shown(stopping), "Had each final run of the converged answer stopped at its plateau: "
                                               "per floor under the stop, what it would have kept, saved and changed")]
          if len(stopping) else [])]))
    sections.append(Section("Cells", [Table(cells_shown(rows, links), f"Every finished cell of `{label}`: each "
                                                                      "method against Fixed AdaCos")]))
    sections.append(Section("How these numbers are computed", [Bullets(method_bullets(plan, rows, seconds, coverage,
                                                                                      label))]))
    title = plan["title"]
    written["benchmark.json"] = Path("benchmark.json")
    write_json({"title": title, "confidence": confidence, "margin": RELATIVE_MARGIN,
                "method": SOURCES_METHOD, "best_untuned": best, "slope_within_source": slope,
                "pooled": {row["method"]: row for row in pooled.to_dict("records")}, "device_seconds": seconds},
               out_dir / written["benchmark.json"])
    written["report.md"], written["report.html"] = Path("report.md"), Path("report.html")
    (out_dir / "report.md").write_text(render_markdown(title, sections), encoding="utf-8")
    (out_dir / "report.html").write_text(render_html(title, sections, out_dir), encoding="utf-8")
    return written | {f"figure {name}": path.relative_to(out_dir) for name, path in figures.items()}
