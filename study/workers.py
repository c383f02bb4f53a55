"""The processes that run trials, on one machine or many, and what happens when one of them dies.

Every trial records the process that runs it. A trial left RUNNING by a process of this machine
that no longer runs is failed with the reason "worker died" and retried with the same parameters
(and the same training seed: see `first_attempt`); with a database, a worker on any machine that
stops sending heartbeats gets the same treatment from Optuna. A trial a kill interrupted is not evidence about
its parameters: the analysis leaves it out. Each trial is reserved before it trains, so a budget
that many workers share is met exactly and no trial is trained twice.

An interruption (Ctrl-C, SIGTERM, SIGHUP, or the death of the process that started this one: DVC killed, or a packed
worker's stage) is not a crash: the process fails its running trial as interrupted, its packed workers
(study/packing.py) wind down with it, and it ends with one line and the exit status of the signal
(study/interruptions.py). An interrupted trial's place is queued again at its parameters, seed and place in the
search (`requeue_interrupted`), so a resumed study runs exactly the trials an uninterrupted one runs.

Workers prove they run the same study: a study records the identity of what its trials mean (the
prepared data, the model, the training and the search space or the run's values) when it is created,
and a worker whose data or params differ refuses to take a trial, naming what differs.

What a worker serves (a loss's searches, a method's queued seeds) is given to it by search.py and
runs.py as services; this module knows nothing about either.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import hashlib
import json
import logging
import math
import multiprocessing
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from study.storage import MAX_RETRIES, StorageFault, is_storage_fault, open_storage, retry_callback, storage_faults
from study.interruptions import Interrupted
from study.progress import after_training

# Statuses of trials that trained nothing worth counting (see the module's docstring).
INTERRUPTED, NOT_RUN = "interrupted", "not run"
RUNNING = "running"
# A RUNNING trial that names no worker this long after it started was left by a process killed as it began it.
ORPHAN_SECONDS = 30


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _process_start(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, from /proc), so a reused pid is not taken for it."""
    stat = _read(f"/proc/{pid}/stat")
    return stat.rpartition(")")[2].split()[19] if stat else ""


def _is_zombie(pid: int) -> bool:
    """Whether process `pid` has exited and only waits to be reaped (state Z or X in /proc): a killed packed worker
    is one until its stage reaps it, and keeps its start time meanwhile."""
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat.rpartition(")")[2].split()[0] in ("Z", "X")


def machine_id() -> str:
    """This machine, distinct from others even when their host names agree."""
    return _read("/etc/machine-id") or socket.gethostname()


def _role() -> str:
    """What this process is to a user: a stage's packed worker by its name, the stage itself, or a worker."""
    name = multiprocessing.current_process().name
    if name != "MainProcess":
        return name  # "packed worker 1"
    return "the stage" if Path(sys.argv[0]).parent.name == "stages" else "a worker"


def this_process() -> dict[str, str]:
    """The user attributes that name the process running a trial: shown as host:pid, checked by machine and start, and
    named to a user by its role (`describe_worker`)."""
    pid = os.getpid()
    return {"worker": f"{socket.gethostname()}:{pid}", "worker_machine": machine_id(),
            "worker_process": f"{_read('/proc/sys/kernel/random/boot_id')}:{pid}:{_process_start(pid)}",
            "worker_role": _role()}


def describe_worker(attrs: dict) -> str:
    """The process a trial's attributes name, as a user knows it: "packed worker 2 (pid 16689)", or with its host
    when it runs on another machine."""
    if "worker" not in attrs:
        return "a process killed as it started the trial"
    host, _, pid = attrs["worker"].rpartition(":")
    role = attrs.get("worker_role", "a worker")
    if attrs.get("worker_machine", machine_id()) != machine_id():
        return f"{role} on {host} (pid {pid})"
    return f"{role} (pid {pid})"


def has_died(trial: FrozenTrial) -> bool:
    """Whether the process that holds this RUNNING trial is known to be gone: it ran on this machine and runs no more,
    or it was killed between creating the trial and naming itself (which takes it a millisecond, not a minute)."""
    attrs = trial.user_attrs
    if not {"worker_machine", "worker_process"} <= attrs.keys():  # named one attribute at a time: killed in between
        return time.time() - trial.datetime_start.timestamp() > ORPHAN_SECONDS
    if attrs["worker_machine"] != machine_id():
        return False  # another machine's: only its heartbeats (database storage) can tell
    boot, pid, start = attrs["worker_process"].split(":")
    if boot != _read("/proc/sys/kernel/random/boot_id"):
        return True  # the machine rebooted since
    if start:
        return _process_start(int(pid)) != start or _is_zombie(int(pid))
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(int(pid))


def retire_dead_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Fail the RUNNING trials of dead workers as interrupted, with the reason (`requeue_interrupted` queues them
    again).

    Returns the trials this call retired.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # database heartbeats (Optuna retries those); a no-op for the journal
    retired = []
    storage = study._storage  # Optuna's own retry and heartbeat code work on the storage the same way
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not has_died(trial):
            continue
        try:
            storage.set_trial_user_attr(trial._trial_id, "status", INTERRUPTED)
            storage.set_trial_user_attr(trial._trial_id, "reason",
                                        f"worker died: {describe_worker(trial.user_attrs)} no longer runs; retried")
            storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process retired it first
        retired.append(trial)
    return retired


def requeue_interrupted(study: optuna.Study, place: Callable[[FrozenTrial, list[FrozenTrial]], object]) -> list[int]:
    """Queue again, with its parameters and user attributes, each interrupted trial that is the latest attempt at its
    `place` (a search's place in its sequence, a final run's seed): a dead worker's, one stopped by Ctrl-C or SIGTERM,
    one the storage failed. A place whose attempts were interrupted MAX_RETRIES times is given up (its parameters
    may be what kills the workers). Returns the numbers of the trials queued again."""
    trials = study.get_trials(deepcopy=False)
    latest = {}
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.user_attrs.get("status") != NOT_RUN:  # a trial that trained nothing held no place
            latest[place(trial, trials)] = trial
    requeued = []
    for trial in latest.values():
        if (trial.state == TrialState.FAIL and trial.user_attrs.get("status") == INTERRUPTED
                and len(trial.system_attrs.get("retry_history", [])) < MAX_RETRIES):
            retry_callback()(study, copy.deepcopy(trial))  # Optuna's retry, as for a database's stale trial
            requeued.append(trial.number)
    return requeued


# --- the same study: what a study's trials mean, recorded when it is created and checked by every worker ----------

IDENTITY = "identity"
_DIFFERENCES_SHOWN = 6


def run_meaning(params) -> dict:
    """What a training run's result depends on: data, model and training, without how many runs and threads share the
    device (speed: on a CPU a change of threads moves scores by float rounding only)."""
    train = {k: v for k, v in params.train.to_dict().items() if k not in ("threads", "parallel")}
    if train["learning_rates"] is None:  # one shared rate: what every run meant before rates could be chosen
        del train["learning_rates"]
    if train.get("learning_rates") is None or train["choose_at"] is None:  # no early choice: what runs meant before it
        del train["choose_at"]
    return {"data": params.data.to_dict(), "model": params.model.to_dict(), "train": train}


def data_identity(sets: dict) -> dict:
    """The prepared data a worker trains on, per split: images, classes and a SHA-256 of labels, class names and
    pixels (or of each image file's class folder and name: the folder may lie elsewhere on another machine)."""
    identity = {}
    for name, image_set in sets.items():
        content = hashlib.sha256(np.ascontiguousarray(image_set.labels, dtype=np.int64))
        content.update(json.dumps(image_set.class_names).encode())
        if image_set.images is not None:
            content.update(np.ascontiguousarray(image_set.images.numpy()))
        else:
            content.update(json.dumps([f"{Path(p).parent.name}/{Path(p).name}" for p in image_set.paths]).encode())
        identity[name] = {"images": len(image_set), "classes": image_set.num_classes,
                          "sha256": content.hexdigest()[:16]}
    return identity


def study_identity(meaning: dict, sets: dict) -> dict:
    """A study's identity: what its trials mean (`meaning`, from params) and the prepared data they train on, as the
    storage gives it back (JSON)."""
    return json.loads(json.dumps({**meaning, "prepared data": data_identity(sets)}, sort_keys=True, default=list))


class NotTheSameStudy(RuntimeError):
    """A worker whose prepared data or params are not those of the study it would serve."""


def differences(ours: dict, theirs: dict, where: str = "in the study") -> list[str]:
    """Every key (dotted) whose value differs: `train.lr: 0.01 here, 0.003 in the study`."""
    mine, stored = _flat(ours), _flat(theirs)
    return [f"{key}: {mine.get(key, 'absent')!r} here, {stored.get(key, 'absent')!r} {where}"
            for key in sorted(set(mine) | set(stored)) if mine.get(key) != stored.get(key)]


def _flat(tree, prefix: str = "") -> dict:
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat = {}
    for key, value in tree.items():
        flat.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def listed(found: list[str]) -> str:
    """The first few of `differences`, and how many more there are."""
    more = f"; and {len(found) - _DIFFERENCES_SHOWN} more" if len(found) > _DIFFERENCES_SHOWN else ""
    return "; ".join(found[:_DIFFERENCES_SHOWN]) + more


def refusal(study_name: str, found: list[str]) -> str:
    """Why a worker takes no trial of `study_name`, naming what differs, and the fix."""
    return (f"this worker's data or params are not those of the study {study_name}, so it takes none of its trials: "
            f"{listed(found)}. Use the params.yaml of the checkout that runs the stage, prepare the data from it "
            "(dvc repro prepare, or dvc pull), then start the worker again")


def claim_identity(study: optuna.Study, identity: dict) -> None:
    """Record `identity` as the study's own when it has none yet (it was just created), else refuse if it differs."""
    held = study.user_attrs
    if IDENTITY in held:
        found = differences(identity, held[IDENTITY])
        if found:
            raise NotTheSameStudy(refusal(study.study_name, found))
    else:
        study.set_user_attr(IDENTITY, identity)


class NotRun(Exception):
    """A trial that found its place already taken by other workers' trials, so it trains nothing."""


class Budget(abc.ABC):
    """How many trials a study needs, and whether a trial may still start; subclasses say what counts."""

    @abc.abstractmethod
    def met(self, trials: list[FrozenTrial]) -> bool:
        """Whether the study needs no more trials."""

    @abc.abstractmethod
    def may_start(self, trials: list[FrozenTrial]) -> bool:
        """Whether a new or waiting trial may start now (else wait: a running one may still fail)."""

    @abc.abstractmethod
    def taken(self, number: int, trials: list[FrozenTrial]) -> str:
        """Why trial `number` must not run (its place is taken by earlier trials), or '' when it may."""

    def place(self, trial: FrozenTrial, trials: list[FrozenTrial]) -> object:
        """The place in the budget that `trial` is an attempt at; an interrupted attempt's place is queued again (see
        `requeue_interrupted`). By default the first attempt's number: a retry shares the place of the trial it
        retries."""
        retried = retried_number(trial)
        return trial.number if retried is None else retried


def retried_number(trial: FrozenTrial) -> int | None:
    """The number of the first attempt that `trial` retries (Optuna's retry of a failed trial), or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(trial)


class TrialCount(Budget):
    """`target` trials in `counted` states (COMPLETE and PRUNED for a search): failed ones are replaced."""

    def __init__(self, target: int, counted: tuple[TrialState, ...]):
        self.target, self.counted = target, counted

    def _held(self, trials, before: int | None = None) -> int:
        # Finished trials, and running ones that started earlier: each holds one place of the budget.
        return sum(t.state in self.counted or (t.state == TrialState.RUNNING and before is not None
                                               and t.number < before) for t in trials)

    def met(self, trials):
        return sum(t.state in self.counted for t in trials) >= self.target

    def may_start(self, trials):
        running = sum(t.state == TrialState.RUNNING for t in trials)
        waiting = sum(t.state == TrialState.WAITING for t in trials)
        return waiting > 0 or self._held(trials) + running < self.target

    def taken(self, number, trials):
        others = [t for t in trials if t.number != number]
        if self._held(others, before=number) >= self.target:
            return f"the budget of {self.target} trials was already met or held by other workers' trials"
        return ""


def serve(study: optuna.Study, run_trial: Callable[[optuna.Trial], float], budget: Budget,
          max_trials: int | None = None, poll_seconds: float = 2.0, identity: dict | None = None,
          label: str | None = None) -> int:
    """Run trials of `study` until `budget` is met (or `max_trials` were started here); returns how many it trained (a
    trial that found its place taken by other workers' trials trains nothing).

    Dead workers' trials are retired, and interrupted ones queued again, first. While the remaining places are held
    by other workers' running trials, this waits: one of them may still fail and need replacing. Before each trial,
    `identity` (see `study_identity`) must be the study's own, else NotTheSameStudy names what differs. `label` names
    the study in log lines as a user knows it ("arcface, split 2"; default: the study's name).
    """
    label = label or study.study_name
    _quiet_about_interrupted_trials()

    def reserved(trial: optuna.Trial) -> float:
        for key, value in this_process().items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("status", RUNNING)
        reason = budget.taken(trial.number, study.get_trials(deepcopy=False))
        if reason:
            trial.set_user_attr("status", NOT_RUN)
            trial.set_user_attr("reason", reason)
            print(f"{label}: trial {trial.number} trains nothing: {reason}", flush=True)
            raise NotRun(reason)
        trained.append(trial.number)
        try:
            return run_trial(trial)
        except KeyboardInterrupt as interruption:  # Optuna fails the trial; say why, so it is not taken for diverged
            cause = interruption.cause if isinstance(interruption, Interrupted) else "interrupted (Ctrl-C)"
            trial.set_user_attr("status", INTERRUPTED)
            trial.set_user_attr("reason", f"{cause}; its trial is retried")
            raise
        except Exception as error:
            if is_storage_fault(error):  # no evidence about the trial: it fails quietly, and serving stops below
                storage_failed.append(error)
                with contextlib.suppress(Exception):  # the storage may refuse these too: then the trial is retired
                    trial.set_user_attr("status", INTERRUPTED)
                    trial.set_user_attr("reason", f"the storage failed ({type(error).__name__}): see the stage")
                return math.nan
            trial.set_user_attr("status", "error")
            trial.set_user_attr("reason", f"{type(error).__name__}: {error}")
            raise

    started, trained, waiting_said, storage_failed = 0, [], False, []
    while max_trials is None or started < max_trials:
        for trial in retire_dead_trials(study):
            print(f"{label}: trial {trial.number} was left running by {describe_worker(trial.user_attrs)}, which is "
                  "gone; it is run again", flush=True)
        requeue_interrupted(study, budget.place)
        trials = study.get_trials(deepcopy=False)
        if budget.met(trials):
            break
        if not budget.may_start(trials):
            if not any(t.state == TrialState.RUNNING for t in trials):
                raise RuntimeError(f"{label} ({study.study_name}) needs more trials but none is queued or running; its "
                                   "failed trials' reasons are in the stage's tables: fix the cause and run the stage "
                                   "again")
            if not waiting_said:
                running = [t for t in trials if t.state == TrialState.RUNNING]
                held_by = ", ".join(dict.fromkeys(describe_worker(t.user_attrs) for t in running))
                print(f"{label}: waiting for {len(running)} trial{'s' if len(running) > 1 else ''} still running in "
                      f"{held_by}", flush=True)
                waiting_said = True
            time.sleep(poll_seconds)
            continue
        waiting_said = False
        if identity is not None:
            claim_identity(study, identity)
        before = len(trained)
        study.optimize(reserved, n_trials=1, catch=(NotRun,))
        if storage_failed:
            raise storage_failed[0]  # study/storage.py's storage_faults says what failed, and the fix, in one line
        started += 1
        if len(trained) > before:
            after_training()  # the whole study's progress, where a stage announced it (study/progress.py)
    return len(trained)


class _QuietAboutInterruptedTrials(logging.Filter):
    """Drops Optuna's two warnings (the first with a traceback) that a trial failed because its process was
    interrupted, or because it found its place taken (NotRun): the process says so itself, in one line."""

    def __init__(self):
        super().__init__()
        self.trial = None  # "Trial 7", whose second warning comes next

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and isinstance(record.exc_info[1], (KeyboardInterrupt, NotRun)):
            self.trial = message.split(" failed ")[0]
            return False
        if self.trial and message.startswith(f"{self.trial} failed with value"):
            self.trial = None
            return False
        return True


_INTERRUPTED_TRIALS_FILTER = _QuietAboutInterruptedTrials()


def _quiet_about_interrupted_trials() -> None:
    logging.getLogger("optuna.study._optimize").addFilter(_INTERRUPTED_TRIALS_FILTER)  # once, however often called


def serve_study(params, root: Path, services, max_trials: int | None = None) -> None:
    """Run each of `services` on the study whose checkout is `root`, with its prepared data and its storage.

    A service is what search.py and runs.py give a worker to serve (a loss's searches, the queued final runs),
    called as `service(params, storage, sets, root, max_trials=max_trials)`.
    """
    from study.results import JOURNAL, prepared_dir
    from study.splits import load_splits

    if params.data.seeds is not None:  # a whole study's params (`study worker`): each class split in turn
        for split in params.data.split_seeds():
            serve_study(params.for_split(split), root, services, max_trials)
        return
    sets = load_splits(root / prepared_dir(params.data.seed))
    # A storage that fails at any point, even while it is being opened (a database dying mid-connection), ends the
    # worker with one line: a packed worker's start can meet the moment its database goes.
    with storage_faults(params.search, root / JOURNAL):
        storage = open_storage(params.search, root / JOURNAL)
        for service in services:
            service(params, storage, sets, root, max_trials=max_trials)


@contextlib.contextmanager
def ends_cleanly(search, journal: str | Path) -> Iterator[None]:
    """A stage (or worker) that the storage fails (read-only, full, a database lost) or that is refused a study ends
    with that one message, which names the path or URL and the fix, instead of a traceback."""
    try:
        with storage_faults(search, journal):
            yield
    except (StorageFault, NotTheSameStudy) as error:
        raise SystemExit(f"error: {error}") from None
