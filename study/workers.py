"""The processes that run trials, on one machine or many, and what happens when one of them dies.

Every trial records the process that runs it. A trial left RUNNING by a process of this machine
that no longer runs is failed with the reason "worker died" and retried with the same parameters
(and the same training seed: see `first_attempt`); with a database, a worker on any machine that
stops sending heartbeats gets the same treatment from Optuna. A trial a kill interrupted is not evidence about
its parameters: the analysis leaves it out. Each trial is reserved before it trains, so a budget
that many workers share is met exactly and no trial is trained twice.

A stage trains `train.parallel` runs at once on its device by starting that many workers less one
beside itself (`packed`): small models leave most of a GPU, and of a CPU's cores, idle when runs
take turns. A run's trial number fixes its seed and, under random search, its point, so packed
runs are the runs a stage trains one at a time, with the same scores at the same threads per run.
"""

from __future__ import annotations

import abc
import contextlib
import multiprocessing
import os
import socket
import threading
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

import optuna
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from study.training import resolve_device

# Statuses of trials that trained nothing worth counting (see the module's docstring).
INTERRUPTED, NOT_RUN = "interrupted", "not run"
RUNNING = "running"
# A trial whose worker died this often is not queued again (its parameters may be what kills the workers).
MAX_RETRIES = 3
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


def machine_id() -> str:
    """This machine, distinct from others even when their host names agree."""
    return _read("/etc/machine-id") or socket.gethostname()


def this_process() -> dict[str, str]:
    """The user attributes that name the process running a trial: shown as host:pid, checked by machine and start."""
    pid = os.getpid()
    return {"worker": f"{socket.gethostname()}:{pid}", "worker_machine": machine_id(),
            "worker_process": f"{_read('/proc/sys/kernel/random/boot_id')}:{pid}:{_process_start(pid)}"}


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
        return _process_start(int(pid)) != start
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def retry_callback() -> RetryHeartbeatStaleTrialCallback:
    """Optuna's retry of a dead worker's trial (same parameters, queued again), used for the journal and the database."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)


def retire_dead_trials(study: optuna.Study) -> list[int]:
    """Fail the RUNNING trials of dead workers with the reason, and queue each again with the same parameters.

    Returns the numbers of the trials this call retired.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # database heartbeats; a no-op for the journal
    retired = []
    storage = study._storage  # Optuna's own retry and heartbeat code work on the storage the same way
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not has_died(trial):
            continue
        worker = trial.user_attrs.get("worker", "a process killed as it started the trial")
        try:
            storage.set_trial_user_attr(trial._trial_id, "status", INTERRUPTED)
            storage.set_trial_user_attr(trial._trial_id, "reason", f"worker died: {worker} no longer runs; retried")
            storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process retired it first, and retried it
        retry_callback()(study, storage.get_trial(trial._trial_id))
        retired.append(trial.number)
    return retired


def first_attempt(study: optuna.Study, number: int) -> int:
    """The number of the trial that trial `number` retries (its own when it is no retry): it fixes the training seed."""
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retried = RetryHeartbeatStaleTrialCallback.retried_trial_number(trial)
    return number if retried is None else retried


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
          max_trials: int | None = None, poll_seconds: float = 2.0) -> int:
    """Run trials of `study` until `budget` is met (or `max_trials` were started here); returns how many started.

    Dead workers' trials are retired and retried first. While the remaining places are held by other
    workers' running trials, this waits: one of them may still fail and need replacing.
    """
    def reserved(trial: optuna.Trial) -> float:
        for key, value in this_process().items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("status", RUNNING)
        reason = budget.taken(trial.number, study.get_trials(deepcopy=False))
        if reason:
            trial.set_user_attr("status", NOT_RUN)
            trial.set_user_attr("reason", reason)
            raise NotRun(reason)
        try:
            return run_trial(trial)
        except KeyboardInterrupt:  # Optuna fails the trial; say why, so it is not taken for a diverged one
            trial.set_user_attr("status", INTERRUPTED)
            trial.set_user_attr("reason", "stopped by an interrupt (Ctrl-C or SIGINT)")
            raise
        except Exception as error:
            trial.set_user_attr("status", "error")
            trial.set_user_attr("reason", f"{type(error).__name__}: {error}")
            raise

    started, waiting_said = 0, False
    while max_trials is None or started < max_trials:
        for number in retire_dead_trials(study):
            print(f"{study.study_name}: trial {number} was left running by a dead worker; failed and queued again",
                  flush=True)
        trials = study.get_trials(deepcopy=False)
        if budget.met(trials):
            break
        if not budget.may_start(trials):
            if not any(t.state == TrialState.RUNNING for t in trials):
                raise RuntimeError(f"{study.study_name} needs more trials but none is queued or running; its failed "
                                   "trials' reasons are in the stage's tables: fix the cause and run the stage again")
            if not waiting_said:
                running = [t.user_attrs.get("worker", "?") for t in trials if t.state == TrialState.RUNNING]
                print(f"{study.study_name}: waiting for {len(running)} running trial(s) of {', '.join(running)}",
                      flush=True)
                waiting_said = True
            time.sleep(poll_seconds)
            continue
        waiting_said = False
        study.optimize(reserved, n_trials=1, catch=(NotRun,))
        started += 1
    return started


def run_worker(params_path: str = "params.yaml", losses=None, serve_what: str = "all", max_trials: int | None = None,
               threads: int | None = None) -> int:
    """`study worker`: serve a study's searches, then its queued final runs, from another process or machine.

    It needs the study's checkout with the prepared data (`dvc repro prepare` or `dvc pull`) and the same
    params.yaml; a shared database in search.storage lets it run on another machine.
    """
    from study.config import load_params

    params = load_params(params_path)
    if threads is not None:  # several workers on one machine share its cores
        params = params.replace(train=params.train.replace(threads=threads))
    unknown = sorted(set(losses or ()) - set(params.search.losses))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not searched in {params_path}; search.losses is "
                         f"{list(params.search.losses)}")
    serve_study(params, Path(params_path).resolve().parent, losses, serve_what, max_trials)
    return 0


def serve_study(params, root: Path, losses=None, serve_what: str = "all", max_trials: int | None = None,
                runs_study: str | None = None) -> None:
    """Serve the searches of `losses` (default all), then the queued final runs (only `runs_study`'s, when named), of
    the study whose checkout is `root`."""
    from study.data import load_splits
    from study.results import JOURNAL, PREPARED_DIR
    from study.runs import join_runs
    from study.search import join_search
    from study.storage import open_storage, storage_url

    sets = load_splits(root / PREPARED_DIR)
    storage = open_storage(params.search, root / JOURNAL)
    if serve_what in ("all", "search"):
        for loss in losses or params.search.losses:
            join_search(loss, params, storage, sets, max_trials=max_trials)
    if serve_what in ("all", "runs"):
        trained = join_runs(params, storage, sets, root, ship_checkpoints=storage_url(params.search) is not None,
                            max_trials=max_trials, only=runs_study)
        print(f"{trained} final run(s) trained by this worker", flush=True)


def available_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def runs_at_once(train) -> int:
    """How many runs train at once on the device: train.parallel, or for auto 4 on a GPU and one per core, up to 4,
    on a CPU (see the README's figures: a run of a small model uses neither a GPU nor several cores well)."""
    if train.parallel != "auto":
        return train.parallel
    return 4 if resolve_device(train.device).type == "cuda" else min(4, available_cores())


def threads_per_run(params, parallel: int):
    """`params` with the torch threads of each of `parallel` packed runs: train.threads when given, else an equal
    share of the cores (one run alone keeps torch's default, every core)."""
    if parallel == 1 or params.train.threads is not None:
        return params
    return params.replace(train=params.train.replace(threads=max(1, available_cores() // parallel)))


def _serve_beside(stage: int, work: Callable, params) -> None:
    """A packed worker's life: `work(params)`, ended as soon as the stage process `stage` that started it is gone,
    even by a kill -9 (its running trial is then retired and retried like any dead worker's)."""
    def end_with_the_stage() -> None:
        while os.getppid() == stage:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=end_with_the_stage, daemon=True).start()
    work(params)


@contextlib.contextmanager
def packed(params, root: Path, serve_what: str, losses=None, runs_study: str | None = None) -> Iterator:
    """Train `runs_at_once` runs at a time: while the block runs, that many workers less one serve the same studies
    beside this process (`serve_study`), each a process of its own; yields the params this process trains with.

    Packed runs share the machine's cores: each gets cores ÷ runs torch threads unless train.threads says otherwise.
    A worker that fails is named once the block ends; the trials it finished are kept, its unfinished one is retried.
    """
    parallel = runs_at_once(params.train)
    params = threads_per_run(params, parallel)
    work = partial(serve_study, root=Path(root).resolve(), losses=losses, serve_what=serve_what, runs_study=runs_study)
    context = multiprocessing.get_context("spawn")  # a forked copy of torch's thread pools or CUDA state misbehaves
    workers = [context.Process(target=_serve_beside, args=(os.getpid(), work, params), name=f"packed worker {n}")
               for n in range(1, parallel)]
    for worker in workers:
        worker.start()
    try:
        yield params
    except BaseException:
        for worker in workers:  # their running trials are retired and retried when the stage runs again
            worker.terminate()
        raise
    finally:
        for worker in workers:
            worker.join()
    failed = [f"{worker.name} (exit code {worker.exitcode})" for worker in workers if worker.exitcode]
    if failed:
        raise RuntimeError(f"{', '.join(failed)} of the {parallel} packed runs failed; the error is printed above. "
                           "The finished trials are kept in the storage: fix the cause and run the stage again, or "
                           "set train.parallel: 1")
