"""DVC stage `evaluate`: every final run evaluated once on the test split with every metric."""

import math

import pandas as pd

from study.config import load_params
from study.data import load_splits
from study.results import EVALUATION_DIR, PREPARED_DIR, RUNS_DIR, read_csv, tuned_method, write_csv
from study.training import build_modules, evaluate, input_shape_of, load_checkpoint, resolve_device


def main() -> None:
    params = load_params()
    sets = load_splits(PREPARED_DIR)
    device = resolve_device(params.train.device)
    methods = list(params.runs.methods) + [tuned_method(loss) for loss in params.search.losses]
    rows, histories = [], []
    for method in methods:
        stage = f"runs@{method}" if method in params.runs.methods else f"tuned@{method.removesuffix('_tuned')}"
        for run in read_csv(RUNS_DIR / method / "runs.csv", stage).to_dict("records"):
            if run["status"] != "diverged":
                hyperparameters = {k: run[k] for k in ("s", "m") if not math.isnan(run[k])}
                model, loss = build_modules(params.model, run["loss"], hyperparameters, sets["train"].num_classes,
                                            input_shape_of(sets["train"], params.data.image_size))
                load_checkpoint(run["checkpoint"], model, loss)
                model.to(device), loss.to(device)
                test = evaluate(model, loss, sets, "test", params.train, device, params.data.image_size, full=True)
                run.update({f"test_{name}": value for name, value in test.items()})
            rows.append(run)
            print(f"{method} seed {run['seed']}: " + ", ".join(
                f"{k[5:]} {v:.4f}" for k, v in run.items() if k.startswith("test_")), flush=True)
        histories.append(read_csv(RUNS_DIR / method / "history.csv", stage))
    write_csv(pd.DataFrame(rows), EVALUATION_DIR / "runs.csv")
    write_csv(pd.concat(histories, ignore_index=True), EVALUATION_DIR / "history.csv")


if __name__ == "__main__":
    main()
