"""DVC stage `runs@<method>` / `tuned@<loss>`: one method trained at every seed, with checkpoints for `evaluate`.

Each seed is a trial of the method's runs study in the same storage as the searches: finished seeds are
kept when the stage is interrupted, and `study worker` on other processes or machines can train seeds too.
train.parallel seeds train at a time.
"""

import argparse
from pathlib import Path

from study.config import load_params
from study.data import load_splits
from study.results import JOURNAL, PREPARED_DIR, RUNS_DIR, SEARCH_DIR, read_json, tuned_method, write_csv
from study.runs import collect_runs, open_runs, serve_runs
from study.storage import open_storage, storage_url
from study.workers import packed


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
    study = open_runs(method, loss, hyperparameters, params, open_storage(params.search, JOURNAL))
    with packed(params, Path.cwd(), "runs", runs_study=study.study_name) as packed_params:
        serve_runs(study, packed_params, sets, ship_checkpoints=storage_url(params.search) is not None)
    runs, history = collect_runs(study, params, RUNS_DIR / method)
    write_csv(runs, RUNS_DIR / method / "runs.csv")
    write_csv(history, RUNS_DIR / method / "history.csv")


if __name__ == "__main__":
    main()
