"""The learning-rate check: does any ranking of methods change at lr/3 or 3·lr?

Every method of this project trains at one Adam learning rate (train.lr, 3e-3) and schedule. This check trains every
method of two converged cells (mnist-pairs-open-c50-conv and glyphs-open-c100-conv) again at lr/3 and 3·lr, at the
cell's own training length, schedule, batch size, checkpoint rule and objective, on each of its class splits at seed
0. Tuned ArcFace keeps, per class split, the (s, m) the cell's own search selected at lr (its landscape.csv). The
runs at lr are not retrained: they are the cell's own final runs at seed 0 (its run_scores.csv).

If any ranking of methods by test score changes beyond noise, choosing the learning rate by val for every method
becomes part of the protocol. The computation (ranks, reversals, val's choice) is study/benchmark/learning_rate.py.

Each finished run is written at once to <out>/learning_rate/<cell>/runs/<method>_lr<factor>_split<k>.json (and its
learning curve, .csv beside it): an interrupted run loses only the runs under way, and rerunning the script trains
only what is missing. It then writes <out>/learning_rate.csv (per configuration, method and learning rate), .md (the
answer), and learning_rate/runs.csv and swaps.csv (every run's scores, every reversal).

    python benchmarks/learning_rate.py              # train what is missing (one process per core), then summarise
    python benchmarks/learning_rate.py --report     # summarise the runs already written
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from functools import partial
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.benchmark.learning_rate import (BASELINE_FACTOR, LR_FACTORS, RUN_COLUMNS,  # noqa: E402
                                           chosen_learning_rates, learning_rate_sections, selected_values,
                                           summary_table, swap_table)
from study.benchmark.run_pool import train_missing_runs  # noqa: E402
import study.report.formats as fmt  # noqa: E402
from study.config import StudyParams, load_params  # noqa: E402
from study.results import is_tuned, tuned_method, write_bytes  # noqa: E402

CELLS = REPO / "benchmarks" / "cells"
OUT = REPO / "benchmarks" / "results"
CONFIGURATIONS = ("mnist-pairs-open-c50-conv", "glyphs-open-c100-conv")
SEED = 0  # one run per class split and learning rate: the cell's own seed-0 runs are the ones at lr
RETRAINED = tuple(factor for factor in LR_FACTORS if factor != BASELINE_FACTOR)
TITLE = "Does any ranking of methods change with the learning rate?"
# What a cell must hold for this check, and where in it.
CELL_FILES = ("params.yaml", "reports/tables/run_scores.csv", "reports/tables/landscape.csv")


class Cell:
    """One committed benchmark cell: its params, its methods and where its files are."""

    def __init__(self, folder: Path):
        self.folder, self.name = folder, folder.name
        self.params: StudyParams = load_params(str(folder / "params.yaml"))
        self.tables = folder / "reports" / "tables"

    @property
    def splits(self) -> tuple[int, ...]:
        return self.params.data.split_seeds()

    @property
    def methods(self) -> list[str]:
        """Its final runs' methods: runs.methods, then each searched loss at its selected values."""
        return [*self.params.runs.methods, *(tuned_method(loss) for loss in self.params.search.losses)]

    def loss_and_values(self, method: str, split: int) -> tuple[str, dict]:
        """The loss and hyperparameters the cell's own run of `method` on `split` trained with."""
        if not is_tuned(method):
            return self.params.runs.hyperparameters(method)
        loss = method.removesuffix("_tuned")
        try:
            return loss, selected_values(pd.read_csv(self.tables / "landscape.csv"), loss, split)
        except ValueError as error:
            raise SystemExit(f"{self.tables / 'landscape.csv'}: {error}; {method} takes its (s, m) from it (git "
                             "checkout the cell's committed reports/)") from None


def missing_files(folder: Path) -> list[str]:
    return [name for name in CELL_FILES if not (folder / name).is_file()]


def available_cells(cells_dir: Path, names) -> list[Cell]:
    """The named cells that are trained and committed; a message for each one that is not, saying how to make it."""
    cells = []
    for name in names:
        absent = missing_files(cells_dir / name)
        if absent:
            print(f"{cells_dir / name} is not ready (no {', '.join(absent)}): the cell is not trained yet; make it "
                  "with `python -m study.cli benchmark` (it trains every unfinished cell of "
                  "presets/benchmark/full.yaml, this one among them), then rerun this script. Skipping it.",
                  file=sys.stderr, flush=True)
        else:
            cells.append(Cell(cells_dir / name))
    if not cells:
        raise SystemExit(f"none of {', '.join(names)} is ready under {cells_dir}; train them first "
                         "(`python -m study.cli benchmark`)")
    return cells


def factor_tag(factor: float) -> str:
    """A factor as file names spell it: 1/3 → '0.333', 3 → '3'."""
    return f"{factor:.3g}"


def learning_rate(params: StudyParams, factor: float) -> float:
    """The cell's learning rate times `factor`, to 6 figures (3e-3 × 3 is 0.009, not 0.009000000000000001)."""
    return float(f"{params.train.lr * factor:.6g}")


def runs_dir(out: Path, cell: str) -> Path:
    return out / "learning_rate" / cell / "runs"


def run_name(method: str, factor: float, split: int) -> str:
    return f"{method}_lr{factor_tag(factor)}_split{split}"


def planned(cells: list[Cell]) -> list[tuple[str, str, float, int]]:
    """Every run to train, (cell, method, factor, split): a whole class split at a time."""
    return [(cell.name, method, factor, split) for cell in cells for split in cell.splits
            for factor in RETRAINED for method in cell.methods]


def train_one(cells_dir: Path, out: Path, cell_name: str, method: str, factor: float, split: int) -> str:
    """Train one run and write its learning curve and summary (whole files, so a killed run leaves nothing)."""
    import torch

    from study.plateau import plateau_rise
    from study.sources import load_dataset
    from study.splits import class_split
    from study.training import train

    torch.set_num_threads(1)
    cell = Cell(cells_dir / cell_name)
    params, objective = cell.params, cell.params.train.objective
    loss, values = cell.loss_and_values(method, split)
    config = params.train.replace(lr=learning_rate(params, factor), seed=SEED, threads=1)
    sets = class_split(load_dataset(params.data.dataset, cache_dir=params.data.cache_dir), params.data, split)
    result = train(sets, loss_name=loss, hyperparameters=values, model_config=params.model, config=config,
                   image_size=params.data.image_size, curve_splits=("test",), progress=False)
    history = pd.DataFrame(result.history).assign(method=method, lr_factor=factor, split=split, seed=SEED)
    completed = result.status == "completed"
    summary = {"configuration": cell_name, "method": method, "loss": loss,
               **{k: values.get(k, math.nan) for k in ("s", "m")}, "lr": config.lr, "lr_factor": factor,
               "split": split, "seed": SEED, "status": result.status, "reason": result.reason,
               "iterations": result.iterations, "selected_iteration": result.selected_iteration,
               "seconds": result.seconds, "device": result.device,
               "val_score": result.final.get(objective, math.nan),
               # a diverged run keeps no checkpoint in the cells, so it has no test score here either
               "test_score": result.final.get(f"test_{objective}", math.nan) if completed else math.nan,
               "plateau_rise": plateau_rise(history["iteration"], history[objective])}
    name, folder = run_name(method, factor, split), runs_dir(out, cell_name)
    write_bytes(history.to_csv(index=False).encode(), folder / f"{name}.csv")
    write_bytes((json.dumps(summary, indent=1) + "\n").encode(), folder / f"{name}.json")  # last: the run is done
    return (f"{cell_name} {name}: {result.status}, val {summary['val_score']:.4f} test {summary['test_score']:.4f} "
            f"at iteration {result.selected_iteration} of {result.iterations}, {result.seconds:.0f} s")


def train_missing(cells_dir: Path, out: Path, cells: list[Cell], workers: int) -> None:
    train_missing_runs(partial(train_one, cells_dir, out), planned(cells),
                       lambda run: (runs_dir(out, run[0]) / f"{run_name(*run[1:])}.json").exists(), workers)


def runs_at_lr(cell: Cell) -> pd.DataFrame:
    """The cell's own final runs at seed 0: the runs at lr itself."""
    path = cell.tables / "run_scores.csv"
    scores = pd.read_csv(path)
    test = f"test_{cell.params.train.objective}"
    own = scores[(scores["seed"] == SEED) & scores["method"].isin(cell.methods) & scores["split"].isin(cell.splits)]
    absent = [(method, split) for method in cell.methods for split in cell.splits
              if not ((own["method"] == method) & (own["split"] == split)).any()]
    if absent or test not in own:
        raise SystemExit(f"{path} lacks the seed-{SEED} runs (method, split) {absent} or the column {test}; it "
                         "must be the cell's committed report: git checkout it, or make the cell with "
                         "`python -m study.cli benchmark`")
    return pd.DataFrame({"configuration": cell.name, "method": own["method"], "lr": cell.params.train.lr,
                         "lr_factor": BASELINE_FACTOR, "split": own["split"], "status": own["status"],
                         "val_score": own["val_score"], "test_score": own[test], "plateau_rise": math.nan})


def retrained_runs(out: Path, cell: Cell) -> pd.DataFrame:
    """The runs at the other learning rates written so far."""
    rows = [json.loads(path.read_text()) for path in sorted(runs_dir(out, cell.name).glob("*.json"))]
    return pd.DataFrame(rows, columns=RUN_COLUMNS) if rows else pd.DataFrame(columns=RUN_COLUMNS)


def all_runs(out: Path, cells: list[Cell]) -> pd.DataFrame:
    """Every run of the check, in the cells' method order then learning rate order."""
    frames = [frame for cell in cells for frame in (runs_at_lr(cell), retrained_runs(out, cell)) if not frame.empty]
    runs = pd.concat(frames, ignore_index=True)[RUN_COLUMNS]
    order = {(cell.name, method): (c, m) for c, cell in enumerate(cells) for m, method in enumerate(cell.methods)}
    runs = runs.assign(order=[order[key] for key in zip(runs["configuration"], runs["method"])])
    return runs.sort_values(["order", "lr_factor", "split"], kind="stable").drop(columns="order").reset_index(drop=True)


def setup_paragraph(cells: list[Cell], runs: pd.DataFrame, skipped: list[str]) -> str:
    """What was run, at which learning rates and length, how much of it is done, and how the intervals read."""
    retrained = runs[runs["lr_factor"] != BASELINE_FACTOR]
    planned_runs = len(planned(cells))
    lines = []
    for cell in cells:
        train = cell.params.train
        lines.append(f"{cell.name}: {train.optimizer} at lr = {train.lr:g} (so "
                     f"{', '.join(f'{learning_rate(cell.params, f):g}' for f in LR_FACTORS)}), {train.schedule} "
                     f"schedule, {fmt.plural(train.epochs, 'epoch')} of batch {train.batch_size}, "
                     f"checkpoint {train.checkpoint}, {fmt.plural(len(cell.splits), 'class split')}")
    text = ("Every method at lr/3, lr and 3·lr, one run per class split at seed 0; the runs at lr are the cell's own. "
            + "; ".join(lines) + f". {len(retrained)} of {planned_runs} retrained runs done"
            + ("" if len(retrained) == planned_runs else " (a partial summary: rerun benchmarks/learning_rate.py)")
            + ". Intervals: 95% t over class splits; a reversal is beyond noise when the paired (same class split) "
              "interval of the difference excludes 0 at both learning rates.")
    if skipped:
        text += f" Not yet checked (cell not trained: `python -m study.cli benchmark`): {', '.join(skipped)}."
    return text


def write_summary(out: Path, cells: list[Cell], skipped: list[str]) -> None:
    from study.report.document import Section, render_markdown

    runs = all_runs(out, cells)
    summary = summary_table(runs)
    swaps, chosen = swap_table(runs, summary), chosen_learning_rates(runs)
    objectives = {cell.name: cell.params.train.objective for cell in cells}
    for frame, path in ((summary, out / "learning_rate.csv"), (runs, out / "learning_rate" / "runs.csv"),
                        (swaps, out / "learning_rate" / "swaps.csv")):
        write_bytes(frame.to_csv(index=False).encode(), path)
    sections = [Section("Setup", [setup_paragraph(cells, runs, skipped)]),
                *learning_rate_sections(runs, summary, swaps, chosen, objectives)]
    write_bytes(render_markdown(TITLE, sections).encode(), out / "learning_rate.md")
    print(f"wrote {out / 'learning_rate.csv'} and {out / 'learning_rate.md'}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="store_true", help="only write the summary from the runs already done")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs trained at once")
    parser.add_argument("--cells-dir", type=Path, default=CELLS, help="where the benchmark's cells are")
    parser.add_argument("--cells", nargs="+", default=list(CONFIGURATIONS), metavar="CELL",
                        help=f"the cells checked (default: {' '.join(CONFIGURATIONS)})")
    parser.add_argument("--out", type=Path, default=OUT, help="where the runs and the summary go")
    args = parser.parse_args()
    cells = available_cells(args.cells_dir, args.cells)
    skipped = [name for name in args.cells if name not in {cell.name for cell in cells}]
    if not args.report:
        train_missing(args.cells_dir, args.out, cells, args.workers)
    write_summary(args.out, cells, skipped)


if __name__ == "__main__":
    main()
