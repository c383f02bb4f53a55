"""Coverage of the absolute scores' intervals (precision@1, R-precision, MAP@R: mean [95% CI over class splits]) in
simulated worlds with a known truth, the raw-scale t interval the report printed before beside the logit-scale one it
prints now (study.analysis.comparison.logit_t_interval).

The worlds are the committed benchmark cells' own (benchmarks/cells/*/reports/tables/run_scores.csv): per metric, the
three (cell, method) rows pressed hardest against 1 (the largest standard error of the mean over splits relative to
the remaining error 1 − mean, where the raw interval runs above 1) and the rows at the 10th, 50th and 90th percentile
of the mean, each with its own mean, split-to-split sd, pooled within-split seed sd, splits and seeds per split.
Each world's split effect and seed noise are drawn three ways: normal on the raw scale (clipped to [0, 1]), normal on
the logit scale (sds matched at the mean by the delta method), and a left-skewed split effect on the raw scale (a
centred exponential, negated: a bad split drags the score down, as near a ceiling). The truth is the expected score of
one run (a new split, a new seed), from 400,000 draws. Each study averages its splits' seeds and builds both intervals
over the splits; the table gives the share of studies whose 95% interval held the truth, with its Monte Carlo error,
the share whose bounds left [0, 1], and the mean widths (also against the mean's real spread) (benchmarks/results/absolute_coverage.csv).

    python benchmarks/absolute_coverage.py [--studies 4000] [--out benchmarks/results/absolute_coverage.csv]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import special, stats

from study.analysis.comparison import ABSOLUTE_METRICS, logit_t_interval

ROOT = Path(__file__).resolve().parents[1]
CELLS = ROOT / "benchmarks" / "cells"
OUT = ROOT / "benchmarks" / "results" / "absolute_coverage.csv"
CONFIDENCE = 0.95
SHAPES = ("normal", "logit-normal", "left-skewed")


def cell_spreads(cells_dir: Path = CELLS) -> pd.DataFrame:
    """Per (cell, method, metric): the mean, split-to-split sd of the split means, pooled within-split seed sd,
    splits and seeds per split (rounded down) of the committed runs."""
    rows = []
    for path in sorted(cells_dir.glob("*/reports/tables/run_scores.csv")):
        runs = pd.read_csv(path)
        for method, group in runs.groupby("method"):
            for metric in ABSOLUTE_METRICS:
                scores = group.dropna(subset=[f"test_{metric}"]).groupby("split")[f"test_{metric}"]
                if scores.ngroups < 2:
                    continue
                rows.append({"cell": path.parts[-4], "method": method, "metric": metric,
                             "mean": float(scores.mean().mean()), "split_sd": float(scores.mean().std(ddof=1)),
                             "seed_sd": float(np.sqrt(scores.var(ddof=1).mean())), "splits": scores.ngroups,
                             "seeds": int(scores.size().min())})
    return pd.DataFrame(rows)


def chosen_worlds(spreads: pd.DataFrame) -> pd.DataFrame:
    """Per metric, the three rows pressed hardest against 1 and those at the 10th, 50th and 90th percentile of the
    mean."""
    chosen = []
    for _, rows in spreads.groupby("metric", sort=False):
        error = np.sqrt(rows["split_sd"] ** 2 + rows["seed_sd"] ** 2 / rows["seeds"]) / np.sqrt(rows["splits"])
        pressed = rows.assign(pressure=error / (1 - rows["mean"])).nlargest(3, "pressure")
        ranked = rows.sort_values("mean").reset_index(drop=True)
        quantiles = ranked.iloc[[int(q * (len(ranked) - 1)) for q in (0.1, 0.5, 0.9)]]
        chosen.append(pd.concat([pressed.drop(columns="pressure"), quantiles]))
    return pd.concat(chosen).drop_duplicates(["cell", "method", "metric"]).reset_index(drop=True)


def draw_scores(world, shape: str, shape_of: tuple, rng) -> np.ndarray:
    """Run scores of shape `shape_of` (…, splits, seeds) in a world: split effect plus seed noise, on the raw scale
    (clipped to [0, 1]) or on the logit scale."""
    *lead, splits, seeds = shape_of
    if shape == "logit-normal":
        slope = world.mean * (1 - world.mean)  # d mean / d logit at the mean: the delta method's match of the sds
        effect = rng.normal(0, world.split_sd / slope, (*lead, splits, 1))
        return special.expit(special.logit(world.mean) + effect
                             + rng.normal(0, world.seed_sd / slope, (*lead, splits, seeds)))
    effect = (rng.normal(0, world.split_sd, (*lead, splits, 1)) if shape == "normal"
              else world.split_sd - rng.exponential(world.split_sd, (*lead, splits, 1)))
    return np.clip(world.mean + effect + rng.normal(0, world.seed_sd, (*lead, splits, seeds)), 0.0, 1.0)


def raw_t_interval(units: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The interval the report printed before: mean ± t_{(1+c)/2, n−1} · sd / √n on the raw scale."""
    n = units.shape[-1]
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * units.std(axis=-1, ddof=1) / math.sqrt(n)
    return units.mean(axis=-1) - half, units.mean(axis=-1) + half


def coverage(worlds: pd.DataFrame, studies: int, seed: int = 0) -> pd.DataFrame:
    """Per world and shape, each interval's coverage of the expected score, its Monte Carlo error, the share of
    intervals with a bound outside [0, 1], the share that leave out the plain mean (the point the report prints),
    the mean width and its ratio to the mean's real spread (2 · 1.96 · its sd over the studies)."""
    rng = np.random.default_rng(seed)
    rows = []
    for world in worlds.itertuples():
        for shape in SHAPES:
            truth = float(draw_scores(world, shape, (400_000, 1, 1), rng).mean())
            units = draw_scores(world, shape, (studies, world.splits, world.seeds), rng).mean(axis=-1)
            means = units.mean(axis=-1)
            for name, (low, high) in (("t, raw scale (before)", raw_t_interval(units, CONFIDENCE)),
                                      ("t, logit scale (now)", logit_t_interval(units, CONFIDENCE))):
                covered = float(((low <= truth) & (truth <= high)).mean())
                rows.append({"cell": world.cell, "method": world.method, "metric": world.metric,
                             "mean": world.mean, "split_sd": world.split_sd, "seed_sd": world.seed_sd,
                             "splits": world.splits, "seeds": world.seeds, "world": shape, "interval": name,
                             "truth": truth, "studies": studies, "coverage": covered,
                             "monte_carlo_se": math.sqrt(max(covered * (1 - covered), CONFIDENCE * (1 - CONFIDENCE))
                                                         / studies),
                             "outside_0_1": float(((low < 0) | (high > 1)).mean()),
                             "mean_outside_interval": float(((means < low) | (means > high)).mean()),
                             "mean_width": float((high - low).mean()),
                             "width_ratio": float((high - low).mean() / (2 * 1.96 * means.std(ddof=1)))})
    return pd.DataFrame(rows)


def committed_bounds(spreads_dir: Path = CELLS) -> pd.DataFrame:
    """Both intervals on the committed cells' own split means: how many run above 1 and how far."""
    rows = []
    for path in sorted(spreads_dir.glob("*/reports/tables/run_scores.csv")):
        runs = pd.read_csv(path)
        for (method, metric) in ((m, k) for m in runs["method"].unique() for k in ABSOLUTE_METRICS):
            units = runs[runs["method"] == method].dropna(subset=[f"test_{metric}"]).groupby("split")[
                f"test_{metric}"].mean().to_numpy()
            if units.size < 2:
                continue
            raw, logit = raw_t_interval(units, CONFIDENCE), logit_t_interval(units, CONFIDENCE)
            rows.append({"raw_high": float(raw[1]), "logit_high": float(logit[1]), "raw_low": float(raw[0]),
                         "logit_low": float(logit[0])})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    start = time.perf_counter()
    worlds = chosen_worlds(cell_spreads())
    table = coverage(worlds, args.studies)
    table.to_csv(args.out, index=False)
    summary = table.groupby(["world", "interval"])["coverage"].agg(["min", "mean", "max"])
    print(table.drop(columns=["split_sd", "seed_sd", "truth", "studies"]).round(4).to_string(index=False))
    print("\n" + summary.round(4).to_string())
    bounds = committed_bounds()
    print(f"\ncommitted cells, {len(bounds)} intervals: raw t above 1 in {(bounds['raw_high'] > 1).sum()} "
          f"(highest {bounds['raw_high'].max():.4f}), logit t above 1 in {(bounds['logit_high'] > 1).sum()} "
          f"(highest {bounds['logit_high'].max():.4f}); {len(worlds)} worlds × {len(SHAPES)} shapes, "
          f"{args.studies} studies each ({time.perf_counter() - start:.0f} s); written to {args.out}")


if __name__ == "__main__":
    main()
