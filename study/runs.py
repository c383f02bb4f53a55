"""The final runs of one method as an Optuna study with one trial per seed.

Any worker that shares the storage can train them (`study worker`, on this machine or, with a
database, on others); an interrupted stage keeps its finished seeds and trains only the missing
ones; the stage then collects every seed's row, learning curve and checkpoint. A run's study is
named after everything that gives it its meaning (data, model, training, loss and its values), so
a changed param starts fresh runs instead of mixing them with old ones.
"""

from __future__ import annotations

import base64
import hashlib
import math
from pathlib import Path

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from study.config import StudyParams
from study.data import ImageSet
from study.results import CHECKPOINT_STORE, RUN_COLUMNS, write_bytes
from study.search import digest, run_meaning
from study.training import save_checkpoint, train
from study.workers import Budget, serve

KIND = "runs"


def runs_study_name(method: str, loss: str, hyperparameters: dict, params: StudyParams) -> str:
    """The study of `method`'s runs: its name, plus a hash of the data, model, training, loss and values."""
    return f"{KIND}-{method}-{digest({**run_meaning(params), 'loss': loss, 'hyperparameters': hyperparameters})}"


def _is_done(trial: FrozenTrial) -> bool:
    # A diverged run is a result (recorded as such); an interrupted or refused one is not.
    return trial.state == TrialState.COMPLETE or (trial.state == TrialState.FAIL
                                                  and trial.user_attrs.get("status") == "diverged")


def open_runs(method: str, loss: str, hyperparameters: dict, params: StudyParams, storage) -> optuna.Study:
    """The runs study of `method`, with a trial queued for every seed of runs.seeds that has none done or under way."""
    study = optuna.create_study(study_name=runs_study_name(method, loss, hyperparameters, params), storage=storage,
                                direction="maximize", load_if_exists=True)
    for key, value in {"kind": KIND, "method": method, "loss": loss, "hyperparameters": hyperparameters}.items():
        study.set_user_attr(key, value)
    present = {t.user_attrs.get("seed") for t in study.get_trials(deepcopy=False)
               if _is_done(t) or t.state in (TrialState.RUNNING, TrialState.WAITING)}
    for seed in params.runs.seeds:
        if seed not in present:
            study.enqueue_trial({}, user_attrs={"seed": seed})
    return study


class SeedQueue(Budget):
    """Every seed of `seeds` done once: workers take the queued trials, and no seed is trained twice."""

    def __init__(self, seeds):
        self.seeds = set(seeds)

    def met(self, trials):
        return self.seeds <= {t.user_attrs.get("seed") for t in trials if _is_done(t)}

    def may_start(self, trials):
        return any(t.state == TrialState.WAITING for t in trials)

    def taken(self, number, trials):
        seed = next(t.user_attrs.get("seed") for t in trials if t.number == number)
        for other in trials:
            if other.number != number and other.user_attrs.get("seed") == seed and (
                    _is_done(other) or (other.state == TrialState.RUNNING and other.number < number)):
                return f"seed {seed} was already trained, or is being trained by {other.user_attrs.get('worker')}"
        return ""


def run_objective(study: optuna.Study, params: StudyParams, sets: dict[str, ImageSet], root: str | Path = ".",
                  ship_checkpoints: bool = False):
    """One run of the study's method at the trial's seed; returns the final val score (NaN, a failed trial, if it diverged).

    The checkpoint goes to this machine's store under `root`; with `ship_checkpoints` (a database shared by
    machines) its bytes also go into the trial, so the stage can collect it wherever it runs.
    """
    method, loss = study.user_attrs["method"], study.user_attrs["loss"]
    hyperparameters = study.user_attrs["hyperparameters"]
    objective = params.train.objective

    def run(trial: optuna.Trial) -> float:
        seed = trial.user_attrs["seed"]
        result = train(sets, loss_name=loss, hyperparameters=hyperparameters, model_config=params.model,
                       config=params.train.replace(seed=seed), image_size=params.data.image_size)
        score = result.final.get(objective, math.nan)
        attrs = {"status": result.status, "reason": result.reason, "seconds": result.seconds, "device": result.device,
                 "iterations": result.iterations, "val_score": score, "history": result.history}
        if result.status != "diverged":
            path = Path(root) / CHECKPOINT_STORE / study.study_name / f"seed{seed}.pt"
            save_checkpoint(result, path, loss=loss, hyperparameters=hyperparameters)
            data = path.read_bytes()
            attrs["checkpoint_sha256"] = hashlib.sha256(data).hexdigest()
            if ship_checkpoints:
                attrs["checkpoint_bytes"] = base64.b64encode(data).decode("ascii")
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        print(f"{method} seed {seed}: {result.status} {result.reason}; val {objective} {score:.4f} "
              f"after {result.iterations} iterations in {result.seconds:.1f} s", flush=True)
        return score if result.status == "completed" else math.nan

    return run


def serve_runs(study: optuna.Study, params: StudyParams, sets: dict[str, ImageSet], seeds=None,
               root: str | Path = ".", ship_checkpoints: bool = False, max_trials: int | None = None) -> int:
    """Train queued seeds of `study` until each of `seeds` (default runs.seeds) is done, by this or other workers."""
    return serve(study, run_objective(study, params, sets, root, ship_checkpoints),
                 SeedQueue(params.runs.seeds if seeds is None else seeds), max_trials=max_trials)


def _checkpoint(trial: FrozenTrial, study_name: str, root: Path) -> bytes:
    """The trial's checkpoint from this machine's store, or from the trial itself; its hash is checked either way."""
    expected = trial.user_attrs["checkpoint_sha256"]
    local = root / CHECKPOINT_STORE / study_name / f"seed{trial.user_attrs['seed']}.pt"
    if local.is_file() and hashlib.sha256(data := local.read_bytes()).hexdigest() == expected:
        return data
    if "checkpoint_bytes" in trial.user_attrs:
        data = base64.b64decode(trial.user_attrs["checkpoint_bytes"])
        if hashlib.sha256(data).hexdigest() == expected:
            return data
    raise FileNotFoundError(
        f"the checkpoint of {study_name} seed {trial.user_attrs['seed']} (trained by {trial.user_attrs.get('worker')}) "
        f"is not at {local} and not in the database; run the stage where that worker ran, or rerun the seed "
        "with `dvc repro --force` on the stage")


def collect_runs(study: optuna.Study, params: StudyParams, out_dir: str | Path, root: str | Path = ".",
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv's rows and the learning curves of every seed of runs.seeds, with each checkpoint written to `out_dir`."""
    out_dir, root = Path(out_dir), Path(root)
    method, loss = study.user_attrs["method"], study.user_attrs["loss"]
    hyperparameters = study.user_attrs["hyperparameters"]
    done = {}
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if _is_done(trial):
            done.setdefault(trial.user_attrs["seed"], trial)
    missing = [seed for seed in params.runs.seeds if seed not in done]
    if missing:
        raise RuntimeError(f"{study.study_name}: seeds {missing} have no finished run; rerun the stage to train them")
    rows, histories = [], []
    for seed in params.runs.seeds:
        attrs = done[seed].user_attrs
        checkpoint = ""
        if attrs["status"] != "diverged":
            checkpoint = str(out_dir / f"seed{seed}.pt")
            write_bytes(_checkpoint(done[seed], study.study_name, root), checkpoint)
        rows.append({"method": method, "loss": loss, "s": hyperparameters.get("s", math.nan),
                     "m": hyperparameters.get("m", math.nan), "seed": seed, "status": attrs["status"],
                     "reason": attrs["reason"], "seconds": attrs["seconds"], "device": attrs["device"],
                     "iterations": attrs["iterations"], "objective": params.train.objective,
                     "val_score": attrs["val_score"], "checkpoint": checkpoint})
        histories.append(pd.DataFrame(attrs["history"]).assign(method=method, seed=seed))
    history = pd.concat(histories, ignore_index=True)
    history = history[["method", "seed"] + [c for c in history.columns if c not in ("method", "seed")]]
    return pd.DataFrame(rows, columns=RUN_COLUMNS), history


def join_runs(params: StudyParams, storage, sets: dict[str, ImageSet], root: str | Path = ".",
              ship_checkpoints: bool = False, max_trials: int | None = None, only: str | None = None) -> int:
    """Serve every runs study in `storage` (or only the one named `only`) that has queued seeds and matches these
    params; returns the runs trained."""
    trained = 0
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        attrs = summary.user_attrs
        if attrs.get("kind") != KIND or only not in (None, summary.study_name):
            continue
        if summary.study_name != runs_study_name(attrs["method"], attrs["loss"], attrs["hyperparameters"], params):
            continue  # another study's runs (other data, model or training): not ours to train
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        if any(t.state == TrialState.WAITING for t in trials):
            print(f"{summary.study_name}: serving its queued seeds", flush=True)
            trained += serve_runs(study, params, sets, {t.user_attrs.get("seed") for t in trials}, root,
                                  ship_checkpoints, None if max_trials is None else max_trials - trained)
    return trained
