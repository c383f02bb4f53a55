"""A way out of a broken checkpoint store: after the store is deleted or one checkpoint tampered with, the runs stage
run again (as `dvc repro --force runs@<method>` runs it, its outputs deleted) names what it found, trains those seeds
again (the storage is the truth) and ends with every seed's checkpoint, instead of failing on a missing file."""

import shutil
import subprocess
import sys

import optuna
import pandas as pd
import pytest

from study.results import CHECKPOINT_STORE, JOURNAL, runs_dir
from study.runs import retire_lost_checkpoints
from study.storage import journal_storage
from tests.test_faults import ENVIRONMENT, study_folder

SEEDS = [0, 1, 2, 3]


def runs_stage(root):
    done = subprocess.run([sys.executable, "-m", "stages.runs", "--method", "fixed_adacos"], cwd=root,
                          env=ENVIRONMENT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def trained(output):
    return [int(line.split()[2].rstrip(":")) for line in output.splitlines() if line.startswith("fixed_adacos seed")]


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["store deleted", "one checkpoint changed"])
def test_a_broken_checkpoint_store_retrains_the_seeds_it_lost(tmp_path, broken):
    root = study_folder(tmp_path, train={"parallel": 1})
    assert trained(runs_stage(root)) == SEEDS
    store = root / CHECKPOINT_STORE / "final" / "fixed_adacos" / "split0"
    if broken == "store deleted":
        shutil.rmtree(root / CHECKPOINT_STORE)
        lost, found = SEEDS, "is missing: not at"
    else:
        changed = store / "seed2.pt"
        changed.write_bytes(changed.read_bytes() + b"tampered")
        lost, found = [2], "does not match the SHA-256 the storage recorded"
    shutil.rmtree(root / runs_dir("fixed_adacos", 0))  # what DVC does before it runs the stage again

    output = runs_stage(root)
    named = [line for line in output.splitlines() if "its checkpoint" in line]
    assert len(named) == len(lost) and all(found in line and "trained again" in line for line in named), output
    assert sorted(trained(output)) == lost
    runs = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert runs["seed"].tolist() == SEEDS and (runs["status"] == "completed").all()
    assert (runs["cpu_seconds"] > 0).all()  # the CPU time of the process each run trained in
    for seed in SEEDS:  # each checkpoint written out is the one its seed's run stored, whole
        out = (root / runs_dir("fixed_adacos", 0) / f"seed{seed}.pt").read_bytes()
        assert out == (store / f"seed{seed}.pt").read_bytes()
    # Once retrained, nothing is lost any more.
    storage = journal_storage(root / JOURNAL)
    study = optuna.load_study(study_name="final/fixed_adacos/split0", storage=storage)
    assert retire_lost_checkpoints(study, root) == []
