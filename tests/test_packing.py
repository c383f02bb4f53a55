"""Runs packed several at a time on one device (train.parallel) are the runs trained one at a time.

The reference is the stage run with train.parallel: 1, in a checkout of its own: a packed search must train the
same trials (number, seed, point) to the same scores, and packed final runs the same seeds to the same scores
and weights. Both run at one torch thread per run, as the packed runs of a 2-core machine do: on a CPU the
thread count moves scores by float rounding.
"""

import multiprocessing
import re
import time

import pandas as pd
import pytest
import torch

from study import packing, training
from study.config import StudyParams
from study.presets import write_params
from study.results import prepared_dir, runs_dir, search_dir
from study.sources import load_dataset
from study.splits import save_splits, split_dataset
from tests.conftest import copy_study, run_stages, trained_trials

SPLIT = (0.6, 0.2, 0.2)


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", SPLIT, seed=0)


def checkout(root, digits, parallel):
    """The study's code with a small digits study's params and prepared data, packed `parallel` at a time."""
    copy_study(root)
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed", "fractions": list(SPLIT), "seeds": None},
        "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": 25, "batch_size": 128, "eval_every": 5, "device": "cpu", "lr": 0.01,
                  "objective": "accuracy", "threads": 1, "parallel": parallel},
        "search": {"n_trials": 6},
        "runs": {"seeds": [0, 1, 2, 3], "methods": ["fixed_adacos"], "plateau_cap": 1}})
    write_params(params, root / "params.yaml", "test")
    save_splits(digits, root / prepared_dir(0), source="digits", protocol="closed", seed=0, fractions=SPLIT)
    return root


@pytest.fixture(scope="module")
def alone_and_packed(tmp_path_factory, digits):
    roots = {}
    for parallel in (1, 3):
        root = checkout(tmp_path_factory.mktemp(f"parallel{parallel}"), digits, parallel)
        done = run_stages(root, [["stages.search", "--loss", "arcface"], ["stages.runs", "--method", "fixed_adacos"]])
        (root / "stages.log").write_text(done.stdout)
        roots[parallel] = root
    return roots[1], roots[3]


@pytest.mark.slow
def test_a_packed_search_trains_the_same_trials_to_the_same_scores(alone_and_packed):
    alone, packed = (trained_trials([root / search_dir("arcface", 0) / "trials.csv"]) for root in alone_and_packed)
    columns = ["trial", "seed", "state", "s", "m", "value", "test_value", "iterations"]
    assert len(alone) == 6 and set(alone["state"]) == {"COMPLETE"}
    pd.testing.assert_frame_equal(alone[columns], packed.sort_values("trial").reset_index(drop=True)[columns])
    # Alone, one process trained them all; packed, the workers started beside it took some (a trial lasts longer
    # than a worker takes to start).
    assert alone["worker"].nunique() == 1 and packed["worker"].nunique() >= 2


@pytest.mark.slow
def test_packed_final_runs_train_each_seed_to_the_same_scores_and_weights(alone_and_packed):
    runs = [pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv") for root in alone_and_packed]
    pd.testing.assert_frame_equal(runs[0][["seed", "status", "iterations", "val_score"]],
                                  runs[1][["seed", "status", "iterations", "val_score"]])
    for seed in (0, 3):
        alone, packed = (torch.load(root / runs_dir("fixed_adacos", 0) / f"seed{seed}.pt", weights_only=True)
                         for root in alone_and_packed)
        for name, tensor in alone["model"].items():
            assert torch.equal(tensor, packed["model"][name]), name
        assert torch.equal(alone["loss"]["s"], packed["loss"]["s"])


@pytest.mark.slow
def test_each_process_of_a_runs_stage_says_how_many_seeds_it_trained(alone_and_packed):
    for root in alone_and_packed:
        output = (root / "stages.log").read_text()
        seeds = re.findall(r"^fixed_adacos seed (\d+): completed", output, re.MULTILINE)
        counts = re.findall(r"^fixed_adacos, split 0: (\d+) seeds? trained by (.+)$", output, re.MULTILINE)
        # The stage and each packed worker that trained seeds: one line each, adding up to the seeds trained.
        assert sorted(seeds) == ["0", "1", "2", "3"] and sum(int(count) for count, _ in counts) == 4, output
        assert len({process for _, process in counts}) == len(counts), output
        assert any(process.startswith("the stage (pid") for _, process in counts), output
        assert not re.search(r"\b0 (final run|seed)", output), output


def test_auto_packs_four_runs_on_a_gpu_and_one_per_core_up_to_four_on_a_cpu(monkeypatch):
    def train(**values):
        return StudyParams.from_dict({"train": values}).train

    monkeypatch.setattr(packing, "available_cores", lambda: 2)
    assert packing.runs_at_once(train(device="cpu")) == 2
    assert packing.runs_at_once(train(device="cpu", parallel=7)) == 7
    monkeypatch.setattr(packing, "available_cores", lambda: 64)
    assert packing.runs_at_once(train(device="cpu")) == 4
    monkeypatch.setattr(training, "resolve_device", lambda name: torch.device("cuda"))  # workers import it when used
    assert packing.runs_at_once(train(device="cuda")) == 4


def test_packed_runs_share_the_cores_unless_threads_are_given(monkeypatch):
    monkeypatch.setattr(packing, "available_cores", lambda: 8)
    params = StudyParams.from_dict({"train": {"device": "cpu"}})
    alone = packing.threads_per_run(params, 1)
    assert alone.train.threads is None  # torch's default: every core
    packed = packing.threads_per_run(params, 4)
    assert packed.train.threads == 2
    given = StudyParams.from_dict({"train": {"device": "cpu", "threads": 3}})
    assert packing.threads_per_run(given, 4).train.threads == 3


@pytest.mark.slow
def test_a_packed_worker_that_fails_is_named_after_the_block(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(packing, "WORKERS_JOIN_AFTER_SECONDS", 0)
    params = StudyParams.from_dict({"train": {"device": "cpu", "parallel": 2, "threads": 1}})
    with pytest.raises(RuntimeError, match=r"packed worker 1 \(exit code 1\) of the 2 packed runs failed"):
        with packing.packed(params, tmp_path, services=[]):
            # this process's own share finishes once its worker has started, which finds no prepared data and fails
            while not multiprocessing.active_children():
                time.sleep(0.01)
    assert "data/prepared" in capfd.readouterr().err


def test_a_block_done_before_the_workers_join_starts_none(tmp_path):
    params = StudyParams.from_dict({"train": {"device": "cpu", "parallel": 4, "threads": 1}})
    began = time.monotonic()
    # A worker started would find no prepared data here and fail, and the block would raise (see the test above).
    with packing.packed(params, tmp_path, services=[]):
        time.sleep(0.2)  # this process's own share: over before the workers' delay
    assert time.monotonic() - began < packing.WORKERS_JOIN_AFTER_SECONDS  # it did not wait for the delay either
