"""`study benchmark --list` tells how far an unfinished cell got in its trial storage (a cell trained over several
machines in turn): the trainings kept and their training time, counted by hand here from a storage written with Optuna
itself."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna
from optuna.trial import FrozenTrial, TrialState

from study.benchmark.pipelines import kept_trainings
from study.cli import main
from study.results import JOURNAL
from study.storage import journal_storage

from test_benchmark import TINY, declaration


ELEVEN_MINUTES = timedelta(minutes=11)


def trials(storage, name: str, states: list[TrialState]) -> None:
    """A study `name` in `storage` holding one trial in each of `states`; a finished one records 600 s of training,
    within the 11 minutes of clock from its start to its end (data loading, evaluation on test)."""
    study = optuna.create_study(study_name=name, storage=storage)
    start = datetime(2026, 1, 1, 9, 0)
    for state in states:
        if state in (TrialState.COMPLETE, TrialState.PRUNED):
            study.add_trial(FrozenTrial(
                number=0, trial_id=0, state=state, value=0.5 if state == TrialState.COMPLETE else None,
                datetime_start=start, datetime_complete=start + ELEVEN_MINUTES, params={}, distributions={},
                user_attrs={"seconds": 600.0}, system_attrs={}, intermediate_values={}))
        else:
            trial = study.ask()
            if state != TrialState.RUNNING:
                study.tell(trial, state=state)


def storage_with_six_kept(cell) -> None:
    """Search trials: 3 completed, 1 pruned (its slot done), 1 failed (retried: not kept); final runs: 2 completed,
    1 still running; and 4 completed trials kept aside under other settings (`…@digest`), not this cell's."""
    storage = journal_storage(cell / JOURNAL)
    complete, pruned, failed, running = TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING
    trials(storage, "search/arcface/split0", [complete, complete, pruned, failed, complete])
    trials(storage, "final/fixed_adacos/split0/lr0.003", [complete, running, complete])
    trials(storage, "search/arcface/split0@0123456789", [complete] * 4)


def test_the_trainings_kept_are_the_completed_and_pruned_ones_of_the_cells_own_settings(tmp_path):
    assert kept_trainings(tmp_path / "cell") is None  # no storage: nothing to say
    storage_with_six_kept(tmp_path / "cell")
    kept = kept_trainings(tmp_path / "cell")
    assert (kept.count, kept.seconds) == (6, 6 * 600)


def test_the_list_says_how_many_trainings_an_unfinished_cell_kept(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".dvc").mkdir()
    plan = declaration(tmp_path, TINY)
    storage_with_six_kept(tmp_path / "bench" / "glyphs-open")
    assert main(["benchmark", "--out", "bench", "--report-dir", "reports/bench", "--plan", str(plan), "--list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    planned = rows["glyphs-open"].split()[2]
    left = int(planned) - 6
    assert rows["glyphs-open"].endswith(f"to run; 6 of {planned} trainings kept (1.0 h of training); {left} left, "
                                        f"about {left / 6:.1f} h of training at their mean")
    assert rows["digits-closed"].endswith("to run")  # no storage yet
