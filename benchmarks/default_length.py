"""How long the default study's data needs to train before the plateau rule holds: Fixed AdaCos and ArcFace at the
default study's searched (s, m), on its first class split, at the declared length and at 2×, 4×, ... of it.

Each length here is a whole run of its own (its own cosine schedule, val at the study's log-spaced evaluations), at 2
seeds, as the study trains them; the plateau rule (study/plateau.py `plateau_table`: the mean best val so
far rises by under 1% over the second half) is read from their learning curves as the report reads it. Lengths double
until both methods meet the rule, or up to `--cap` times the declared length. The first rows measured the earlier
default (80 training classes of `glyphs:160:40`, 500 iterations), which needed 4,000: so the default became 50
training classes of `glyphs:100:40` at 1,984 iterations.

    python benchmarks/default_length.py            # the declared length, then 2x, 4x, ... two runs at a time
    python benchmarks/default_length.py --cap 4    # at most 4x the declared length

Each finished length's rows are appended to benchmarks/results/default_length.csv at once (a rerun skips the
lengths there for the same data): method, data, iterations, seeds, mean best val at half-way and at the end, rise,
converged, seconds and CPU-seconds a run (this machine, `cpu`), and its device.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.plateau import plateau_table  # noqa: E402
from study.config import load_params  # noqa: E402
from study.environment import cpu_model  # noqa: E402
from study.sources import load_dataset  # noqa: E402
from study.splits import class_split  # noqa: E402
from study.training import planned_iterations, train  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "default_length.csv"
SEARCH = REPO / "reports" / "tables" / "search.csv"  # the default study's best (s, m) over its class splits
SEEDS = (0, 1)
STUDY: dict = {}  # each process's params, first class split and methods, loaded once by `load_study`


def methods() -> dict[str, tuple[str, dict]]:
    """The methods the default study's converged answer needs: (loss, hyperparameters) by method name."""
    best = pd.read_csv(SEARCH).query("loss == 'arcface'").iloc[0]
    return {"fixed_adacos": ("fixed_adacos", {}),
            "arcface_tuned": ("arcface", {"s": float(best["best_s"]), "m": float(best["best_m"])})}


def load_study() -> None:
    """The default study's params, its first class split and the methods, in this process's STUDY."""
    params = load_params(str(REPO / "params.yaml"))
    STUDY.update(params=params, sets=class_split(load_dataset(params.data.dataset, params.data.cache_dir),
                                                 params.data, 0), methods=methods())


def one_run(task: tuple[str, int, int]) -> tuple[pd.DataFrame, dict]:
    """One run of `method` at `iterations` and `seed`: its learning curve (method, split, seed, iteration, val) and
    its seconds."""
    method, iterations, seed = task
    params, sets = STUDY["params"], STUDY["sets"]
    per_epoch = max(len(sets["train"]) // params.train.batch_size, 1)
    config = params.train.replace(epochs=math.ceil(iterations / per_epoch), max_iterations=iterations, seed=seed,
                                  threads=1, device="cpu")
    loss, hyperparameters = STUDY["methods"][method]
    result = train(sets, loss_name=loss, hyperparameters=hyperparameters, model_config=params.model, config=config,
                   image_size=params.data.image_size, progress=False)
    curve = pd.DataFrame({"method": method, "split": 0, "seed": seed,
                          "iteration": [row["iteration"] for row in result.history],
                          "val": [row.get(params.train.objective, math.nan) for row in result.history]})
    return curve, {"method": method, "seconds": result.seconds, "cpu_seconds": result.cpu_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cap", type=int, default=16, help="the longest length, in times the declared (default 16)")
    parser.add_argument("--out", type=Path, default=OUT)
    arguments = parser.parse_args()
    load_study()
    declared = planned_iterations(len(STUDY["sets"]["train"]), STUDY["params"].train)
    dataset = STUDY["params"].data.dataset
    done = pd.read_csv(arguments.out) if arguments.out.is_file() else pd.DataFrame(columns=["dataset", "iterations"])
    done = done[done["dataset"] == dataset]
    factor = 1
    # Spawned, not forked: a child forked after this process's torch started its thread pool would hang in it.
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1), initializer=load_study,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        while factor <= arguments.cap:
            iterations = declared * factor
            rows = done[done["iterations"] == iterations]
            if rows.empty:
                curves, seconds = zip(*pool.map(one_run, [(method, iterations, seed) for method in STUDY["methods"]
                                                          for seed in SEEDS]))
                # The plateau rule as the report applies it, on the mean over each method's runs.
                rows = plateau_table(pd.concat(curves, ignore_index=True), list(STUDY["methods"])).rename(
                    columns={"runs": "seeds", "last_iteration": "iterations"}).astype({"iterations": int})
                rows = rows.merge(pd.DataFrame(seconds).groupby("method", sort=False).mean().reset_index(),
                                  on="method")
                rows["device"], rows["dataset"] = f"cpu:{cpu_model()}", dataset
                rows = rows[["method", "dataset", "iterations", "seeds", "best_at_half", "best_at_end", "rise",
                             "converged", "seconds", "cpu_seconds", "device"]]
                rows.to_csv(arguments.out, mode="a", header=not arguments.out.is_file(), index=False)
                done = pd.concat([done, rows], ignore_index=True) if len(done) else rows
            for row in rows.itertuples():
                print(f"{row.method} at {row.iterations:,} iterations: rise {row.rise:+.2%} "
                      f"({'converged' if row.converged else 'still improving'}), {row.seconds:.0f} s a run",
                      flush=True)
            if bool(rows["converged"].all()):
                break
            factor *= 2


if __name__ == "__main__":
    main()
