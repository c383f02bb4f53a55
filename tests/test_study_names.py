"""The trial storage as its users read it: a study's name says which search or method, and which class split, it holds
(no digest); what its trials mean is the study's MEANING attribute. A stage whose settings changed moves the old
trials aside whole (histories and checkpoints with them) and takes them back when those settings return, resuming at
the same points and seeds; a worker of other settings is refused and moves nothing; a move killed half-way is finished
by the next, and storages written before names were readable are resumed under the readable names. optuna-dashboard
opens the journal as docs/usage.md says."""

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import optuna
import pytest

import study.search as search
from study.sources import load_dataset
from study.splits import split_dataset
from study.results import CHECKPOINT_STORE, JOURNAL, tuned_method
from study.runs import collect_runs, done_seeds, open_runs, runs_meaning, runs_study_name, serve_runs
from study.storage import MEANING, journal_storage
from study.study_names import digest
from study.workers import NotTheSameStudy, this_process
from tests.test_search import params_with, use_fake_training

optuna.logging.set_verbosity(optuna.logging.WARNING)

# What a person can read: the search or method, the class split, the repeat; no hex digest anywhere.
READABLE = re.compile(r"(search/[a-z]+/split\d+(/repeat\d+)?|final/[a-z_]+/split\d+)")
NAME = "search/arcface/split0"


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)


def names(storage) -> set[str]:
    return {study.study_name for study in storage.get_all_studies()}


def trials_of(storage, name):
    """Each trial as a user would compare it: number, state, point, value and user attributes."""
    study = optuna.load_study(study_name=name, storage=storage)
    return [(t.number, t.state, t.params, t.value, t.user_attrs) for t in study.get_trials(deepcopy=False)]


def test_names_say_which_search_or_method_and_split_and_carry_no_digest(tmp_path):
    params = params_with(data={"seed": 2}, search={"repeats": 2})
    named = [search.study_name("arcface", params), search.study_name("arcface", params, repeat=1),
             runs_study_name("fixed_adacos", params), runs_study_name(tuned_method("arcface"), params)]
    assert named == ["search/arcface/split2", "search/arcface/split2/repeat1", "final/fixed_adacos/split2",
                     "final/arcface_tuned/split2"]
    assert all(READABLE.fullmatch(name) for name in named)
    # Studies that share a database (a benchmark's cells) begin with their folder in the DVC project, which every
    # checkout of the project gives alike; with its own journal a study needs none.
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "digits-closed").mkdir()
    shared = params_with(search={"storage": "sqlite:///studies.db"})
    assert search.study_name("arcface", shared, root=tmp_path / "digits-closed") == f"digits-closed/{NAME}"
    assert search.study_name("arcface", shared, root=tmp_path) == NAME
    assert search.study_name("arcface", params_with(), root=tmp_path / "digits-closed") == NAME


def open_search(params, storage, digits, **options):
    return search.open_study("arcface", params, storage, len(digits["train"]), seed=0, **options)


def test_a_changed_setting_keeps_the_old_trials_aside_and_changing_back_resumes_them(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed"] * 20)
    storage = journal_storage(tmp_path / "journal.log")
    first = params_with(search={"n_trials": 4, "sampler": "random"})
    changed = params_with(search={"n_trials": 4, "sampler": "random"}, train={"lr": 0.02})
    search.run_search(open_search(first, storage, digits), "arcface", first, digits, max_trials=2)
    kept = trials_of(storage, NAME)

    live = open_search(changed, storage, digits)
    aside = f"{NAME}@{digest(search.search_meaning('arcface', first))}"
    assert live.study_name == NAME and live.trials == []
    assert live.user_attrs[MEANING]["train"]["lr"] == 0.02
    assert names(storage) == {NAME, aside} and trials_of(storage, aside) == kept
    assert sorted(path.name for path in (tmp_path / "histories" / aside).iterdir()) == ["trial0.json", "trial1.json"]
    search.run_search(live, "arcface", changed, digits, max_trials=1)

    back = open_search(first, storage, digits)
    assert trials_of(storage, NAME) == kept
    assert names(storage) == {NAME, f"{NAME}@{digest(search.search_meaning('arcface', changed))}"}
    search.run_search(back, "arcface", first, digits)
    # Resumed where it stopped: the trials of a search never interrupted, at the same points and seeds.
    alone = journal_storage(tmp_path / "alone" / "journal.log")
    search.run_search(open_search(first, alone, digits), "arcface", first, digits)
    columns = ["trial", "state", "s", "m", "seed"]
    resumed = search.trials_table("arcface", [back], "accuracy")[columns]
    assert resumed.equals(search.trials_table("arcface", [optuna.load_study(study_name=NAME, storage=alone)],
                                              "accuracy")[columns])
    assert search.history_table("arcface", [back])["trial"].unique().tolist() == [0, 1, 2, 3]


def test_a_worker_of_other_settings_is_refused_and_moves_nothing(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed"])
    storage = journal_storage(tmp_path / "journal.log")
    first = params_with()
    search.run_search(open_search(first, storage, digits), "arcface", first, digits, max_trials=1)
    kept = trials_of(storage, NAME)
    with pytest.raises(NotTheSameStudy, match=f"not those of the study {NAME} in the storage: train.lr: 0.02 here, "
                                              f"0.01 in {NAME}"):
        open_search(params_with(train={"lr": 0.02}), storage, digits, stage=False)
    assert names(storage) == {NAME} and trials_of(storage, NAME) == kept


def test_a_stage_does_not_move_a_study_whose_trials_live_workers_still_train(digits, tmp_path):
    storage = journal_storage(tmp_path / "journal.log")
    study = open_search(params_with(), storage, digits)
    trial = study.ask()  # trained right now by a live process: this one
    for key, value in this_process().items():
        trial.set_user_attr(key, value)
    with pytest.raises(NotTheSameStudy, match=f"{NAME} was run with other settings .*train.lr.* is still training "
                                              "its trials: stop it"):
        open_search(params_with(train={"lr": 0.02}), storage, digits)
    assert names(storage) == {NAME} and len(trials_of(storage, NAME)) == 1


@pytest.mark.parametrize("killed", ["moving aside", "taking back"])
def test_a_move_killed_half_way_is_finished_by_the_next_and_loses_nothing(digits, tmp_path, monkeypatch, killed):
    use_fake_training(monkeypatch, ["completed"] * 3)
    storage = journal_storage(tmp_path / "journal.log")
    first, changed = params_with(), params_with(train={"lr": 0.02})
    search.run_search(open_search(first, storage, digits), "arcface", first, digits)
    kept = trials_of(storage, NAME)
    if killed == "taking back":
        open_search(changed, storage, digits)
    copy, copied = storage.create_new_trial, []

    def killed_after_one(study_id, template_trial=None):  # the process killed as it copies the second trial
        if copied:
            raise KeyboardInterrupt
        copied.append(template_trial.number)
        return copy(study_id, template_trial=template_trial)

    monkeypatch.setattr(storage, "create_new_trial", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        open_search(changed if killed == "moving aside" else first, storage, digits)
    monkeypatch.setattr(storage, "create_new_trial", copy)
    assert trials_of(storage, f"{NAME}@{digest(search.search_meaning('arcface', first))}" if killed == "taking back"
                     else NAME) == kept  # the source is whole until the copy is
    open_search(changed, storage, digits)
    assert trials_of(storage, f"{NAME}@{digest(search.search_meaning('arcface', first))}") == kept
    open_search(first, storage, digits)
    assert trials_of(storage, NAME) == kept
    assert sorted(path.name for path in (tmp_path / "histories" / NAME).iterdir()) == \
        ["trial0.json", "trial1.json", "trial2.json"]


def test_a_storage_written_before_names_were_readable_is_resumed_under_them(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed"] * 3)
    storage = journal_storage(tmp_path / "journal.log")
    params = params_with()
    search.run_search(open_search(params, storage, digits), "arcface", params, digits)
    kept = trials_of(storage, NAME)
    # The layout of before: the study and its histories named `<loss>-<digest>`, no MEANING recorded.
    legacy = f"arcface-{digest(search.search_meaning('arcface', params))}"
    optuna.create_study(study_name=legacy, storage=storage, direction="maximize").add_trials(
        optuna.load_study(study_name=NAME, storage=storage).trials)
    optuna.delete_study(study_name=NAME, storage=storage)
    (tmp_path / "histories" / NAME).rename(tmp_path / "histories" / legacy)

    open_search(params, storage, digits)
    assert names(storage) == {NAME} and trials_of(storage, NAME) == kept
    assert json.loads((tmp_path / "histories" / NAME / "trial1.json").read_text())[-1]["iteration"] == 10


@pytest.mark.slow
def test_final_runs_move_aside_with_their_checkpoints_and_come_back_whole(digits, tmp_path):
    storage = journal_storage(tmp_path / CHECKPOINT_STORE.parent / "journal.log")
    first = params_with(runs={"seeds": [0, 1], "methods": ["fixed_adacos"]})
    changed = params_with(runs={"seeds": [0, 1], "methods": ["fixed_adacos"]}, train={"lr": 0.02})
    name = "final/fixed_adacos/split0"
    study = open_runs("fixed_adacos", "fixed_adacos", {}, first, storage, root=tmp_path)
    assert serve_runs(study, first, digits, root=tmp_path) == 2
    # Each run's seed is its trial's parameter: a final run is a method at a seed.
    assert [trial.params for trial in study.trials] == [{"seed": 0}, {"seed": 1}]
    checkpoints = {seed: (tmp_path / CHECKPOINT_STORE / name / f"seed{seed}.pt").read_bytes() for seed in (0, 1)}

    open_runs("fixed_adacos", "fixed_adacos", {}, changed, storage, root=tmp_path)
    aside = f"{name}@{digest(runs_meaning('fixed_adacos', {}, first))}"
    assert names(storage) == {name, aside}
    assert not (tmp_path / CHECKPOINT_STORE / name).exists()
    assert (tmp_path / CHECKPOINT_STORE / aside / "seed1.pt").read_bytes() == checkpoints[1]

    back = open_runs("fixed_adacos", "fixed_adacos", {}, first, storage, root=tmp_path)
    assert done_seeds(back) == {0, 1}  # neither is trained again: its checkpoint is where the storage says
    runs, _ = collect_runs(back, first, tmp_path / "out", root=tmp_path)
    assert runs["seed"].tolist() == [0, 1]
    assert (tmp_path / "out" / "seed0.pt").read_bytes() == checkpoints[0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(shutil.which("optuna-dashboard") is None,
                    reason="optuna-dashboard is not installed: pip install -c constraints.txt -e '.[dev]'")
def test_optuna_dashboard_opens_the_journal_as_the_docs_say(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed"])
    params = params_with()
    study = open_search(params, journal_storage(tmp_path / JOURNAL), digits)
    search.run_search(study, "arcface", params, digits, max_trials=1)
    port = free_port()
    server = subprocess.Popen(["optuna-dashboard", str(JOURNAL), "--host", "127.0.0.1", "--port", str(port)],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, answer = time.monotonic() + 60, None
        while answer is None and server.poll() is None and time.monotonic() < deadline:
            try:
                answer = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5)
            except OSError:
                time.sleep(0.2)
        assert answer is not None, server.stderr.read() if server.poll() is not None else "no answer in 60 s"
        assert answer.status == 200
        listed = json.loads(answer.read())["study_summaries"]  # the study, by its name, with what it means
        assert [row["study_name"] for row in listed] == [NAME]
        assert {"meaning", "loss", "split"} <= {attr["key"] for attr in listed[0]["user_attrs"]}
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
