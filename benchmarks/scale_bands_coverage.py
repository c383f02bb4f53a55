"""Coverage of the stalled-trial rates the benchmark's details print per band of s / s_f (study.analysis.scale_bands:
the wider of Wilson's interval on the trials over their cells' design effect and the cluster-robust one over cells),
in worlds where trials of one cell share a cell effect, as the benchmark's do.

Per band with stalled trials, the design is the band's real one (each cell's trials in it, from the committed cells'
landscape tables through study.benchmark.cells.search_trials); each cell's true stall rate is drawn from a beta
distribution whose mean is the band's observed share and whose intraclass correlation ρ is 0 (independent trials),
the band's own method-of-moments estimate, or 0.2; a cell's stalls are binomial at its rate, each read against its
split's best trial at a good scale, as in a real search. The truth is the beta's mean: the rate for a trial at that
scale on a new cell like these. The table gives, per band and ρ, the share of simulated benchmarks whose interval
held it, with its Monte Carlo error.

    python benchmarks/scale_bands_coverage.py [--benchmarks 4000] [--out benchmarks/results/scale_bands_coverage.csv]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.analysis.scale_bands import BANDS, STALLED, scale_bands, within_cell_correlation  # noqa: E402
from study.benchmark.cells import search_trials  # noqa: E402


def band_cells(trials: pd.DataFrame) -> dict[tuple[float, float], pd.DataFrame]:
    """Per band, each cell's trials in it and how many stalled (against its split's best, as scale_bands counts)."""
    best = trials.groupby(["cell", "split"])["value"].transform("max")
    trials = trials.assign(ratio=trials["s"] / trials["s_f"], stalled=trials["value"] / best < STALLED)
    out = {}
    for low, high in zip(BANDS[:-1], BANDS[1:]):
        inside = trials[(trials["ratio"] > low) & (trials["ratio"] <= high)]
        out[low, high] = inside.groupby("cell")["stalled"].agg(["size", "sum"]).rename(columns={"size": "n", "sum": "k"})
    return out


WORLD_BAND = 1.0  # the lower edge of the band a world's trials fall in: s = 1.5 s_f, in (1, 2]


def world_trials(trials: np.ndarray, stalled: np.ndarray) -> pd.DataFrame:
    """A world's trials as scale_bands reads them: each cell's `trials` in the band, `stalled` of them stalled, and
    beside them its split's best trial at a good scale (0.75 s_f, another band), as every real search has one. A stall
    is read against the split's best: without it a cell whose band trials all stalled would count none."""
    band = pd.DataFrame({"cell": np.repeat(np.arange(len(trials)), trials), "split": 0, "s_f": 1.0, "s": 1.5,
                         "value": np.concatenate([np.r_[np.full(k, 0.1), np.full(m - k, 1.0)]
                                                  for k, m in zip(stalled, trials)])})
    best = pd.DataFrame({"cell": np.arange(len(trials)), "split": 0, "s_f": 1.0, "s": 0.75, "value": 1.0})
    return pd.concat([band, best], ignore_index=True)


def simulate(cells: pd.DataFrame, rho: float, benchmarks: int, rng: np.random.Generator) -> tuple[float, float]:
    """Coverage of the band's Wilson interval and its Monte Carlo error, in `benchmarks` worlds at intraclass ρ."""
    n = cells["n"].to_numpy(int)
    mean = cells["k"].sum() / n.sum()
    held = 0
    for _ in range(benchmarks):
        if rho > 0:
            a, b = mean * (1 - rho) / rho, (1 - mean) * (1 - rho) / rho
            rates = rng.beta(a, b, size=len(n))
        else:
            rates = np.full(len(n), mean)
        band = scale_bands(world_trials(n, rng.binomial(n, rates))).set_index("low").loc[WORLD_BAND]
        held += band["stalled_low"] <= mean <= band["stalled_high"]
    coverage = held / benchmarks
    return coverage, math.sqrt(coverage * (1 - coverage) / benchmarks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmarks", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "scale_bands_coverage.csv")
    args = parser.parse_args()
    rows = pd.read_csv(REPO / "reports" / "benchmark" / "tables" / "cells.csv")
    bands = band_cells(search_trials(rows, REPO / "benchmarks" / "cells", "arcface"))
    rng, table = np.random.default_rng(0), []
    for (low, high), cells in bands.items():
        if cells["k"].sum() == 0:
            continue  # no stalled trial: the interval starts at 0, which holds a zero rate by construction
        own = within_cell_correlation(cells["n"], cells["k"])[0]
        for name, rho in (("independent", 0.0), ("the band's own", own), ("0.2", 0.2)):
            coverage, error = simulate(cells, rho, args.benchmarks, rng)
            table.append({"low": low, "high": high, "trials": int(cells["n"].sum()), "cells": len(cells),
                          "stalled_share": cells["k"].sum() / cells["n"].sum(), "icc": name, "rho": rho,
                          "benchmarks": args.benchmarks, "coverage": coverage, "mc_error": error})
            print(f"({low:g}, {high:g}] ρ = {rho:.3f} ({name}): {coverage:.1%} ± {error:.1%}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(table).to_csv(args.out, index=False, float_format="%.4g")


if __name__ == "__main__":
    main()
