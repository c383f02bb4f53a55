"""A method still improving in a headline cell, trained on to convergence: its runs, the length the declared rule
takes, and the cell's rows with those runs in place of the cell's own.

The rule (docs/analysis.md, "A method still improving in a headline cell", declared before these runs): the method
is trained again alone, at the cell's class splits, seeds and val-chosen rates, for 2× the cell's iterations, and
where the plateau rule still fails on the mean over its runs, for 4× (the cap). The pooled rows read the shortest
length at which the rule holds with every run written, else the 4× runs, flagged still improving at the cap; until
one length is whole, the cell's own runs. benchmarks/defaults_to_convergence.py trains the runs; each is one file,
<results>/defaults_to_convergence/<cell>/<method>_x<factor>_split<k>_seed<s>.json, with its learning curve.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from study.analysis import differences_to_fixed_adacos
from study.plateau import PLATEAU_RISE, plateau_table

FOLDER = "defaults_to_convergence"
FACTORS = (2, 4)  # the declared lengths, × the cell's iterations; 4× is the cap
# What a cell's row takes from the longer runs: the difference as the cell forms it, and the method's own facts.
ESTIMATE_COLUMNS = ("difference", "low", "high", "standard_error", "df", "se_splits", "se_floor", "se_from",
                    "relative", "relative_se")


def results_beside(cells_dir: Path) -> Path:
    """Where the longer runs of a benchmark's cells are kept: its results/ folder, beside cells/."""
    return Path(cells_dir).resolve().parent / "results"


def run_path(results: Path, cell: str, method: str, factor: int, split: int, seed: int) -> Path:
    return Path(results) / FOLDER / cell / f"{method}_x{factor}_split{split}_seed{seed}.json"


def written(results: Path, cell: str, method: str, factor: int) -> list[dict]:
    """The runs of `method` in `cell` at `factor` × its iterations written so far."""
    return [json.loads(path.read_text(encoding="utf-8")) for path in
            sorted((Path(results) / FOLDER / cell).glob(f"{method}_x{factor}_split*_seed*.json"))]


def learning_curves(runs: list[dict]) -> pd.DataFrame:
    """The runs' curves in the long form plateau_table reads (method, split, seed, iteration, val, test)."""
    return pd.DataFrame([{"method": run["method"], "split": run["split"], "seed": run["seed"], **point}
                         for run in runs for point in run["curve"]],
                        columns=["method", "split", "seed", "iteration", "val", "test"])


def plateau_rise(runs: list[dict], method: str) -> float:
    """The plateau rule's rise on the mean over the runs (plateau_table), as a cell's report reads it; NaN for none."""
    table = plateau_table(learning_curves(runs), [method])
    return float(table["rise"].iloc[0]) if len(table) else math.nan


def run_scores(runs: list[dict]) -> pd.DataFrame:
    """The runs as rows of a cell's run_scores.csv (their curves left out)."""
    return pd.DataFrame([{key: value for key, value in run.items() if key not in ("curve", "factor", "configuration")}
                         for run in runs])


def taken_length(results: Path, cell: str, method: str, planned: int) -> tuple[int, list[dict], float] | None:
    """The length the declared rule takes for `method` in `cell` (`planned` runs at each), its runs and their
    plateau rise: the shortest whole length at which the rule holds, else the cap's whole runs; None until then."""
    for factor in FACTORS:
        runs = written(results, cell, method, factor)
        if len(runs) < planned:
            return None
        rise = plateau_rise(runs, method)
        if rise < PLATEAU_RISE or factor == FACTORS[-1]:
            return factor, runs, rise
    return None


def with_longer_curves(curves: pd.DataFrame, cell_rows: pd.DataFrame, results: Path) -> pd.DataFrame:
    """A cell's learning curves (its tables/learning_curves.csv) with the curves of each method its rows read from
    longer runs (length_factor > 1) replaced by those runs' curves: the iterations counted on the runs the scores
    come from."""
    longer = cell_rows[cell_rows.get("length_factor", pd.Series(1, index=cell_rows.index)).astype(int) > 1]
    for row in longer.itertuples():
        runs = learning_curves(written(results, row.cell, row.method, int(row.length_factor)))
        curves = pd.concat([curves[curves["method"] != row.method], runs[curves.columns]], ignore_index=True)
    return curves


def with_longer_runs(rows: pd.DataFrame, cells_dir: Path, results: Path) -> pd.DataFrame:
    """The cells' rows, each method trained on to convergence reading the length the rule takes: its difference to
    the cell's own Fixed AdaCos runs (paired by split and seed), its mean score, rise and convergence, and
    `length_factor` (1: the cell's own runs) beside `own_relative` and `own_rise` (the cell's own runs'). The
    rate-choice bound stays the cell's own: the longer runs repeat its seeds at the rate val chose there."""
    rows = rows.assign(length_factor=1, own_relative=rows["relative"],
                       own_rise=rows["method_rise"] if "method_rise" in rows else math.nan)
    folder = Path(results) / FOLDER
    if not folder.is_dir():
        return rows
    for cell in sorted(path.name for path in folder.iterdir() if path.is_dir()):
        mine = rows["cell"] == cell
        if not mine.any():
            continue
        scores = pd.read_csv(Path(cells_dir) / cell / "reports" / "tables" / "run_scores.csv")
        metric, confidence = rows.loc[mine, "metric"].iloc[0], float(rows.loc[mine, "confidence"].iloc[0])
        for method in sorted({run.name.split("_x")[0] for run in (folder / cell).glob("*_x*.json")}):
            at = mine & (rows["method"] == method)
            taken = taken_length(results, cell, method, int((scores["method"] == method).sum()))
            if not at.any() or taken is None:
                continue
            factor, runs, rise = taken
            adjusted = pd.concat([scores[scores["method"] != method], run_scores(runs)], ignore_index=True)
            estimate = differences_to_fixed_adacos(adjusted, metric, confidence).set_index("method").loc[method]
            for column in ESTIMATE_COLUMNS:
                rows.loc[at, column] = estimate[column]
            rows.loc[at, "method_test_mean"] = float(pd.DataFrame(runs)[metric].mean())
            rows.loc[at, "method_rise"] = rise
            rows.loc[at, "converged"] = bool(rows.loc[at, "reference_converged"].iloc[0]) and rise < PLATEAU_RISE
            rows.loc[at, "length_factor"] = factor
    return rows
