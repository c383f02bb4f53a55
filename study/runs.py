"""The final runs of one method as an Optuna study with one trial per seed.

Any worker that shares the storage can train them (`study worker`, on this machine or, with a
database, on others); an interrupted stage keeps its finished seeds and trains only the missing
ones; the stage then collects every seed's row, learning curve and checkpoint. A method's study is
named `final/<method>/split<k>` and records what gives its runs their meaning (data, model, training,
loss and its values): a changed param moves the old runs aside, with their checkpoints, instead of
mixing them with new ones (study/study_names.py `open_current`). Each run's seed and values are its
trial's parameters, as the dashboard plots them.

The storage is the truth about which seeds are done: a done seed whose checkpoint is missing or no
longer matches the SHA-256 the storage recorded is marked lost in the study and trained again.
`serve_queued_runs` is what a worker serves of the final runs (study/workers.py).
"""

from __future__ import annotations

import base64
import hashlib
import math
from functools import partial
from pathlib import Path

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from study.config import StudyParams
from study.results import CHECKPOINT_STORE, RUN_COLUMNS, is_tuned, write_bytes
from study.sources import ImageSet
from study.storage import (load_history, quiet_optuna, save_history, set_missing_user_attrs,
                           storage_url)
from study.training import save_checkpoint, train
from study.study_names import digest, load_current, namespace, open_current
from study.workers import Budget, describe_worker, run_meaning, serve, study_identity, this_process

KIND = "runs"
# The study's record of done trials whose checkpoint was lost: {trial number: what was found}.
LOST = "lost_checkpoints"


def runs_study_name(method: str, params: StudyParams, root: str | Path = ".", early: bool = False,
                    factor: int = 1) -> str:
    """The study of `method`'s runs on one class split: `final/fixed_adacos/split0`, `final/arcface_tuned/split0` (see
    study/study_names.py `namespace` for the study in folder `root` sharing a database with others)."""
    # With train.learning_rates each rate's runs are a study of their own: `final/fixed_adacos/split0/lr0.009`, and
    # with train.choose_at its runs until val chooses the rate another: `final/fixed_adacos/split0/lr0.009/early`.
    # Runs trained again longer (runs.plateau_cap) another: `final/fixed_adacos/split0/x2`, beside the shorter ones.
    rate = f"/lr{params.train.lr:g}" if params.train.learning_rates else ""
    longer = f"/x{factor}" if factor != 1 else ""
    return f"{namespace(params, root)}final/{method}/split{params.data.seed}{rate}{'/early' if early else ''}{longer}"


def legacy_runs_study_name(method: str, loss: str, hyperparameters: dict, params: StudyParams) -> str:
    """The name the same runs had in storages written before names were readable: the method and a digest."""
    return f"{KIND}-{method}-{digest(runs_meaning(loss, hyperparameters, params))}"


def runs_meaning(loss: str, hyperparameters: dict, params: StudyParams, early: bool = False) -> dict:
    """What gives a final run its meaning: data, model, training, the loss and its values, and whether it stops where
    val chooses the learning rate (`early`)."""
    return {**run_meaning(params), "loss": loss, "hyperparameters": hyperparameters} | ({"early": True} if early else {})


def lost_trials(study: optuna.Study) -> set[int]:
    """The numbers of the study's done trials whose checkpoint was found lost (their seeds are trained again)."""
    return {int(number) for number in study.user_attrs.get(LOST, {})}


def _is_done(trial: FrozenTrial, lost=frozenset()) -> bool:
    # A diverged run is a result (recorded as such); an interrupted or refused one is not, nor a lost checkpoint's.
    return trial.number not in lost and (trial.state == TrialState.COMPLETE or (
        trial.state == TrialState.FAIL and trial.user_attrs.get("status") == "diverged"))


def open_runs(method: str, loss: str, hyperparameters: dict, params: StudyParams, storage,
              root: str | Path = ".", early: bool = False, factor: int = 1) -> optuna.Study:
    """The runs study of `method`, with a trial queued for every seed of runs.seeds that has none done or under way
    (a done seed whose checkpoint under `root` is lost counts as none: see `retire_lost_checkpoints`). `early`: its
    runs until val chooses the learning rate, which keep no checkpoint (test never reads them). `factor`: its runs at
    that many times the declared length (runs.plateau_cap)."""
    longer = params.at_length(factor)
    study = open_current(runs_study_name(method, params, root, early, factor),
                         runs_meaning(loss, hyperparameters, longer, early), storage, params.train.objective,
                         stores=[Path(root) / CHECKPOINT_STORE],
                         legacy=None if early or factor != 1 else legacy_runs_study_name(method, loss, hyperparameters,
                                                                                         params))
    set_missing_user_attrs(study, {"kind": KIND, "method": method, "loss": loss, "hyperparameters": hyperparameters,
                                   "split": params.data.seed, "lr": params.train.lr, "early": early,
                                   "length_factor": factor})
    retire_lost_checkpoints(study, root)
    lost = lost_trials(study)
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs.get("seed") for t in trials if _is_done(t, lost)}
    present = done | {t.user_attrs.get("seed") for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)}
    for seed in params.runs.seeds:
        if seed not in present:
            study.enqueue_trial({}, user_attrs={"seed": seed})
    print(f"{runs_label(method, params)}: {len(done & set(params.runs.seeds))} of {len(params.runs.seeds)} seeds done "
          f"(study {study.study_name})", flush=True)
    return study


def runs_label(method: str, params: StudyParams) -> str:
    """A method's runs as a user knows them in log lines: "fixed_adacos, split 2"."""
    return f"{method}, split {params.data.seed}"


def done_seeds(study: optuna.Study) -> set:
    """The seeds of the study whose run is done (a lost checkpoint's is not)."""
    lost = lost_trials(study)
    return {t.user_attrs.get("seed") for t in study.get_trials(deepcopy=False) if _is_done(t, lost)}


def retire_lost_checkpoints(study: optuna.Study, root: str | Path = ".") -> list[int]:
    """Mark lost every done seed whose checkpoint is neither under `root` nor in the storage with the SHA-256 the
    storage recorded, so that it is trained again; returns those seeds. The storage is the truth: a checkpoint
    deleted or changed after its run finished is no result."""
    lost, found, seeds = lost_trials(study), {}, []
    if study.user_attrs.get("early"):
        return seeds  # runs until the rate's choice keep no checkpoint
    for trial in study.get_trials(deepcopy=False):
        if not _is_done(trial, lost) or trial.user_attrs.get("status") == "diverged":
            continue
        state = checkpoint_problem(trial, study.study_name, Path(root))
        if state:
            found[str(trial.number)] = state
            seeds.append(trial.user_attrs["seed"])
            print(f"{study.study_name} seed {seeds[-1]}: its checkpoint {state}; the seed is trained again",
                  flush=True)
    if found:
        study.set_user_attr(LOST, {**study.user_attrs.get(LOST, {}), **found})
    return seeds


class SeedQueue(Budget):
    """Every seed of `seeds` done once: workers take the queued trials, and no seed is trained twice; the trials
    numbered in `lost` (their checkpoint is lost) do not count as done."""

    def __init__(self, seeds, lost=frozenset()):
        self.seeds, self.lost = set(seeds), frozenset(lost)

    def met(self, trials):
        return self.seeds <= {t.user_attrs.get("seed") for t in trials if _is_done(t, self.lost)}

    def may_start(self, trials):
        return any(t.state == TrialState.WAITING for t in trials)

    def taken(self, number, trials):
        seed = next(t.user_attrs.get("seed") for t in trials if t.number == number)
        if seed is None:  # Optuna made a fresh trial: the queued one this worker saw was taken by another meanwhile
            return "no queued seed was left: other workers took them"
        for other in trials:
            if other.number != number and other.user_attrs.get("seed") == seed and (
                    _is_done(other, self.lost) or (other.state == TrialState.RUNNING and other.number < number)):
                return f"seed {seed} was already trained, or is being trained by {describe_worker(other.user_attrs)}"
        return ""

    def place(self, trial, trials):
        return trial.user_attrs.get("seed")  # an interrupted seed is queued again, unless a later trial holds it


def run_objective(study: optuna.Study, params: StudyParams, sets: dict[str, ImageSet], root: str | Path = ".",
                  ship_checkpoints: bool = False):
    """One run of the study's method at the trial's seed; returns the final val score (NaN, a failed trial, if it diverged).

    The checkpoint goes to this machine's store under `root`; with `ship_checkpoints` (a database shared by
    machines) its bytes also go into the trial, so the stage can collect it wherever it runs.
    """
    method, loss = study.user_attrs["method"], study.user_attrs["loss"]
    hyperparameters = study.user_attrs["hyperparameters"]
    early = bool(study.user_attrs.get("early"))
    objective = params.train.objective

    def run(trial: optuna.Trial) -> float:
        seed = trial.user_attrs["seed"]
        # Its seed and values as the trial's parameters, each a single value: what the dashboard plots and filters by.
        trial.suggest_int("seed", seed, seed)
        for name, value in hyperparameters.items():
            trial.suggest_float(name, value, value)
        # The test objective at every evaluation too: the run's whole learning curve (val selects, test reports).
        result = train(sets, loss_name=loss, hyperparameters=hyperparameters, model_config=params.model,
                       config=params.train.replace(seed=seed), image_size=params.data.image_size,
                       curve_splits=("test",), until_choice=early)
        score = result.final.get(objective, math.nan)
        save_history(study, trial, result.history)
        attrs = {"status": result.status, "reason": result.reason, "seconds": result.seconds,
                 "cpu_seconds": result.cpu_seconds, "device": result.device,
                 "iterations": result.iterations, "selected_iteration": result.selected_iteration,
                 "val_score": score}
        if result.status != "diverged" and not early:
            path = Path(root) / CHECKPOINT_STORE / study.study_name / f"seed{seed}.pt"
            save_checkpoint(result, path, loss=loss, hyperparameters=hyperparameters)
            data = path.read_bytes()
            attrs["checkpoint_sha256"] = hashlib.sha256(data).hexdigest()
            if ship_checkpoints:
                attrs["checkpoint_bytes"] = base64.b64encode(data).decode("ascii")
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        print(f"{method} seed {seed}: {result.status} {result.reason}; val {objective} {score:.4f} at iteration "
              f"{result.selected_iteration} of {result.iterations}, in {result.seconds:.1f} s", flush=True)
        return score if result.status == "completed" else math.nan

    return run


def serve_runs(study: optuna.Study, params: StudyParams, sets: dict[str, ImageSet], seeds=None,
               root: str | Path = ".", ship_checkpoints: bool = False, max_trials: int | None = None) -> int:
    """Train queued seeds of `study` until each of `seeds` (default runs.seeds) is done, by this or other workers,
    each taken only while this process's data and params are the study's own (see study/workers.py)."""
    identity = study_identity(runs_meaning(study.user_attrs["loss"], study.user_attrs["hyperparameters"], params,
                                           bool(study.user_attrs.get("early"))), sets)
    label = runs_label(study.user_attrs["method"], params)
    # Each seed prints its own line (run_objective); Optuna's "parameters: {}. Best is trial 0" would only repeat it.
    with quiet_optuna():
        trained = serve(study, run_objective(study, params, sets, root, ship_checkpoints),
                        SeedQueue(params.runs.seeds if seeds is None else seeds, lost_trials(study)),
                        max_trials=max_trials, identity=identity, label=label)
    if trained:  # each process its own count: a stage's packed workers train some of its seeds
        print(f"{label}: {trained} seed{'s' if trained > 1 else ''} trained by {describe_worker(this_process())}",
              flush=True)
    return trained


def _find_checkpoint(trial: FrozenTrial, study_name: str, root: Path) -> tuple[bytes | None, str]:
    """A done trial's checkpoint from this machine's store, or from the trial itself, whose SHA-256 is the one the
    storage recorded; else None and what is wrong with it."""
    expected = trial.user_attrs.get("checkpoint_sha256")
    local = root / CHECKPOINT_STORE / study_name / f"seed{trial.user_attrs['seed']}.pt"
    stored = local.read_bytes() if local.is_file() else None
    shipped = trial.user_attrs.get("checkpoint_bytes")
    shipped = base64.b64decode(shipped) if shipped else None
    for data in (stored, shipped):
        if data is not None and hashlib.sha256(data).hexdigest() == expected:
            return data, ""
    if stored is not None:
        return None, (f"at {local} does not match the SHA-256 the storage recorded when its run finished (the file "
                      "was changed since)")
    return None, f"is missing: not at {local}" + (", and the copy in the database does not match its SHA-256"
                                                 if shipped else "")


def checkpoint_problem(trial: FrozenTrial, study_name: str, root: Path) -> str:
    """What is wrong with a done trial's checkpoint, found where the storage says it is ('' when it is whole)."""
    return _find_checkpoint(trial, study_name, root)[1]


def _checkpoint(trial: FrozenTrial, study_name: str, root: Path, stage: str) -> bytes:
    """The trial's checkpoint from this machine's store, or from the trial itself; its hash is checked either way."""
    data, problem = _find_checkpoint(trial, study_name, root)
    if data is not None:
        return data
    raise FileNotFoundError(
        f"the checkpoint of {study_name} seed {trial.user_attrs['seed']} (trained by "
        f"{describe_worker(trial.user_attrs)}) "
        f"{problem}; run the stage again (dvc repro --force {stage}): it marks the seed lost in the storage and trains "
        "it again")


def collect_runs(study: optuna.Study, params: StudyParams, out_dir: str | Path, root: str | Path = ".",
                 checkpoints: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv's rows and the learning curves of every seed of runs.seeds, with each checkpoint written to `out_dir`
    (none without `checkpoints`: the rows of a learning rate val did not choose)."""
    out_dir, root = Path(out_dir), Path(root)
    method, loss = study.user_attrs["method"], study.user_attrs["loss"]
    hyperparameters = study.user_attrs["hyperparameters"]
    stage = f"tuned@{loss}" if is_tuned(method) else f"runs@{method}"
    done, lost = {}, lost_trials(study)
    for trial in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if _is_done(trial, lost):
            done.setdefault(trial.user_attrs["seed"], trial)
    missing = [seed for seed in params.runs.seeds if seed not in done]
    if missing:
        raise RuntimeError(f"{study.study_name}: seeds {missing} have no finished run; rerun the stage to train them")
    rows, histories = [], []
    for seed in params.runs.seeds:
        attrs = done[seed].user_attrs
        checkpoint = ""
        if attrs["status"] != "diverged" and checkpoints:
            checkpoint = str(out_dir / f"seed{seed}.pt")
            write_bytes(_checkpoint(done[seed], study.study_name, root, stage), checkpoint)
        rows.append({"method": method, "loss": loss, "s": hyperparameters.get("s", math.nan),
                     "m": hyperparameters.get("m", math.nan), "lr": params.train.lr, "seed": seed, "status": attrs["status"],
                     "reason": attrs["reason"], "seconds": attrs["seconds"],
                     "cpu_seconds": attrs.get("cpu_seconds", math.nan), "device": attrs["device"],
                     "iterations": attrs["iterations"],
                     "selected_iteration": attrs.get("selected_iteration", attrs["iterations"]),
                     "objective": params.train.objective,
                     "val_score": attrs["val_score"], "checkpoint": checkpoint})
        histories.append(pd.DataFrame(load_history(study, done[seed])).assign(method=method, seed=seed))
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
        # Its learning rate: one of train.learning_rates, or a tuned loss's searched one (its meaning checks it).
        at = params.at_learning_rate(attrs["lr"]) if "lr" in attrs else params
        early, factor = bool(attrs.get("early")), int(attrs.get("length_factor", 1))
        if summary.study_name != runs_study_name(attrs["method"], at, root, early, factor):
            continue  # another class split's runs, or runs kept aside
        at = at.at_length(factor)
        study = load_current(summary.study_name, runs_meaning(attrs["loss"], attrs["hyperparameters"], at, early),
                             storage)
        if study is None:
            continue  # another study's runs (other data, model or training): not ours to train
        trials = study.get_trials(deepcopy=False)
        if any(t.state == TrialState.WAITING for t in trials):
            seeds = {t.user_attrs.get("seed") for t in trials} - {None}  # None: a trial that found no seed left
            trained += serve_runs(study, at, sets, seeds, root,
                                  ship_checkpoints, None if max_trials is None else max_trials - trained)
    return trained


def serve_queued_runs(params: StudyParams, storage, sets: dict[str, ImageSet], root: Path,
                      max_trials: int | None = None, only: str | None = None, quiet: bool = False) -> None:
    """What a worker serves of the final runs (study/workers.py `serve_study`): the queued seeds of every runs study
    of these params, or only of the study named `only`; each study it trained seeds of says how many. Unless `quiet`
    (a stage's packed worker), a worker that found none queued says so."""
    trained = join_runs(params, storage, sets, root, ship_checkpoints=storage_url(params.search) is not None,
                        max_trials=max_trials, only=only)
    if not trained and not quiet:
        print(f"split {params.data.seed}: no final run queued for these params was left to this worker", flush=True)


def packed_service(study: optuna.Study):
    """What the workers packed beside a runs stage serve: `study`'s queued seeds only, each worker's count said by
    serve_runs."""
    return partial(serve_queued_runs, only=study.study_name, quiet=True)
