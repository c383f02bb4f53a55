"""DVC stage `evaluate`: every final run evaluated once on the test split with every metric."""

import math
import sys

import pandas as pd

from stages import begin
from study.config import load_params
from study.results import EVALUATION_DIR, prepared_dir, read_csv, runs_dir, tuned_method, write_csv
from study.splits import load_splits
from study.training import build_modules, evaluate, input_shape_of, load_checkpoint, resolve_device


def main() -> None:
    begin()
    params = load_params()
    rows, histories = [], []
    for split in params.data.split_seeds():
        split_rows, split_histories = evaluate_split(params.for_split(split), split)
        rows += split_rows
        histories += split_histories
    write_csv(pd.DataFrame(rows), EVALUATION_DIR / "runs.csv")
    write_csv(pd.concat(histories, ignore_index=True), EVALUATION_DIR / "history.csv")


def evaluate_split(params, split: int) -> tuple[list[dict], list[pd.DataFrame]]:
    """Every final run of one class split scored on that split's test set."""
    sets = load_splits(prepared_dir(split))
    device = resolve_device(params.train.device)
    methods = list(params.runs.methods) + [tuned_method(loss) for loss in params.search.losses]
    rows, histories = [], []
    for method in methods:
        stage = f"runs@{method}" if method in params.runs.methods else f"tuned@{method.removesuffix('_tuned')}"
        for run in read_csv(runs_dir(method, split) / "runs.csv", stage).to_dict("records"):
            if run["status"] != "diverged":
                hyperparameters = {k: run[k] for k in ("s", "m") if not math.isnan(run[k])}
                model, loss = build_modules(params.model, run["loss"], hyperparameters, sets["train"].num_classes,
                                            input_shape_of(sets["train"], params.data.image_size))
                load_checkpoint(run["checkpoint"], model, loss)
                model.to(device), loss.to(device)
                test = evaluate(model, loss, sets, "test", params.train, device, params.data.image_size, full=True)
                run.update({f"test_{name}": value for name, value in test.items()})
            rows.append(run)
            print(f"split {split}, {method} seed {run['seed']}: " + ", ".join(
                f"{k[5:]} {v:.4f}" for k, v in run.items() if k.startswith("test_")), flush=True)
        histories.append(read_csv(runs_dir(method, split) / "history.csv", stage))
    return rows, histories


if __name__ == "__main__":
    try:
        main()
    except (ValueError, FileNotFoundError) as error:  # a corrupt or missing checkpoint: one line naming the fix
        sys.exit(f"error: {error}")
