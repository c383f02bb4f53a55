"""What the benchmark cost: per finished cell its trainings, their iterations and device-seconds, what the converged
answer took, how much of an iteration evaluation is, and what stopping every final run at its plateau would have saved
and changed (a what-if read from the converged cells' learning curves), as tables and the report's sentences."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

import study.report.formats as fmt
from study.analysis import REFERENCE_METHOD, differences_to_fixed_adacos
from study.plateau import stopped_runs
from study.benchmark.long_cell import seconds_per_iteration
from study.analysis.headline import headline_cells
from study.report import method_name
from study.results import REPORT_DIR

# The floors under which a run may not stop at its plateau (shares of its length) that the cost section compares: with
# none, runs stop at their first evaluations, where val has barely moved.
STOP_FLOORS = (0.0, 0.05, 0.1, 0.25)
CPU_CORES = 2  # the machine the budget is read on: `train.parallel: auto` trains one run per core there
STOP_COLUMNS = ["earliest_share", "cell", "runs", "iterations_trained", "iterations_stopped", "arcface_tuned_relative",
                "arcface_tuned_relative_stopped", "largest_loss", "largest_loss_method"]
STOP_SUMMARY_COLUMNS = ["earliest_share", "cells", "iterations_kept", "seconds_saved", "largest_shift",
                        "largest_shift_cell", "shift_from", "shift_to", "largest_loss", "largest_loss_method",
                        "largest_loss_cell"]


def _trained_seconds(cells: pd.DataFrame) -> float:
    """Device-seconds `cells` (one row each) trained: their searches and tuned runs, and the untuned methods' final
    runs once per configuration (the other tuners' cells restore those from DVC's run cache)."""
    shared = cells.groupby("configuration")["shared_final_seconds"].max().sum()
    return float((cells["cell_seconds"] - cells["shared_final_seconds"]).sum() + shared)


def cost_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per finished cell, what it trained: its trainings, their iterations and device-seconds (evaluation included),
    those of its searches, the seconds an iteration cost, and whether the converged headline reads it."""
    cells = rows.drop_duplicates("cell")
    headline = set(headline_cells(rows[rows["method"] == "arcface_tuned"])["cell"])
    iterations = cells["iterations_trained"].astype(float)
    return pd.DataFrame({
        "cell": cells["cell"], "data": cells["longer_of"].where(cells["longer_of"].notna(), cells["configuration"]),
        "source": cells["source"], "train_classes": cells["train_classes"],
        "regime": cells["regime"], "iterations": cells["iterations"],
        "trainings": cells["trainings"], "iterations_trained": iterations,
        "seconds": cells["cell_seconds"].astype(float), "search_seconds": cells["cell_search_seconds"].astype(float),
        "seconds_per_iteration": cells["cell_seconds"] / iterations,
        "headline": cells["cell"].isin(headline)}).reset_index(drop=True)


def benchmark_seconds(rows: pd.DataFrame) -> dict:
    """Device-seconds the benchmark trained, in all, per regime and in the cells the converged headline reads (the
    last is what the converged answer cost)."""
    cells = rows.drop_duplicates("cell")
    headline = headline_cells(rows[rows["method"] == "arcface_tuned"])["cell"]
    return {"cells": float(cells["cell_seconds"].sum()), "trained": _trained_seconds(cells),
            "short": _trained_seconds(cells[cells["regime"] == "short"]),
            "longer": _trained_seconds(cells[cells["regime"] == "long"]),
            "headline": _trained_seconds(cells[cells["cell"].isin(headline)]), "headline_cells": int(headline.nunique())}


def plateau_stop_table(curves: dict[str, pd.DataFrame], floors=STOP_FLOORS) -> pd.DataFrame:
    """Per floor and cell (`curves`: each cell's learning_curves.csv), what stopping every final run at its plateau
    (study.plateau.stopped_runs) would have trained and changed: the iterations, tuned ArcFace − Fixed
    AdaCos in % of Fixed AdaCos's score over the whole curves and stopped, and the largest loss of any method's mean
    test score in % of Fixed AdaCos's."""
    rows = []
    for floor in floors:
        for cell, table in curves.items():
            runs = stopped_runs(table, floor)
            reference = float(runs.loc[runs["method"] == REFERENCE_METHOD, "test"].mean())
            whole, stopped = (differences_to_fixed_adacos(runs, column).set_index("method")["relative"]
                              for column in ("test", "test_stopped"))
            means = runs.groupby("method")[["test", "test_stopped"]].mean()
            loss = (means["test_stopped"] - means["test"]) / reference
            rows.append({"earliest_share": floor, "cell": cell, "runs": len(runs),
                         "iterations_trained": float(runs["last_iteration"].sum()),
                         "iterations_stopped": float(runs["stop_iteration"].sum()),
                         "arcface_tuned_relative": float(whole.get("arcface_tuned", math.nan)),
                         "arcface_tuned_relative_stopped": float(stopped.get("arcface_tuned", math.nan)),
                         "largest_loss": float(loss.min()), "largest_loss_method": str(loss.idxmin())})
    return pd.DataFrame(rows, columns=STOP_COLUMNS)


def plateau_stop_summary(stops: pd.DataFrame, costs: pd.DataFrame) -> pd.DataFrame:
    """plateau_stop_table per floor over its cells: the share of the final runs' iterations kept, the device-seconds
    that would save (each cell's final runs' seconds, costs' seconds less its search's, in proportion to the
    iterations left out), the largest move of tuned ArcFace − Fixed AdaCos in any cell and the largest loss of any
    method's mean score, with where each happened."""
    final = costs.set_index("cell").eval("seconds - search_seconds")
    rows = []
    for floor, cells in stops.groupby("earliest_share", sort=True):
        shift = cells["arcface_tuned_relative_stopped"] - cells["arcface_tuned_relative"]
        moved, lost = cells.loc[shift.abs().idxmax()], cells.loc[cells["largest_loss"].idxmin()]
        saved = (1 - cells["iterations_stopped"] / cells["iterations_trained"]) * cells["cell"].map(final)
        rows.append({"earliest_share": floor, "cells": len(cells),
                     "iterations_kept": cells["iterations_stopped"].sum() / cells["iterations_trained"].sum(),
                     "seconds_saved": float(saved.sum()), "largest_shift": float(shift.abs().max()),
                     "largest_shift_cell": moved["cell"], "shift_from": float(moved["arcface_tuned_relative"]),
                     "shift_to": float(moved["arcface_tuned_relative_stopped"]),
                     "largest_loss": float(lost["largest_loss"]), "largest_loss_method": lost["largest_loss_method"],
                     "largest_loss_cell": lost["cell"]})
    return pd.DataFrame(rows, columns=STOP_SUMMARY_COLUMNS)


def device_clock(summaries: pd.DataFrame) -> pd.DataFrame:
    """Per device of a learning-curve cell's runs, the device's clock a training iteration took (median over runs):
    a run's seconds over its iterations and over the runs that shared the device (its recorded `parallel`; a CPU run
    that recorded none trained one run per core of the 2-core CPU). Rows in the order the devices first appear."""
    parallel = summaries["parallel"] if "parallel" in summaries else pd.Series(math.nan, index=summaries.index)
    on_cpu = summaries["device"].astype(str).eq("cpu")
    runs = summaries.assign(parallel=parallel.where(parallel.notna() | ~on_cpu, CPU_CORES)).dropna(subset=["parallel"])
    runs = runs.assign(clock=runs["seconds"] / runs["parallel"] / runs["iterations"])
    return (runs.groupby("device", sort=False)
            .agg(runs=("clock", "size"), parallel_low=("parallel", "min"), parallel_high=("parallel", "max"),
                 clock=("clock", "median"))
            .reset_index())


def gpu_sentence(cpu_summaries: pd.DataFrame, gpu_runs: Path, headline_seconds: float) -> list[str]:
    """How much faster the learning-curve cell's runs (`cpu_summaries`) went on the GPUs lent (the same runs trained
    again there, in a cell of their own), and what the converged answer's clock would be at that rate: none until
    the GPU cell has runs."""
    if not gpu_runs.is_file():
        return []
    cpu, gpus = device_clock(cpu_summaries), device_clock(pd.read_csv(gpu_runs))
    cpu = cpu[cpu["device"] == "cpu"]
    if cpu.empty or gpus.empty:
        return []
    cpu_clock = float(cpu["clock"].iloc[0])

    def at_once(row) -> str:  # '12', or '4–8' where the runs shared the device with different numbers of others
        return span([row.parallel_low, row.parallel_high], lambda count: f"{int(count)}")

    devices = " and ".join(f"{1000 * row.clock:.2f} ms on {str(row.device).removeprefix('cuda:')} "
                           f"({fmt.plural(row.runs, 'run')}, {at_once(row)} at once)" for row in gpus.itertuples())
    speedups = cpu_clock / gpus["clock"]
    clock_hours = headline_seconds / CPU_CORES / 3600
    return [f"On a GPU, the same runs trained again ({gpu_runs.parents[2].name}) took {devices} of the device's clock "
            f"an iteration (a run's seconds over the runs sharing the device), against {1000 * cpu_clock:.2f} ms on "
            f"the 2-core CPU ({at_once(cpu.iloc[0])} at once): {span(speedups, '{:.0f}'.format)}× less. At that rate the "
            f"converged answer's {clock_hours:.1f} h of 2-core clock would take "
            f"{span(clock_hours / speedups, '{:.1f}'.format)} h of such a GPU's; the "
            f"small backbones leave a GPU waiting on the host, so more runs at once go faster still."]


def span(values, form) -> str:
    """'72–76', or '72' where the values' smallest and largest read the same through `form`."""
    low, high = form(min(values)), form(max(values))
    return low if low == high else f"{low}–{high}"


def budget_sentences(seconds: dict, costs: pd.DataFrame, unfinished: list[str], curve_cell: Path,
                     gpu_cell: Path | None = None) -> list[str]:
    """What the benchmark cost to train, summed over trainings: the converged answer's cells, the longer cells, the
    short regime; what an iteration cost, how much of it evaluation, how much faster a GPU trained the same runs,
    and how far these times carry."""
    def hours(value: float) -> str:
        return f"{value / 3600:.1f} h"

    long, headline = costs[costs["regime"] == "long"], costs[costs["headline"].astype(bool)]
    costliest = ""
    if len(headline) > 1:  # one cell can outweigh all the others: what the answer costs without it
        cell = headline.loc[headline["seconds"].idxmax()]
        rest = seconds["headline"] - cell["seconds"]
        costliest = (f"; its costliest cell, {cell['cell']} ({fmt.iteration_number(cell['train_classes'])} classes, "
                     f"{fmt.iteration_number(cell['iterations'])} iterations a training), took {hours(cell['seconds'])} "
                     f"of that, and the other {fmt.plural(len(headline) - 1, 'cell')} {hours(rest)}, about "
                     f"{hours(rest / CPU_CORES)} of the clock")
    sentences = [
        "Device time is each training's own recorded seconds (evaluation included), summed; `train.parallel: auto` "
        "trains one run per core with a thread each, so on a 2-core CPU the clock runs about half the sum.",
        f"The converged answer's {fmt.plural(seconds['headline_cells'], 'cell')} trained "
        f"{fmt.count(headline['trainings'].sum())} times: "
        f"{hours(seconds['headline'])} ({fmt.seconds(seconds['headline'])}), about "
        f"{hours(seconds['headline'] / CPU_CORES)} of a 2-core CPU's clock{costliest}. Every longer cell, those still "
        f"improving included ({len(long)}): {hours(seconds['longer'])}; the short regime's "
        f"{fmt.plural(len(costs) - len(long), 'cell')}: {hours(seconds['short'])}"
        + (f". Not yet counted: {fmt.plural(len(unfinished), 'declared cell')} not finished ({', '.join(unfinished)})."
           if unfinished else "."),
    ]
    per_iteration = long["seconds_per_iteration"].dropna()
    if len(per_iteration):
        # The same data trained to the same length in two cells: how far one cell's time says what another's costs.
        same = long.groupby(["data", "iterations"])["seconds_per_iteration"]
        spread = float((same.max() / same.min()).max())
        sentences.append(
            f"An iteration cost {1000 * per_iteration.min():.1f}–{1000 * per_iteration.max():.1f} ms in the longer "
            f"cells (median {1000 * per_iteration.median():.1f} ms), evaluation included"
            + (f"; the same data trained to the same length cost up to {spread:.1f}× as much per iteration in one "
               "cell as in another" if spread > 1.05 else "")
            + ": these times vary with the machine and its load, so they plan a budget and rank nothing.")
    runs = curve_cell / REPORT_DIR / "tables" / "runs.csv"
    if runs.is_file():
        summaries = pd.read_csv(runs)
        training, evaluated = seconds_per_iteration(summaries)
        sentences.append(
            f"How much of it is evaluation, measured on {curve_cell.name} ({len(summaries)} runs of "
            f"{summaries['iterations'].max():,.0f} iterations, {summaries['device'].iloc[0]}): "
            f"{1000 * training:.1f} ms an iteration without evaluation, {1000 * evaluated:.1f} ms with its "
            f"log-spaced evaluations of val and test ({evaluated / training - 1:.0%} more); evaluating more sparsely "
            "saves at most that share.")
        if gpu_cell is not None:
            sentences += gpu_sentence(summaries, gpu_cell / REPORT_DIR / "tables" / "runs.csv", seconds["headline"])
    return sentences


def plateau_stop_sentences(summary: pd.DataFrame, headline_seconds: float) -> list[str]:
    """What stopping each final run at its plateau would have saved and changed (plateau_stop_summary): a
    what-if read from the converged answer's learning curves, over the floors it was read at."""
    floored, unfloored = summary[summary["earliest_share"] > 0], summary[summary["earliest_share"] == 0]
    if not len(floored):
        return []

    def share(value) -> str:
        return f"{100 * value:.0f}"

    worst = floored.loc[floored["largest_loss"].idxmin()]
    sentences = [
        f"Stopping at the plateau, a what-if read from the learning curves of the converged answer's "
        f"{int(floored['cells'].iloc[0])} cells: had every final run stopped at the first evaluation where the plateau "
        f"rule held on its curve so far, and not before a floor of {span(floored['earliest_share'], share)}% of its "
        f"length, it would have trained {span(floored['iterations_kept'], share)}% of their iterations, "
        f"about {span(floored['seconds_saved'] / 3600, '{:.1f}'.format)} h less device time of "
        f"{headline_seconds / 3600:.1f} h. Tuned ArcFace − Fixed AdaCos would have moved by at most "
        f"{100 * floored['largest_shift'].max():.2f} percentage points in any cell, and no method's mean score would "
        f"have lost more than {-100 * worst['largest_loss']:.1f}% of Fixed AdaCos's "
        f"({method_name(worst['largest_loss_method'])} on {worst['largest_loss_cell']}, stopping no earlier than "
        f"{worst['earliest_share']:.0%} of its length)."]
    if len(unfloored):
        free = unfloored.iloc[0]
        sentences.append(
            f"Without a floor, runs stop at their first evaluations, where val has barely moved: "
            f"{free['iterations_kept']:.0%} of the iterations, and {method_name(free['largest_loss_method'])}'s mean "
            f"score on {free['largest_loss_cell']} falls by {-100 * free['largest_loss']:.0f}% of Fixed AdaCos's.")
    sentences.append("The searches' trials keep their length (they record no learning curves) and each method keeps "
                     "the learning rate val chose over whole curves: the what-if prices the lever, and the answer "
                     "above still reads every run to its end.")
    return sentences
