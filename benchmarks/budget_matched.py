"""The budget-matched control at the search's real budget: a cell's ArcFace search of N trials per class split against
the best of n Fixed AdaCos runs picked by val, for every n up to N (the cells' own final runs give only n = 3).

For a committed benchmark cell, trains N Fixed AdaCos runs per class split at fresh seeds (10,000 + i: never a final
run's or a trial's seed), with the cell's own params (data, model, training), and scores each on val and test. Each
finished run is appended at once to benchmarks/results/budget_matched/<cell>_seeds.csv, so a rerun trains only what is
missing. Then, per n: the expected test score of the trial val selects among n of the cell's search trials
(landscape.csv) and of the Fixed AdaCos run val selects among n, their gap averaged over splits with its t interval
over splits (study.analysis.tuning.gap_to_control), written to <cell>_gap.csv.

    python benchmarks/budget_matched.py glyphs-open-c50 digits-closed
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.analysis.tuning import expected_selected_after_n_trials, gap_to_control  # noqa: E402
from study.config import load_params  # noqa: E402
from study.results import write_bytes  # noqa: E402

CELLS = REPO / "benchmarks" / "cells"
OUT = REPO / "benchmarks" / "results" / "budget_matched"
FIRST_SEED = 10_000


def train_seeds(cell: str) -> pd.DataFrame:
    """N Fixed AdaCos runs per class split of `cell` (N its search's trials per split), val and test objective each."""
    import torch

    from study.sources import load_dataset
    from study.splits import class_split
    from study.training import evaluate, resolve_device, train

    params = load_params(CELLS / cell / "params.yaml")
    path = OUT / f"{cell}_seeds.csv"
    done = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["split", "seed"])
    objective, trials = params.train.objective, params.search.n_trials
    torch.set_num_threads(1)
    for split in params.data.split_seeds():
        sets = None
        for seed in range(FIRST_SEED, FIRST_SEED + trials):
            if ((done["split"] == split) & (done["seed"] == seed)).any():
                continue
            sets = sets or class_split(load_dataset(params.data.dataset, cache_dir=params.data.cache_dir),
                                       params.data, split)
            config = params.train.replace(seed=seed, threads=1)
            began = time.perf_counter()
            result = train(sets, loss_name="fixed_adacos", model_config=params.model, config=config,
                           image_size=params.data.image_size, progress=False)
            test = (evaluate(result.model, result.loss, sets, "test", config, resolve_device(config.device),
                             params.data.image_size).get(objective, math.nan)
                    if result.status == "completed" else math.nan)
            row = {"cell": cell, "split": split, "seed": seed, "status": result.status,
                   "val": result.final.get(objective, math.nan), "test": test, "iterations": result.iterations,
                   "seconds": time.perf_counter() - began}
            done = pd.concat([done, pd.DataFrame([row])], ignore_index=True)
            write_bytes(done.to_csv(index=False).encode(), path)
            print(f"{cell} split {split} seed {seed}: val {row['val']:.4f} test {test:.4f} ({row['seconds']:.1f} s)",
                  flush=True)
    return done


def gap_table(cell: str, seeds: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per n: the search's selected test score, the control's, and their gap over splits with its interval."""
    landscape = pd.read_csv(CELLS / cell / "reports" / "tables" / "landscape.csv")
    trials = landscape[(landscape["loss"] == "arcface") & (landscape["state"] == "COMPLETE")]
    trials = trials[trials["repeat"].fillna(0) == trials["repeat"].fillna(0).min()]
    search = {split: expected_selected_after_n_trials(group["value"], group["test_value"])
              for split, group in trials.groupby("split")}
    finished = seeds[seeds["status"] == "completed"]
    control = {split: expected_selected_after_n_trials(group["val"], group["test"])
               for split, group in finished.groupby("split")}
    return gap_to_control(search, control, confidence).assign(cell=cell)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="+", help="committed benchmark cells, e.g. glyphs-open-c50")
    args = parser.parse_args()
    for cell in args.cells:
        gaps = gap_table(cell, train_seeds(cell))
        write_bytes(gaps.to_csv(index=False).encode(), OUT / f"{cell}_gap.csv")
        last = gaps.iloc[-1]
        print(f"{cell}: search − best of n Fixed AdaCos by val, up to n = {int(last['n'])}: "
              f"{last['gap']:+.4f} [{last['low']:+.4f}, {last['high']:+.4f}] at n = {int(last['n'])}; ahead at "
              f"{int((gaps['gap'] > 0).sum())} of {len(gaps)} n", flush=True)


if __name__ == "__main__":
    main()
