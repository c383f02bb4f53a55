"""What can be known before training is found by the validate stage, before DVC deletes an output (issue 28): the
test split's verification pairs against verification_accuracy's folds, a folder's unreadable images (with a progress
line for large folders), a corrupt journal line, and the study's cost, printed on one line and refused beyond a
documented bound unless STUDY_ALLOW_LARGE=1."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import stages.validate
import study.validation
from study.config import ModelConfig, StudyParams, TrainConfig
from study.metrics import verification_metrics
from study.sources import load_dataset
from study.splits import split_dataset
from study.storage import check_storage
from study.training import planned_iterations, train
from study.validation import (MAX_ITERATIONS, MAX_TRAININGS, VERIFICATION_FOLDS, image_file_problems, study_cost,
                              verification_pairs)

from conftest import REPO
from test_bad_inputs import CORRUPT, PREVIOUS_REPORT, RECORD, dvc, image_folder, params_text, png_bytes, snapshot


def test_the_validate_stage_says_what_the_study_will_cost(tmp_path, monkeypatch, capsys):
    (tmp_path / "params.yaml").write_text(params_text({}))
    monkeypatch.chdir(tmp_path)
    stages.validate.main()
    line = capsys.readouterr().out.strip()
    assert line == ("params.yaml passed; the study makes 18 trainings (3 class split(s) × (2 search trials + 4 final "
                    "runs)), 252 iterations in all"), line


def test_the_cost_counts_every_training_and_the_iterations_each_makes():
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed", "seeds": [0, 1]},
        "train": {"epochs": 1, "batch_size": 64, "objective": "accuracy"},
        "search": {"losses": ["arcface", "cosface"], "repeats": 2, "n_trials": 3},
        "runs": {"seeds": [0, 1, 2]}})
    sizes = [len(split_dataset(load_dataset("digits"), "closed", params.data.fractions, seed=s)["train"])
             for s in (0, 1)]
    cost = study_cost(params, sizes)
    finals = 3 * (len(params.runs.methods) + 2)  # every method and both tuned losses, at every seed
    assert (cost.splits, cost.trials, cost.finals) == (2, 2 * 2 * 3, finals)
    assert cost.trainings == 2 * (12 + finals) and cost.exact
    assert cost.iterations == (12 + finals) * sum(planned_iterations(size, params.train) for size in sizes)
    # Where prepare first learns the source's size, an epoch takes at least one step: a lower bound, said as one.
    unknown = study_cost(params, None)
    assert not unknown.exact and unknown.iterations == unknown.trainings and "at least" in str(unknown)


def test_a_run_makes_the_iterations_the_cost_counts():
    sets = split_dataset(load_dataset("digits"), "closed", (0.5, 0.25, 0.25), seed=0)
    config = TrainConfig(epochs=1, batch_size=128, device="cpu", eval_every=100, objective="accuracy")
    result = train(sets, loss_name="softmax", model_config=ModelConfig(name="mlp", embedding_size=8), config=config,
                   progress=False)
    assert result.iterations == planned_iterations(len(sets["train"]), config)


def test_the_bound_is_the_one_the_docs_give():
    documented = (REPO / "docs" / "configuration.md").read_text()
    assert f"{MAX_TRAININGS:,} trainings" in documented and "10^9 iterations" in documented
    assert MAX_ITERATIONS == 10**9 and "STUDY_ALLOW_LARGE=1" in documented


@pytest.mark.parametrize("classes, per_class", [(4, 10), (4, 12), (2, 3), (1, 20), (5, 3)])
def test_verification_pairs_are_those_verification_scores(classes, per_class):
    labels = np.repeat(np.arange(classes), per_class)
    embeddings = torch.randn(len(labels), 8, generator=torch.Generator().manual_seed(0))
    try:
        verification_metrics(embeddings, labels)
    except ValueError:
        assert verification_pairs(labels) < VERIFICATION_FOLDS
    else:
        assert verification_pairs(labels) >= VERIFICATION_FOLDS


def test_a_large_folder_says_how_far_the_image_check_got(tmp_path, monkeypatch, capsys):
    folder = image_folder(tmp_path / "images", classes=3, per_class=2, bad={"class1/cut.png": png_bytes()[:60]})
    monkeypatch.setattr(study.validation, "PROGRESS_SECONDS", 0.0)  # a line after every file
    problems = image_file_problems(load_dataset(f"folder:{folder}"), "folder:images")
    said = capsys.readouterr().err.splitlines()
    assert said[0] == "validate: checked 1 of the 7 image files of folder:images", said
    assert said[-1].startswith("validate: checked the 7 image files of folder:images in ")
    assert len(problems) == 1 and "class1/cut.png cannot be read as an image" in problems[0]


def test_many_bad_images_are_named_up_to_a_limit_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(study.validation, "MAX_NAMED_FILES", 2)
    folder = image_folder(tmp_path / "images", classes=3, per_class=2,
                          bad={f"class0/bad{n}.png": CORRUPT for n in range(5)})
    problems = image_file_problems(load_dataset(f"folder:{folder}"), "folder:images")
    assert len(problems) == 3 and problems[-1].startswith("data.dataset: 3 more image files of folder:images")


def test_validate_reads_the_journal_as_the_storage_will_and_changes_nothing(tmp_path):
    journal = tmp_path / "trials" / "journal.log"
    journal.parent.mkdir()
    data = RECORD + RECORD + b'{"op_code": 5, "wor'  # a torn last line: the storage moves it aside, later
    journal.write_bytes(data)
    check_storage(StudyParams().search, journal)
    assert journal.read_bytes() == data and sorted(path.name for path in journal.parent.iterdir()) == ["journal.log"]
    journal.write_bytes(RECORD + b"\0\0\0\n" + RECORD)
    with pytest.raises(RuntimeError, match=r"journal.log line 2 is corrupt .*head -n 1 "):
        check_storage(StudyParams().search, journal)


# --- through `dvc repro`: found by validate, so DVC deletes nothing ----------------------------------------------


def _bad_folder(kind: str):
    def make(root):
        if kind == "too few for the folds":
            return image_folder(root / "images", classes=4, per_class=10)
        return image_folder(root / "images", classes=4, per_class=20, bad={"class1/cut.png": png_bytes()[:60]})
    return make


@pytest.mark.slow
@pytest.mark.parametrize("case, needles", [
    ("corrupt journal", ("journal.log line 2 is corrupt", "head -n 1")),
    ("too few for the folds", ("8 verification pairs", "10 folds")),
    ("truncated image", ("class1/cut.png cannot be read as an image",)),
    ("a billion trials", ("search.n_trials: the study would make", "STUDY_ALLOW_LARGE=1")),
])
def test_dvc_repro_finds_it_at_validate_and_deletes_nothing(prepared_study, tmp_path, case, needles):
    root, before = prepared_study, snapshot(prepared_study)
    journal = root / "results" / "trials" / "journal.log"
    values = {"search.n_trials": 10**9} if case == "a billion trials" else {}
    if case in ("too few for the folds", "truncated image"):
        folder = _bad_folder(case)(tmp_path)
        values = {"data.dataset": f"folder:{folder}", "data.image_size": 8, "train.batch_size": 4}
    params = (root / "params.yaml").read_text()
    try:
        if case == "corrupt journal":
            journal.parent.mkdir(parents=True, exist_ok=True)
            journal.write_bytes(RECORD + b"{garbage\n" + RECORD)
            values = {"search.n_trials": 3}  # the search would rerun, and its outputs be deleted first
        (root / "params.yaml").write_text(params_text(values))
        done = dvc(root, "repro")
    finally:
        (root / "params.yaml").write_text(params)
        journal_bytes = journal.read_bytes() if journal.exists() else None
        journal.unlink(missing_ok=True)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in output
    for needle in needles:
        assert needle in output, output
    assert "Running stage 'prepare'" not in output and "Running stage 'search" not in output
    assert snapshot(root) == before and before["reports/report.md"] == PREVIOUS_REPORT.encode()
    if case == "corrupt journal":
        assert journal_bytes == RECORD + b"{garbage\n" + RECORD  # named, not repaired or guessed at


@pytest.mark.slow
def test_an_empty_params_yaml_stops_dvc_before_any_stage_and_deletes_nothing(prepared_study):
    """DVC reads params.yaml itself (dvc.yaml's `foreach: ${search.losses}`) before any stage runs, so its own parse
    error is what `dvc repro` says; nothing is deleted, and the validate stage, run alone, names the fix."""
    root, before = prepared_study, snapshot(prepared_study)
    params = (root / "params.yaml").read_text()
    try:
        (root / "params.yaml").write_text("")
        done = dvc(root, "repro")
        alone = subprocess.run([sys.executable, "-m", "stages.validate"], cwd=root, capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(root)})
    finally:
        (root / "params.yaml").write_text(params)
    assert done.returncode != 0 and "Running stage" not in done.stdout
    assert snapshot(root) == before
    assert alone.returncode != 0 and "params.yaml is empty" in alone.stderr and "study preset default" in alone.stderr
    assert "Traceback" not in alone.stderr
