"""The benchmark report's tables as they are shown: each one a few columns of words and intervals read from the
cells' rows, the pooled estimates and the tuners, in the order the report reads them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

import study.report.formats as fmt
from study.analysis import published_beside_prediction
from study.plateau import PLATEAU_RISE
from study.analysis.headline import headline_cells, rate_chosen
from study.analysis.published_comparisons import InsideByChance, inside_by_chance
from study.benchmark.meta import (RELATIVE_MARGIN, SCOPES, length_by_source)
from study.adacos_scale import fixed_adacos_scale
from study.published import MLRC_ARCFACE
from study.benchmark.card import pct, pct_interval
from study.report.sections import absolute_shown as study_absolute_shown
from study.report import method_name
from study.results import REPORT_DIR

# What each source stands in for, and what it cannot: the reader judges how far the pooled answer reaches their data.
SOURCE_ROLES = {
    "digits": ("scikit-learn's 8×8 handwritten digits: small real images", "many classes, the open protocol, "
               "realistic resolution"),
    "mnist": ("MNIST handwriting (mnist5k), and Double MNIST composed from it: real strokes, 100 composed classes "
              "under the open protocol", "natural images; variation beyond a writer's hand"),
    "fashion-mnist": ("Zalando's product photographs in grey 28×28, and pairs of them: real photographed objects, "
                      "100 composed classes under the open protocol", "identities (faces), fine-grained classes, "
                      "colour"),
    "glyphs": ("Unicode characters in 16 font faces, and CJK ideographs in Noto's 20 (cjk): up to 20,000 classes "
               "under the open protocol, the stand-in for many-identity data", "real images; its classes differ in "
               "shape only"),
    "strokes": ("random pen-stroke characters: arbitrary shapes whose classes no typeface designed apart",
                "real images; texture and colour"),
    "emoji": ("colour emoji (Noto Color Emoji) on random backgrounds: RGB images whose classes differ in colour "
              "and shape", "natural photographs; within-class variation beyond jitter"),
    "wesnoth": ("Battle for Wesnoth's hand-pixelled unit sprites: a class is a unit's line, its instances the "
                "animation frames people drew", "photographs; classes beyond a hundred"),
    "freedroid": ("FreedroidRPG's 3D models of items and droids seen from 32 angles, as COIL-100's turntable: objects "
                  "modelled by people, varying by pose", "photographs; lighting and background"),
    "cards": ("the 52 cards of 14 card decks drawn by people: fine-grained classes (a ten against a nine of one "
              "suit) in each deck's own style", "many classes; many images per class"),
    "iconify": ("one icon name (home, camera) as the open icon sets draw it: classes that are concepts, "
                "instances in designers' styles", "photographs; grey levels beyond black ink on white"),
}


def sources_shown(rows: pd.DataFrame, cells_dir: Path) -> pd.DataFrame:
    """Every source of the finished cells: what it stands in for, what it cannot, its cells and the device each ran
    on (as its own report says)."""
    table = []
    for source, group in rows.groupby("source", sort=False):
        role, cannot = SOURCE_ROLES.get(source, ("your own data (`study benchmark --add`)", "other data than yours"))
        cells = list(dict.fromkeys(group["cell"]))
        devices = sorted({_device_of(cells_dir / cell) for cell in cells})
        table.append({"source": source, "made by people": "yes" if group["by_people"].iloc[0] else "no",
                      "stands in for": role, "cannot stand in for": cannot, "cells": ", ".join(cells),
                      "device": ", ".join(devices)})
    return pd.DataFrame(table)


def _device_of(cell: Path) -> str:
    """The device a cell's study trained on, as its report states it ("measured on cpu")."""
    report = cell / REPORT_DIR / "report.md"
    found = re.search(r"measured on ([\w:]+)", report.read_text(encoding="utf-8")) if report.is_file() else None
    return found.group(1) if found else "not stated"


# --- tables ----------------------------------------------------------------------------------------------


def convergence_shown(rows: pd.DataFrame) -> pd.DataFrame:
    """Per cell, the plateau rule for Fixed AdaCos and tuned ArcFace: how much the best val so far rose over the
    second half of training, and whether the cell enters the converged headline."""
    tuned = rows[(rows["method"] == "arcface_tuned") & (rows["primary"].astype(bool) | (rows["regime"] == "long"))]
    return pd.DataFrame([{
        "cell": row.cell, "iterations": fmt.iteration_number(row.iterations), "regime": row.regime,
        "Fixed AdaCos: rise over the second half": fmt.rise(row.reference_rise),
        "tuned ArcFace": fmt.rise(row.method_rise), "both converged (< 1%)": "yes" if row.converged else "no",
        "read from": "every run's curve" if row.plateau_basis == "runs" else "the mean val curve over runs",
    } for row in tuned.itertuples()])


def trained_on_shown(rows: pd.DataFrame) -> pd.DataFrame:
    """Per headline cell and method trained on to convergence (study.benchmark.trained_on): the cell's own runs
    against the longer ones the pooled rows read, each with the plateau rule's rise and its difference to Fixed
    AdaCos in % of Fixed AdaCos's score."""
    longer = rows[rows["length_factor"].astype(int) > 1] if "length_factor" in rows else rows.iloc[:0]
    return pd.DataFrame([{
        "cell": row.cell, "method": method_name(row.method),
        "cell's length": fmt.iteration_number(row.iterations), "rise there": fmt.rise(row.own_rise),
        "− Fixed AdaCos there": pct(row.own_relative),
        "trained on to": f"{fmt.iteration_number(row.iterations * row.length_factor)} ({int(row.length_factor)}×)",
        "rise": fmt.rise(row.method_rise),
        f"converged (< {PLATEAU_RISE:.0%})": "yes" if row.method_rise < PLATEAU_RISE else "no, at the cap",
        "− Fixed AdaCos, read": f"{pct(row.relative)} "
                                f"{pct_interval(row.low / row.reference_test_mean, row.high / row.reference_test_mean)}",
    } for row in longer.itertuples()])


def published_shown(pooled: pd.DataFrame) -> tuple[pd.DataFrame, str, InsideByChance]:
    """The published same-setup ArcFace − AdaCos rows beside the prediction for a new source of ArcFace at its
    defaults (the pooled row of `arcface_default`: they ran it at its defaults, so tuned ArcFace's prediction is not
    theirs to answer), which pool's prediction that is, and what counting them inside it can show."""
    rows = pooled.set_index("method")
    prefix = "" if math.isfinite(rows["prediction_low"].get("arcface_default", math.nan)) else "short_"
    # A method the benchmark did not run has no prediction: every row then reads n/a.
    low, high = (100 * rows[f"{prefix}{key}"].get("arcface_default", math.nan)
                 for key in ("prediction_low", "prediction_high"))
    shown = published_beside_prediction(low, high)
    table = pd.DataFrame({
        "source": shown["source"], "benchmark": shown["benchmark"], "AdaCos": shown["adacos_variant"],
        "ArcFace": shown["arcface"].map(lambda v: f"{v:.2f}"), "AdaCos score": shown["adacos"].map(lambda v: f"{v:.2f}"),
        "ArcFace − AdaCos": shown["difference_percent"].map(lambda v: f"{v:+.2f}%"),
        "errors, ArcFace ÷ AdaCos": shown["error_ratio"].map(lambda v: f"{v:.2f}×"),
        "inside: defaults": shown["inside"].map({True: "yes", False: "no"}).fillna("n/a"),
        "note": shown["note"]})
    return table, SCOPES[prefix], inside_by_chance(shown["difference_percent"], low, high)


def methods_shown(pooled: pd.DataFrame) -> pd.DataFrame:
    """"Which loss should I use": every method against Fixed AdaCos, as the reader sees it."""
    return pd.DataFrame([{
        "method": method_name(row.method), "needs tuning": "yes" if row.tuned else "no",
        "mean over sources [95% CI]": f"{pct(row.mean)} {pct_interval(row.low, row.high)}",
        "a new source [95% prediction]": pct_interval(row.prediction_low, row.prediction_high),
        "mean at fresh seeds for every method (the rate choice's bounds)": "n/a" if fmt.missing(row.fresh_low_mean)
        else f"{pct(row.fresh_low_mean)} to {pct(row.fresh_high_mean)}",
        f"against ±{100 * RELATIVE_MARGIN:.0f}%": row.judgement,
        "equivalent from": "n/a" if fmt.missing(row.equivalent_from) else f"±{100 * row.equivalent_from:.1f}%",
        "made by people": f"{pct(row.people_mean)} {pct_interval(row.people_low, row.people_high)}",
        "rendered by code": f"{pct(row.code_mean)} {pct_interval(row.code_low, row.code_high)}",
        "converged, one shared learning rate: a new source (sensitivity)": pct_interval(
            row.shared_rate_prediction_low, row.shared_rate_prediction_high),
        "trained long, converged or not: a new source (sensitivity)": pct_interval(
            row.long_prediction_low, row.long_prediction_high),
        "short regime: a new source (sensitivity)": f"{pct(row.short_mean)} "
                                                    f"{pct_interval(row.short_prediction_low, row.short_prediction_high)}",
        "short, near-floor cells out (sensitivity)": f"{pct(row.short_off_floor_mean)} " + pct_interval(
            row.short_off_floor_prediction_low, row.short_off_floor_prediction_high),
        "short: a new source's true effect, Bayesian (beside)": pct_interval(row.short_true_low, row.short_true_high),
        "short: weighted by inverse variance (beside)": f"{pct(row.short_inverse_variance_mean)} "
                                                         + pct_interval(row.short_inverse_variance_low,
                                                                        row.short_inverse_variance_high),
        "absolute [95% CI]": f"{fmt.signed(row.absolute_mean)} {fmt.interval(row.absolute_low, row.absolute_high)}",
        "DerSimonian–Laird over configurations (not read)": f"{pct(row.dl_estimate)} "
                                                            f"{pct_interval(row.dl_low, row.dl_high)}",
    } for row in pooled.itertuples()])


def findings_shown(rows: pd.DataFrame) -> pd.DataFrame:
    """What the ArcFace search found per configuration, with the published MLRC values as reference rows."""
    tuned = rows[(rows["method"] == "arcface_tuned") & (rows["primary"].astype(bool) | (rows["regime"] == "long"))]
    shown = [{"data": f"{row.configuration} ({row.source})", "C": f"{int(row.train_classes):,}",
              "tuned s / s_f, median [range over splits]": f"{row.s_ratio_median:.2f} "
                                                          f"[{row.s_ratio_low:.2f}, {row.s_ratio_high:.2f}]",
              "tuned m (rad), median": f"{row.best_m_median:.2f}",
              "splits selecting s at an edge of the range": f"{int(row.s_edge_splits)} of {int(row.splits)} "
                                                            f"(s in [{row.s_range}])",
              "share of val variance from s (PED-ANOVA)": "n/a" if fmt.missing(row.importance_s)
              else f"{row.importance_s:.0%}"} for row in tuned.itertuples()]
    shown += [{"data": f"{entry['data']} (MLRC, published)", "C": f"{entry['train_classes']:,}",
               "tuned s / s_f, median [range over splits]":
                   f"{entry['s'] / fixed_adacos_scale(entry['train_classes']):.1f} (s = {entry['s']:g}, s_f = "
                   f"{fixed_adacos_scale(entry['train_classes']):.1f})",
               "tuned m (rad), median": f"{math.radians(entry['margin_degrees']):.2f} ({entry['margin_degrees']}°)",
               "splits selecting s at an edge of the range": "—",
               "share of val variance from s (PED-ANOVA)": "—"} for entry in MLRC_ARCFACE]
    return pd.DataFrame(shown)


def scale_bands_shown(bands: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """study.analysis.scale_bands as the reader sees it: a band per row, its stalled trials as a count and a rate."""
    return pd.DataFrame([{
        "s / s_f": f"({row.low:g}, {row.high:g}]" if math.isfinite(row.high) else f"over {row.low:g}",
        "trials (cells)": f"{row.trials:,} ({row.cells})",
        f"stalled [{confidence:.0%} interval]": "—" if not row.trials else
        f"{row.stalled} ({row.stalled_share:.0%} [{row.stalled_low:.0%}, {row.stalled_high:.0%}])",
        "median val, share of the split's best": "—" if not row.trials else f"{row.median_share_of_best:.0%}",
    } for row in bands.itertuples()])


def cells_shown(rows: pd.DataFrame, links: dict[str, str]) -> pd.DataFrame:
    """One row per cell and method, as the reader sees it."""
    return pd.DataFrame([{
        "cell": row.cell, "method": method_name(row.method),
        "source": f"{row.source} ({'made by people' if row.by_people else 'rendered by code'})",
        "C": f"{int(row.train_classes):,}", "iterations": fmt.iteration_number(row.iterations) + (
            f" (this method {fmt.iteration_number(row.iterations * row.length_factor)}: trained on to converge)"
            if getattr(row, "length_factor", 1) > 1 else ""),
        "Fixed AdaCos": fmt.score(row.reference_test_mean) + (" (near floor)" if row.near_floor else ""),
        "− Fixed AdaCos [95% CI]": f"{fmt.signed(row.difference)} {fmt.interval(row.low, row.high)}",
        "% of its score": pct(row.relative),
        "SE (df, from)": f"{fmt.score(row.standard_error)} ({fmt.count(row.df)}, {row.se_from})",
        "detectable": fmt.score(row.detectable) if fmt.missing(row.detectable) or row.detectable <= 1
        else "not detectable with these splits",
        "report": f"[report]({links[row.cell]})",
    } for row in rows.itertuples()])


def cost_shown(costs: pd.DataFrame) -> pd.DataFrame:
    """cost.cost_table as the reader sees it."""
    return pd.DataFrame([{
        "cell": row.cell, "C": f"{int(row.train_classes):,}",
        "iterations per training": fmt.iteration_number(row.iterations),
        "trainings": fmt.count(row.trainings), "device time (summed)": f"{row.seconds / 3600:.2f} h",
        "ms per iteration (evaluation included)": "n/a" if fmt.missing(row.seconds_per_iteration)
        else f"{1000 * row.seconds_per_iteration:.1f}",
        "in the converged answer": "yes" if row.headline else "no"} for row in costs.itertuples()])


def plateau_stop_shown(summary: pd.DataFrame) -> pd.DataFrame:
    """cost.plateau_stop_summary as the reader sees it."""
    return pd.DataFrame([{
        "a run stops no earlier than": "its first evaluations" if row.earliest_share == 0
        else f"{row.earliest_share:.0%} of its length",
        "final runs' iterations kept": f"{row.iterations_kept:.0%}",
        "device time saved (summed)": f"{row.seconds_saved / 3600:.1f} h",
        "tuned ArcFace − Fixed AdaCos, where it moved most": f"{pct(row.shift_from)} → {pct(row.shift_to)} "
                                                             f"({row.largest_shift_cell})",
        "largest loss of a method's mean score": f"{pct(row.largest_loss)} ({method_name(row.largest_loss_method)}, "
                                                 f"{row.largest_loss_cell})"} for row in summary.itertuples()])


def absolute_shown(rows: pd.DataFrame, cells_dir: Path, confidence: float) -> pd.DataFrame:
    """Per configuration, the absolute test scores per method (mean [CI over class splits] of precision@1,
    R-precision and MAP@R, PML-style) of the cell the headline pools (study.analysis.headline), else of its longest
    protocol cell, the objective's difference in % of Fixed AdaCos's beside: the same cells as the pooled rows."""
    data = lambda frame: frame["longer_of"].where(frame["longer_of"].notna(), frame["configuration"])  # noqa: E731
    answered = rows[rows["primary"].astype(bool) | (rows["regime"] == "long")].assign(data=data)
    pooled = set(headline_cells(rows)["cell"])
    answered = answered.assign(chosen=rate_chosen(answered), pooled=answered["cell"].isin(pooled))
    # Per data: the pooled cell first, then a cell of the protocol (rate chosen by val), then the longest.
    ranked = answered.sort_values(["pooled", "chosen", "iterations"], kind="stable")
    tables = []
    for cell in ranked.drop_duplicates("data", keep="last").sort_values(["data"], kind="stable").itertuples():
        runs = pd.read_csv(cells_dir / cell.cell / REPORT_DIR / "tables" / "run_scores.csv")
        methods = list(dict.fromkeys(runs["method"]))
        shown = study_absolute_shown(runs, methods, confidence, cell.metric.removeprefix("test_"))
        shown.insert(0, "configuration", f"{cell.data} ({fmt.iteration_number(cell.iterations)} it"
                                          + (", converged" if cell.converged else "") + ")")
        shown.insert(0, "pooled", cell.pooled)
        shown.insert(0, "source", cell.source)
        tables.append(shown)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def length_shown(rows: pd.DataFrame) -> pd.DataFrame:
    """meta.length_by_source as the reader sees it."""
    return pd.DataFrame([{
        "source": row.source, "short: configurations (iterations)": f"{row.short_configurations} "
                                                                   f"({row.short_iterations or 'none'})",
        "short: tuned ArcFace − Fixed AdaCos": pct(row.short_relative),
        "converged: cells (iterations)": f"{row.converged_cells} ({row.converged_iterations or 'none yet'})",
        "converged: tuned ArcFace − Fixed AdaCos": pct(row.converged_relative)}
        for row in length_by_source(rows).itertuples()])


def tuners_shown(tuners: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{
        "configuration": row.configuration, "tuner": labels[row.cell],
        "trials (pruned)": f"{fmt.count(row.trials)} ({fmt.count(row.pruned_trials)})",
        "iterations per trial": "n/a" if fmt.missing(row.iterations_per_trial) else f"{row.iterations_per_trial:,.0f}",
        "selected test at equal trials [95%]":
            f"{fmt.score(row.test_at_budget)} {fmt.interval(row.low_at_budget, row.high_at_budget)} "
            f"({fmt.count(row.budget)} trials)",
        "selected test at equal iterations [95%]":
            f"{fmt.score(row.test_at_iterations)} {fmt.interval(row.low_at_iterations, row.high_at_iterations)} "
            f"({'n/a' if fmt.missing(row.iterations_budget) else f'{row.iterations_budget:,.0f}'} iterations)",
        "device-seconds per trial (as measured, not compared)": fmt.seconds(row.seconds_per_trial),
    } for row in tuners.itertuples()])


def moderators_shown(table: pd.DataFrame) -> pd.DataFrame:
    """study.analysis.moderators.moderator_table as the reader sees it: slopes in % of Fixed AdaCos's score per unit
    of the moderator."""
    columns = ["moderator", "level", "slope", "low", "high", "leave_one_source_out_min", "leave_one_source_out_max",
               "leave_one_source_out_same_sign", "supported", "cells", "sources", "note"]
    fitted = table.reindex(columns=columns)
    return pd.DataFrame([{
        "moderator (declared before the analysis)": row.moderator,
        f"slope [{row.level:.0%} interval, Bonferroni]": row.note if isinstance(row.note, str) and row.note else
        f"{pct(row.slope)} {pct_interval(row.low, row.high)}",
        "leaving out one source": f"{pct(row.leave_one_source_out_min)} to {pct(row.leave_one_source_out_max)}"
        if math.isfinite(row.leave_one_source_out_min) else "",
        "sign kept": "" if row.leave_one_source_out_same_sign != row.leave_one_source_out_same_sign else
        "yes" if row.leave_one_source_out_same_sign else "no",
        "supports a condition": "yes" if row.supported else "no", "cells (sources)": f"{row.cells} ({row.sources})",
    } for row in fitted.itertuples()])


def absolute_by_source(absolute: pd.DataFrame, metric: str) -> dict[str, pd.DataFrame]:
    """absolute_shown's pooled cells, one table per source: a row per method, a column per configuration, its
    `metric` (mean [interval]) and its difference to Fixed AdaCos."""
    pooled = absolute[absolute["pooled"].astype(bool)]
    tables = {}
    for source, group in pooled.groupby("source", sort=False):
        versus = next(column for column in group.columns if column.endswith("vs Fixed AdaCos"))
        cells = group.assign(shown=group[metric] + " (" + group[versus].str.replace("reference", "ref.") + ")")
        table = cells.pivot_table(index="method", columns="configuration", values="shown", aggfunc="first",
                                  sort=False)
        tables[source] = table.reindex(list(dict.fromkeys(group["method"]))).reset_index()
    return tables


def moved_differences_shown(compared: pd.DataFrame, change: str = "", after: str = "after") -> pd.DataFrame:
    """A check's differences to Fixed AdaCos that it moved (`compared`: cell, method, difference, relative, low, high
    and each `_after`), as its summary shows them: the share of Fixed AdaCos's score before → after (`change` names the
    two, e.g. "at the end → early"), and the absolute difference `after` with its interval."""
    moved = compared[compared["difference"] != compared["difference_after"]]
    return pd.DataFrame({
        "cell": moved["cell"], "method": moved["method"].map(method_name),
        f"− Fixed AdaCos (% of its score){', ' + change if change else ''}": [
            f"{pct(a)} → {pct(b)}" for a, b in zip(moved["relative"], moved["relative_after"])],
        f"absolute, {after} [95% CI]": [f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]" for d, lo, hi in
                                        zip(moved["difference_after"], moved["low_after"], moved["high_after"])]})


def headline_before_after_shown(headline: pd.DataFrame) -> pd.DataFrame:
    """The converged headline pooled before → after a check (study.benchmark.meta.headline_with_differences), per
    method: the mean over sources and a new source's prediction, each with its interval."""
    return pd.DataFrame({
        "method": headline["method"].map(method_name),
        "mean over sources [95% CI]": [f"{pct(r.mean)} {pct_interval(r.low, r.high)} → {pct(r.mean_after)} "
                                       f"{pct_interval(r.low_after, r.high_after)}" for r in headline.itertuples()],
        "a new source [95% prediction]": [f"{pct_interval(r.prediction_low, r.prediction_high)} → "
                                          f"{pct_interval(r.prediction_low_after, r.prediction_high_after)}"
                                          for r in headline.itertuples()]})
