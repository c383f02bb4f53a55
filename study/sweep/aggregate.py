"""The sweep's aggregate: every C's study in one table, one figure and a report whose trend sentences are
computed from the numbers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from study.analysis import REFERENCE_METHOD, TEST_PREFIX, fixed_scale_of, primary_loss
from study.report import (FigureRef, Section, Table, loss_name, metric_name, new_figure, plain_log_ticks, render_html,
                          render_markdown, save_figure, trials_interval)
import study.report.formats as fmt
from study.results import PREPARED_DIR, prepared_dir, read_csv, read_json, search_dir, tuned_method, write_csv
from study.sweep.pipelines import (DEFAULT_REPORT_DIR, DIFFERENCES_FILE, MANIFEST_NAME, METRICS_FILE, REPORT_FILES,
                                   TOTAL_PLACEHOLDER, SweepError, class_count_dir)

TABLE_COLUMNS = ["C", "s_f", "tuned_loss", "best_s", "best_m", "search_trials", "break_even_reached",
                 "break_even_trials", "break_even_low", "break_even_high", "break_even_seconds", "search_gain",
                 "search_gain_low", "search_gain_high", "recommendation", "objective", "difference", "difference_low",
                 "difference_high", "p_value", "significant", "tuned_test_mean", "adacos_test_mean"]


def _number(value) -> float:
    return math.nan if value is None else float(value)


def _split_of(directory: Path) -> int:
    """The class split whose best trial and manifest stand for one C's study: its first (all splits of a study hold
    the same class count)."""
    folders = sorted((Path(directory) / PREPARED_DIR).glob("split*/" + MANIFEST_NAME))
    if not folders:
        raise FileNotFoundError(f"{Path(directory) / PREPARED_DIR} holds no class split's manifest; run `dvc repro` "
                                f"in {directory}")
    return min(int(folder.parent.name.removeprefix("split")) for folder in folders)


def class_count_row(train_classes: int, directory: Path) -> dict:
    """One C's numbers, read from its finished study's metrics.json, differences.csv and best.json."""
    directory = Path(directory)
    metrics = read_json(directory / METRICS_FILE, "report")
    loss = primary_loss(list(metrics.get("break_even", {})))
    if loss is None:
        raise ValueError(f"{directory / METRICS_FILE} records no searched loss, so there is no tuned method to "
                         "compare with Fixed AdaCos; search at least one loss (search.losses)")
    best = read_json(directory / search_dir(loss, _split_of(directory)) / "best.json", f"search@{loss}")
    objective, tuned = best["objective"], tuned_method(loss)
    metric = f"{TEST_PREFIX}{objective}"
    even = metrics["break_even"][loss][REFERENCE_METHOD]
    verdict = metrics.get("verdict", {})
    cost = verdict.get("cost") or {}
    differences = read_csv(directory / DIFFERENCES_FILE, "report")
    row = differences[(differences["method"] == tuned) & (differences["metric"] == metric)]
    difference = row.iloc[0] if len(row) else pd.Series(dtype=object)
    s_f = fixed_scale_of(train_classes)

    def test_mean(method):
        return _number(metrics.get(method, {}).get(metric, {}).get("mean"))

    return {
        "C": train_classes, "s_f": math.nan if s_f is None else s_f, "tuned_loss": loss,
        "best_s": _number(best["hyperparameters"].get("s")), "best_m": _number(best["hyperparameters"].get("m")),
        "search_trials": int(even["max_trials"]), "break_even_reached": bool(even["reached"]),
        "break_even_trials": _number(even["trials"]), "break_even_low": _number(even["low"]),
        "break_even_high": _number(even["high"]), "break_even_seconds": _number(even["seconds"]),
        # What the whole search buys over one Fixed AdaCos run (recommend()'s cost), with its interval where valid.
        "search_gain": _number(cost.get("gain")), "search_gain_low": _number(cost.get("gain_low")),
        "search_gain_high": _number(cost.get("gain_high")),
        "recommendation": verdict.get("recommendation", "n/a"), "objective": objective,
        "difference": _number(difference.get("difference")), "difference_low": _number(difference.get("low")),
        "difference_high": _number(difference.get("high")), "p_value": _number(difference.get("p_holm")),
        "significant": bool(difference.get("significant", False)),
        "tuned_test_mean": test_mean(tuned), "adacos_test_mean": test_mean(REFERENCE_METHOD),
    }


def class_count_table(directories: dict[int, Path]) -> pd.DataFrame:
    """One row per class count C (ascending): s_f, the tuned loss's best (s, m), break-even and the test difference."""
    rows = [class_count_row(c, directory) for c, directory in sorted(directories.items())]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def check_train_classes(train_classes: int, directory: Path) -> None:
    """Refuse a class count whose prepared data (its manifest) does not hold exactly C training classes."""
    manifest = read_json(Path(directory) / prepared_dir(_split_of(directory)) / MANIFEST_NAME, "prepare")
    prepared, dataset = manifest["splits"]["train"]["num_classes"], manifest.get("requested_source", manifest["source"])
    if prepared != train_classes:
        raise SweepError(f"C={train_classes}: data.dataset={dataset} gives {prepared} training "
                         f"classes, not {train_classes}; give a --dataset-template whose {TOTAL_PLACEHOLDER} sets the "
                         f"class count, e.g. 'glyphs:{TOTAL_PLACEHOLDER}:40'")


def aggregate_sweep(classes: Sequence[int], sweep_dir: str | Path = ".", report_dir: str | Path = DEFAULT_REPORT_DIR,
                    *, label: str | None = None, dpi: int = 120) -> dict[str, Path]:
    """The aggregate stage: every C's study in `sweep_dir` (named `label` in the report) to table, figure, report."""
    directories = {c: class_count_dir(sweep_dir, c) for c in sorted(set(classes))}
    for train_classes, directory in directories.items():
        check_train_classes(train_classes, directory)
    return write_sweep_report(class_count_table(directories), report_dir,
                              sweep_dir=sweep_dir if label is None else label, dpi=dpi)


def _slope_per_decade(classes, values) -> float:
    """Least-squares slope of `values` against log10 C (NaN where fewer than two finite points)."""
    x, y = np.log10(np.asarray(classes, dtype=float)), np.asarray(values, dtype=float)
    keep = np.isfinite(y)
    if keep.sum() < 2 or np.ptp(x[keep]) == 0:
        return math.nan
    return float(np.polyfit(x[keep], y[keep], 1)[0])


def _break_even_text(row) -> str:
    return f"{int(row.break_even_trials)}" if row.break_even_reached else f"not within {row.search_trials}"


def _scale_course(classes: list[int], values: list[float]) -> str:
    """How the best s moves from C to C, runs of steps the same way merged; compared as printed (3 digits)."""
    shown = [float(f"{value:.3g}") for value in values]
    course = []  # [step, first C, last C]
    for before, after, start, end in zip(shown, shown[1:], classes, classes[1:]):
        step = "grows" if after > before else "shrinks" if after < before else f"stays at {before:g}"
        if course and course[-1][0] == step:
            course[-1][2] = end
        else:
            course.append([step, start, end])
    if len(course) > 1:
        return ", then ".join(f"{step} from C = {start} to {end}" for step, start, end in course) + \
            ", while s_f grows throughout"
    step = course[0][0]
    return {"grows": "grows with C, as s_f does",
            "shrinks": "shrinks as C grows, while s_f grows"}.get(step, f"{step} at every C, while s_f grows")


def trend_sentences(table: pd.DataFrame) -> str:
    """The trend with C, every clause chosen from the table's numbers: the difference's slope and the break-even."""
    if table.empty:
        return "No class count finished, so there is no trend to report."
    tuned = f"tuned {loss_name(table['tuned_loss'].iloc[0])}"
    metric = metric_name(table["objective"].iloc[0])
    classes = table["C"].tolist()
    span = f"C = {classes[0]} to {classes[-1]}" if len(classes) > 1 else f"C = {classes[0]}"
    sentences = []
    slope = _slope_per_decade(table["C"], table["difference"])
    finite = table[np.isfinite(table["difference"])]
    if len(finite) < 2 or not math.isfinite(slope):
        if len(finite):
            row = finite.iloc[0]
            sentences.append(f"At C = {row.C}, {tuned} − Fixed AdaCos on test {metric} is {row.difference:+.4f}; "
                             "a trend needs at least two class counts.")
        else:
            sentences.append(f"No class count has a test difference between {tuned} and Fixed AdaCos.")
    else:
        favoured = tuned if slope > 0 else "Fixed AdaCos"
        first, last = finite.iloc[0], finite.iloc[-1]
        sentences.append(
            f"Across {span}, the test {metric} difference {tuned} − Fixed AdaCos moves in favour of {favoured} as C "
            f"grows ({slope:+.4f} per tenfold C by least squares on log C; {first.difference:+.4f} at C = {first.C}, "
            f"{last.difference:+.4f} at C = {last.C}).")
        change = abs(slope) * np.ptp(np.log10(finite["C"].to_numpy(dtype=float)))
        half_widths = ((finite["difference_high"] - finite["difference_low"]) / 2).dropna()
        if len(half_widths) and change < half_widths.median():
            sentences.append(f"That change ({change:.4f} over the range) is smaller than the typical 95% CI "
                             f"half-width ({half_widths.median():.4f}), so the trend is not resolved by these seeds.")
    significant = table[table["significant"]]
    sentences.append(
        f"The difference is significant at {len(significant)} of {len(table)} class counts"
        + (f" ({', '.join(f'C = {c}' for c in significant['C'])})." if len(significant) else "."))
    # Break-even: "not reached" counts as one trial past the search's budget, so it ranks above any reached value.
    trials = np.where(table["break_even_reached"], table["break_even_trials"], table["search_trials"] + 1)
    listing = ", ".join(f"C = {row.C}: {_break_even_text(row)}" for row in table.itertuples())
    if not table["break_even_reached"].any():
        sentences.append(f"The trial val selects in {loss_name(table['tuned_loss'].iloc[0])}'s search never reached "
                         f"one Fixed AdaCos run's mean test score within the search at any C ({listing}).")
    elif len(table) > 1:
        trend = _slope_per_decade(table["C"], trials)
        direction = "rise" if trend > 0 else "fall" if trend < 0 else "stay level"
        sentences.append(f"Break-even trials {direction} with C ({listing}).")
    else:
        sentences.append(f"Break-even: {listing} trials.")
    scales = table[np.isfinite(table["best_s"]) & np.isfinite(table["s_f"])]
    if len(scales) > 1:
        # Does the searched s grow with C the way AdaCos's s_f = √2·ln(C−1) does, at every step?
        pairs = ", ".join(f"{row.best_s:.3g} against s_f = {row.s_f:.3g} at C = {row.C}"
                          for row in scales.itertuples())
        sentences.append(f"The search's best s {_scale_course(scales['C'].tolist(), scales['best_s'].tolist())}: "
                         f"{pairs}.")
    return " ".join(sentences)


def figure_class_count(table: pd.DataFrame, path: Path, dpi: int = 120) -> Path:
    """Three panels against C (log x): break-even trials, the test difference with its CI, and s_f with the best s."""
    figure, axes = new_figure(ncols=3, size=(14.0, 4.6))
    classes = table["C"].to_numpy(dtype=float)
    for ax in axes:
        ax.set_xscale("log")
        if len(classes):  # fixed before plotting, so a single C does not autoscale to an empty range
            ax.set_xlim(classes.min() / 1.5, classes.max() * 1.5)
        ax.set_xlabel("training classes C (log scale)")
    tuned = f"tuned {loss_name(table['tuned_loss'].iloc[0])}" if len(table) else "tuned"
    metric = metric_name(table["objective"].iloc[0]) if len(table) else "objective"

    ax = axes[0]
    reached_mask = table["break_even_reached"].astype(bool)
    reached, missed = table[reached_mask], table[~reached_mask]
    top = float(table["search_trials"].max()) if len(table) else 1.0
    if len(reached):
        ax.plot(reached["C"], reached["break_even_trials"], "o-", color="C0", label="break-even reached")
        # The bootstrap interval; an end that some replicates never reach is drawn at the search's budget.
        low = reached["break_even_low"].fillna(reached["break_even_trials"])
        high = reached["break_even_high"].fillna(reached["search_trials"])
        ax.errorbar(reached["C"], reached["break_even_trials"], yerr=[reached["break_even_trials"] - low,
                    high - reached["break_even_trials"]], fmt="none", ecolor="C0", elinewidth=1.0, capsize=4,
                    label="95% bootstrap interval")
    if len(missed):
        ax.plot(missed["C"], missed["search_trials"], "o", markerfacecolor="none", color="C3", markersize=9,
                label="not reached within the search (drawn at its budget)")
        for row in missed.itertuples():
            ax.annotate("not reached", (row.C, row.search_trials), textcoords="offset points", xytext=(0, -14),
                        ha="center", fontsize="small", color="C3")
    for row in reached.itertuples():
        ax.annotate(f"{row.break_even_seconds:.0f} s", (row.C, row.break_even_trials), textcoords="offset points",
                    xytext=(0, 7), ha="center", fontsize="small", color="C0")
    ax.set_ylim(0, top * 1.15 + 0.5)
    ax.set_ylabel("break-even (tuning trials)")
    ax.set_title("Break-even: trials until tuning matches Fixed AdaCos on test", fontsize="medium")
    ax.legend(fontsize="small", loc="upper left")

    ax = axes[1]
    ax.axhline(0.0, color="black", linewidth=1.0)
    for significant, face, label in ((True, None, "significant (95% CI excludes 0)"),
                                     (False, "none", "not significant")):
        part = table[(table["significant"] == significant) & np.isfinite(table["difference"])]
        if part.empty:
            continue
        low = (part["difference"] - part["difference_low"]).fillna(0.0).clip(lower=0.0)
        high = (part["difference_high"] - part["difference"]).fillna(0.0).clip(lower=0.0)
        ax.errorbar(part["C"], part["difference"], yerr=[low, high], fmt="o", color="C2", capsize=4,
                    markerfacecolor=face, markersize=8, label=label)
    finite = table[np.isfinite(table["difference"])]
    ax.plot(finite["C"], finite["difference"], "-", color="C2", alpha=0.5)
    ax.set_ylabel(f"test {metric}: {tuned} − Fixed AdaCos\n(score difference, 95% CI)")
    ax.set_title("Above 0: tuning pays; below 0: Fixed AdaCos is better", fontsize="medium")
    ax.legend(fontsize="small", loc="best")

    ax = axes[2]
    if len(classes):
        # The formula drawn as a smooth curve through the swept points (which come from fixed_scale_of).
        dense = np.geomspace(max(classes.min() / 1.5, 2.5), classes.max() * 1.5, 200)
        ax.plot(dense, np.sqrt(2.0) * np.log(dense - 1.0), "-", color="C1", label="Fixed AdaCos s_f = √2·ln(C−1)")
    ax.plot(table["C"], table["s_f"], "o", color="C1")
    ax.plot(table["C"], table["best_s"], "D", color="C0", markersize=8, label=f"{tuned}: best s of the search")
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    ax.set_ylabel("scale s (log scale)")
    ax.set_title("AdaCos's fixed scale and the searched scale", fontsize="medium")
    ax.legend(fontsize="small", loc="best")
    for ax in axes:
        plain_log_ticks(ax.xaxis)
    return save_figure(figure, path, dpi)


def _cell(value, format_spec: str, missing: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, format_spec)


def _shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the reader sees it: formatted numbers, 'not reached' spelled out."""
    rows = []
    for row in table.itertuples():
        rows.append({
            "C": row.C, "s_f": _cell(row.s_f, ".3f"), "best s": _cell(row.best_s, ".2f"),
            "best m (rad)": _cell(row.best_m, ".3f"),
            "break-even trials [95% interval]": f"{_break_even_text(row)} "
                                                f"{trials_interval(row.break_even_low, row.break_even_high, row.search_trials)}",
            "break-even seconds": _cell(row.break_even_seconds, ".1f", "—") if row.break_even_reached else "—",
            "search gain on test [95%]": f"{fmt.signed(row.search_gain)} "
                                         f"{fmt.interval(row.search_gain_low, row.search_gain_high)}",
            "tuned − AdaCos (test, paired)": fmt.signed(row.difference),
            "95% CI": fmt.interval(row.difference_low, row.difference_high),
            "significant": ("yes" if row.significant else "no") + (f" (Holm p = {row.p_value:.3g})"
                                                                  if math.isfinite(row.p_value) else ""),
            "recommendation": row.recommendation,
            "tuned test mean": fmt.score(row.tuned_test_mean),
            "Fixed AdaCos test mean": fmt.score(row.adacos_test_mean),
        })
    return pd.DataFrame(rows)


def write_sweep_report(table: pd.DataFrame, report_dir: str | Path = DEFAULT_REPORT_DIR,
                       sweep_dir: str | Path | None = None, dpi: int = 120) -> dict[str, Path]:
    """Write class_count.csv, class_count.png, report.md and a report.html that links the PNG; return their paths."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    written = {name: report_dir / name for name in REPORT_FILES}
    write_csv(table, written["class_count.csv"])
    figure_class_count(table, written["class_count.png"], dpi)
    tuned = f"tuned {loss_name(table['tuned_loss'].iloc[0])}" if len(table) else "the tuned loss"
    metric = metric_name(table["objective"].iloc[0]) if len(table) else "objective"
    blocks = [
        "The whole study was run once per training class count C, each in its own folder"
        + (f" under `{sweep_dir}`" if sweep_dir is not None else "")
        + f"; every number below comes from that folder's report. s_f = √2·ln(C−1) is Fixed AdaCos's scale; "
          f"the difference is {tuned} minus Fixed AdaCos on test {metric}, paired by seed, with its 95% CI over "
          "seeds and significance after Holm's correction across the test metrics; break-even is the number of "
          "search trials after which the test score of the trial val selects reaches Fixed AdaCos's mean test "
          "score of one run, with its bootstrap interval; the search gain is what the whole search buys on test "
          "over one Fixed AdaCos run; the recommendation is each study's own verdict.",
        trend_sentences(table),
        Table(_shown_table(table), f"{tuned} against Fixed AdaCos at each class count"),
        FigureRef("class_count.png",
                  "Left: break-even tuning trials against C (hollow: not reached within the search, drawn at its "
                  f"budget). Middle: {tuned} − Fixed AdaCos on test {metric} with its 95% CI (hollow: not "
                  "significant). Right: Fixed AdaCos's s_f and the search's best s (log scales)."),
    ]
    title = "How the verdict moves with the number of classes"
    sections = [Section("Class count", blocks)]
    written["report.md"].write_text(render_markdown(title, sections), encoding="utf-8")
    written["report.html"].write_text(render_html(title, sections, report_dir), encoding="utf-8")
    return written
