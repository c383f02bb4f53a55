"""Class-count sweep: the whole study at several training class counts C, and how the verdict moves with C.

Each C gets a folder (`sweeps/C<C>/`) holding its own params.yaml; the DVC stages run unchanged
inside it, in dvc.yaml's order, and write their usual files there (see study/results.py). The
aggregate then reads three of those files per C — reports/metrics.json, reports/tables/
differences.csv and results/search/<loss>/best.json — and writes one table, one figure and a
report with a trend sentence computed from the numbers.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from study.analysis import REFERENCE_METHOD, TEST_PREFIX, fixed_scale_of, primary_loss
from study.config import ConfigError, StudyParams, load_params
from study.data import _split_counts
from study.presets import build_preset, write_params
from study.report import (
    FigureRef,
    Section,
    Table,
    loss_name,
    metric_name,
    render_html,
    render_markdown,
    trials_interval,
)
from study.results import REPORT_DIR, SEARCH_DIR, read_csv, read_json, tuned_method, write_csv

REPO_ROOT = Path(__file__).resolve().parents[1]
DVC_FILE = REPO_ROOT / "dvc.yaml"
DEFAULT_SWEEP_DIR = Path("sweeps")
DEFAULT_REPORT_DIR = Path("reports/sweep")
TOTAL_PLACEHOLDER = "{total}"
# The three files of a finished study that the aggregate reads (relative to one C's folder).
METRICS_FILE = REPORT_DIR / "metrics.json"
DIFFERENCES_FILE = REPORT_DIR / "tables" / "differences.csv"
MANIFEST_FILE = Path("data/prepared/manifest.json")
LOG_TAIL_LINES = 40
TABLE_COLUMNS = ["C", "s_f", "tuned_loss", "best_s", "best_m", "search_trials", "break_even_reached",
                 "break_even_trials", "break_even_low", "break_even_high", "break_even_seconds", "search_gain",
                 "search_gain_low", "search_gain_high", "recommendation", "objective", "difference", "difference_low",
                 "difference_high", "p_value", "significant", "tuned_test_mean", "adacos_test_mean"]

Log = Callable[[str], None]


class SweepError(RuntimeError):
    """A class count that cannot be set up, or a stage that failed during the sweep."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- which dataset gives exactly C training classes ---------------------------------------


def total_classes_for(train_classes: int, protocol: str, fractions: Sequence[float]) -> int:
    """The class count the dataset must have so that the protocol's train split holds exactly `train_classes`.

    Closed: every split has every class, so it is C itself. Open: the smallest total whose class
    split, computed by the data module's own `_split_counts` (the function `split_dataset` uses),
    gives C train classes and the ≥ 2 val and test classes the open protocol requires.
    """
    if train_classes < 3:
        raise ValueError(f"C = {train_classes} training classes is too few: Fixed AdaCos's s_f = √2·ln(C−1) "
                         "needs C ≥ 3")
    if protocol == "closed":
        return train_classes
    if protocol != "open":
        raise ValueError(f"unknown protocol {protocol!r}; known: closed, open")
    total = train_classes
    while True:
        counts = _split_counts(total, fractions)
        if counts[0] > train_classes:  # the train count only grows with the total: C was skipped
            break
        if counts[0] == train_classes and min(counts[1:]) >= 2:
            return total
        total += 1
    raise ValueError(f"no class count gives exactly {train_classes} training classes and ≥ 2 val and test classes "
                     f"under the open protocol with fractions {list(fractions)}")


def default_dataset_template(dataset: str) -> str:
    """The template a sweep varies when none is given: a glyphs spec with its class count replaced, else the dataset."""
    name, _, argument = dataset.partition(":")
    if name == "glyphs":
        return ":".join(["glyphs", TOTAL_PLACEHOLDER, *argument.split(":")[1:]])
    return dataset  # a fixed source: each C keeps that many of its classes (data.classes)


def class_count_params(base: StudyParams, train_classes: int, template: str) -> StudyParams:
    """`base` made to give exactly `train_classes` training classes: data.dataset from `template` when it has
    {total} (a source generated at that size, such as glyphs), else data.classes keeps that many of the source's."""
    total = total_classes_for(train_classes, base.data.protocol, base.data.fractions)
    values = base.to_dict()
    if TOTAL_PLACEHOLDER in template:
        values["data"]["dataset"] = template.replace(TOTAL_PLACEHOLDER, str(total))
    else:
        values["data"].update(dataset=template, classes=total)
    return StudyParams.from_dict(values)


# --- the stages, from dvc.yaml -------------------------------------------------------------


@dataclass(frozen=True)
class StageCommand:
    """One stage of the pipeline as DVC names it (`search@arcface`) and the command that runs it."""

    name: str
    argv: tuple[str, ...]


def _lookup(values: dict, reference) -> list:
    """A `foreach` list: given literally, or as `${section.key}` into the params."""
    if isinstance(reference, list):
        return reference
    match = re.fullmatch(r"\$\{([\w.]+)\}", str(reference).strip())
    if not match:
        raise ValueError(f"dvc.yaml: cannot expand foreach {reference!r}; the sweep understands ${{section.key}}")
    value = values
    for key in match.group(1).split("."):
        value = value[key]
    return list(value)


def _argv(command: str) -> tuple[str, ...]:
    if "${" in command:
        raise ValueError(f"dvc.yaml: the command {command!r} uses an interpolation the sweep cannot expand")
    words = shlex.split(command)
    if words and words[0] in ("python", "python3"):
        words[0] = sys.executable  # the interpreter running the sweep, so the stages see the same packages
    return tuple(words)


def pipeline_stages(params: StudyParams, dvc_file: Path = DVC_FILE) -> list[StageCommand]:
    """The study's stage commands in dvc.yaml's order, each `foreach` expanded over its params list."""
    stages = yaml.safe_load(Path(dvc_file).read_text(encoding="utf-8"))["stages"]
    values = params.to_dict()
    commands = []
    for name, stage in stages.items():
        if "foreach" in stage:
            for item in _lookup(values, stage["foreach"]):
                commands.append(StageCommand(f"{name}@{item}", _argv(stage["do"]["cmd"].replace("${item}", str(item)))))
        else:
            commands.append(StageCommand(name, _argv(stage["cmd"])))
    return commands


# --- running one class count ---------------------------------------------------------------


def class_count_dir(out_dir: str | Path, train_classes: int) -> Path:
    """The folder of one class count's study."""
    return Path(out_dir) / f"C{train_classes}"


def is_finished(directory: Path, params: StudyParams) -> bool:
    """Whether the folder holds a finished study (its metrics.json) made from exactly these params."""
    if not (directory / METRICS_FILE).is_file():
        return False
    try:
        return load_params(str(directory / "params.yaml")) == params
    except (FileNotFoundError, ConfigError):
        return False


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").rstrip().splitlines()
    return "\n".join(text[-lines:]) or "(no output)"


def run_stage(stage: StageCommand, directory: Path, repo_root: Path = REPO_ROOT) -> tuple[int, Path]:
    """Run one stage in `directory` with the repository on PYTHONPATH; its output goes to logs/<stage>.log."""
    log_path = directory / "logs" / f"{stage.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")]))}
    with open(log_path, "w", encoding="utf-8") as log:
        completed = subprocess.run(stage.argv, cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT)
    return completed.returncode, log_path


def run_class_count(train_classes: int, params: StudyParams, directory: Path, origin: str, *,
                    dvc_file: Path = DVC_FILE, repo_root: Path = REPO_ROOT, log: Log = _stderr,
                    progress: Callable[[], str] = lambda: "") -> None:
    """Write the folder's params.yaml and run every stage there; a failing stage raises SweepError with its output."""
    directory.mkdir(parents=True, exist_ok=True)
    write_params(params, directory / "params.yaml", origin)
    # A stale metrics.json would mark an interrupted rerun as finished.
    (directory / METRICS_FILE).unlink(missing_ok=True)
    stages = pipeline_stages(params, dvc_file)
    started = time.monotonic()
    for number, stage in enumerate(stages, 1):
        stage_started = time.monotonic()
        log(f"{progress()}C={train_classes}: {stage.name} ({number}/{len(stages)}) ...")
        returncode, log_path = run_stage(stage, directory.resolve(), repo_root)
        if returncode != 0:
            raise SweepError(f"C={train_classes}: stage {stage.name} failed (exit {returncode}). Its output ends:\n"
                             f"{_log_tail(log_path)}\n(full log: {log_path})")
        log(f"{progress()}C={train_classes}: {stage.name} done in {_duration(time.monotonic() - stage_started)} "
            f"({_duration(time.monotonic() - started)} for C={train_classes})")
        if stage.name == "prepare":
            _check_train_classes(directory, train_classes, params.data.dataset)


def _check_train_classes(directory: Path, train_classes: int, dataset: str) -> None:
    manifest = read_json(directory / MANIFEST_FILE, "prepare")
    prepared = manifest["splits"]["train"]["num_classes"]
    if prepared != train_classes:
        raise SweepError(f"C={train_classes}: data.dataset={dataset} gives {prepared} training classes, not "
                         f"{train_classes}; give a --dataset-template whose {TOTAL_PLACEHOLDER} sets the class count, "
                         f"e.g. 'glyphs:{TOTAL_PLACEHOLDER}:40'")


def run_sweep(classes: Sequence[int], preset: str = "glyphs-sweep", assignments: Sequence[str] = (),
              dataset_template: str | None = None, out_dir: str | Path = DEFAULT_SWEEP_DIR,
              report_dir: str | Path = DEFAULT_REPORT_DIR, *, dvc_file: Path = DVC_FILE,
              repo_root: Path = REPO_ROOT, log: Log = _stderr) -> dict[str, Path]:
    """Run the study for every class count C (skipping finished ones), then write the aggregate report."""
    classes = sorted(set(int(c) for c in classes))
    if not classes:
        raise ValueError("give at least one class count, e.g. --classes 10 30 100")
    base = build_preset(preset, list(assignments))
    template = dataset_template or default_dataset_template(base.data.dataset)
    out_dir = Path(out_dir)
    # Every C's params first, so a bad class count stops before any training.
    plan = {c: class_count_params(base, c, template) for c in classes}
    started, finished = time.monotonic(), []
    for index, (train_classes, params) in enumerate(plan.items(), 1):
        directory = class_count_dir(out_dir, train_classes)

        def progress(index=index) -> str:
            return f"[{index}/{len(plan)}, sweep {_duration(time.monotonic() - started)}] "

        if is_finished(directory, params):
            log(f"{progress()}C={train_classes}: finished earlier with the same params, skipped ({directory})")
            finished.append(train_classes)
            continue
        log(f"{progress()}C={train_classes}: data.dataset={params.data.dataset} ({params.data.protocol} protocol) "
            f"in {directory}")
        # The header of its params.yaml: the `study preset` command that writes the same params.
        origin = " ".join([preset, *(f"--set {shlex.quote(a)}" for a in assignments
                                     if not a.startswith("data.dataset=")),
                           f"--set {shlex.quote('data.dataset=' + params.data.dataset)}"])
        try:
            run_class_count(train_classes, params, directory, origin,
                            dvc_file=dvc_file, repo_root=repo_root, log=log, progress=progress)
        except SweepError as error:
            kept = ", ".join(f"C={c}" for c in finished) or "none"
            raise SweepError(f"{error}\nThe sweep stopped; finished class counts are kept ({kept}) and are skipped "
                             "when the same command runs again.") from None
        finished.append(train_classes)
    log(f"sweep of {len(plan)} class counts done in {_duration(time.monotonic() - started)}; writing the aggregate")
    return write_sweep_report(class_count_table({c: class_count_dir(out_dir, c) for c in classes}), report_dir,
                              sweep_dir=out_dir, dpi=base.report.dpi)


# --- the aggregate -------------------------------------------------------------------------


def _number(value) -> float:
    return math.nan if value is None else float(value)


def class_count_row(train_classes: int, directory: Path) -> dict:
    """One C's numbers, read from its finished study's metrics.json, differences.csv and best.json."""
    directory = Path(directory)
    metrics = read_json(directory / METRICS_FILE, "report")
    loss = primary_loss(list(metrics.get("break_even", {})))
    if loss is None:
        raise ValueError(f"{directory / METRICS_FILE} records no searched loss, so there is no tuned method to "
                         "compare with Fixed AdaCos; search at least one loss (search.losses)")
    best = read_json(directory / SEARCH_DIR / loss / "best.json", f"search@{loss}")
    objective, tuned = best["objective"], tuned_method(loss)
    metric = f"{TEST_PREFIX}{objective}"
    even = metrics["break_even"][loss][REFERENCE_METHOD]
    verdict = metrics.get("verdict", {})
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
        "search_gain": _number(verdict.get("search_gain")), "search_gain_low": _number(verdict.get("search_gain_low")),
        "search_gain_high": _number(verdict.get("search_gain_high")),
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


def _slope_per_decade(classes, values) -> float:
    """Least-squares slope of `values` against log10 C (NaN where fewer than two finite points)."""
    x, y = np.log10(np.asarray(classes, dtype=float)), np.asarray(values, dtype=float)
    keep = np.isfinite(y)
    if keep.sum() < 2 or np.ptp(x[keep]) == 0:
        return math.nan
    return float(np.polyfit(x[keep], y[keep], 1)[0])


def _break_even_text(row) -> str:
    return f"{int(row.break_even_trials)}" if row.break_even_reached else f"not within {row.search_trials}"


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
        # Both scales on log C, per tenfold C: does the searched s grow with C the way AdaCos's s_f does?
        searched = _slope_per_decade(scales["C"], np.log10(scales["best_s"]))
        pairs = ", ".join(f"{row.best_s:.3g} against s_f = {row.s_f:.3g} at C = {row.C}"
                          for row in scales.itertuples())
        direction = ("grows with C, as s_f does" if searched > 0 else "shrinks as C grows, while s_f grows"
                     if searched < 0 else "stays level as C grows, while s_f grows")
        sentences.append(f"The search's best s {direction}: {pairs}.")
    return " ".join(sentences)


def _plain_log_ticks(axis) -> None:
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def figure_class_count(table: pd.DataFrame, path: Path, dpi: int = 120) -> Path:
    """Three panels against C (log x): break-even trials, the test difference with its CI, and s_f with the best s."""
    figure = Figure(figsize=(14.0, 4.6), layout="constrained")
    axes = figure.subplots(1, 3)
    classes = table["C"].to_numpy(dtype=float)
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.8)
        ax.set_axisbelow(True)
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
    ax.set_title(f"Above 0: tuning pays; below 0: Fixed AdaCos is better", fontsize="medium")
    ax.legend(fontsize="small", loc="best")

    ax = axes[2]
    if len(classes):
        # The formula drawn as a smooth curve through the swept points (which come from fixed_scale_of).
        dense = np.geomspace(max(classes.min() / 1.5, 2.5), classes.max() * 1.5, 200)
        ax.plot(dense, np.sqrt(2.0) * np.log(dense - 1.0), "-", color="C1", label="Fixed AdaCos s_f = √2·ln(C−1)")
    ax.plot(table["C"], table["s_f"], "o", color="C1")
    ax.plot(table["C"], table["best_s"], "D", color="C0", markersize=8, label=f"{tuned}: best s of the search")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_ylabel("scale s (log scale)")
    ax.set_title("AdaCos's fixed scale and the searched scale", fontsize="medium")
    ax.legend(fontsize="small", loc="best")
    for ax in axes:
        _plain_log_ticks(ax.xaxis)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def _cell(value, format_spec: str, missing: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, format_spec)


def _shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the reader sees it: formatted numbers, 'not reached' spelled out."""
    rows = []
    for row in table.itertuples():
        interval = (f"[{row.difference_low:+.4f}, {row.difference_high:+.4f}]"
                    if math.isfinite(row.difference_low) and math.isfinite(row.difference_high) else "[n/a]")
        rows.append({
            "C": row.C, "s_f": _cell(row.s_f, ".3f"), "best s": _cell(row.best_s, ".2f"),
            "best m (rad)": _cell(row.best_m, ".3f"),
            "break-even trials [95% interval]": f"{_break_even_text(row)} "
                                                f"{trials_interval(row.break_even_low, row.break_even_high, row.search_trials)}",
            "break-even seconds": _cell(row.break_even_seconds, ".1f", "—") if row.break_even_reached else "—",
            "search gain on test [95%]": f"{_cell(row.search_gain, '+.4f')} [{_cell(row.search_gain_low, '+.4f')}, "
                                         f"{_cell(row.search_gain_high, '+.4f')}]",
            "tuned − AdaCos (test, paired)": _cell(row.difference, "+.4f"), "95% CI": interval,
            "significant": ("yes" if row.significant else "no") + (f" (Holm p = {row.p_value:.3g})"
                                                                  if math.isfinite(row.p_value) else ""),
            "recommendation": row.recommendation,
            "tuned test mean": _cell(row.tuned_test_mean, ".4f"),
            "Fixed AdaCos test mean": _cell(row.adacos_test_mean, ".4f"),
        })
    return pd.DataFrame(rows)


def write_sweep_report(table: pd.DataFrame, report_dir: str | Path = DEFAULT_REPORT_DIR,
                       sweep_dir: str | Path | None = None, dpi: int = 120) -> dict[str, Path]:
    """Write class_count.csv, class_count.png, report.md and a self-contained report.html; return their paths."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    written = {"class_count.csv": report_dir / "class_count.csv", "class_count.png": report_dir / "class_count.png",
               "report.md": report_dir / "report.md", "report.html": report_dir / "report.html"}
    write_csv(table, written["class_count.csv"])
    figure_class_count(table, written["class_count.png"], dpi)
    tuned = f"tuned {loss_name(table['tuned_loss'].iloc[0])}" if len(table) else "the tuned loss"
    metric = metric_name(table["objective"].iloc[0]) if len(table) else "objective"
    blocks = [
        f"The whole study was run once per training class count C, each in its own folder"
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
