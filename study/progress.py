"""One line of the whole study's progress, said after each training a stage finishes: how many of the study's
trainings are done (every stage's, every worker's: counted in the trial storage they share) and when the rest is
expected to end, at the pace of the trainings done so far: in seconds an iteration where the study's iterations are
known (a study whose early-choice runs, a share of the length, train first would otherwise look cheaper than it is),
else in seconds a training.

The search and runs stages announce the study they serve (`announce`: its whole params, before any class split is
taken apart, and its storage); study/workers.py's `serve` then calls `after_training`. A worker that was not announced
(`study worker`, a stage's packed workers) says nothing: the stage that started it says it for all of them.
"""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)  # FAIL: only a diverged training counts
KINDS = ("search/", "final/")  # the studies of trainings (study/study_names.py); a name with '@' is one moved aside
# A runs study trained again longer (runs.plateau_cap) records each run's planned iterations under this: its
# trainings come on top of the study's declared ones, which `announce` was told.
PLANNED = "planned_iterations"


def duration(seconds: float) -> str:
    """Seconds as people say them: 42 s, 7.1 min, 3.2 h, 2.5 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


@dataclass(frozen=True)
class Progress:
    """A study's trainings done of `total`, and the wall seconds each of those took; where `total_iterations` (the
    study's optimiser steps, every training's) is known, the steps each of those trainings took too."""

    done: int
    total: int
    seconds: tuple[float, ...]
    iterations: tuple[int, ...] = ()
    total_iterations: int | None = None

    def line(self, at_once: int, now: datetime.datetime) -> str:
        """'study: 23 of 88 trainings done; about 17 min left at 31 s a training, 2 at once (ends about 12:47)', or
        with the iterations known '… trainings done (9,100 of 44,000 iterations); about 17 min left at 42 ms an
        iteration, …'."""
        said = f"study: {min(self.done, self.total):,} of {self.total:,} trainings done"
        left = max(self.total - self.done, 0)
        if left == 0 or not self.seconds:
            return said
        steps = sum(self.iterations)
        if self.total_iterations and steps > 0 and len(self.iterations) == len(self.seconds):
            said += f" ({min(steps, self.total_iterations):,} of {self.total_iterations:,} iterations)"
            pace = sum(self.seconds) / steps
            remaining = max(self.total_iterations - steps, 0) * pace / max(at_once, 1)
            rate = f"{pace * 1000:.0f} ms an iteration" if pace < 1 else f"{duration(pace)} an iteration"
        else:
            pace = statistics.median(self.seconds)
            remaining = left * pace / max(at_once, 1)
            rate = f"{duration(pace)} a training"
        end = now + datetime.timedelta(seconds=remaining)
        return (f"{said}; about {duration(remaining)} left at {rate}, {at_once} at once "
                f"(ends about {end:%H:%M}{'' if end.date() == now.date() else f' on {end:%d %b}'})")


def study_progress(storage: optuna.storages.BaseStorage, namespace: str, total: int,
                   total_iterations: int | None = None) -> Progress:
    """The trainings done in the studies of one study (their names begin with `namespace`) of `storage`; with the
    study's `total_iterations`, the steps each took (a training that recorded none leaves the pace a training's)."""
    seconds, iterations = [], []
    for study in storage.get_all_studies():
        name = study.study_name
        if not name.startswith(namespace) or "@" in name or not name[len(namespace):].startswith(KINDS):
            continue
        trials = storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False)
        if PLANNED in study.user_attrs:  # runs trained again longer: a training a seed more to do
            seeds = len({trial.user_attrs.get("seed") for trial in trials} - {None})
            total += seeds
            if total_iterations is not None:
                total_iterations += seeds * int(study.user_attrs[PLANNED])
        for trial in (trial for trial in trials if trial.state in FINISHED):
            trained = trial.state != TrialState.FAIL or trial.user_attrs.get("status") == "diverged"
            if trained and trial.datetime_start is not None and trial.datetime_complete is not None:
                seconds.append((trial.datetime_complete - trial.datetime_start).total_seconds())
                if isinstance(trial.user_attrs.get("iterations"), int):
                    iterations.append(trial.user_attrs["iterations"])
    return Progress(len(seconds), total, tuple(seconds), tuple(iterations), total_iterations)


_ANNOUNCED: dict = {}


def announce(storage: optuna.storages.BaseStorage, namespace: str, total: int, at_once: int,
             total_iterations: int | None = None) -> None:
    """Say the progress of a study after each training this process finishes: its `total` trainings (every class
    split's) and, where known, their `total_iterations`; its studies' names beginning with `namespace` in `storage`,
    `at_once` runs training at a time."""
    _ANNOUNCED.update(storage=storage, namespace=namespace, total=total, at_once=at_once,
                      total_iterations=total_iterations)


def after_training() -> None:
    """Print the study's progress line, where a stage announced its study; a storage that fails here says nothing
    (the training that just finished is kept; the next storage call says what failed)."""
    if not _ANNOUNCED:
        return
    try:
        progress = study_progress(_ANNOUNCED["storage"], _ANNOUNCED["namespace"], _ANNOUNCED["total"],
                                  _ANNOUNCED["total_iterations"])
    except Exception:  # noqa: BLE001 - progress is never worth a failed stage
        return
    print(progress.line(_ANNOUNCED["at_once"], datetime.datetime.now()), flush=True)
