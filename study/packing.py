"""Packed runs: a stage trains `train.parallel` runs at once on its device by starting that many workers less one
beside itself (`packed`): small models leave most of a GPU, and of a CPU's cores, idle when runs take turns. A run's
trial number fixes its seed and, under random search, its point, so packed runs are the runs a stage trains one at a
time, with the same scores at the same threads per run. The stage reaps its packed workers as they exit: one killed by
any signal costs at most its own trial (study/workers.py says how).

Workers join once the stage's own share has trained for `WORKERS_JOIN_AFTER_SECONDS`: a worker spends seconds
importing torch before it trains, so a block that ends sooner (a search or seeds resumed with nothing left, a study of
seconds) would only have waited for workers that found nothing to do; a longer one loses those seconds of one worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.resource_tracker
import os
import re
import signal
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

from study.interruptions import INTERRUPTING_SIGNALS, Interrupted, end_by, interruptible
from study.storage import StorageFault
from study.workers import NotTheSameStudy, serve_study

# How long a stage's own share trains before its packed workers start (about what a worker takes to import torch on
# a 2-core CPU), and how long it waits for them to wind down before killing them.
WORKERS_JOIN_AFTER_SECONDS = 3
WORKERS_WIND_DOWN_SECONDS = 10


def available_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# OpenMP's and MKL's thread counts: a positive whole number (OpenMP: a list of them, one per nesting level).
_THREAD_COUNT = re.compile(r"\s*[1-9]\d*(\s*,\s*[1-9]\d*)*\s*")


def thread_variable_problems() -> list[str]:
    """OMP_NUM_THREADS or MKL_NUM_THREADS set to what is no thread count: libgomp only warns, at every process's
    start, and ignores it, so a study would run at threads other than asked for; one line each, with the fix."""
    return [f"{name}={value!r} in the environment is not a thread count, so OpenMP ignores it (and says \"Invalid "
            f"value\" at every stage's start); unset it (unset {name}) or give a whole number, e.g. {name}=1, and set "
            "train.threads for the runs' own" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
            if (value := os.environ.get(name)) is not None and not _THREAD_COUNT.fullmatch(value)]


def runs_at_once(train) -> int:
    """How many runs train at once on the device: train.parallel, or for auto 4 on a GPU and one per core, up to 4,
    on a CPU (see the README's figures: a run of a small model uses neither a GPU nor several cores well)."""
    if train.parallel != "auto":
        return train.parallel
    from study.training import resolve_device  # here, not at the top: the analysis reads this module without torch

    return 4 if resolve_device(train.device).type == "cuda" else min(4, available_cores())


def threads_per_run(params, parallel: int):
    """`params` with the torch threads of each of `parallel` packed runs: train.threads when given, else an equal
    share of the cores (one run alone keeps torch's default, every core)."""
    if parallel == 1 or params.train.threads is not None:
        return params
    return params.replace(train=params.train.replace(threads=max(1, available_cores() // parallel)))


def _serve_beside(stage: int, work: Callable, params) -> None:
    """A packed worker's life: `work(params)`, ended as an interruption (its running trial failed as interrupted and
    queued again) by Ctrl-C, SIGTERM (its stage stopping it), or as soon as the stage process `stage` that started it
    is gone, even by a kill -9. It then exits by the signal, printing nothing: its stage speaks for it."""
    with interruptible(parent=stage, parent_name="its stage"):
        try:
            # held since it started (see `_start_then_reap`): handled from now on
            signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTING_SIGNALS)
            work(params)
        except Interrupted as interruption:
            end_by(interruption.signum)
        except (StorageFault, NotTheSameStudy) as error:  # its one line, as the stage says it: no traceback
            print(f"{multiprocessing.current_process().name}: {error}", file=sys.stderr, flush=True)
            sys.exit(1)


def _start_then_reap(workers: list, started: list, stop: threading.Event, starting: threading.Lock) -> None:
    """Unless `stop` comes first, start `workers` after WORKERS_JOIN_AFTER_SECONDS (each appended to `started`), then
    wait for each that exits, until `stop`: a dead worker is then gone, not a zombie whose trial looks alive (see
    study/workers.py `has_died`).

    A worker starts with the interrupting signals blocked, and handles them once it can (`_serve_beside`): Ctrl-C
    while it imports torch is then an interruption, not a traceback. This thread holds them blocked from after
    multiprocessing's resource tracker is running (starting it unblocks SIGINT and SIGTERM in its thread); the main
    thread handles them, as it always does."""
    if stop.wait(WORKERS_JOIN_AFTER_SECONDS):
        return
    with starting:
        if stop.is_set():
            return
        multiprocessing.resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTING_SIGNALS)
        for worker in workers:
            worker.start()
            started.append(worker)
    while not stop.wait(1):
        for worker in started:
            worker.is_alive()  # reaps it once it has exited


def _say_how_workers_ended(workers: list, parallel: int) -> None:
    """Name each packed worker a signal stopped (its trial was retried), and raise for those that failed."""
    for worker in workers:
        if worker.exitcode is not None and worker.exitcode < 0:
            print(f"{worker.name} was stopped by {signal.Signals(-worker.exitcode).name}: the trial it was running "
                  "was retried, those it finished are kept", flush=True)
    failed = [f"{worker.name} (exit code {worker.exitcode})" for worker in workers if worker.exitcode
              and worker.exitcode > 0]
    if failed:
        raise RuntimeError(f"{', '.join(failed)} of the {parallel} packed runs failed; the error is printed above. "
                           "The finished trials are kept in the storage: fix the cause and run the stage again, or "
                           "set train.parallel: 1")


@contextlib.contextmanager
def packed(params, root: Path, services) -> Iterator:
    """Train `runs_at_once` runs at a time: while the block runs, that many workers less one serve `services` (see
    `serve_study`) beside this process, each a process of its own; yields the params this process trains with.

    Packed runs share the machine's cores: each gets cores ÷ runs torch threads unless train.threads says otherwise.
    The workers start once the block has run for WORKERS_JOIN_AFTER_SECONDS (none if it ends sooner). A worker is
    reaped as it exits, so its unfinished trial is retried at once; one that a signal stopped costs that trial only.
    One that fails is named once the block ends; the trials it finished are kept.
    """
    parallel = runs_at_once(params.train)
    params = threads_per_run(params, parallel)
    if parallel == 1:
        yield params
        return
    work = partial(serve_study, root=Path(root).resolve(), services=list(services))
    context = multiprocessing.get_context("spawn")  # a forked copy of torch's thread pools or CUDA state misbehaves
    workers = [context.Process(target=_serve_beside, args=(os.getpid(), work, params), name=f"packed worker {n}")
               for n in range(1, parallel)]
    started, stop, starting = [], threading.Event(), threading.Lock()
    helper = threading.Thread(target=_start_then_reap, args=(workers, started, stop, starting), daemon=True)
    helper.start()
    try:
        yield params
    except BaseException:
        with starting:  # none starts from here on
            stop.set()
        # Each winds down as interrupted (SIGTERM): its running trial failed, queued again when the stage runs again.
        for worker in started:
            worker.terminate()
        deadline = time.monotonic() + WORKERS_WIND_DOWN_SECONDS
        for worker in started:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():  # hung: its trial is retired as a dead worker's
                worker.kill()
        raise
    finally:
        with starting:
            stop.set()
        helper.join()
        for worker in started:
            worker.join()
    _say_how_workers_ended(started, parallel)
