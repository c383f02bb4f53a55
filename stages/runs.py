"""DVC stage `runs@<method>` / `tuned@<loss>`: one method trained at every seed of every class split, with checkpoints
for `evaluate`.

Each seed is a trial of the method's runs study in the same storage as the searches: finished seeds are
kept when the stage is interrupted, and `study worker` on other processes or machines can train seeds too.
train.parallel seeds train at a time.
"""

import argparse
import contextlib
from pathlib import Path

import pandas as pd

from study.config import load_params
from study.interruptions import Interrupted, ends_as_interrupted
from study.learning_rates import choose_rate, split_searched
from study.results import (JOURNAL, prepared_dir, prepared_train_sizes, read_json, runs_dir, search_dir, tuned_method,
                           write_csv)
from study.runs import collect_runs, done_seeds, open_runs, packed_service, serve_runs
from study.splits import load_splits
from study.progress import announce
from study.study_names import namespace
from study.validation import study_cost
from study.storage import open_storage, storage_url
from study.workers import ends_cleanly, packed, runs_at_once


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--method", help="a baseline of runs.methods")
    which.add_argument("--tuned", metavar="LOSS", help="a searched loss, run at its best trial's values")
    args = parser.parse_args()
    # Ctrl-C, SIGTERM or DVC killed: one line saying what was kept and how to resume, exit status 128 + the signal.
    with ends_as_interrupted():
        params = load_params()
        with ends_cleanly(params.search, JOURNAL):  # a storage fault: one message naming the path or URL and the fix
            storage = open_storage(params.search, JOURNAL)
            # the whole study's progress after each training: every class split's trainings
            cost = study_cost(params, prepared_train_sizes(params.data.split_seeds()))
            announce(storage, namespace(params, "."), cost.trainings, runs_at_once(params.train),
                     cost.iterations if cost.exact else None)
            for split in params.data.split_seeds():
                run_split(args, params.for_split(split), storage, split)


def run_split(args, params, storage, split: int) -> None:
    """One method's seeds on one class split (a tuned loss at that split's best trial), written to its folder; with
    train.learning_rates, a hyperparameter-free method's seeds at every rate (until train.choose_at of the length,
    or to the end) and the rate val chooses kept, trained to the end."""
    if args.tuned:
        method, loss = tuned_method(args.tuned), args.tuned
        searched = read_json(search_dir(loss, split) / "best.json", f"search@{loss}")["hyperparameters"]
        hyperparameters, lr = split_searched(searched)
        rates = [params.train.lr if lr is None else lr]
    else:
        method = args.method
        loss, hyperparameters = params.runs.hyperparameters(method)
        rates = list(params.train.learning_rates or [params.train.lr])
    sets = load_splits(prepared_dir(split))
    out_dir = runs_dir(method, split)
    # With train.choose_at every rate trains until val chooses, and the chosen rate alone on to the end.
    early = len(rates) > 1 and params.train.choose_at is not None
    studies = {lr: train_seeds(method, loss, hyperparameters, params.at_learning_rate(lr), storage, sets, split, early)
               for lr in rates}
    if len(rates) > 1:
        tried = pd.concat([collect_runs(study, params.at_learning_rate(lr), out_dir, checkpoints=False)[0]
                           for lr, study in studies.items()], ignore_index=True)
        scores = tried["val_score"].where(tried["status"] != "diverged")  # a diverged run: NaN, never chosen
        chosen = choose_rate({lr: list(scores[tried["lr"] == lr]) for lr in rates}, params.train.lr)
        if chosen is None:
            raise RuntimeError(f"{method}, split {split}: every learning rate of train.learning_rates had a diverged "
                               "run; add smaller rates")
        write_csv(tried.assign(split=split, chosen=tried["lr"] == chosen), out_dir / "learning_rates.csv")
        where = f" at iteration {int(tried['iterations'].max())}" if early else ""
        print(f"{method}, split {split}: val chose learning rate {chosen:g} of {', '.join(f'{r:g}' for r in rates)}"
              f"{where}" + (", which alone trains on to the end" if early else ""), flush=True)
        if early:
            studies[chosen] = train_seeds(method, loss, hyperparameters, params.at_learning_rate(chosen), storage,
                                          sets, split)
    else:
        chosen = rates[0]
    runs, history = collect_runs(studies[chosen], params.at_learning_rate(chosen), out_dir)
    write_csv(runs.assign(split=split), out_dir / "runs.csv")
    write_csv(history.assign(split=split), out_dir / "history.csv")


def train_seeds(method: str, loss: str, hyperparameters: dict, params, storage, sets, split: int,
                early: bool = False):
    """Every seed of the method at params' learning rate trained (or found done), its runs study returned; `early`:
    each only until val chooses the learning rate (train.choose_at)."""
    study = open_runs(method, loss, hyperparameters, params, storage, early=early)
    try:
        with packed(params, Path.cwd(), [packed_service(study)]) as packed_params:
            serve_runs(study, packed_params, sets, ship_checkpoints=storage_url(params.search) is not None)
    except Interrupted as interruption:
        with contextlib.suppress(Exception):  # a storage that fails now leaves the line without the count
            done = len(done_seeds(study) & set(params.runs.seeds))
            interruption.kept = f"{done} of {len(params.runs.seeds)} seeds of {method} (split {split}) trained and kept"
        raise
    return study


if __name__ == "__main__":
    main()
