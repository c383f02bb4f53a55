"""The learning-rate grid's edges: does any method gain from a rate beyond the grid val chose at its edge?

In the benchmark's cells that choose each method's learning rate by val (train.learning_rates), val often chose the
grid's largest or smallest rate. This check trains every such method (not a searched loss, which draws its rate
between the grid's ends), on every class split where val chose an edge and at each of the cell's seeds, once more
at the next rate beyond the edge, with the cell's own length, schedule, batch size, checkpoint rule and objective.
Val then chooses between the edge and beyond it as the cell does; the methods are compared with Fixed AdaCos again,
and the benchmark's converged headline is pooled again with those cells (study/benchmark/rate_edges.py).

Each finished run is written at once to <out>/rate_edges/<cell>/<method>_lr<rate>_split<k>_seed<s>.json: an
interrupted check loses only the runs under way, and rerunning it trains only what is missing. Fixed AdaCos's runs
train first, as they move every comparison. It then writes <out>/rate_edges.md (the answer), rate_edges.csv (every
choice) and rate_edges_pooled.csv (the headline before and after, per method).

    python benchmarks/rate_edges.py                # train what is missing (one process per core), then summarise
    python benchmarks/rate_edges.py --report       # summarise the runs already written
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

from study.benchmark.card import pct, pct_interval  # noqa: E402
from study.benchmark.shown import headline_before_after_shown, moved_differences_shown  # noqa: E402
from study.benchmark.meta import headline_with_differences  # noqa: E402
from study.analysis import differences_to_fixed_adacos  # noqa: E402
from study.benchmark.rate_edges import beyond_edges, rechoose  # noqa: E402
from study.benchmark.run_pool import run_summary, train_as_the_cell, train_missing_runs  # noqa: E402
from study.config import load_params  # noqa: E402
from study.report.formats import method_name  # noqa: E402
from study.results import write_bytes  # noqa: E402

CELLS = REPO / "benchmarks" / "cells"
OUT = REPO / "benchmarks" / "results"
AGGREGATE = REPO / "reports" / "benchmark" / "tables" / "cells.csv"
TITLE = "Does any method gain from a learning rate beyond the grid's edge?"
# Fixed AdaCos first: it is every comparison's reference.
ORDER = ("fixed_adacos", "arcface_default", "dynamic_adacos", "softmax", "p2sgrad")


def grid_cells(cells_dir: Path) -> list[str]:
    """The finished cells of the benchmark's plan that choose the rate by val (their committed run_scores.csv)."""
    plan = json.loads((cells_dir / "plan.json").read_text())
    return [cell["name"] for cell in plan["cells"] if cell.get("learning_rates")
            and (cells_dir / cell["name"] / "reports" / "tables" / "run_scores.csv").is_file()]


def run_scores(cells_dir: Path, cell: str) -> pd.DataFrame:
    return pd.read_csv(cells_dir / cell / "reports" / "tables" / "run_scores.csv")


def planned(cells_dir: Path, cells: list[str]) -> list[tuple[str, str, int, float, int]]:
    """Every run to train, (cell, method, split, rate, seed), Fixed AdaCos's first."""
    runs = []
    for cell in cells:
        params = load_params(str(cells_dir / cell / "params.yaml"))
        edges = beyond_edges(run_scores(cells_dir, cell), params.train.learning_rates)
        for row in edges[edges["method"].isin(ORDER)].itertuples():
            runs += [(cell, row.method, int(row.split), row.beyond, seed) for seed in params.runs.seeds]
    return sorted(runs, key=lambda run: ORDER.index(run[1]))


def run_path(out: Path, cell: str, method: str, split: int, rate: float, seed: int) -> Path:
    return out / "rate_edges" / cell / f"{method}_lr{rate:g}_split{split}_seed{seed}.json"


def train_one(cells_dir: Path, out: Path, cell: str, method: str, split: int, rate: float, seed: int) -> str:
    """Train one run as the cell's runs stage trains it, at `rate`; write its summary (a whole file, last)."""
    from study.plateau import plateau_rise

    params, result = train_as_the_cell(cells_dir, cell, method, split, rate, seed)
    objective = params.train.objective
    history = pd.DataFrame(result.history)
    summary = {"configuration": cell, "method": method, "split": split, "lr": rate, "seed": seed,
               **run_summary(result, objective),
               "plateau_rise": plateau_rise(history["iteration"], history[objective])}
    write_bytes((json.dumps(summary, indent=1) + "\n").encode(), run_path(out, cell, method, split, rate, seed))
    return (f"{cell} {method} split {split} seed {seed} at {rate:g}: {result.status}, val {summary['val_score']:.4f} "
            f"at iteration {result.selected_iteration} of {result.iterations}, {result.seconds:.0f} s")


def train_missing(cells_dir: Path, out: Path, cells: list[str], workers: int) -> None:
    train_missing_runs(partial(train_one, cells_dir, out), planned(cells_dir, cells),
                       lambda run: run_path(out, *run).exists(), workers)


def beyond_runs(out: Path, cell: str) -> pd.DataFrame:
    rows = [json.loads(path.read_text()) for path in sorted((out / "rate_edges" / cell).glob("*.json"))]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["method", "split", "lr", "seed", "val_score"])


def cell_tables(cells_dir: Path, out: Path, cell: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cell's val choices beyond its edges, and every method − Fixed AdaCos before and after them."""
    params = load_params(str(cells_dir / cell / "params.yaml"))
    scores, metric = run_scores(cells_dir, cell), f"test_{params.train.objective}"
    runs = beyond_runs(out, cell)
    adjusted, choices = rechoose(scores, runs, params.train.lr)
    plateau = runs.groupby(["method", "split"])["plateau_rise"].max() if len(runs) else pd.Series(dtype=float)
    choices = choices.assign(cell=cell, beyond_rise=[plateau.get((row.method, row.split), math.nan)
                                                    for row in choices.itertuples()])
    before = differences_to_fixed_adacos(scores, metric)
    after = differences_to_fixed_adacos(adjusted, metric)
    compared = before.merge(after, on="method", suffixes=("", "_after")).assign(cell=cell)
    return choices, compared


def write_summary(cells_dir: Path, out: Path, cells: list[str]) -> None:
    from study.report.document import Section, Table, render_markdown

    pairs = [cell_tables(cells_dir, out, cell) for cell in cells]
    choices = pd.concat([choice for choice, _ in pairs], ignore_index=True)
    compared = pd.concat([frame for _, frame in pairs], ignore_index=True)
    headline, used = headline_with_differences(pd.read_csv(AGGREGATE), compared)
    write_bytes(choices.to_csv(index=False).encode(), out / "rate_edges.csv")
    write_bytes(headline.to_csv(index=False).encode(), out / "rate_edges_pooled.csv")
    planned_runs, done = len(planned(cells_dir, cells)), sum(len(beyond_runs(out, cell)) for cell in cells)
    pairs_at_edge = len({run[:3] for run in planned(cells_dir, cells)})
    whole = choices[choices["beyond_val"].notna()]
    took = whole[whole["chose_beyond"]]
    setup = (f"The cells that choose each method's learning rate by val: {', '.join(cells)}. Every hyperparameter-free "
             "method on every class split where val chose the grid's largest rate (or smallest) trained again at each "
             "of the cell's seeds at 3× that rate (or a third of it), the grid's own step; val chooses between the "
             f"edge and beyond it by the mean over seeds, as the cell does. {done} of {planned_runs} runs done"
             + ("" if done == planned_runs else " (a partial summary: rerun benchmarks/rate_edges.py)") + ". Tuned "
             "ArcFace keeps its runs: its search draws the rate between the grid's ends, and it chose inside them.")
    answer = (f"Of {pairs_at_edge} (method, class split) pairs at an edge, {len(whole)} have every seed's run beyond "
              f"it; val chose beyond on {len(took)}"
              + (": " + "; ".join(f"{method_name(method)} {len(own)} of {int((whole['method'] == method).sum())}"
                                  for method, own in took.groupby("method", sort=False)) if len(took) else "") + ".")
    shown = pd.DataFrame({
        "cell": whole["cell"], "method": whole["method"].map(method_name), "split": whole["split"].astype(int),
        "edge → beyond": [f"{row.edge:g} → {row.beyond:g}" for row in whole.itertuples()],
        "mean val: edge → beyond": [f"{row.edge_val:.4f} → {row.beyond_val:.4f}" for row in whole.itertuples()],
        "beyond: best val's rise over its second half (largest over seeds)": [pct(v) for v in whole["beyond_rise"]],
        "val chose beyond": ["yes" if chose else "no" for chose in whole["chose_beyond"]]})
    differences_shown = moved_differences_shown(compared)
    pooled_shown = headline_before_after_shown(headline)
    tuned = headline.set_index("method").loc["arcface_tuned"] if "arcface_tuned" in set(headline["method"]) else None
    verdict = ("" if tuned is None else
               f"Tuned ArcFace − Fixed AdaCos in the converged headline: {pct(tuned['mean'])} on average, a new "
               f"source "
               f"{pct_interval(tuned['prediction_low'], tuned['prediction_high'])}; with val free to choose beyond the "
               f"edges in {', '.join(used) or 'no headline cell'}: {pct(tuned['mean_after'])}, a new source "
               f"{pct_interval(tuned['prediction_low_after'], tuned['prediction_high_after'])}. The headline keeps "
               "its cells (the plateau rule read at the grid's rates); this is a sensitivity, not the answer.")
    sections = [Section("Setup", [setup]),
                Section("The answer", [answer, verdict]),
                Section("Each choice", [Table(shown, "Per cell, method and class split: the mean val over seeds at "
                                                     "the edge and beyond it, and whether val chose beyond.")]),
                Section("What moved", [Table(differences_shown, "Each method − Fixed AdaCos on the cell's test "
                                                                "objective, where a choice beyond an edge moved it.")
                                       if len(differences_shown) else "No difference to Fixed AdaCos moved."]),
                Section("The converged headline again", [Table(pooled_shown, "Every method − Fixed AdaCos pooled "
                                                                            "over sources as the benchmark's report "
                                                                            "pools it, before → after.")])]
    write_bytes(render_markdown(TITLE, sections).encode(), out / "rate_edges.md")
    print(f"wrote {out / 'rate_edges.md'}, rate_edges.csv and rate_edges_pooled.csv", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="store_true", help="only write the summary from the runs already done")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs trained at once")
    parser.add_argument("--cells-dir", type=Path, default=CELLS, help="where the benchmark's cells are")
    parser.add_argument("--out", type=Path, default=OUT, help="where the runs and the summary go")
    args = parser.parse_args()
    cells = grid_cells(args.cells_dir)
    if not cells:
        raise SystemExit(f"no finished cell under {args.cells_dir} chooses its learning rate by val; train them "
                         "first (`python -m study.cli benchmark`)")
    if not args.report:
        train_missing(args.cells_dir, args.out, cells, args.workers)
    write_summary(args.cells_dir, args.out, cells)


if __name__ == "__main__":
    main()
