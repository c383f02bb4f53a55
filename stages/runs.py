"""DVC stage `runs@<method>` / `tuned@<loss>`: one method trained at every seed, with checkpoints for `evaluate`."""

import argparse
import math

import pandas as pd

from study.config import load_params
from study.data import load_splits
from study.results import PREPARED_DIR, RUN_COLUMNS, RUNS_DIR, SEARCH_DIR, read_json, tuned_method, write_csv
from study.training import save_checkpoint, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--method", help="a baseline of runs.methods")
    which.add_argument("--tuned", metavar="LOSS", help="a searched loss, run at its best trial's values")
    args = parser.parse_args()
    params = load_params()
    if args.tuned:
        method, loss = tuned_method(args.tuned), args.tuned
        hyperparameters = read_json(SEARCH_DIR / loss / "best.json", f"search@{loss}")["hyperparameters"]
    else:
        method = args.method
        loss, hyperparameters = params.runs.hyperparameters(method)
    sets = load_splits(PREPARED_DIR)
    out_dir = RUNS_DIR / method
    rows, histories = [], []
    for seed in params.runs.seeds:
        result = train(sets, loss_name=loss, hyperparameters=hyperparameters, model_config=params.model,
                       config=params.train.replace(seed=seed), image_size=params.data.image_size)
        checkpoint = out_dir / f"seed{seed}.pt"
        if result.status != "diverged":
            save_checkpoint(result, checkpoint, loss=loss, hyperparameters=hyperparameters)
        score = result.final.get(params.train.objective, math.nan)
        rows.append({"method": method, "loss": loss, "s": hyperparameters.get("s", math.nan),
                     "m": hyperparameters.get("m", math.nan), "seed": seed, "status": result.status,
                     "reason": result.reason, "seconds": result.seconds, "device": result.device,
                     "iterations": result.iterations, "objective": params.train.objective, "val_score": score,
                     "checkpoint": str(checkpoint) if result.status != "diverged" else ""})
        histories.append(pd.DataFrame(result.history).assign(method=method, seed=seed))
        print(f"{method} seed {seed}: {result.status} {result.reason}; val {params.train.objective} {score:.4f} "
              f"after {result.iterations} iterations in {result.seconds:.1f} s", flush=True)
    write_csv(pd.DataFrame(rows, columns=RUN_COLUMNS), out_dir / "runs.csv")
    history = pd.concat(histories, ignore_index=True)
    write_csv(history[["method", "seed"] + [c for c in history.columns if c not in ("method", "seed")]],
              out_dir / "history.csv")


if __name__ == "__main__":
    main()
