"""The whole report on disk: figures/, tables/, report.md, report.html, metrics.json and headline.json."""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import pandas as pd

from study.analysis import REPRODUCTION_SPREAD_STDS, TEST_PREFIX, StudyAnalysis, count_or_none, reproduction_table
from study.analysis.common import REFERENCE_METHOD
from study.config import METRIC_KIND
from study.config import StudyParams
from study.interruptions import Interrupted
from study.published import published_setup
import study.report.formats as fmt
from study.report.document import FigureRef, render_html, render_markdown
from study.report.figures import (figure_angles, figure_convergence, figure_crossings, figure_dynamic_scale,
                                  figure_final_test, figure_landscape, figure_learning_curves)
from study.report.palette import method_styles
from study.report.tuning_figures import (break_even_note, figure_expected_best_val, figure_tuning,
                                         measurement_conditions)
from study.report.beside import BENCHMARK_NUMBERS
from study.report.sections import report_sections
from study.results import write_bytes, write_csv, write_json

# The report's files and folders (the report stage's outs), swapped in together from the staging folder.
REPORT_PARTS = ("figures", "tables", "report.md", "report.html", "metrics.json", "headline.json")
STAGING = ".report-staging"
# Written into the staging folder once the new report is whole: each part's inode, so that a swap killed midway is
# finished by the next run (a part whose inode is already in place was swapped in).
SWAP_PLAN = ".swap-plan.json"
T = TypeVar("T")


def _final_test_table(analysis: StudyAnalysis) -> pd.DataFrame:
    return analysis.final.merge(analysis.costs[["method", "tuning_trials", "tuning_seconds", "run_seconds"]],
                                on="method", how="left")


def _reference_test_mean(analysis: StudyAnalysis) -> float:
    """Fixed AdaCos's mean test objective over its runs: what the relative margin is a share of."""
    rows = analysis.final[(analysis.final["method"] == REFERENCE_METHOD)
                          & (analysis.final["metric"] == f"{TEST_PREFIX}{analysis.objective}")]
    return float(rows["mean"].iloc[0]) if len(rows) else math.nan


def _curves_wide(analysis: StudyAnalysis) -> pd.DataFrame:
    """Mean val objective per iteration, one column per method (the layout `dvc plots` draws)."""
    wide = analysis.curves.pivot(index="iteration", columns="method", values="mean")
    return wide.reindex(columns=[m for m in analysis.methods if m in wide.columns]).reset_index()


# The keys of study.analysis.recommend's verdict.
RECOMMEND_KEYS = ("recommendation", "reason", "alternatives", "objective", "metric", "confidence", "power", "reference",
                  "reference_test_mean", "tuned_loss", "tuned_method", "tuned_test_mean", "tuned",
                  "tuned_better_metrics", "tuned_worse_metrics", "other_metrics", "variance_sources", "cost",
                  "at_chance", "price_per_training")


def metrics_summary(analysis: StudyAnalysis, reproduction: pd.DataFrame | None = None) -> dict:
    """What `dvc metrics show` reads: the verdict with its numbers, the break-even of each searched loss with its
    interval, per method the objective's test mean and costs, the crossings and (when given) the reproduction.
    Per-seed scores of every run are in tables/run_scores.csv, every metric in tables/final_test.csv."""
    def number(value):
        return None if fmt.missing(value) or pd.isna(value) else float(value)

    facts = analysis.verdict_facts
    # The verdict is study.analysis.recommend's output, as it is (the numbers it decides by, its cost and variance).
    summary = {"verdict": {key: facts[key] for key in RECOMMEND_KEYS}}
    summary["break_even"] = {
        loss: {reference.reference: {"trials": count_or_none(reference.trials),
                                     "low": count_or_none(reference.trials_low),
                                     "high": count_or_none(reference.trials_high),
                                     "valid_trials": count_or_none(reference.valid_trials),
                                     "seconds": number(reference.seconds), "reached": bool(reference.reached),
                                     "shown": bool(reference.shown) if not pd.isna(reference.shown) else False,
                                     "max_trials": int(reference.max_trials), "target": number(reference.target),
                                     # against the best of n reference seeds by val, n ≤ control_n
                                     "control": {"n": count_or_none(reference.control_n),
                                                 "trials": count_or_none(reference.control_trials),
                                                 "low": count_or_none(reference.control_trials_low),
                                                 "high": count_or_none(reference.control_trials_high),
                                                 "gap": number(reference.control_gap),
                                                 "gap_low": number(reference.control_low),
                                                 "gap_high": number(reference.control_high)}}
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
        plateau = analysis.plateau[analysis.plateau["method"] == method]
        if len(plateau):  # the plateau rule of docs/analysis.md
            row = plateau.iloc[0]
            entry.update({"converged": bool(row["converged"]), "plateau_rise": number(row["rise"])})
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


def headline_metrics(summary: dict) -> dict:
    """What `dvc metrics show` and `dvc exp show` read (headline.json, DVC's metric): the recommendation, tuned −
    Fixed AdaCos on the objective with its confidence interval, both methods' test means, and the break-even in
    trials (null unless its interval shows it). A few flat keys, rounded as the report states them, so that a row fits 120
    columns; metrics.json keeps every number at full precision."""
    verdict = summary["verdict"]
    tuned = verdict.get("tuned") or {}
    references = next(iter(summary.get("break_even", {}).values()), {})
    even = references.get(verdict.get("reference", "fixed_adacos")) or {}
    return {"recommendation": verdict.get("recommendation"),
            "difference": _rounded(tuned.get("difference")), "low": _rounded(tuned.get("low")),
            "high": _rounded(tuned.get("high")), "fixed_adacos": _rounded(verdict.get("reference_test_mean")),
            # A break-even only where its interval shows it, as the report states it; a point estimate alone is null.
            "tuned": _rounded(verdict.get("tuned_test_mean")),
            "break_even": even.get("trials") if even.get("shown") else None}


def _rounded(value, decimals: int = 4):
    """A score or difference to the report's four decimals (None stays None)."""
    return None if value is None else round(float(value), decimals) + 0.0  # + 0.0: no "-0" for a tiny negative


def _tuning_wide(analysis: StudyAnalysis, kind: str) -> pd.DataFrame:
    """The expected test score of the val-selected run per n, one column per search (`<loss>_search`) or per
    untuned control, for `dvc plots`: searches and controls apart, since a control stops at its number of seeds
    and vega would draw the missing cells as zeros."""
    curves = analysis.tuning_curves[analysis.tuning_curves["kind"] == kind]
    curves = curves.assign(column=curves["method"] + ("_search" if kind == "search" else ""))
    return curves.pivot(index="n", columns="column", values="expected_test").dropna().reset_index()


class UnwritableReportFolder(RuntimeError):
    """The report's folder refuses writes (a read-only file system, no permission, a full disk): the message names
    the folder and the fix."""


# The errors of a folder that refuses writes, as opposed to a fault of the report's own making.
_REFUSED_WRITES = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def _unwritable(error: OSError, out_dir: Path) -> UnwritableReportFolder:
    if error.errno == errno.EROFS:
        problem, fix = "is on a read-only file system", "remount it writable"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        problem, fix = "is on a full disk", f"free space there (df -h {out_dir})"
    else:
        problem, fix = "is not writable by this user", f"make it writable (chmod u+w {out_dir}) or run as its owner"
    return UnwritableReportFolder(f"{out_dir}/ {problem}, and the report is written there; {fix}, then run "
                                  "`dvc repro report` again (the previous report is left as it was)")


def check_writable(out_dir: Path) -> None:
    """An UnwritableReportFolder when nothing can be written into `out_dir`, tried with a folder made and removed
    there: the report stage asks before its analysis, so that it stops at once and writes nothing."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".writable-", dir=out_dir))
    except OSError as error:
        if error.errno in _REFUSED_WRITES:
            raise _unwritable(error, out_dir) from None
        raise


def write_report(analysis: StudyAnalysis, params: StudyParams, manifest: dict, environment: dict,
                 out_dir: Path, benchmark_numbers: Path = BENCHMARK_NUMBERS) -> dict[str, Path]:
    """Write figures/, tables/, report.md, report.html (when params.report.html), metrics.json and headline.json;
    return their paths.

    `environment` is printed in the reproducibility footer as given (git revision, params hash, package
    versions, device...); `benchmark_numbers` is the benchmark's aggregate the report sets the study beside. The
    returned dict maps each file's path relative to out_dir to its full path.
    All of it is written into a staging folder first and swapped in only once complete (`write_staged`); a folder
    that refuses the writes (read-only, full) raises UnwritableReportFolder.
    """
    out_dir = Path(out_dir)
    written = write_staged(out_dir, lambda staging: _write_all(analysis, params, manifest, environment, staging,
                                                               benchmark_numbers))
    return {name: out_dir / name for name in written}


def write_staged(out_dir: Path, write: Callable[[Path], T], parts: Sequence[str] = REPORT_PARTS) -> T:
    """A whole report written by `write(staging)` into a staging folder in `out_dir`, then its `parts` (files and
    folders) swapped in at once (`swap_in`); returns what `write` returned. A run that fails, is killed or is
    interrupted before the swap leaves the previous report as it was, and stale files of the previous report go only
    with it; a swap killed midway is finished by the next run. An interruption (study.interruptions) says which."""
    out_dir = Path(out_dir)
    staging = out_dir / STAGING
    if (staging / SWAP_PLAN).is_file():
        swap_in(staging, out_dir)  # an earlier run was killed while swapping its whole report in: finish that first
    shutil.rmtree(staging, ignore_errors=True)  # what an earlier, killed run left
    try:
        staging.mkdir(parents=True)
        written = write(staging)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError) and error.errno in _REFUSED_WRITES:
            raise _unwritable(error, out_dir) from None
        if isinstance(error, Interrupted):
            error.kept = f"nothing in {out_dir} was changed"
        raise
    try:
        swap_in(staging, out_dir, parts)
    except Interrupted as interruption:
        interruption.kept = f"the new report was being swapped into {out_dir} whole; the next run finishes the swap"
        raise
    return written


def swap_in(staging: Path, out_dir: Path, parts: Sequence[str] = REPORT_PARTS) -> None:
    """Put every part of the whole report in `staging` in place in `out_dir`, each in one atomic step: a reader (or a
    kill) finds each part all old or all new, never missing or half; a swap killed midway is finished by the next
    call, from the plan written before the first step. Parts the new report lacks are removed."""
    plan_path = staging / SWAP_PLAN
    if plan_path.is_file():  # a swap killed midway: finish it as it was planned
        plan = json.loads(plan_path.read_text())
    else:
        plan = {part: _inode(staging / part) for part in parts}
        write_bytes(json.dumps(plan).encode(), plan_path)
    for part, inode in plan.items():
        new, old = staging / part, out_dir / part
        if inode is None:  # a part this report has not, e.g. report.html once report.html is false
            _remove(old, staging / f"previous-{part}")
        elif _inode(old) != inode:  # not yet swapped in
            _replace(new, old, staging / f"previous-{part}")
    shutil.rmtree(staging)


def _inode(path: Path) -> int | None:
    return path.stat().st_ino if path.exists() else None


def _replace(new: Path, old: Path, aside: Path) -> None:
    """Put `new` at `old`'s place in one step: exchanged with it (Linux), else renamed over a file; a folder the
    system cannot exchange is moved aside first (the only moment it is missing)."""
    if not old.is_dir():
        os.replace(new, old)
    elif not _exchange(new, old):
        os.replace(old, aside)
        os.replace(new, old)


def _remove(old: Path, aside: Path) -> None:
    if old.is_dir():
        os.replace(old, aside)  # deleted with the staging folder
    elif old.exists():
        old.unlink()


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where the system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(error, os.strerror(error), str(second))


def _write_all(analysis: StudyAnalysis, params: StudyParams, manifest: dict, environment: dict,
               out_dir: Path, benchmark_numbers: Path = BENCHMARK_NUMBERS) -> dict[str, Path]:
    """Every file of the report, written into `out_dir`."""
    figures_dir, tables_dir = out_dir / "figures", out_dir / "tables"
    dpi = params.report.dpi
    styles = method_styles(analysis, params.report.palette)
    written: dict[str, Path] = {}

    figure_paths = {
        "tuning_trials": figure_tuning(analysis, styles, "n", figures_dir / "tuning_trials.png", dpi)
        if len(analysis.tuning_curves) else None,
        "tuning_seconds": figure_tuning(analysis, styles, "seconds", figures_dir / "tuning_seconds.png", dpi,
                                        measured_on=measurement_conditions(params, environment))
        if len(analysis.tuning_curves) else None,
        "tuning_val": figure_expected_best_val(analysis, styles, figures_dir / "expected_best_val.png", dpi)
        if (analysis.tuning_curves["kind"] == "search").any() else None,
        "convergence": figure_convergence(analysis, styles, figures_dir / "convergence.png", dpi),
        "crossings": figure_crossings(analysis, styles, figures_dir / "crossings.png", dpi),
        "angles": figure_angles(analysis, styles, figures_dir / "angles.png", dpi),
        "dynamic_scale": figure_dynamic_scale(analysis, styles, figures_dir / "dynamic_scale.png", dpi),
        "landscape": figure_landscape(analysis, params, figures_dir / "landscape.png", dpi),
        "final_test": figure_final_test(analysis, styles, figures_dir / "final_test.png", dpi),
        "learning_curves": figure_learning_curves(
            analysis.learning_curves, analysis.difference_curves, _reference_test_mean(analysis),
            params.analysis.score_share(METRIC_KIND[analysis.objective]), styles, figures_dir / "learning_curves.png", dpi, analysis.objective),
    }
    confidence = f"{analysis.confidence:.0%}"
    captions = {
        "tuning_trials": "Test score of the run val selects among n ArcFace trials, or n seeds of an untuned method; "
                         "dotted: one Fixed AdaCos run. " + break_even_note(analysis),
        "tuning_seconds": "The same against the device-seconds those runs cost (log scale), measured on "
                          f"{measurement_conditions(params, environment)}: the seconds compare methods within this "
                          "study, not across machines.",
        "tuning_val": "For contrast, the classic curve: the expected best val of n trials against the untuned "
                      "methods' mean val. It includes the best of n seed draws, so it overstates tuning.",
        "convergence": "Val score against iteration, one panel per method: its mean over seeds with its "
                       f"{confidence} band, the other methods' means in grey behind; dotted lines: the targets.",
        "crossings": "AdaCos minus ArcFace, mean val score over seeds, against iteration, one panel per pair (symlog: "
                     "linear within ±0.01); a dotted line marks where the lead settles for good, on whichever side.",
        "angles": "Median target angle θ and mean non-target cosine against iteration, mean over seeds; each method's "
                  "markers sit at other iterations, so lines that lie on one another still show each.",
        "dynamic_scale": "Dynamic AdaCos's scale s against iteration, with Fixed AdaCos's s_f for reference.",
        "landscape": "The searched (s, m) plane: colour is the val score, a star the best trial of each class split, "
                     "the dashed line AdaCos's s_f.",
        "final_test": "Test score of every seed (points) and mean ± std over seeds (black) per method.",
        "learning_curves": "Left: every final run's test score at each evaluation, the mean over runs and the band "
                           "over splits × seeds. Right: each method − Fixed AdaCos, paired by split and seed, with its "
                           f"{confidence} interval; grey: the margin. Val selects the checkpoint; test only reports.",
    }
    figures = {}
    for name, path in figure_paths.items():
        if path is not None:
            written[f"figures/{path.name}"] = path
            figures[name] = FigureRef(f"figures/{path.name}", captions[name])

    tables = {
        "tuning_curves.csv": analysis.tuning_curves,
        "tuning_search_wide.csv": _tuning_wide(analysis, "search"),
        "tuning_controls_wide.csv": _tuning_wide(analysis, "control"),
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
        "learning_curves.csv": analysis.learning_curves,
        "plateau.csv": analysis.plateau,
        "difference_curves.csv": analysis.difference_curves,
        "learning_crossovers.csv": analysis.learning_crossovers,
    }
    reproduction = (reproduction_table(analysis.run_scores, published_setup(params.report.reproduce))
                    if params.report.reproduce else None)
    if reproduction is not None:
        tables["reproduction.csv"] = reproduction
    for name, frame in tables.items():
        write_csv(frame, tables_dir / name)
        written[f"tables/{name}"] = tables_dir / name

    sections = report_sections(analysis, params, manifest, environment, figures, reproduction, benchmark_numbers)
    markdown_path = out_dir / "report.md"
    markdown_path.write_text(render_markdown(params.report.title, sections), encoding="utf-8")
    written["report.md"] = markdown_path
    if params.report.html:
        html_path = out_dir / "report.html"
        html_path.write_text(render_html(params.report.title, sections, out_dir), encoding="utf-8")
        written["report.html"] = html_path
    summary = metrics_summary(analysis, reproduction)
    for name, data in (("metrics.json", summary), ("headline.json", headline_metrics(summary))):
        write_json(data, out_dir / name)
        written[name] = out_dir / name
    return written
