"""Optuna search over a tunable loss's scale `s` and margin `m`, shareable by many workers.

The objective is small: it turns a trial's suggestions into one training run and returns the
val score. Training sees Optuna only through the "report and maybe stop" callback. Each trial
is an independent draw of what a user does: it trains at its own seed and, once trained, is
also scored on test — recorded for the tuning-cost analysis, never used to choose anything.
A search's study is named `search/<loss>/split<k>` (and `/repeat<r>` after the first repeat; final runs' are
`final/<method>/split<k>`), records what its trials mean, and is moved aside when that changes (study/study_names.py
`open_current`); its objective is named after the metric, and a trial's training history is kept beside the storage
(study/storage.py), out of `optuna trials`. `serve_searches` is what a worker serves of a search (study/workers.py).
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from optuna.trial import TrialState

from study.config import SearchConfig, StudyParams, TrainConfig
from study.learning_rates import LEARNING_RATE
from study.sources import ImageSet
from study.storage import load_history, save_history, set_missing_user_attrs
from study.training import evaluate, planned_iterations, resolve_device, train
from study.study_names import digest, namespace, open_current
from study.packing import packed
from study.workers import INTERRUPTED, NOT_RUN, RUNNING, TrialCount, retried_number, run_meaning, serve, study_identity

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
KIND = "search"
# Tags the seed streams of this module, so that trial seeds and sampler seeds never coincide.
_TRIAL_SEED_STREAM, _SAMPLER_SEED_STREAM, _SPLIT_SEED_STREAM = 1, 2, 3


def study_name(loss: str, params: StudyParams, repeat: int = 0, root: str | Path = ".") -> str:
    """Name of the Optuna study of one search: `search/arcface/split0`, `search/arcface/split0/repeat1` (see
    study/study_names.py `namespace` for the study in folder `root` sharing a database with others)."""
    return f"{namespace(params, root)}search/{loss}/split{params.data.seed}" + (f"/repeat{repeat}" if repeat else "")


def legacy_study_name(loss: str, params: StudyParams, repeat: int = 0) -> str:
    """The name the same search had in storages written before names were readable: the loss and a digest."""
    return f"{loss}-{digest(search_meaning(loss, params))}" + (f"-r{repeat}" if repeat else "")


def search_meaning(loss: str, params: StudyParams) -> dict:
    """What gives a trial of `loss`'s search its meaning: data, model, training and this loss's search space.

    The trial budget, the number of repeats and the storage are left out, so raising `n_trials` or `repeats` resumes
    the same studies, while a change of data, model, training or search space moves the old trials aside instead of
    mixing them with new ones.
    """
    search = params.search.to_dict()
    excluded = ("n_trials", "max_failed_trials", "storage", "heartbeat_seconds", "losses", "repeats", "stop_early")
    space = {k: v for k, v in search.items() if k not in excluded}
    space["m_range"] = search["m_range"].get(loss)  # only this loss's range: adding another loss's keeps its studies
    return {**run_meaning(params), "search": space, "loss": loss}


def _derived_seed(*keys: int) -> int:
    """A 31-bit seed drawn from numpy's SeedSequence of `keys`: distinct keys give unrelated streams."""
    return int(np.random.SeedSequence([int(key) for key in keys]).generate_state(1)[0] & 0x7FFFFFFF)


def trial_seed(search_seed: int, repeat: int, trial_number: int, final_seeds=()) -> int:
    """The training seed of one trial: derived from the search seed, the repeat and the trial number.

    Never one of `final_seeds` (runs.seeds): a trial that shared a final run's seed would make that
    run the search's own winning draw, not a fresh test of the chosen values.
    """
    seed, attempt = None, 0
    while seed is None or seed in final_seeds:
        seed = _derived_seed(_TRIAL_SEED_STREAM, search_seed, repeat, trial_number, attempt)
        attempt += 1
    return seed


SLOT = "slot"


def trial_slots(trials: list[optuna.trial.FrozenTrial]) -> dict[int, int | None]:
    """Each trial's slot, by trial number: its place in the search's sequence of draws, from which it draws its seed
    and (random search) its point; None for a trial that found its place taken and trained nothing.

    A search run without interruption numbers its trials 0, 1, 2, ... and each trial's slot is its number. A retry
    (of a trial killed, or stopped by Ctrl-C or SIGTERM) keeps the slot of the trial it retries, and a new trial takes
    the slot after the highest one held so far: a resumed search draws exactly the uninterrupted one's points at its
    seeds, whatever numbers Optuna gave its trials. A trial records its slot as it starts; one killed before that is
    given its slot by the same rule, and one recorded before slots were (a seed and no slot) keeps its number.
    """
    slots, highest = {}, -1
    for trial in sorted(trials, key=lambda t: t.number):
        retried = retried_number(trial)
        if SLOT in trial.user_attrs:
            slot = int(trial.user_attrs[SLOT])
        elif retried is not None:
            slot = slots.get(retried)
        elif trial.user_attrs.get("status") == NOT_RUN:
            slot = None
        elif "seed" in trial.user_attrs:
            slot = trial.number
        else:
            slot = highest + 1
        slots[trial.number] = slot
        if slot is not None:
            highest = max(highest, slot)
    return slots


def split_search_seed(params: StudyParams) -> int:
    """The search seed of one class split's search: each split searches its own (s, m) points at its own trial seeds,
    so that searches differ from split to split as a user's would. Split 0 keeps search.seed itself (a one-split
    study draws what it always drew)."""
    if params.data.seed == 0:
        return params.search.seed
    return _derived_seed(_SPLIT_SEED_STREAM, params.search.seed, params.data.seed)


def sampler_seed(search_seed: int, repeat: int, trials_so_far: int) -> int:
    """The sampler's seed for one repeat, resumed after `trials_so_far` trials (a resume must not redraw them)."""
    return _derived_seed(_SAMPLER_SEED_STREAM, search_seed, repeat, trials_so_far)


def search_space(loss: str, search: SearchConfig, learning_rates=None) -> dict[str, tuple[float, float, bool]]:
    """Each hyperparameter's (low, high, log-scale) for `loss`; with train.learning_rates the learning rate `lr` too,
    between the smallest and the largest (the other methods choose among them by val: study/learning_rates.py)."""
    space = {"s": (*search.s_range, True)}
    if loss != "normface":
        space["m"] = (*search.m_range[loss], False)
    if learning_rates:
        space[LEARNING_RATE] = (min(learning_rates), max(learning_rates), True)
    return space


def grid_size(loss: str, params: StudyParams) -> int:
    """Number of points of the grid sampler's grid for `loss`."""
    return params.search.grid_points ** len(search_space(loss, params.search, params.train.learning_rates))


class TrialSeededRandomSampler(optuna.samplers.RandomSampler):
    """Random search whose trial in slot n (see `trial_slots`) draws its point from a seed of its own, derived from
    `seed` and n.

    Whichever worker runs slot n, and whenever, it draws the same point: trials trained several at a
    time, by other workers or after a resume are the trials a search run one at a time trains.
    """

    def __init__(self, seed: int):
        super().__init__(seed)
        self._seed = seed
        self._trial_sampler: tuple[int, int, optuna.samplers.RandomSampler] | None = None

    def sample_independent(self, study, trial, param_name, param_distribution):
        slot = int(trial.user_attrs.get(SLOT, trial.number))
        if self._trial_sampler is None or self._trial_sampler[:2] != (trial.number, slot):
            seed = _derived_seed(_SAMPLER_SEED_STREAM, self._seed, slot)
            self._trial_sampler = (trial.number, slot, optuna.samplers.RandomSampler(seed=seed))
        return self._trial_sampler[2].sample_independent(study, trial, param_name, param_distribution)


TPE_STARTUP_SHARE = 0.25
# search.pruner halving: a third of the trials go on at each rung, the first at train.choose_at of the length (its
# default where train.choose_at is null).
HALVING_FACTOR = 3
DEFAULT_CHOOSE_AT = TrainConfig.model_fields["choose_at"].default


def make_sampler(loss: str, params: StudyParams, seed: int | None) -> optuna.samplers.BaseSampler:
    """The sampler named in params; `seed=None` for extra workers of the samplers whose draws depend on order, so
    they do not repeat the first one's draws (random search draws by trial number: every worker gets the seed)."""
    search = params.search
    if search.sampler == "grid":
        space = search_space(loss, search, params.train.learning_rates)
        grid = {name: (np.geomspace(low, high, search.grid_points) if log else np.linspace(low, high, search.grid_points))
                for name, (low, high, log) in space.items()}
        return optuna.samplers.GridSampler({k: v.tolist() for k, v in grid.items()}, seed=seed)
    if search.sampler == "random":
        return TrialSeededRandomSampler(seed) if seed is not None else optuna.samplers.RandomSampler()
    if search.sampler == "qmc":
        return optuna.samplers.QMCSampler(seed=seed, scramble=True)
    # Optuna's default of 10 random start-up trials would make a 10-15-trial TPE search mostly random search: a
    # quarter of the budget (at least 3) leaves TPE the rest at every budget.
    return optuna.samplers.TPESampler(n_startup_trials=tpe_startup_trials(search.n_trials), seed=seed)


def tpe_startup_trials(n_trials: int) -> int:
    """TPE's random start-up trials: a quarter of the search's budget, at least 3."""
    return max(3, math.ceil(TPE_STARTUP_SHARE * n_trials))


def make_pruner(params: StudyParams, num_train: int) -> optuna.pruners.BasePruner:
    """The pruner named in params; steps are training iterations."""
    if params.search.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=params.train.eval_every)
    if params.search.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=params.train.eval_every,
                                              max_resource=planned_iterations(num_train, params.train))
    if params.search.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=halving_rung(num_train, params.train),
                                                      reduction_factor=HALVING_FACTOR)
    return optuna.pruners.NopPruner()


def halving_rung(num_train: int, train: TrainConfig) -> int:
    """search.pruner halving's first rung: the iteration at train.choose_at of the length (0.3 where it is null), where
    every trial is judged against the others first (at the first evaluation at or after it)."""
    return max(1, round((train.choose_at or DEFAULT_CHOOSE_AT) * planned_iterations(num_train, train)))


def open_study(loss: str, params: StudyParams, storage, num_train: int, seed: int | None,
               repeat: int = 0, root: str | Path = ".", stage: bool = True) -> optuna.Study:
    """Create one repeat's study in `storage` (see study/storage.py), or load it when it exists: finished trials are kept.

    `seed` is the search seed (None for extra workers of the samplers whose draws depend on order, so they do not
    repeat the first one's draws; random search draws by trial number, so every worker gets it);
    each repeat and each resume draws its sampler seed from it. The `stage` moves a study of other settings aside
    (study/study_names.py `open_current`); a worker is refused it.
    """
    study = open_current(
        study_name(loss, params, repeat, root), search_meaning(loss, params), storage, params.train.objective,
        legacy=legacy_study_name(loss, params, repeat), stage=stage,
        sampler=make_sampler(loss, params, None if seed is None else sampler_seed(seed, repeat, 0)),
        pruner=make_pruner(params, num_train))
    existing = len(study.get_trials(deepcopy=False))
    if seed is not None and existing and params.search.sampler != "random":
        # A resumed study with the original seed would draw its first points again (random search draws by trial).
        study.sampler = make_sampler(loss, params, sampler_seed(seed, repeat, existing))
    # What the dashboard shows beside the study's name and meaning, for filtering: its loss and class split.
    set_missing_user_attrs(study, {"kind": KIND, "loss": loss, "repeat": repeat, "split": params.data.seed})
    return study


def objective_for(loss: str, params: StudyParams, sets: dict[str, ImageSet], repeat: int = 0):
    """The Optuna objective: one training run at the suggested (s, m) and its own seed, returning the final val score.

    A completed trial is then scored on test with every metric and the scores kept as a user attribute:
    the tuning-cost analysis asks what the trial that val selects scores on test.
    """
    objective_metric = params.train.objective

    def objective(trial: optuna.Trial) -> float:
        # Its slot first: random search draws the point from it (a retry reruns the interrupted draw's parameters).
        slot = trial_slots(trial.study.get_trials(deepcopy=False))[trial.number]
        trial.set_user_attr(SLOT, slot)
        hyperparameters = {name: trial.suggest_float(name, low, high, log=log) for name, (low, high, log)
                           in search_space(loss, params.search, params.train.learning_rates).items()}
        lr = hyperparameters.pop(LEARNING_RATE, params.train.lr)  # a training setting, not the loss's
        seed = trial_seed(split_search_seed(params), repeat, slot, params.runs.seeds)
        trial.set_user_attr("seed", seed)

        def report_and_maybe_stop(row: dict) -> bool:
            trial.report(row.get(objective_metric, math.nan), step=row["iteration"])
            return trial.should_prune()

        config = params.train.replace(seed=seed, lr=lr)
        result = train(sets, loss_name=loss, hyperparameters=hyperparameters, model_config=params.model,
                       config=config, image_size=params.data.image_size, callback=report_and_maybe_stop)
        test = {}
        if result.status == "completed":
            test = evaluate(result.model, result.loss, sets, "test", config, resolve_device(config.device),
                            params.data.image_size, full=True)
        save_history(trial.study, trial, result.history)
        for key, value in {"seed": seed, "repeat": repeat, "seconds": result.seconds,
                           "cpu_seconds": result.cpu_seconds, "device": result.device,
                           "iterations": result.iterations, "selected_iteration": result.selected_iteration,
                           "status": result.status, "reason": result.reason,
                           "test": test}.items():
            trial.set_user_attr(key, value)
        if result.status == "stopped":
            raise optuna.TrialPruned(result.reason)
        # A diverged run returns NaN: Optuna records the trial as FAIL and the study goes on.
        return result.final.get(objective_metric, math.nan) if result.status == "completed" else math.nan

    return objective


def count_trials(study: optuna.Study, states) -> int:
    """Trials of the study in any of `states`."""
    return len(study.get_trials(deepcopy=False, states=states))


class SearchBudget(TrialCount):
    """`n_trials` COMPLETE or PRUNED trials; a diverged trial is replaced, until too many have diverged. A trial's
    place is its slot (`trial_slots`): an interrupted one is retried in its slot, and no slot is trained twice."""

    def __init__(self, study: optuna.Study, target: int, max_failed_trials: int):
        super().__init__(target, FINISHED)
        self.study, self.max_failed_trials = study, max_failed_trials
        self._slots: tuple[list, dict] = ([], {})

    def _slots_of(self, trials) -> dict[int, int | None]:
        if self._slots[0] is not trials:  # computed once per list of trials read from the storage
            self._slots = (trials, trial_slots(trials))
        return self._slots[1]

    def place(self, trial, trials):
        return self._slots_of(trials).get(trial.number)

    def taken(self, number, trials):
        reason = super().taken(number, trials)
        if reason:
            return reason
        slots = self._slots_of(trials)
        for other in trials:
            if other.number == number or slots.get(other.number) != slots.get(number):
                continue
            done = other.state in FINISHED or (other.state == TrialState.FAIL and other.user_attrs.get("status")
                                               == "diverged")
            if done or (other.state == TrialState.RUNNING and other.number < number):
                return (f"its slot {slots[number]} was already trained, or is being trained, by trial {other.number} "
                        f"({other.user_attrs.get('worker', '?')})")
        return ""

    def may_start(self, trials):
        diverged = sum(t.state == TrialState.FAIL and t.user_attrs.get("status") == "diverged" for t in trials)
        if diverged > self.max_failed_trials:
            raise RuntimeError(
                f"{diverged} trials of {self.study.study_name} diverged (more than search.max_failed_trials="
                f"{self.max_failed_trials}); their reasons are in trials.csv. Narrow search.s_range / m_range, "
                "lower train.lr, or raise search.max_failed_trials")
        return super().may_start(trials)


def run_search(study: optuna.Study, loss: str, params: StudyParams, sets: dict[str, ImageSet],
               max_trials: int | None = None, repeat: int = 0, quiet: bool = False) -> None:
    """Run trials until the study holds exactly `n_trials` COMPLETE or PRUNED ones, counting every worker's.

    Each trial is taken only while this process's data and params are the study's own (see study/workers.py).
    """
    search = params.search
    target = min(search.n_trials, grid_size(loss, params)) if search.sampler == "grid" else search.n_trials
    label = search_label(loss, params, repeat)
    if not quiet:
        print(f"{label}: {count_trials(study, FINISHED)} of {target} trials finished (study {study.study_name})",
              flush=True)
    serve(study, objective_for(loss, params, sets, repeat), SearchBudget(study, target, search.max_failed_trials),
          max_trials=max_trials, identity=study_identity(search_meaning(loss, params), sets), label=label)


def search_label(loss: str, params: StudyParams, repeat: int = 0) -> str:
    """A search as a user knows it in log lines: "arcface, split 2" (and its repeat when there are several)."""
    return f"{loss}, split {params.data.seed}" + (f", repeat {repeat + 1}" if params.search.repeats > 1 else "")


def run_searches(loss: str, params: StudyParams, storage, sets: dict[str, ImageSet], root: str | Path,
                 studies: list[optuna.Study]) -> None:
    """Every repeat's search of `loss`, train.parallel trials at a time (workers started beside this process for the
    study whose checkout is `root`: see study/packing.py); each repeat's study is appended to `studies` as it opens,
    before any worker starts, so the workers find them and the caller has them even when a search is interrupted."""
    for repeat in range(params.search.repeats):
        studies.append(open_study(loss, params, storage, len(sets["train"]), seed=split_search_seed(params),
                                  repeat=repeat, root=root))
    with packed(params, root, [partial(serve_searches, losses=[loss], quiet=True)]) as packed_params:
        for repeat, study in enumerate(studies):
            if params.search.repeats > 1:
                print(f"{loss}: repeat {repeat + 1} of {params.search.repeats}", flush=True)
            run_search(study, loss, packed_params, sets, repeat=repeat)


TRIAL_COLUMNS = ["loss", "repeat", "trial", "seed", "state", "s", "m", "value", "test_value", "objective", "seconds",
                 "cpu_seconds", "device", "iterations", "status", "reason", "worker", "optuna_trial"]


def trials_table(loss: str, studies: list[optuna.Study], objective: str) -> pd.DataFrame:
    """One row per trial of every repeat: its (s, m), seed, state, val and test scores, cost and status with reason.

    `trial` is the trial's slot (`trial_slots`: its number in a search run without interruption, so that a resumed
    search's table reads as the uninterrupted one's), `optuna_trial` Optuna's number (what `optuna trials` shows);
    rows go by repeat and slot, an interrupted attempt before its retry. `value` is the objective on val (what
    selects), `test_value` the objective on test and `test_<metric>` every test metric (recorded only).
    """
    rows = []
    for repeat, study in enumerate(studies):
        trials = study.get_trials(deepcopy=False)
        slots = trial_slots(trials)
        for trial in trials:
            attrs = trial.user_attrs
            test = attrs.get("test") or {}
            status, reason = trial_status(trial)
            rows.append({
                "loss": loss, "repeat": repeat, "trial": slots[trial.number], "seed": attrs.get("seed", math.nan),
                "state": trial.state.name, "s": trial.params.get("s", math.nan), "m": trial.params.get("m", math.nan),
                **({LEARNING_RATE: trial.params[LEARNING_RATE]} if LEARNING_RATE in trial.params else {}),
                "value": trial.value if trial.state == TrialState.COMPLETE else math.nan,
                "test_value": test.get(objective, math.nan) if trial.state == TrialState.COMPLETE else math.nan,
                "objective": objective, "seconds": attrs.get("seconds", math.nan),
                "cpu_seconds": attrs.get("cpu_seconds", math.nan), "device": attrs.get("device", ""),
                "iterations": attrs.get("iterations", 0), "status": status, "reason": reason,
                "worker": attrs.get("worker", ""), "optuna_trial": trial.number,
                **{f"test_{name}": value for name, value in test.items()},
            })
    frame = pd.DataFrame(rows)
    if len(frame):
        frame = frame.astype({"trial": "Int64"}).sort_values(["repeat", "trial", "optuna_trial"], kind="stable",
                                                             na_position="last", ignore_index=True)
    extra = sorted(column for column in frame.columns if column not in TRIAL_COLUMNS)
    return frame.reindex(columns=TRIAL_COLUMNS + extra)


def trial_status(trial: optuna.trial.FrozenTrial) -> tuple[str, str]:
    """A trial's status and its reason, as trials.csv shows them: a failed trial whose worker stopped beating mid-run
    (Optuna failed it, the objective never returned) was interrupted, not diverged."""
    status, reason = trial.user_attrs.get("status", trial.state.name.lower()), trial.user_attrs.get("reason", "")
    if trial.state == TrialState.FAIL and status == RUNNING:
        return INTERRUPTED, "worker stopped sending heartbeats; retried"
    return status, reason


def history_table(loss: str, studies: list[optuna.Study]) -> pd.DataFrame:
    """One row per evaluation of every trial of every repeat (its learning curve); `trial` is its slot, as in
    `trials_table`."""
    histories = []
    for repeat, study in enumerate(studies):
        trials = study.get_trials(deepcopy=False)
        slots = trial_slots(trials)
        histories += [(repeat, slots[trial.number], trial.number, load_history(study, trial))
                      for trial in sorted(trials, key=lambda t: (slots[t.number] is None, slots[t.number], t.number))]
    frames = [pd.DataFrame(history).assign(loss=loss, repeat=repeat, trial=slot, optuna_trial=number)
              for repeat, slot, number, history in histories if history]
    if not frames:
        return pd.DataFrame(columns=["loss", "repeat", "trial", "iteration"])
    table = pd.concat(frames, ignore_index=True)
    return table[["loss", "repeat", "trial"] + [c for c in table.columns if c not in ("loss", "repeat", "trial")]]


def best_trial(loss: str, study: optuna.Study, objective: str) -> dict:
    """The best COMPLETE trial's hyperparameters and val score (of the first repeat: the one search a user runs); its
    `trial` is its slot, as in `trials_table`."""
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        raise RuntimeError(f"no trial of {study.study_name} completed; see trials.csv for the reasons")
    slots = trial_slots(trials)
    best = max(sorted(complete, key=lambda t: slots[t.number]), key=lambda t: t.value)  # a tie: the earliest slot
    return {"loss": loss, "study": study.study_name, "trial": slots[best.number], "objective": objective,
            "value": best.value, "hyperparameters": best.params, "complete_trials": len(complete)}


def join_search(loss: str, params: StudyParams, storage, sets: dict[str, ImageSet], root: str | Path = ".",
                max_trials: int | None = None, quiet: bool = False) -> None:
    """Serve the searches of `loss` (every repeat) as an extra worker: unseeded, so it does not repeat the first one's
    draws, except under random search, whose trial n draws the same point in every worker. A search the storage lacks
    is begun; one the storage holds with other settings is refused (the stage that runs it moves it aside)."""
    seed = split_search_seed(params) if params.search.sampler == "random" else None
    for repeat in range(params.search.repeats):
        study = open_study(loss, params, storage, len(sets["train"]), seed=seed, repeat=repeat, root=root, stage=False)
        run_search(study, loss, params, sets, max_trials=max_trials, repeat=repeat, quiet=quiet)
        if not quiet:
            print(f"{study.study_name}: {count_trials(study, FINISHED)} finished trials in the study", flush=True)


def serve_searches(params: StudyParams, storage, sets: dict[str, ImageSet], root: Path, max_trials: int | None = None,
                   losses=None, quiet: bool = False) -> None:
    """What a worker serves of the searches (study/workers.py `serve_study`): every repeat of each of `losses`
    (default search.losses)."""
    for loss in losses or params.search.losses:
        join_search(loss, params, storage, sets, root, max_trials=max_trials, quiet=quiet)
