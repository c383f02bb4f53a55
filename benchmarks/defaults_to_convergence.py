"""A method still improving in a headline cell, trained on to convergence by the rule docs/analysis.md declares
("A method still improving in a headline cell"): alone, at the cell's class splits and seeds and at the learning
rate val chose there per split, for 2× the cell's iterations; where the plateau rule still fails on the mean over its
runs, for 4×, and no longer. Its difference to Fixed AdaCos pairs those runs with the cell's own Fixed AdaCos runs
(converged there) by split and seed.

Which methods: the rows of the benchmark's converged headline (reports/benchmark/tables/cells.csv, read by
study.analysis.headline.headline_cells) flagged still improving, untuned ones (a tuned loss's runs are its search's
selected values, retrained in the cell). At its declaration that is ArcFace at its defaults in 5 of the 9 cells and
Dynamic AdaCos in one; the runs train shortest cell first.

Each finished run is written at once to <out>/defaults_to_convergence/<cell>/<method>_x<factor>_split<k>_seed<s>.json
with its learning curve (val and test at every evaluation): an interrupted chunk loses only the runs under way, and
rerunning trains only what is missing, on this machine or a fresh one. It then writes
<out>/defaults_to_convergence.csv: per cell, method and length, the plateau rule and the method − Fixed AdaCos as the
cell forms it (study.analysis.differences_to_fixed_adacos), and which length the declared rule takes.

    python benchmarks/defaults_to_convergence.py              # train what is missing (one process per core), then summarise
    python benchmarks/defaults_to_convergence.py --report     # summarise the runs already written
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

from study.analysis import differences_to_fixed_adacos  # noqa: E402
from study.plateau import PLATEAU_RISE, plateau_table  # noqa: E402
from study.analysis.headline import headline_cells  # noqa: E402
from study.benchmark.run_pool import run_summary, train_as_the_cell, train_missing_runs  # noqa: E402
from study.benchmark.trained_on import FACTORS, plateau_rise, run_path, run_scores, taken_length, written  # noqa: E402
from study.config import load_params  # noqa: E402
from study.results import write_bytes  # noqa: E402

CELLS = REPO / "benchmarks" / "cells"
OUT = REPO / "benchmarks" / "results"
AGGREGATE = REPO / "reports" / "benchmark" / "tables" / "cells.csv"


def still_improving(aggregate: Path = AGGREGATE) -> list[tuple[str, str]]:
    """(cell, method) of every untuned method the converged headline pools although its cell's own runs were still
    improving: flagged so, or read from the longer runs already (length_factor > 1)."""
    rows = headline_cells(pd.read_csv(aggregate))
    longer = rows["length_factor"].astype(int) > 1 if "length_factor" in rows else False
    rows = rows[(rows["still_improving"].astype(bool) | longer) & ~rows["tuned"].astype(bool)]
    rows = rows.sort_values(["iterations", "cell"], kind="stable")  # the cheapest runs land first
    return list(dict.fromkeys(zip(rows["cell"], rows["method"])))


def cell_runs(cells_dir: Path, cell: str) -> pd.DataFrame:
    return pd.read_csv(cells_dir / cell / "reports" / "tables" / "run_scores.csv")


def planned(cells_dir: Path, out: Path, pairs: list[tuple[str, str]]) -> list[tuple]:
    """Every run to train now, (cell, method, factor, split, rate, seed): 2× for every pair; 4× for a pair whose 2×
    runs are all written and still improving."""
    runs = []
    for cell, method in pairs:
        scores = cell_runs(cells_dir, cell)
        own = scores[scores["method"] == method].sort_values(["split", "seed"])
        keys = [(int(row.split), float(row.lr), int(row.seed)) for row in own.itertuples()]
        runs += [(cell, method, 2, *key) for key in keys]
        done = written(out, cell, method, 2)
        if len(done) == len(keys) and not plateau_rise(done, method) < PLATEAU_RISE:
            runs += [(cell, method, 4, *key) for key in keys]
    return runs


def train_one(cells_dir: Path, out: Path, cell: str, method: str, factor: int, split: int, rate: float,
              seed: int) -> str:
    """Train one run as the cell's runs stage trains it, at `rate` and `factor` × its epochs; write its summary and
    learning curve (a whole file, last)."""
    params, result = train_as_the_cell(cells_dir, cell, method, split, rate, seed, epochs_factor=factor)
    objective = params.train.objective
    curve = [{"iteration": int(point["iteration"]), "val": float(point.get(objective, math.nan)),
              "test": float(point.get(f"test_{objective}", math.nan))} for point in result.history]
    summary = {"configuration": cell, "method": method, "factor": factor, "split": split, "lr": rate, "seed": seed,
               **run_summary(result, objective), "curve": curve}
    write_bytes((json.dumps(summary, indent=1) + "\n").encode(), run_path(out, cell, method, factor, split, seed))
    return (f"{cell} {method} ×{factor} split {split} seed {seed} at {rate:g}: {result.status}, val "
            f"{summary['val_score']:.4f} at iteration {result.selected_iteration} of {result.iterations}, "
            f"{result.seconds:.0f} s")


def summary_rows(cells_dir: Path, out: Path, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """Per cell, method and length (1× the cell's own runs, 2×, 4×): runs written of those planned, the plateau
    rule, the method − Fixed AdaCos (its cell's Fixed AdaCos runs), and whether the declared rule takes that length."""
    rows = []
    for cell, method in pairs:
        params = load_params(str(cells_dir / cell / "params.yaml"))
        metric = f"test_{params.train.objective}"
        scores = cell_runs(cells_dir, cell)
        planned_runs = int((scores["method"] == method).sum())
        lengths = []
        for factor in (1, *FACTORS):
            if factor == 1:
                runs, adjusted = planned_runs, scores
                curves = pd.read_csv(cells_dir / cell / "reports" / "tables" / "learning_curves.csv")
                converged = bool(plateau_table(curves, [method])["converged"].iloc[0])
            else:
                done = written(out, cell, method, factor)
                runs = len(done)
                if not done:
                    continue
                converged = bool(plateau_rise(done, method) < PLATEAU_RISE)
                adjusted = pd.concat([scores[scores["method"] != method], run_scores(done)], ignore_index=True)
            difference = differences_to_fixed_adacos(adjusted, metric).set_index("method").loc[method]
            lengths.append({"cell": cell, "method": method, "factor": factor, "runs": runs, "planned": planned_runs,
                            "converged": converged, "relative": difference["relative"],
                            "low": difference["low"] / difference["reference_test_mean"],
                            "high": difference["high"] / difference["reference_test_mean"],
                            "difference": difference["difference"], "standard_error": difference["standard_error"],
                            "df": difference["df"]})
        taken = taken_length(out, cell, method, planned_runs)
        for row in lengths:
            row["taken"] = taken is not None and row["factor"] == taken[0]
        rows += lengths
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="store_true", help="summarise the runs already written, train nothing")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    pairs = still_improving()
    print(f"{len(pairs)} (cell, method) pairs still improving in the converged headline: "
          + ", ".join(f"{method} in {cell}" for cell, method in pairs), flush=True)
    if not args.report:
        runs = planned(CELLS, args.out, pairs)
        train_missing_runs(partial(train_one, CELLS, args.out), runs,
                           lambda run: run_path(args.out, run[0], run[1], run[2], run[3], run[5]).exists(),
                           args.workers)
    table = summary_rows(CELLS, args.out, pairs)
    write_bytes(table.to_csv(index=False).encode(), args.out / "defaults_to_convergence.csv")
    print(table.to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
