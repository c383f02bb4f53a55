"""Choosing the learning rate early, on the benchmark's cells that chose it at the end: how often would val at 30% of
the length choose another rate, what would that change, and what would it save?

The cells that choose each method's learning rate by val trained every rate to the end (train.choose_at null). The
runs stage now trains every rate only to train.choose_at (0.3) of the length, under the whole length's schedule, and
the chosen rate alone on to the end. This check replays that on each cell named: every hyperparameter-free method, on
every class split, at each of the cell's rates and seeds, trains until val chooses, as the runs stage trains it. Val
chooses per method and split by the same rule (study.learning_rates.choose_rate). Where it chooses the rate the cell
chose at the end, the method's runs are the cell's own (an early run is its full run's first part); where it chooses
another, that rate's runs train to the end as the cell's would. Every method − Fixed AdaCos is then formed again with
the runs the early choice keeps, as the cell forms it, and the converged headline pooled again (where the headline
reads a method's runs trained on to convergence, its difference moves by as much as the cell's own did).

What each way trains is counted in iterations, both ways alike: the cell's (every rate to the end) against the early
choice's (every rate until the choice, the chosen one to the end); the searches and tuned ArcFace's runs are alike in
both. Seconds are not compared: the cells' runs and these were timed under different loads on the machine. One
difference is left out: the stage evaluates every run at the choice point too, which the committed runs did not, so a
run's weights could be selected there; for runs that kept improving past 30% of their length that changes nothing.

Each finished run is written at once to <out>/early_choice/<cell>/<method>_lr<rate>_split<k>_seed<s>_<early|full>.json:
an interrupted check loses only the runs under way, and rerunning it trains only what is missing.

    python benchmarks/early_choice.py --cells digits-closed-conv-lr glyphs-open-c100-conv-lr
    python benchmarks/early_choice.py --cells digits-closed-conv-lr --report   # the summary from the runs done
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from functools import partial
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.analysis import differences_to_fixed_adacos  # noqa: E402
from study.benchmark.card import pct, pct_interval  # noqa: E402
from study.benchmark.shown import headline_before_after_shown, moved_differences_shown  # noqa: E402
from study.benchmark.meta import headline_with_differences  # noqa: E402
from study.benchmark.run_pool import run_summary, train_as_the_cell, train_missing_runs  # noqa: E402
from study.config import load_params  # noqa: E402
from study.learning_rates import choose_rate  # noqa: E402
from study.report.formats import method_name  # noqa: E402
from study.results import write_bytes  # noqa: E402

CELLS = REPO / "benchmarks" / "cells"
OUT = REPO / "benchmarks" / "results"
AGGREGATE = REPO / "reports" / "benchmark" / "tables" / "cells.csv"
COSTS = REPO / "reports" / "benchmark" / "tables" / "costs.csv"
TITLE = "Choosing the learning rate at 30% of the length: the same choice, the same answer, at what saving?"
CHOOSE_AT = 0.3
# Fixed AdaCos first: it is every comparison's reference.
ORDER = ("fixed_adacos", "arcface_default", "dynamic_adacos", "softmax", "p2sgrad")


def run_scores(cells_dir: Path, cell: str) -> pd.DataFrame:
    return pd.read_csv(cells_dir / cell / "reports" / "tables" / "run_scores.csv")


@functools.cache  # read once per cell: every step of the check asks for it
def cell_params(cells_dir: Path, cell: str):
    params = load_params(str(cells_dir / cell / "params.yaml"))
    if not params.train.learning_rates or params.train.choose_at is not None:
        raise SystemExit(f"{cell} does not choose its learning rate at the end among train.learning_rates; name a "
                         "cell that does (its params.yaml: train.learning_rates set, train.choose_at null)")
    return params


def run_path(out: Path, cell: str, method: str, split: int, rate: float, seed: int, length: str) -> Path:
    return out / "early_choice" / cell / f"{method}_lr{rate:g}_split{split}_seed{seed}_{length}.json"


def early_runs(cells_dir: Path, cells: list[str]) -> list[tuple]:
    """Every run until the choice, (cell, method, split, rate, seed, 'early'), Fixed AdaCos's first."""
    runs = []
    for cell in cells:
        params = cell_params(cells_dir, cell)
        methods = [method for method in ORDER if method in params.runs.methods]
        runs += [(cell, method, split, rate, seed, "early") for method in methods
                 for split in params.data.split_seeds() for rate in params.train.learning_rates
                 for seed in params.runs.seeds]
    return sorted(runs, key=lambda run: ORDER.index(run[1]))


def read_runs(out: Path, cell: str, length: str) -> pd.DataFrame:
    rows = [json.loads(path.read_text()) for path in sorted((out / "early_choice" / cell).glob(f"*_{length}.json"))]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["method", "split", "lr", "seed", "val_score"])


def early_choices(cells_dir: Path, out: Path, cell: str) -> pd.DataFrame:
    """Per method and class split whose early runs are all done: the rate val chooses at the choice point, and the
    rate the cell chose at the end."""
    params = cell_params(cells_dir, cell)
    scores, early = run_scores(cells_dir, cell), read_runs(out, cell, "early")
    rows = []
    for (method, split), own in scores.groupby(["method", "split"], sort=False):
        if method.endswith("_tuned"):
            continue
        mine = early[(early["method"] == method) & (early["split"] == split)] if len(early) else early
        if len(mine) < len(params.train.learning_rates) * len(params.runs.seeds):
            continue
        chosen = choose_rate({rate: list(mine.loc[mine["lr"] == rate, "val_score"])
                              for rate in params.train.learning_rates}, params.train.lr)
        rows.append({"cell": cell, "method": method, "split": int(split), "at_end": float(own["lr"].iloc[0]),
                     "early": chosen, "same": chosen == float(own["lr"].iloc[0]),
                     "early_seconds": float(mine["seconds"].sum()), "choice_iteration": int(mine["iterations"].max())})
    return pd.DataFrame(rows)


def full_runs(cells_dir: Path, out: Path, cells: list[str]) -> list[tuple]:
    """The runs to train to the end: each seed of every (method, split) whose early choice is not the cell's."""
    runs = []
    for cell in cells:
        params = cell_params(cells_dir, cell)
        choices = early_choices(cells_dir, out, cell)
        for row in choices[~choices["same"]].itertuples() if len(choices) else ():
            runs += [(cell, row.method, row.split, row.early, seed, "full") for seed in params.runs.seeds]
    return runs


def train_one(cells_dir: Path, out: Path, cell: str, method: str, split: int, rate: float, seed: int,
              length: str) -> str:
    """Train one run as the cell's runs stage trains it at `rate`, until the choice or to the end; write its summary
    (a whole file, last)."""
    params, result = train_as_the_cell(cells_dir, cell, method, split, rate, seed,
                                       choose_at=CHOOSE_AT if length == "early" else None)
    summary = {"cell": cell, "method": method, "split": split, "lr": rate, "seed": seed,
               **run_summary(result, params.train.objective)}
    write_bytes((json.dumps(summary, indent=1) + "\n").encode(), run_path(out, cell, method, split, rate, seed, length))
    return (f"{cell} {method} split {split} seed {seed} at {rate:g} ({length}): {result.status}, val "
            f"{summary['val_score']:.4f} at iteration {result.selected_iteration} of {result.iterations}, "
            f"{result.seconds:.0f} s")


def cell_tables(cells_dir: Path, out: Path, cell: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The cell's early choices, every method − Fixed AdaCos before and after them, and its device time both ways."""
    params = cell_params(cells_dir, cell)
    scores, metric = run_scores(cells_dir, cell), f"test_{params.train.objective}"
    choices = early_choices(cells_dir, out, cell)
    full = read_runs(out, cell, "full")
    adjusted = scores
    for row in choices[~choices["same"]].itertuples() if len(choices) else ():
        mine = full[(full["method"] == row.method) & (full["split"] == row.split)] if len(full) else full
        if set(mine["seed"]) >= set(params.runs.seeds):  # only a whole set of seeds replaces the cell's
            kept = mine.reindex(columns=scores.columns)
            adjusted = pd.concat([adjusted[~((adjusted["method"] == row.method) & (adjusted["split"] == row.split))],
                                  kept], ignore_index=True)
    before = differences_to_fixed_adacos(scores, metric)
    after = differences_to_fixed_adacos(adjusted, metric)
    compared = before.merge(after, on="method", suffixes=("", "_after")).assign(cell=cell)
    # What the untuned methods' finals trained, in iterations (the runs' seconds were measured under other loads, so
    # are not compared): the cell trained every rate whole; the early choice trains each rate until the choice and the
    # chosen one whole. The searches and tuned ArcFace's runs are alike in both.
    committed = pd.read_csv(COSTS).set_index("cell")
    length = int(committed.loc[cell, "iterations"])
    seeds, rates = len(params.runs.seeds), len(params.train.learning_rates)
    choice = int(choices["choice_iteration"].max()) if len(choices) else 0
    at_end = len(choices) * seeds * rates * length
    early = len(choices) * seeds * (rates * choice + length)
    cost = {"cell": cell, "pairs": len(choices), "same": int(choices["same"].sum()) if len(choices) else 0,
            "length": length, "choice_iteration": choice, "finals_at_end_iterations": at_end,
            "finals_early_iterations": early,
            "cell_iterations_at_end": float(committed.loc[cell, "iterations_trained"])}
    cost["cell_iterations_early"] = cost["cell_iterations_at_end"] - at_end + early
    return choices, compared, cost


def write_summary(cells_dir: Path, out: Path, cells: list[str]) -> None:
    from study.report.document import Section, Table, render_markdown

    tables = [cell_tables(cells_dir, out, cell) for cell in cells]
    choices = pd.concat([choice for choice, _, _ in tables], ignore_index=True)
    compared = pd.concat([frame for _, frame, _ in tables], ignore_index=True)
    costs = pd.DataFrame([cost for _, _, cost in tables])
    headline, used = headline_with_differences(pd.read_csv(AGGREGATE), compared)
    write_bytes(choices.to_csv(index=False).encode(), out / "early_choice.csv")
    write_bytes(costs.to_csv(index=False).encode(), out / "early_choice_cost.csv")
    write_bytes(headline.to_csv(index=False).encode(), out / "early_choice_pooled.csv")
    planned = len(early_runs(cells_dir, cells)) + len(full_runs(cells_dir, out, cells))
    done = sum(len(read_runs(out, cell, length)) for cell in cells for length in ("early", "full"))
    setup = (f"Cells: {', '.join(cells)}, each trained with every rate of {{0.003, 0.009, 0.027}} to the end. Each "
             "hyperparameter-free method, class split, rate and seed trained again until val chooses, at "
             f"{CHOOSE_AT:.0%} of the cell's length under its whole schedule; val chooses by the mean over seeds. "
             f"{done} of {planned} runs done" + ("" if done == planned else
                                                  " (a partial summary: rerun benchmarks/early_choice.py)") + ".")
    same = int(choices["same"].sum())
    answer = (f"Val at {CHOOSE_AT:.0%} chose the rate val chose at the end on {same} of {len(choices)} (method, class "
              "split) pairs" + (": it differed for " + "; ".join(
                  f"{method_name(method)} {len(own)}" for method, own in choices[~choices["same"]].groupby("method"))
                  if same < len(choices) else "") + ".")
    spent = ("The untuned methods' final runs train "
             + ", ".join(f"{row.finals_early_iterations / row.finals_at_end_iterations:.2f}×"
                         for row in costs.itertuples())
             + " the iterations they trained with every rate to the end (" + ", ".join(costs["cell"]) + "), and the "
             "whole cells, searches and tuned ArcFace's runs alike, "
             + ", ".join(f"{row.cell_iterations_early / row.cell_iterations_at_end:.2f}×"
                         for row in costs.itertuples())
             + ". Counted in iterations: the runs' seconds here were measured under another load than the cells'.")
    differences_shown = moved_differences_shown(compared, "at the end → early", "early")
    pooled_shown = headline_before_after_shown(headline)
    shown = pd.DataFrame({
        "cell": choices["cell"], "method": choices["method"].map(method_name), "split": choices["split"],
        "chosen at the end": [f"{rate:g}" for rate in choices["at_end"]],
        f"chosen at {CHOOSE_AT:.0%}": [f"{rate:g}" for rate in choices["early"]],
        "choice iteration": choices["choice_iteration"]})
    sections = [Section("Setup", [setup]),
                Section("The answer", [answer, spent]),
                Section("What moved", [Table(differences_shown, "Each method − Fixed AdaCos on the cell's test "
                                                                "objective, where the early choice moved it.")
                                       if len(differences_shown) else "No difference to Fixed AdaCos moved."]),
                Section("The converged headline again", [Table(pooled_shown, (
                    "Every method − Fixed AdaCos pooled over sources as the benchmark's report pools it, with "
                    f"{', '.join(used) or 'no cell'} read with the early choice: before → after."))]),
                Section("Each choice", [Table(shown, "Per cell, method and class split.")])]
    write_bytes(render_markdown(TITLE, sections).encode(), out / "early_choice.md")
    print(f"wrote {out / 'early_choice.md'}, early_choice.csv, early_choice_cost.csv and early_choice_pooled.csv",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", required=True, help="finished cells that chose the rate at the end")
    parser.add_argument("--report", action="store_true", help="only write the summary from the runs already done")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs trained at once")
    parser.add_argument("--cells-dir", type=Path, default=CELLS, help="where the benchmark's cells are")
    parser.add_argument("--out", type=Path, default=OUT, help="where the runs and the summary go")
    args = parser.parse_args()
    for cell in args.cells:
        cell_params(args.cells_dir, cell)
    if not args.report:
        train = partial(train_one, args.cells_dir, args.out)
        def done(run: tuple) -> bool:
            return run_path(args.out, *run).exists()

        train_missing_runs(train, early_runs(args.cells_dir, args.cells), done, args.workers)
        train_missing_runs(train, full_runs(args.cells_dir, args.out, args.cells), done, args.workers)
    write_summary(args.cells_dir, args.out, args.cells)


if __name__ == "__main__":
    main()
