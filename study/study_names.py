"""How the studies of a study are named in the storage, and kept apart by what their trials mean.

A study's name says what a person looks for: `search/arcface/split0` (`…/repeat1` for further repeats),
`final/fixed_adacos/split0`, `final/arcface_tuned/split0`; its MEANING attribute says what its trials mean (data,
model, training, and the search space or the run's values). When the settings change, the stage moves the study of
the old ones aside, whole, to `<name>@<digest of the old settings>` and starts the name afresh, or takes back the
trials kept aside for the new settings when they were run before (`open_current`): a changed setting never resumes
the wrong trials and loses none. Only a stage moves studies; a worker whose settings are not the study's is refused
it (study/workers.py checks the same before every trial, prepared data included).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

from study.storage import MEANING, create_or_load, move_study, set_missing_user_attrs
from study.workers import NotTheSameStudy, describe_worker, differences, listed, retire_dead_trials


def digest(meaning: dict) -> str:
    """Ten hex digits that name `meaning`: equal meanings, equal digests."""
    return hashlib.sha256(json.dumps(meaning, sort_keys=True, default=list).encode()).hexdigest()[:10]


def namespace(params, root: str | Path) -> str:
    """What the names of a study's studies begin with: '' for a study with its own journal; with a database (which many
    studies may share, the cells of a benchmark) the study's folder in its DVC project ('digits-closed/'), which
    every checkout of the project gives alike, and '' for the project's own study."""
    if params.search.storage is None:
        return ""
    root = Path(root).resolve()
    project = next((folder for folder in (root, *root.parents) if (folder / ".dvc").is_dir()), root)
    return "" if project == root else f"{root.relative_to(project).as_posix()}/"


def kept_aside(name: str, meaning: dict) -> str:
    """The name under which the trials of study `name` run with the settings `meaning` are kept while others run."""
    return f"{name}@{digest(meaning)}"


def _as_stored(meaning: dict) -> dict:
    return json.loads(json.dumps(meaning, sort_keys=True, default=list))  # tuples as lists, as the storage gives back


def load_current(name: str, meaning: dict, storage) -> optuna.Study | None:
    """The study `name` if it holds trials of these settings (`meaning`), else None (not begun, or other settings)."""
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    return study if study.user_attrs.get(MEANING) == _as_stored(meaning) else None


def open_current(name: str, meaning: dict, storage, objective: str, stores=(), legacy: str | None = None,
                 stage: bool = True, **options) -> optuna.Study:
    """The study `name` of these settings (`meaning`), created when absent (`options` go to Optuna's create_study).

    For the `stage` that runs it, a study of other settings is first moved aside whole to `kept_aside` (its trials
    and its folder in each of `stores` kept for when those settings return), and trials kept aside for these settings
    (or held under the `legacy` name of storages written before names were readable) are taken back. A worker
    (`stage=False`) moves nothing: it is refused a study of other settings.
    """
    meaning = _as_stored(meaning)
    studies = {study.study_name: study for study in storage.get_all_studies()}
    live = studies.get(name)
    held = None if live is None else live.user_attrs.get(MEANING)
    if held is not None and held != meaning:
        found = differences(meaning, held, f"in {name}")
        if not stage:
            raise NotTheSameStudy(
                f"this worker's params are not those of the study {name} in the storage: {listed(found)}. If that "
                "study is the one being run, use the params.yaml and prepared data of its checkout; if these params "
                "are the new ones, start the worker once the stage has begun them")
        _move_aside(name, held, storage, stores, found)
    elif live is not None and held is None and not stage and storage.get_all_trials(live._study_id, deepcopy=False):
        raise NotTheSameStudy(f"the study {name} is being moved by its stage; start this worker again in a moment")
    if stage and held != meaning:  # absent, moved aside just now, or an unfinished copy (no MEANING yet)
        source = next((other for other in (kept_aside(name, meaning), legacy) if other in studies), None)
        if source is not None:
            retire_dead_trials(optuna.load_study(study_name=source, storage=storage))  # none left running by the dead
            move_study(storage, source, name, stores)
            print(f"{name}: the trials of these settings kept in {source} are resumed", flush=True)
    study = create_or_load(name, storage, objective, **options)
    set_missing_user_attrs(study, {MEANING: meaning})
    return study


def _move_aside(name: str, held: dict, storage, stores, found: list[str]) -> None:
    """Move the study `name`, whose settings are `held`, to `kept_aside`; refused while live workers run its trials."""
    study = optuna.load_study(study_name=name, storage=storage)
    retire_dead_trials(study)  # a dead worker's trial is kept as interrupted, and queued again if it comes back
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if running:
        held_by = ", ".join(dict.fromkeys(describe_worker(trial.user_attrs) for trial in running))
        raise NotTheSameStudy(f"the study {name} was run with other settings ({listed(found)}), and {held_by} is "
                              "still training its trials: stop it (the finished trials are kept), then run the stage "
                              "again")
    aside, kept = kept_aside(name, held), len(study.get_trials(deepcopy=False))
    move_study(storage, name, aside, stores)
    print(f"{name}: its {kept} trials were run with other settings "
          f"({listed(found)}); they are kept in {aside}, and resumed if those settings come back", flush=True)
