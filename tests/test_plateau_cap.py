"""runs.plateau_cap: a method whose final runs miss the plateau rule trains them again longer, and those runs are the
ones a study declared at that length would train; the report says each method's length."""

import optuna
import pandas as pd
import pytest

from study.config import StudyParams
from study.plateau import PLATEAU_RISE, best_so_far_at
from study.presets import write_params
from study.progress import study_progress
from study.report.sections import convergence_sentence
from study.results import JOURNAL, prepared_dir, runs_dir
from study.sources import load_dataset
from study.runs import join_runs, open_runs
from study.splits import load_splits, save_splits, split_dataset
from study.storage import load_history, open_storage
from study.training import planned_iterations
from tests.conftest import copy_study, run_stages

SPLIT = (0.6, 0.2, 0.2)


def tiny_study(root, epochs: int, cap: int, parallel: int = 1):
    """Fixed AdaCos alone, two seeds, a few dozen steps on digits: far from its plateau at one epoch; `parallel`: a
    packed worker trains beside the stage."""
    copy_study(root)
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed", "fractions": list(SPLIT), "seeds": None},
        "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": epochs, "batch_size": 128, "eval_every": 2, "eval_points": None, "device": "cpu",
                  "lr": 0.003, "objective": "accuracy", "threads": 1, "parallel": parallel},
        "search": {"n_trials": 2}, "runs": {"seeds": [0, 1], "methods": ["fixed_adacos"], "plateau_cap": cap}})
    write_params(params, root / "params.yaml", "test")
    sets = split_dataset(load_dataset("digits"), "closed", SPLIT, seed=0)
    save_splits(sets, root / prepared_dir(0), source="digits", protocol="closed", seed=0, fractions=SPLIT)
    return params, len(sets["train"])


@pytest.mark.slow
def test_runs_short_of_the_plateau_train_again_at_twice_the_length_as_a_study_declared_that_long(tmp_path):
    params, size = tiny_study(tmp_path / "capped", epochs=1, cap=2)
    output = run_stages(tmp_path / "capped", [["stages.runs", "--method", "fixed_adacos"]]).stdout
    declared = planned_iterations(size, params.train)
    storage = open_storage(params.search, str(tmp_path / "capped" / JOURNAL))
    names = {study.study_name for study in storage.get_all_studies()}
    assert names == {"final/fixed_adacos/split0", "final/fixed_adacos/split0/x2"}
    # The declared length's curve, read by hand: best val so far at the end against at half-way, over 1%.
    short = optuna_history(storage, "final/fixed_adacos/split0")
    half, end = best_so_far_at(short["iteration"], short["accuracy"], declared / 2), short["accuracy"].max()
    assert (end - half) / half > PLATEAU_RISE
    assert "trains again at 2x the length (runs.plateau_cap 2)" in output
    kept = pd.read_csv(tmp_path / "capped" / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert kept["iterations"].tolist() == [2 * declared] * 2
    # The cap reached: the runs of twice the length are kept whether or not they met the rule, and a study declared
    # at two epochs trains the very same run.
    longer, _ = tiny_study(tmp_path / "declared", epochs=2, cap=1)
    run_stages(tmp_path / "declared", [["stages.runs", "--method", "fixed_adacos"]])
    same = pd.read_csv(tmp_path / "declared" / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert same["iterations"].tolist() == [2 * declared] * 2
    assert same["val_score"].tolist() == kept["val_score"].tolist()
    # The study's progress counts the trainings of twice the length beside the declared one.
    assert study_progress(storage, "", total=2).total == 4


def test_a_worker_trains_the_queued_runs_of_twice_the_length_at_twice_the_length(tmp_path):
    # A worker (`study worker`, or one packed beside the stage) reads the declared params; the runs study's
    # length_factor tells it the length its queued seeds train at.
    params, size = tiny_study(tmp_path, epochs=1, cap=2)
    params = params.replace(runs=params.runs.replace(seeds=(0,)))
    storage = open_storage(params.search, str(tmp_path / JOURNAL))
    study = open_runs("fixed_adacos", "fixed_adacos", {}, params, storage, root=tmp_path, factor=2)
    assert study.study_name == "final/fixed_adacos/split0/x2"
    sets = load_splits(tmp_path / prepared_dir(0))
    assert join_runs(params, storage, sets, root=tmp_path) == 1
    assert [trial.user_attrs["iterations"] for trial in study.get_trials()] == [2 * planned_iterations(size,
                                                                                                      params.train)]
    assert join_runs(params, storage, sets, root=tmp_path) == 0  # none left queued


def optuna_history(storage, name: str) -> pd.DataFrame:
    """The learning curve of the one run of the runs study `name`."""
    study = optuna.load_study(study_name=name, storage=storage)
    first = min(study.get_trials(), key=lambda trial: trial.user_attrs["seed"])
    return pd.DataFrame(load_history(study, first)).sort_values("iteration")


def test_the_report_names_each_methods_length_where_runs_trained_longer():
    plateau = pd.DataFrame([
        {"method": "fixed_adacos", "runs": 2, "runs_converged": 2, "diverged": 0, "half_iteration": 500,
         "last_iteration": 1000, "best_at_half": 0.5, "best_at_end": 0.502, "rise": 0.004, "converged": True,
         "selected_iteration": 900},
        {"method": "arcface_tuned", "runs": 2, "runs_converged": 1, "diverged": 0, "half_iteration": 2000,
         "last_iteration": 4000, "best_at_half": 0.5, "best_at_end": 0.52, "rise": 0.04, "converged": False,
         "selected_iteration": 3900}])

    class Analysis:
        methods = ["fixed_adacos", "arcface_tuned"]

    Analysis.plateau = plateau
    said = convergence_sentence(Analysis)
    assert said.startswith("Each method trained until its runs met the plateau rule, up to runs.plateau_cap (Fixed "
                           "AdaCos 1,000 and ArcFace tuned 4,000 iterations); every run kept the checkpoint val")
    assert "train 8,000 iterations (train.epochs, or a larger runs.plateau_cap)" in said
    Analysis.plateau = plateau.assign(last_iteration=1000)
    assert convergence_sentence(Analysis).startswith("Every run trained 1,000 iterations and kept the checkpoint val")
