"""Workers prove they run the same study: two checkouts share one storage; a worker in the second, with stale prepared
data or other params, is refused every trial with a message naming what differs, and trains nothing."""

import subprocess
import sys

import optuna
import pytest

from study.config import load_params
from study.presets import write_params
from study.results import prepared_dir
from study.runs import open_runs, serve_runs
from study.search import open_study, run_search, study_name
from study.sources import load_dataset
from study.splits import load_splits, save_splits, split_dataset
from study.storage import open_storage
from tests.test_faults import ENVIRONMENT, study_folder

SPLIT = (0.6, 0.2, 0.2)


@pytest.fixture
def shared(tmp_path):
    """Checkout A, whose stage has begun a search and the final runs in a database both checkouts name."""
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    (tmp_path / "A").mkdir()
    root = study_folder(tmp_path / "A", storage=url, n_trials=4)
    params = load_params(str(root / "params.yaml"))
    sets = load_splits(root / prepared_dir(0))
    storage = open_storage(params.search, root / "unused")
    search = open_study("arcface", params, storage, len(sets["train"]), seed=0)
    run_search(search, "arcface", params, sets, max_trials=1)
    runs = open_runs("fixed_adacos", "fixed_adacos", {}, params, storage, root=root)
    serve_runs(runs, params, sets, root=root, ship_checkpoints=True, max_trials=1)
    return url, search, runs


def checkout_b(tmp_path, url, data_seed=0, **train):
    """Checkout B: the same params.yaml (or with `train` changed), its data prepared with `data_seed`."""
    (tmp_path / "B").mkdir()
    root = study_folder(tmp_path / "B", storage=url, n_trials=4)
    if train:
        params = load_params(str(root / "params.yaml"))
        write_params(params.replace(train=params.train.replace(**train)), root / "params.yaml", "test")
    if data_seed:  # stale data: prepared from other params, which were then restored
        stale = split_dataset(load_dataset("digits"), "closed", SPLIT, seed=data_seed)
        save_splits(stale, root / prepared_dir(0), source="digits", protocol="closed", seed=0, fractions=SPLIT)
    return root


def worker(root, serve):
    done = subprocess.run([sys.executable, "-m", "study.cli", "worker", "--serve", serve], cwd=root, env=ENVIRONMENT,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("serve", ["search", "runs"])
def test_a_worker_on_stale_data_is_refused_and_trains_nothing(tmp_path, shared, serve):
    url, search, runs = shared
    study = search if serve == "search" else runs
    before = len(study.get_trials(deepcopy=False))
    code, output = worker(checkout_b(tmp_path, url, data_seed=1), serve)
    assert code != 0 and "Traceback" not in output, output
    assert f"not those of the study {study.study_name}" in output and "prepared data.train.sha256" in output, output
    assert "dvc repro prepare" in output
    trials = optuna.load_study(study_name=study.study_name, storage=url).get_trials(deepcopy=False)
    assert len(trials) == before and all(trial.state != optuna.trial.TrialState.RUNNING for trial in trials)


@pytest.mark.slow
def test_a_worker_with_other_params_is_refused_instead_of_running_a_search_nobody_reads(tmp_path, shared):
    url, search, runs = shared
    before = len(search.get_trials(deepcopy=False))
    root = checkout_b(tmp_path, url, lr=0.02)
    code, output = worker(root, "search")
    assert code != 0 and "Traceback" not in output, output
    assert (f"not those of the study {search.study_name} in the storage: train.lr: 0.02 here, 0.01 in "
            f"{search.study_name}") in output, output
    # The same name, other settings: a worker moves nothing aside and begins nothing.
    assert study_name("arcface", load_params(str(root / "params.yaml"))) == search.study_name
    assert sorted(summary.study_name for summary in optuna.get_all_study_summaries(url)) == \
        sorted([search.study_name, runs.study_name])
    assert len(optuna.load_study(study_name=search.study_name, storage=url).get_trials(deepcopy=False)) == before

