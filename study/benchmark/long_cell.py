"""The report of a learning-curve cell (benchmarks/long_training.py): every method's val and test objective against
iterations, the plateau rule per method, each ArcFace − each AdaCos along the iterations with its interval, and one
sentence per pair saying whether and when AdaCos overtakes ArcFace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from study.plateau import PLATEAU_RISE, plateau_table
from study.analysis.learning_curves import crossover_table, difference_curve, learning_curves_table
from study.benchmark.meta import RELATIVE_MARGIN
import study.report.formats as fmt
from study.report.document import FigureRef, Section, Table, render_markdown
from study.report.figures import figure_learning_curves
from study.report.formats import method_name
from study.report.palette import styles_of
from study.report.sections import overtaking_bullets, plateau_shown
from study.report.verdict import overtaking_sentence
from study.results import write_bytes

# The 20,000-iteration cell (benchmarks/long_training.py), in the benchmark's folder, and what the aggregate reads.
LEARNING_CURVE_CELL = "mnist-pairs-open-c50-20k"
LEARNING_CURVE_CELL_ON_GPU = "mnist-pairs-open-c50-20k-cuda"  # the same runs on a GPU: a cell of its own, never pooled
LEARNING_CURVE_INPUTS = ("reports/tables/crossovers.csv", "reports/tables/plateau.csv", "reports/tables/runs.csv",
                         "reports/figures/learning_curves.png")
TITLE = "Does AdaCos overtake ArcFace only after about 20,000 iterations?"
ADACOS = ("fixed_adacos", "dynamic_adacos")
ARCFACE = ("arcface_tuned", "arcface_default")


def read_runs(cell: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The finished runs' summaries and histories (a run whose summary is missing is unfinished and left out)."""
    summaries = [json.loads(path.read_text()) for path in sorted((cell / "runs").glob("*.json"))]
    if not summaries:
        raise SystemExit(f"{cell / 'runs'} holds no finished run yet; train them first (benchmarks/long_training.py)")
    histories = [pd.read_csv(cell / "runs" / f"{s['method']}_split{s['split']}_seed{s['seed']}.csv") for s in summaries]
    return pd.DataFrame(summaries), pd.concat(histories, ignore_index=True)


def write_long_cell_report(cell: Path, planned_runs: int, search: pd.DataFrame | None = None) -> None:
    """Tables, figure and report.md of a learning-curve cell, from its finished runs; `search` holds the trials of
    the cell's own ArcFace search (split, s, m, state, iterations, val, test, best), whose cost the report states."""
    summaries, history = read_runs(cell)
    curves = learning_curves_table(history, "map_at_r")
    methods = list(dict.fromkeys(summaries["method"]))
    plateau = plateau_table(curves, methods)
    differences = pd.concat([difference_curve(curves, method) for method in methods if method != "fixed_adacos"],
                            ignore_index=True)
    reference = summaries[summaries["method"] == "fixed_adacos"]["test_score"].mean()
    crossovers = crossover_table(curves, ADACOS, ARCFACE)
    tables, figures = cell / "reports" / "tables", cell / "reports" / "figures"
    frames = {"learning_curves": curves, "runs": summaries, "plateau": plateau, "difference_curves": differences,
              "crossovers": crossovers}
    if search is not None and len(search):
        frames["search"] = search
    for name, frame in frames.items():
        write_bytes(frame.to_csv(index=False).encode(), tables / f"{name}.csv")
    figure_learning_curves(curves, differences, reference, RELATIVE_MARGIN, styles_of(methods),
                           figures / "learning_curves.png", dpi=120)
    write_bytes(render_markdown(TITLE, _sections(summaries, plateau, crossovers, planned_runs, search)).encode(),
                cell / "reports" / "report.md")
    print(f"wrote {cell / 'reports'}: {len(summaries)} of {planned_runs} runs", flush=True)


def seconds_per_iteration(summaries: pd.DataFrame) -> tuple[float, float]:
    """A training iteration's device-seconds over the runs in `summaries` (their recorded seconds, eval_seconds and
    iterations): without evaluation, and with the run's evaluations of val and test."""
    seconds, evaluating, iterations = (summaries[column].to_numpy(dtype=float)
                                       for column in ("seconds", "eval_seconds", "iterations"))
    return float(np.sum(seconds - evaluating) / np.sum(iterations)), float(np.sum(seconds) / np.sum(iterations))


def search_sentence(search: pd.DataFrame, full_length: int) -> str:
    """What the cell's own ArcFace search ran, cost and chose, split by split."""
    splits = sorted(search["split"].unique())
    iterations = int(search["iterations"].sum())
    chosen = search[search["best"].astype(bool)].sort_values("split")
    choices = "; ".join(f"split {row.split}: s = {row.s:.3g}, m = {row.m:.3g}" for row in chosen.itertuples())
    pruned = int((search["state"] == "pruned").sum())
    return (f"Tuned ArcFace takes each class split's (s, m) from this cell's own search at its full length: "
            f"{len(search)} random-search trials over {len(splits)} splits, {pruned} of them stopped by successive "
            f"halving, {iterations:,} iterations in all ({iterations / full_length:.1f} full-length trainings, "
            f"{search['seconds'].sum() / 3600:.1f} h of device time). Val chose {choices}; the selected (s, m) is "
            "retrained at the cell's seeds, which no trial used.")


def _sections(summaries: pd.DataFrame, plateau: pd.DataFrame, crossovers: pd.DataFrame, planned_runs: int,
              search: pd.DataFrame | None = None) -> list[Section]:
    done = len(summaries)
    seconds, iterations = summaries["seconds"].to_numpy(dtype=float), summaries["iterations"].to_numpy(dtype=float)
    setup = (f"Double MNIST at face-training scale (`compose:2:400:mnist5k`, open protocol, 50 training classes of "
             f"400 images), every method trained {iterations.max():,.0f} iterations (about 64 passes over the "
             f"training images), {done} of {planned_runs} planned runs finished"
             + ("" if done == planned_runs else " (a partial report: rerun benchmarks/long_training.py)") + ". "
             "Each run keeps the checkpoint val selects; test is scored at every evaluation and only reported.")
    if search is not None and len(search):
        setup += " " + search_sentence(search, int(iterations.max()))
    final = summaries.groupby("method")["test_score"].agg(["mean", "std", "count"])
    scores = pd.DataFrame([{"method": method_name(method), "mean": fmt.score(row["mean"]), "sd": fmt.score(row["std"]),
                            "runs": f"{row['count']:.0f}"} for method, row in final.iterrows()])
    training, evaluated = seconds_per_iteration(summaries)
    device = summaries["device"].iloc[0]
    # The CPU cell ran one process per core; a GPU shares its device between the runs trained at once.
    sharing = ("one process per core and one thread each" if device == "cpu" else
               f"{summaries['parallel'].max():.0f} runs trained at once on the one device")
    cost = (f"On {device}, {sharing}: "
            f"{1000 * training:.1f} ms per training iteration without evaluation, "
            f"{1000 * evaluated:.1f} ms with the 21 log-spaced evaluations of val and "
            f"test; a run took {np.median(seconds) / 60:.1f} min (median).")
    return [Section("Setup", [setup]),
            Section("The answer", [*overtaking_bullets(crossovers),
                                   "Intervals: 95%, over the class splits' paired (split, seed) differences, never "
                                   "below the seed noise (`standard_error_floor`); the crossover's bracket reads one "
                                   "such interval per evaluation."]),
            Section("Convergence (the plateau rule of docs/analysis.md)", [
                f"Converged: the mean best val so far rose by less than {100 * PLATEAU_RISE:.0f}% over the second "
                "half of training.", plateau_shown(plateau)]),
            Section("Test MAP@R of the checkpoint val selected", [Table(scores)]),
            Section("Cost", [cost, FigureRef("figures/learning_curves.png",
                                             "Test score and each method − Fixed AdaCos along training.")])]


def overtaking_sentences(cell: Path) -> list[str]:
    """The learning-curve cell's answer from its committed tables: how many runs it has, and whether and when each
    AdaCos overtakes each ArcFace; [] before it has reported."""
    tables = cell / "reports" / "tables"
    if not (tables / "crossovers.csv").is_file():
        return []
    summaries, crossovers = pd.read_csv(tables / "runs.csv"), pd.read_csv(tables / "crossovers.csv")
    lead = (f"**{cell.name}** (Double MNIST at 20,000 training images, {summaries['iterations'].max():,.0f} iterations, "
            f"{len(summaries)} runs):")
    return [lead, *[overtaking_sentence(row) for row in crossovers.to_dict("records")]]
