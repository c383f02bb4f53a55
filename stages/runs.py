"""DVC stage `runs@<method>` / `tuned@<loss>`: one method trained at every seed of every class split, with checkpoints
for `evaluate`.

Each seed is a trial of the method's runs study in the same storage as the searches: finished seeds are
kept when the stage is interrupted, and `study worker` on other processes or machines can train seeds too.
train.parallel seeds train at a time. A method whose runs, over every class split, miss the plateau rule trains them
all again at twice the length, up to runs.plateau_cap times the declared one (its runs at each length a study of
their own, so an interrupted stage resumes at the length it had reached).
"""

import argparse
import contextlib
from pathlib import Path

import pandas as pd

from stages import begin
from study.config import load_params
from study.interruptions import Interrupted, ends_as_interrupted
from study.learning_rates import choose_rate, split_searched
from study.results import (JOURNAL, prepared_dir, prepared_train_sizes, read_json, runs_dir, search_dir, tuned_method,
                           write_csv)
from study.runs import collect_runs, done_seeds, open_runs, packed_service, serve_runs
from study.splits import load_splits
from study.plateau import PLATEAU_RISE, longer_factors, plateau_table
from study.progress import PLANNED, announce
from study.study_names import namespace
from study.validation import study_cost
from study.storage import open_storage, set_missing_user_attrs, storage_url
from study.training import planned_iterations
from study.packing import packed, runs_at_once
from study.workers import ends_cleanly


def main() -> None:
    begin()
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
            splits = params.data.split_seeds()
            chosen = {split: run_split(args, params.for_split(split), storage, split) for split in splits}
            factor, rise = 1, short_of_plateau(args, params, chosen, 1)
            # Until the method's runs meet the plateau rule: trained again at 2x, 4x, ... the length, up to the cap.
            for factor in longer_factors(params.runs.plateau_cap) if rise is not None else []:
                print(f"{method_of(args)}: best val still rose {rise:.1%} over the second half of its runs (plateau "
                      f"rule: under {PLATEAU_RISE:.0%}); every seed of every class split trains again at {factor}x "
                      f"the length (runs.plateau_cap {params.runs.plateau_cap})", flush=True)
                chosen = {split: run_split(args, params.for_split(split), storage, split, factor, lr)
                          for split, (lr, _) in chosen.items()}
                if (rise := short_of_plateau(args, params, chosen, factor)) is None:
                    break
            if rise is not None:
                print(f"{method_of(args)}: best val still rose {rise:.1%} over the second half at {factor}x the "
                      f"declared length, the most runs.plateau_cap ({params.runs.plateau_cap}) allows; the report says "
                      "it is still improving", flush=True)
            for split, (lr, study) in chosen.items():
                at = params.for_split(split).at_learning_rate(lr).at_length(factor)
                runs, history = collect_runs(study, at, runs_dir(method_of(args), split))
                write_csv(runs.assign(split=split), runs_dir(method_of(args), split) / "runs.csv")
                write_csv(history.assign(split=split), runs_dir(method_of(args), split) / "history.csv")


def method_of(args) -> str:
    """The method the stage trains: a baseline of runs.methods, or a searched loss's tuned runs."""
    return tuned_method(args.tuned) if args.tuned else args.method


def short_of_plateau(args, params, chosen: dict, factor: int) -> float | None:
    """The plateau rule's rise over every class split's runs of the method at `factor` times the length
    (study/plateau.py `plateau_table`, as the report applies it), or None where they meet it or none scored."""
    histories = []
    for split, (lr, study) in chosen.items():
        at = params.for_split(split).at_learning_rate(lr).at_length(factor)
        history = collect_runs(study, at, runs_dir(method_of(args), split), checkpoints=False)[1]
        histories.append(history.assign(split=split))
    curves = pd.concat(histories, ignore_index=True).rename(columns={params.train.objective: "val"})
    table = plateau_table(curves.reindex(columns=["method", "split", "seed", "iteration", "val"]), [method_of(args)])
    return None if table.empty or bool(table["converged"].iloc[0]) else float(table["rise"].iloc[0])


def run_split(args, params, storage, split: int, factor: int = 1, rate: float | None = None):
    """One method's seeds on one class split (a tuned loss at that split's best trial) at `factor` times the declared
    length; returns the learning rate and the runs study whose runs the split keeps. With train.learning_rates, a
    hyperparameter-free method's seeds at every rate (until train.choose_at of the length, or to the end) and the rate
    val chooses kept, trained to the end; `rate`: the rate chosen at the declared length, trained longer."""
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
    if rate is not None:
        return rate, train_seeds(method, loss, hyperparameters, params.at_learning_rate(rate), storage, sets, split,
                                 factor=factor)
    # With train.choose_at every rate trains until val chooses, and the chosen rate alone on to the end.
    early = len(rates) > 1 and params.train.choose_at is not None
    studies = {lr: train_seeds(method, loss, hyperparameters, params.at_learning_rate(lr), storage, sets, split, early)
               for lr in rates}
    if len(rates) == 1:
        return rates[0], studies[rates[0]]
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
    return chosen, studies[chosen]


def train_seeds(method: str, loss: str, hyperparameters: dict, params, storage, sets, split: int,
                early: bool = False, factor: int = 1):
    """Every seed of the method at params' learning rate trained (or found done), its runs study returned; `early`:
    each only until val chooses the learning rate (train.choose_at); `factor`: at that many times the length."""
    study = open_runs(method, loss, hyperparameters, params, storage, early=early, factor=factor)
    if factor != 1:  # the study's progress counts these trainings beyond its declared ones (study/progress.py)
        set_missing_user_attrs(study, {PLANNED: planned_iterations(len(sets["train"].labels),
                                                                    params.at_length(factor).train)})
    try:
        with packed(params, Path.cwd(), [packed_service(study)]) as packed_params:
            serve_runs(study, packed_params.at_length(factor), sets,
                       ship_checkpoints=storage_url(params.search) is not None)
    except Interrupted as interruption:
        with contextlib.suppress(Exception):  # a storage that fails now leaves the line without the count
            done = len(done_seeds(study) & set(params.runs.seeds))
            interruption.kept = f"{done} of {len(params.runs.seeds)} seeds of {method} (split {split}) trained and kept"
        raise
    return study


if __name__ == "__main__":
    main()
