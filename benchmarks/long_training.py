"""The 20,000-iteration cell: does AdaCos overtake ArcFace only after about 20,000 iterations?

Double MNIST at face-training scale: `compose:2:400:mnist5k` (99 of its 100 two-digit classes, as the long cell
mnist-pairs-open-c50-long keeps), open protocol, 50 training classes of 400 fresh real-digit pairs each (about
20,000 training images, so 20,000 iterations of 64 are about 64 passes over the data), 2 class splits × 3 seeds.
Every method trains 20,000 iterations with a log-spaced schedule of val and test evaluations and keeps the
checkpoint val selects (docs/analysis.md, "Training length and convergence"). Tuned ArcFace takes, per class split,
the (s, m) that the same configuration's search at its longest searched length selected (the committed cell
mnist-pairs-open-c50-long, 1,860 iterations): this cell runs no search of its own.

Each finished run is written at once to benchmarks/cells/mnist-pairs-open-c50-20k/runs/ (its learning curve and a
summary): an interrupted or killed run loses only the runs under way, and rerunning the script trains only what is
missing. Once every run is there (or with --report), it writes the cell's reports/ (learning_curves.csv, the plateau
rule per method, each method − Fixed AdaCos along the iterations, the crossover sentence, the figure).

    python benchmarks/long_training.py              # train what is missing (one process per core), then report
    python benchmarks/long_training.py --report     # report from the runs already written
    python benchmarks/long_training.py --device cuda --cell mnist-pairs-open-c50-20k-cuda   # the same cell on a GPU
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

from study.benchmark.run_pool import train_missing_runs  # noqa: E402
from study.config import DataConfig, ModelConfig, TrainConfig  # noqa: E402
from study.results import write_bytes  # noqa: E402

CELL = REPO / "benchmarks" / "cells" / "mnist-pairs-open-c50-20k"
RUNS = CELL / "runs"
SEARCHED_AT = REPO / "benchmarks" / "cells" / "mnist-pairs-open-c50-long" / "reports" / "tables" / "landscape.csv"
DATA = DataConfig(dataset="compose:2:400:mnist5k", classes=99, protocol="open", fractions=(0.5, 0.25, 0.25))
SPLITS, SEEDS = (0, 1), (0, 1, 2)
ITERATIONS = 20_000
MODEL = ModelConfig(name="cnn", embedding_size=64)
TRAIN = TrainConfig(epochs=1_000, max_iterations=ITERATIONS, batch_size=64, optimizer="adam", lr=3e-3,
                    schedule="cosine", eval_points=20, checkpoint="best_val", device="cpu", objective="map_at_r",
                    threads=1)
# method: (loss, hyperparameters or "searched": the long cell's selected (s, m) on the same class split)
METHODS = {"fixed_adacos": ("fixed_adacos", {}), "dynamic_adacos": ("dynamic_adacos", {}),
           "softmax": ("softmax", {}), "p2sgrad": ("p2sgrad", {}),
           "arcface_default": ("arcface", {"s": 64.0, "m": 0.5}), "arcface_tuned": ("arcface", "searched")}


def searched_values(split: int) -> dict:
    """The (s, m) mnist-pairs-open-c50-long's ArcFace search selected by val on this class split."""
    landscape = pd.read_csv(SEARCHED_AT)
    best = landscape[(landscape["loss"] == "arcface") & landscape["best"].astype(bool) & (landscape["split"] == split)]
    if len(best) != 1:
        raise SystemExit(f"{SEARCHED_AT} has no single selected ArcFace trial for split {split}; the tuned runs "
                         "take their (s, m) from it (git checkout it from the repository)")
    return {"s": float(best["s"].iloc[0]), "m": float(best["m"].iloc[0])}


def run_name(method: str, split: int, seed: int) -> str:
    return f"{method}_split{split}_seed{seed}"


def planned() -> list[tuple[str, int, int]]:
    """Every run, a seed of every split at a time, so that whole paired sets finish first."""
    return [(method, split, seed) for seed in SEEDS for split in SPLITS for method in METHODS]


def _sets(split: int):
    from study.sources import load_dataset
    from study.splits import class_split

    return class_split(load_dataset(DATA.dataset), DATA, split)


def train_one(method: str, split: int, seed: int, runs: Path = RUNS, device: str = "cpu", parallel: int = 1) -> str:
    """Train one run and write its learning curve and summary into `runs` (whole files, so a killed run leaves
    nothing)."""
    import torch

    from study.training import train

    torch.set_num_threads(TRAIN.threads)
    loss, hyperparameters = METHODS[method]
    if hyperparameters == "searched":
        hyperparameters = searched_values(split)
    result = train(_sets(split), loss_name=loss, hyperparameters=hyperparameters, model_config=MODEL,
                   config=TRAIN.replace(seed=seed, device=device), curve_splits=("test",), progress=False)
    name = run_name(method, split, seed)
    history = pd.DataFrame(result.history).assign(method=method, split=split, seed=seed)
    summary = {"method": method, "loss": loss, **{k: hyperparameters.get(k, math.nan) for k in ("s", "m")},
               "split": split, "seed": seed, "status": result.status, "reason": result.reason,
               "iterations": result.iterations, "selected_iteration": result.selected_iteration,
               "seconds": result.seconds, "parallel": parallel, "eval_seconds": float(history["eval_seconds"].iloc[-1]),
               "device": result.device, "val_score": result.final.get(TRAIN.objective, math.nan),
               "test_score": result.final.get(f"test_{TRAIN.objective}", math.nan)}
    write_bytes(history.to_csv(index=False).encode(), runs / f"{name}.csv")
    write_bytes((json.dumps(summary, indent=1) + "\n").encode(), runs / f"{name}.json")  # written last: the run is done
    return (f"{name}: {result.status}, val {summary['val_score']:.4f} test {summary['test_score']:.4f} at iteration "
            f"{result.selected_iteration} of {result.iterations}, {result.seconds:.0f} s")


def train_missing(workers: int, runs: Path = RUNS, device: str = "cpu") -> None:
    train_missing_runs(partial(train_one, runs=runs, device=device, parallel=workers), planned(),
                       lambda run: (runs / f"{run_name(*run)}.json").exists(), workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="store_true", help="only write the report from the runs already done")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="runs trained at once")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (the committed cell ran on the CPU)")
    parser.add_argument("--cell", default=CELL.name,
                        help="the folder under benchmarks/cells/ its runs and report go to (another device: another "
                             "cell, so that runs of two devices are never pooled)")
    args = parser.parse_args()
    cell = CELL.parent / args.cell
    if not args.report:
        train_missing(args.workers, cell / "runs", args.device)
    from study.benchmark.long_cell import write_long_cell_report

    write_long_cell_report(cell, planned_runs=len(planned()), searched_cell=SEARCHED_AT.parents[2])


if __name__ == "__main__":
    main()
