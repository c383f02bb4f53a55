"""Tests for study.progress: the study's trainings counted across its studies in the shared storage, the expected end
at the pace so far (checked by hand), and the line a served training prints."""

import datetime

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from study import progress, workers
from study.config import StudyParams
from study.study_names import namespace
from study.validation import study_cost
from study.packing import runs_at_once

START = datetime.datetime(2026, 12, 6, 12, 0, 0)


def add(study: optuna.Study, seconds: float, state=TrialState.COMPLETE, status: str | None = None,
        iterations: int | None = None) -> None:
    attrs = ({"status": status} if status else {}) | ({"iterations": iterations} if iterations is not None else {})
    trial = create_trial(state=state, value=0.5 if state == TrialState.COMPLETE else None,
                         params={"s": 8.0}, distributions={"s": FloatDistribution(1.0, 64.0)}, user_attrs=attrs)
    trial.datetime_start, trial.datetime_complete = START, START + datetime.timedelta(seconds=seconds)
    study.add_trial(trial)


@pytest.fixture
def storage():
    storage = optuna.storages.InMemoryStorage()
    search = optuna.create_study(storage=storage, study_name="cell/search/arcface/split0")
    for seconds in (10, 20, 30):
        add(search, seconds)
    add(search, 25, TrialState.PRUNED)
    final = optuna.create_study(storage=storage, study_name="cell/final/fixed_adacos/split0")
    add(final, 40)
    add(final, 5, TrialState.FAIL, status="diverged")  # a training all the same
    add(final, 1, TrialState.FAIL, status="error")  # no training: retried
    moved = optuna.create_study(storage=storage, study_name="cell/search/arcface/split0@0123456789")
    add(moved, 99)  # the old settings' trials, moved aside
    other = optuna.create_study(storage=storage, study_name="other/search/arcface/split0")
    add(other, 99)  # another study's, in a shared database
    return storage


def test_the_trainings_of_one_study_are_counted_across_its_studies(storage):
    counted = progress.study_progress(storage, "cell/", total=12)
    assert counted.done == 6 and sorted(counted.seconds) == [5, 10, 20, 25, 30, 40]


def test_the_end_is_the_rest_at_the_median_pace_over_the_runs_at_once(storage):
    counted = progress.study_progress(storage, "cell/", total=12)
    now = datetime.datetime(2026, 12, 6, 23, 58, 0)
    # 6 left × the median 22.5 s ÷ 2 at once = 67.5 s: past midnight, so the day is said
    assert counted.line(2, now) == ("study: 6 of 12 trainings done; about 68 s left at 22 s a training, 2 at once "
                                    "(ends about 23:59)")
    assert progress.Progress(12, 12, (1.0,)).line(2, now) == "study: 12 of 12 trainings done"
    assert progress.Progress(0, 12, ()).line(2, now) == "study: 0 of 12 trainings done"
    late = progress.Progress(0, 100, (60.0,)).line(1, now)
    assert late.endswith("(ends about 01:38 on 07 Dec)"), late


def test_with_the_iterations_known_the_rest_is_paced_per_iteration_not_per_training():
    # Two early-choice runs (30 steps, 3 s each) trained first, then one full run (100 steps, 10 s): 6 trainings of
    # 30 + 30 + 4 × 100 = 460 steps. At the median training (3 s) the other 3 would take 9 s, where they are 300 steps
    # at 16 s / 160 steps = 0.1 s a step: 30 s.
    storage = optuna.storages.InMemoryStorage()
    early = optuna.create_study(storage=storage, study_name="search/arcface/split0")
    for seconds, iterations in ((3, 30), (3, 30), (10, 100)):
        add(early, seconds, iterations=iterations)
    now = datetime.datetime(2026, 12, 6, 12, 0, 0)
    paced = progress.study_progress(storage, "", total=6, total_iterations=460)
    assert paced.line(1, now) == ("study: 3 of 6 trainings done (160 of 460 iterations); about 30 s left at 100 ms an "
                                  "iteration, 1 at once (ends about 12:00)")
    assert progress.study_progress(storage, "", total=6).line(1, now).endswith("about 9 s left at 3 s a training, "
                                                                               "1 at once (ends about 12:00)")
    add(early, 5)  # a training that recorded no steps: the pace stays a training's, never a guess of its steps
    assert "a training" in progress.study_progress(storage, "", total=6, total_iterations=460).line(1, now)


def test_a_served_training_says_the_whole_studys_progress(storage, capsys, monkeypatch):
    params = StudyParams.from_dict({"data": {"dataset": "digits", "protocol": "closed", "seeds": [0, 1]},
                                    "train": {"device": "cpu", "parallel": 1},
                                    "search": {"n_trials": 3},
                                    "runs": {"seeds": [0, 1], "methods": ["fixed_adacos"]}})
    monkeypatch.setattr(progress, "_ANNOUNCED", {})
    # its own journal: no namespace, so none of the 'cell/' trainings count
    progress.announce(storage, namespace(params, "."), study_cost(params, None).trainings, runs_at_once(params.train))
    study = optuna.create_study(storage=storage, study_name="search/arcface/split0")
    workers.serve(study, lambda trial: 0.5, workers.TrialCount(2, (TrialState.COMPLETE,)))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("study: ")]
    # 2 splits × (3 trials + 2 seeds × (1 method + 1 tuned loss)) = 14 trainings
    assert [line.split(";")[0] for line in lines] == ["study: 1 of 14 trainings done", "study: 2 of 14 trainings done"]


def test_an_unannounced_worker_says_nothing(storage, capsys, monkeypatch):
    monkeypatch.setattr(progress, "_ANNOUNCED", {})
    study = optuna.create_study(storage=storage, study_name="search/arcface/split1")
    workers.serve(study, lambda trial: 0.5, workers.TrialCount(1, (TrialState.COMPLETE,)))
    assert "study: " not in capsys.readouterr().out
