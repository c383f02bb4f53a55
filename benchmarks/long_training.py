"""The 20,000-iteration cell: does AdaCos overtake ArcFace only after about 20,000 iterations?

Double MNIST at face-training scale: `compose:2:400:mnist5k` (99 of its 100 two-digit classes, as the long cell
mnist-pairs-open-c50-long keeps), open protocol, 50 training classes of 400 fresh real-digit pairs each (about
20,000 training images, so 20,000 iterations of 64 are about 64 passes over the data), 3 class splits × 3 seeds.
Every method trains 20,000 iterations with a log-spaced schedule of val and test evaluations and keeps the
checkpoint val selects (docs/analysis.md, "Training length and convergence"). Tuned ArcFace takes, per class split,
the (s, m) that this cell's own search selected by val: a random search of 8 trials over s in [1, 128] (log) and m in
[0, 1] rad, each trial trained on the same 20,000-iteration schedule and stopped early by successive halving
(Optuna's SuccessiveHalvingPruner at 2,000, 6,000 and 18,000 iterations, a third going on at each), its cost counted
in the iterations each trial ran. The selected (s, m) is then retrained at the cell's 3 seeds, which no trial uses.

Each finished run is written at once to benchmarks/cells/mnist-pairs-open-c50-20k/runs/ (its learning curve and a
summary), and each search's trials to an Optuna journal in search/: an interrupted or killed process loses only the
runs under way (a trial left running is retried at its own point and seed), and rerunning the script trains only
what is missing. Once every run is there (or with --report), it writes the cell's reports/ (learning_curves.csv, the plateau
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

import numpy as np
import optuna
import pandas as pd
from optuna.trial import TrialState

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.benchmark.run_pool import train_missing_runs  # noqa: E402
from study.config import DataConfig, ModelConfig, TrainConfig  # noqa: E402
from study.results import write_bytes  # noqa: E402

CELL = REPO / "benchmarks" / "cells" / "mnist-pairs-open-c50-20k"
RUNS = CELL / "runs"
DATA = DataConfig(dataset="compose:2:400:mnist5k", classes=99, protocol="open", fractions=(0.5, 0.25, 0.25))
SPLITS, SEEDS = (0, 1, 2), (0, 1, 2)
ITERATIONS = 20_000
MODEL = ModelConfig(name="cnn", embedding_size=64)
TRAIN = TrainConfig(epochs=1_000, max_iterations=ITERATIONS, batch_size=64, optimizer="adam", lr=3e-3,
                    schedule="cosine", eval_points=20, checkpoint="best_val", device="cpu", objective="map_at_r",
                    threads=1)
# The search at the cell's own length: random (s, m), successive halving on val at rungs of 2,000 × 3^k iterations.
SEARCH_TRIALS, FIRST_RUNG, REDUCTION = 8, 2_000, 3
S_RANGE, M_RANGE = (1.0, 128.0), (0.0, 1.0)
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# method: (loss, hyperparameters or "searched": this cell's search's selected (s, m) on the same class split)
METHODS = {"fixed_adacos": ("fixed_adacos", {}), "dynamic_adacos": ("dynamic_adacos", {}),
           "softmax": ("softmax", {}), "p2sgrad": ("p2sgrad", {}),
           "arcface_default": ("arcface", {"s": 64.0, "m": 0.5}), "arcface_tuned": ("arcface", "searched")}


def search_storage(runs: Path, split: int) -> optuna.storages.JournalStorage:
    """One split's search as an Optuna journal, a file beside runs/ committed with the cell (a fresh checkout
    resumes from it)."""
    path = runs.parent / "search" / f"arcface_split{split}.journal"
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def open_search(split: int, runs: Path) -> optuna.Study:
    """One class split's ArcFace search (created or loaded from the journal)."""
    return optuna.create_study(
        study_name=f"search/arcface/split{split}", storage=search_storage(runs, split), direction="maximize",
        load_if_exists=True,
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=FIRST_RUNG, reduction_factor=REDUCTION))


def search_point(split: int, slot: int) -> dict:
    """Random search's draw for one slot, seeded by split and slot: a resumed search draws what the first would."""
    draw = np.random.default_rng([split, slot])
    return {"s": float(math.exp(draw.uniform(math.log(S_RANGE[0]), math.log(S_RANGE[1])))),
            "m": float(draw.uniform(*M_RANGE))}


def search_one(split: int, runs: Path = RUNS, device: str = "cpu") -> str:
    """Run what is missing of one class split's search. Every missing slot is queued at its own point; a trial a
    killed process left running is failed and its slot queued again, at the same point and seed."""
    import torch

    from study.search import trial_seed
    from study.training import train

    torch.set_num_threads(TRAIN.threads)
    study = open_search(split, runs)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    finished = {t.user_attrs["slot"] for t in study.get_trials(deepcopy=False, states=FINISHED)}
    missing = [slot for slot in range(SEARCH_TRIALS) if slot not in finished]
    for slot in missing:
        study.enqueue_trial(search_point(split, slot), user_attrs={"slot": slot})
    sets = _sets(split)

    def objective(trial: optuna.Trial) -> float:
        s, m = trial.suggest_float("s", *S_RANGE, log=True), trial.suggest_float("m", *M_RANGE)
        seed = trial_seed(split, 0, trial.user_attrs["slot"], SEEDS)
        trial.set_user_attr("seed", seed)

        def report_and_maybe_stop(row: dict) -> bool:
            trial.report(row.get(TRAIN.objective, math.nan), step=row["iteration"])
            return trial.should_prune()

        result = train(sets, loss_name="arcface", hyperparameters={"s": s, "m": m}, model_config=MODEL,
                       config=TRAIN.replace(seed=seed, device=device), curve_splits=("test",), progress=False,
                       callback=report_and_maybe_stop)
        last = result.history[-1]
        for key, value in {"iterations": result.iterations, "seconds": result.seconds, "status": result.status,
                           "reason": result.reason, "selected_iteration": result.selected_iteration,
                           "val_at_stop": last.get(TRAIN.objective, math.nan),
                           "test": result.final.get(f"test_{TRAIN.objective}", math.nan)}.items():
            trial.set_user_attr(key, value)
        if result.status == "stopped":
            raise optuna.TrialPruned(result.reason)
        if result.status != "completed":  # a diverged trial is recorded as failed, with its reason, and never retried
            raise RuntimeError(f"ArcFace trial at s={s:.3g}, m={m:.3g} {result.status}: {result.reason}")
        return result.final.get(TRAIN.objective, math.nan)

    if missing:
        study.optimize(objective, n_trials=len(missing), catch=(RuntimeError,))
    return f"search split {split}: " + search_summary(study)


def search_summary(study: optuna.Study) -> str:
    trials = study.get_trials(deepcopy=False, states=FINISHED)
    iterations = sum(t.user_attrs.get("iterations", 0) for t in trials)
    best = study.best_trial
    return (f"{len(trials)} trials, {iterations:,} iterations ({iterations / ITERATIONS:.1f} full trainings); "
            f"val chose s={best.params['s']:.3g}, m={best.params['m']:.3g} (val {best.value:.4f})")


def searched_values(split: int, runs: Path = RUNS) -> dict:
    """The (s, m) this cell's ArcFace search selected by val on this class split."""
    study = open_search(split, runs)
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    finished = study.get_trials(deepcopy=False, states=FINISHED)
    if len(finished) < SEARCH_TRIALS or not complete:
        raise SystemExit(f"the ArcFace search of split {split} has {len(finished)} of {SEARCH_TRIALS} trials; run "
                         "benchmarks/long_training.py to finish it before training tuned ArcFace")
    return dict(study.best_trial.params)


def search_table(runs: Path = RUNS) -> pd.DataFrame:
    """Every finished trial of the searches: split, (s, m), seed, state, iterations it ran, val and test."""
    rows = []
    for split in SPLITS:
        study = open_search(split, runs)
        best = study.best_trial.number if study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) else None
        for trial in study.get_trials(deepcopy=False, states=FINISHED):
            rows.append({"split": split, "trial": trial.number, **trial.params, "seed": trial.user_attrs["seed"],
                         "state": trial.state.name.lower(), "iterations": trial.user_attrs["iterations"],
                         "seconds": trial.user_attrs["seconds"], "val": trial.user_attrs["val_at_stop"],
                         "test": trial.user_attrs["test"], "best": trial.number == best})
    return pd.DataFrame(rows)


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
        hyperparameters = searched_values(split, runs)
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
    """The searches and the untuned methods' runs first (they need nothing), then tuned ArcFace's runs."""
    def done(run):
        return (runs / f"{run_name(*run)}.json").exists()

    untuned = [("run", *run) for run in planned() if run[0] != "arcface_tuned"]
    searches = [("search", split) for split in SPLITS
                if len(open_search(split, runs).get_trials(states=FINISHED)) < SEARCH_TRIALS]
    train_missing_runs(partial(_task, runs=runs, device=device, parallel=workers), searches + untuned,
                       lambda run: run[0] == "run" and done(run[1:]), workers)
    train_missing_runs(partial(_task, runs=runs, device=device, parallel=workers),
                       [("run", *run) for run in planned() if run[0] == "arcface_tuned"],
                       lambda run: done(run[1:]), workers)


def _task(kind: str, *run, runs: Path, device: str, parallel: int) -> str:
    """One unit of the pool: a class split's search, or one run."""
    if kind == "search":
        return search_one(*run, runs=runs, device=device)
    return train_one(*run, runs=runs, device=device, parallel=parallel)


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

    write_long_cell_report(cell, planned_runs=len(planned()), search=search_table(cell / "runs"))


if __name__ == "__main__":
    main()
