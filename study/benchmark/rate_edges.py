"""The learning-rate grid's edges: where val chose a grid's largest or smallest rate for a method, a rate beyond it
may score higher still, so the grid may hold that method back.

The check (benchmarks/rate_edges.py) trains each such method, on each such class split and at each of the cell's
seeds, at the next rate beyond the edge (the grid's own step: 3× above its largest, ÷3 below its smallest). Val then
chooses between the edge's runs and those, as in the cell (study.learning_rates.choose_rate), test only reports, and
every method − Fixed AdaCos is formed again as the cell forms it. A searched loss draws its rate between the grid's
ends and is not extended.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.learning_rates import choose_rate


def rate_edges(run_scores: pd.DataFrame, rates) -> dict[str, dict[str, int]]:
    """Per method whose rate val chose from the grid `rates` (not a searched loss, whose rate is drawn between the
    grid's ends): on how many class splits the chosen rate is the grid's largest and its smallest, of how many; at
    an edge, a rate beyond it may score higher still. Empty for a cell without a grid or a table without rates."""
    if not rates or "lr" not in run_scores:
        return {}
    grid = np.asarray(sorted(rates), dtype=float)
    chosen = run_scores.drop_duplicates(["method", "split"])
    edges = {}
    for method, own in chosen.groupby("method", sort=False):
        lr = own["lr"].astype(float).to_numpy()
        if not np.isin(lr, grid).all():
            continue
        edges[method] = {"top": int((lr == grid[-1]).sum()), "bottom": int((lr == grid[0]).sum()), "splits": len(lr)}
    return edges


def beyond_edges(run_scores: pd.DataFrame, rates) -> pd.DataFrame:
    """Every (method, split) whose val-chosen rate is an edge of the grid `rates`, with the edge and the rate one grid
    step beyond it (rounded to 6 figures: 0.027 × 3 is 0.081); none for a grid of fewer than two rates."""
    columns = ["method", "split", "edge", "beyond"]
    grid = sorted(float(rate) for rate in rates or ())
    if len(grid) < 2 or "lr" not in run_scores:
        return pd.DataFrame(columns=columns)
    step_up, step_down = grid[-1] / grid[-2], grid[1] / grid[0]
    rows = []
    for row in run_scores.drop_duplicates(["method", "split"]).itertuples():
        lr = float(row.lr)
        if lr == grid[-1]:
            rows.append((row.method, row.split, lr, float(f"{lr * step_up:.6g}")))
        elif lr == grid[0]:
            rows.append((row.method, row.split, lr, float(f"{lr / step_down:.6g}")))
    return pd.DataFrame(rows, columns=columns)


def rechoose(run_scores: pd.DataFrame, beyond_runs: pd.DataFrame, centre: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cell's final runs with val choosing again between each edge's runs and its runs beyond the edge (method,
    split, lr, seed, val_score and the test objective; run_scores' other test metrics are NaN for a run beyond), and
    a table of each choice. A pair whose beyond runs are not all there keeps the edge: only a whole set of seeds is
    compared."""
    adjusted, choices = run_scores, []
    for (method, split), beyond in beyond_runs.groupby(["method", "split"], sort=False):
        mine = (run_scores["method"] == method) & (run_scores["split"] == split)
        edge = run_scores[mine]
        whole = set(beyond["seed"]) >= set(edge["seed"])
        rates = {float(edge["lr"].iloc[0]): list(edge["val_score"])}
        if whole:
            rates[float(beyond["lr"].iloc[0])] = list(beyond.loc[beyond["seed"].isin(edge["seed"]), "val_score"])
        chosen = choose_rate(rates, centre)
        took_beyond = whole and chosen == float(beyond["lr"].iloc[0])
        if took_beyond:
            # A run beyond scored test on the objective alone (its learning curve's): the other metrics stay unknown.
            kept = beyond[beyond["seed"].isin(edge["seed"])].reindex(columns=run_scores.columns)
            adjusted = pd.concat([adjusted[~((adjusted["method"] == method) & (adjusted["split"] == split))], kept],
                                 ignore_index=True)
        choices.append({"method": method, "split": split, "edge": float(edge["lr"].iloc[0]),
                        "beyond": float(beyond["lr"].iloc[0]), "seeds": len(edge), "beyond_seeds": len(beyond),
                        "edge_val": float(np.mean(edge["val_score"])),
                        "beyond_val": float(np.mean(beyond["val_score"])) if whole else math.nan,
                        "chose_beyond": bool(took_beyond)})
    return adjusted, pd.DataFrame(choices)

