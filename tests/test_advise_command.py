"""`study advise` on a real (tiny) study, read from its storage while nothing has been evaluated yet, against the
evaluate stage's own test scores; its bad-input messages; the Optuna callback stopping a user's own search; and
search.stop_early, whose rounds stop where the advice replayed on the storage says, the same on a rerun."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest

from study.advice import AdviceCallback, AdviceError, Prior, replay
from study.advice_evidence import study_evidence
from study.config import StudyParams, load_params
from study.presets import write_params
from study.results import EVALUATION_DIR, JOURNAL, prepared_dir, search_dir
from study.search import study_name
from study.sources import load_dataset
from study.splits import save_splits, split_dataset
from study.storage import open_storage
from tests.conftest import copy_study, run_stages

SPLIT = (0.6, 0.2, 0.2)
BENCHMARK_CELLS = Path(__file__).resolve().parents[1] / "reports" / "benchmark" / "tables" / "cells.csv"


def run(root, *arguments, check=True):
    done = subprocess.run([sys.executable, "-m", *arguments], cwd=root, capture_output=True, text=True, timeout=600)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def digits_study(root, seeds=(0, 1), runs=(0, 1), **search):
    """A digits study of two class splits (`seeds`), four ArcFace trials and two Fixed AdaCos runs each (`runs`: their
    seeds; `search`: more keys), its params written and its splits prepared."""
    copy_study(root)
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed", "fractions": list(SPLIT), "seeds": list(seeds)},
        "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": 1, "batch_size": 128, "eval_every": 5, "device": "cpu", "lr": 0.01,
                  "objective": "accuracy", "threads": 1, "parallel": 1},
        "search": {"n_trials": 4, **search}, "runs": {"seeds": list(runs), "methods": ["fixed_adacos"], "plateau_cap": 1}})
    write_params(params, root / "params.yaml", "test")
    for seed in seeds:
        sets = split_dataset(load_dataset("digits"), "closed", SPLIT, seed=seed)
        save_splits(sets, root / prepared_dir(seed), source="digits", protocol="closed", seed=seed, fractions=SPLIT)
    return root


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """The digits study searched, run and evaluated."""
    root = digits_study(tmp_path_factory.mktemp("advise"))
    run_stages(root, [["stages.search", "--loss", "arcface"], ["stages.runs", "--method", "fixed_adacos"],
                      ["stages.runs", "--tuned", "arcface"], ["stages.evaluate"]])
    return root


@pytest.mark.slow
def test_the_storage_holds_what_the_stages_wrote(tiny_study, monkeypatch):
    monkeypatch.chdir(tiny_study)
    params = load_params()
    evidence, best = study_evidence(params, open_storage(params.search, JOURNAL))
    for split in (0, 1):
        trials = pd.read_csv(search_dir("arcface", split) / "trials.csv").sort_values("trial")
        read = evidence.trials[evidence.trials["split"] == split]
        np.testing.assert_allclose(read[["val", "test"]].to_numpy(), trials[["value", "test_value"]].to_numpy())
    # The runs' test scores before the evaluate stage ran (their learning curve at the iteration val selected) are
    # the scores the evaluate stage computes from their checkpoints.
    evaluated = pd.read_csv(EVALUATION_DIR / "runs.csv")
    evaluated = evaluated[evaluated["method"] == "fixed_adacos"].sort_values(["split", "seed"])
    read = evidence.reference.sort_values(["split", "test"])
    assert len(read) == 4
    for split in (0, 1):
        np.testing.assert_allclose(np.sort(read.loc[read["split"] == split, "test"]),
                                   np.sort(evaluated.loc[evaluated["split"] == split, "test_accuracy"]), atol=1e-6)
    assert best.startswith("(s, m) = (")


@pytest.mark.slow
def test_the_storage_names_each_study_as_a_person_reads_it(tiny_study):
    # Two class splits: ArcFace's search, and Fixed AdaCos's and tuned ArcFace's final runs, on each; no digest.
    studies = open_storage(load_params(str(tiny_study / "params.yaml")).search, tiny_study / JOURNAL).get_all_studies()
    assert sorted(study.study_name for study in studies) == [
        f"{kind}/{name}/split{split}" for kind, name in [("final", "arcface_tuned"), ("final", "fixed_adacos"),
                                                        ("search", "arcface")] for split in (0, 1)]
    assert not any(re.search(r"[0-9a-f]{7,}", study.study_name) for study in studies)
    # What each study means is recorded with it: what the dashboard shows, and what a changed setting is checked by.
    assert all(study.user_attrs["meaning"]["data"]["seed"] == study.user_attrs["split"] for study in studies)


@pytest.mark.slow
def test_the_command_prints_the_advice_and_writes_it(tiny_study):
    done = run(tiny_study, "study.cli", "advise", "--prior", "none", "--json", "advice.json")
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("Use ") and lines[-1].startswith("Evidence:")
    advice = json.loads((tiny_study / "advice.json").read_text())
    assert advice["round"] == 4 and advice["splits"] == 2 and advice["trainings"] == 12
    assert advice["low"] <= advice["difference"] <= advice["high"]


@pytest.mark.slow
def test_bad_input_is_named_and_nothing_is_written(tiny_study):
    # The benchmark's prior is about MAP@R; this study selects by accuracy.
    done = run(tiny_study, "study.cli", "advise", "--prior", str(BENCHMARK_CELLS), "--json", "wrong.json", check=False)
    assert done.returncode == 2 and "map_at_r" in done.stderr and "accuracy" in done.stderr
    assert not (tiny_study / "wrong.json").exists()
    done = run(tiny_study, "study.cli", "advise", "--from", "report", "--prior", "none", check=False)
    assert done.returncode == 2 and "landscape.csv" in done.stderr


def test_the_callback_stops_a_search_once_tuning_pays():
    rng = np.random.default_rng(0)

    def objective(trial):
        x = trial.suggest_float("x", 0.0, 1.0)
        trial.set_user_attr("test", 0.5 + 0.4 * x + rng.normal(0, 0.01))
        return 0.5 + 0.4 * x + rng.normal(0, 0.01)

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    callback = AdviceCallback([(0.50, 0.50), (0.51, 0.49), (0.49, 0.50)], budget=30, objective="toy")
    study.optimize(objective, n_trials=30, callbacks=[callback])
    advice = study.user_attrs["advice"]
    assert advice["decision"] == "tuning_pays" and len(study.trials) < 30
    assert advice["low"] > 0.02 and advice["lines"][-1].startswith("Evidence: stop: tuning pays")


def test_the_callback_says_what_is_missing_before_it_can_judge_and_refuses_unrecorded_test_scores():
    study = optuna.create_study(direction="maximize")
    callback = AdviceCallback([(0.5, 0.5), (0.5, 0.5), (0.5, 0.5)], budget=10, objective="toy")
    study.optimize(lambda trial: trial.set_user_attr("test", 0.5) or 0.5, n_trials=1, callbacks=[callback])
    assert study.user_attrs["advice"]["decision"] == "run_more" and "2 finished" in study.user_attrs["advice"]["says"]
    with pytest.raises(AdviceError, match="set_user_attr"):
        study.optimize(lambda trial: 0.5, n_trials=1, callbacks=[callback])


@pytest.fixture(scope="module")
def stopping_study(tmp_path_factory):
    """The digits study searched with search.stop_early: flat (its Fixed AdaCos runs first, then rounds)."""
    root = digits_study(tmp_path_factory.mktemp("stop_early"), stop_early="flat")
    run(root, "stages.search", "--loss", "arcface")
    return root


@pytest.mark.slow
def test_stop_early_searches_in_rounds_and_a_rerun_reaches_the_same_decision(stopping_study, monkeypatch):
    monkeypatch.chdir(stopping_study)
    params = load_params()
    storage = open_storage(params.search, JOURNAL)
    written = json.loads((search_dir("arcface", 0).parent / "advice.json").read_text())
    # What the advice says, replayed independently round by round on what the storage holds.
    evidence, _ = study_evidence(params, storage)
    replayed = replay(evidence, 0.02, Prior.flat("accuracy"))
    assert (written["round"], written["decision"]) == (replayed.round, replayed.decision)
    assert written["saved_trials"] == (4 - written["round"]) * 2
    # Rounds: one trial per split at a time, so no split is ever more than one trial ahead of the other.
    studies = [optuna.load_study(study_name=study_name("arcface", params.for_split(split), 0), storage=storage)
               for split in (0, 1)]
    started = sorted((trial.datetime_start, split) for split, study in enumerate(studies) for trial in study.trials)
    lead = np.cumsum([1 if split == 0 else -1 for _, split in started])
    assert set(lead) <= {0, 1} and len(started) == 2 * written["round"]
    # The Fixed AdaCos runs it compared with are the runs stage's: it trains none of them again.
    assert "fixed_adacos seed" not in run(stopping_study, "stages.runs", "--method", "fixed_adacos").stdout
    # A rerun trains nothing and reaches the same decision.
    run(stopping_study, "stages.search", "--loss", "arcface")
    assert json.loads((search_dir("arcface", 0).parent / "advice.json").read_text()) == written
    assert sum(len(study.trials) for study in (
        optuna.load_study(study_name=study.study_name, storage=storage) for study in studies)) == len(started)


def test_stop_early_refuses_a_design_it_cannot_judge():
    values = {"search": {"stop_early": "benchmark", "sampler": "tpe"}}
    with pytest.raises(ValueError, match="search.sampler: must be random"):
        StudyParams.from_dict(values)
    with pytest.raises(ValueError, match="search.n_trials: must be at least 2"):
        StudyParams.from_dict({"search": {"stop_early": "flat", "n_trials": 1}})


@pytest.mark.slow
def test_ad8b_the_storage_after_a_params_change_is_refused_naming_what_changed(tiny_study, tmp_path, monkeypatch):
    """`study advise --from storage` after params.yaml changed: the storage's studies hold trials of the old
    settings, so the advice refuses them in one line naming the study and the fix; nothing is written."""
    study = tmp_path / "study"
    shutil.copytree(tiny_study, study)
    params = study / "params.yaml"
    params.write_text(params.read_text().replace("  lr: 0.01\n", "  lr: 0.02\n", 1))
    done = run(study, "study.cli", "advise", "--from", "storage", "--prior", "none", "--json", "refused.json",
               check=False)
    assert done.returncode == 2 and done.stdout == ""
    line = done.stderr.strip().splitlines()[-1]
    assert "params.yaml changed since the study ran" in line and "arcface" in line, done.stderr
    assert not (study / "refused.json").exists()


@pytest.mark.slow
def test_the_callback_gives_the_commands_decision_on_the_same_trials(tmp_path):
    """One class split searched and its Fixed AdaCos runs trained by the stages; `study advise` reads them from the
    storage, and the callback of a user's own study holding the same trials (val as the value, test as the user
    attribute) with the same reference runs, margin, price and prior says the same, with the same interval."""
    root = digits_study(tmp_path, seeds=(0,), runs=(0, 1, 2))
    run_stages(root, [["stages.search", "--loss", "arcface"], ["stages.runs", "--method", "fixed_adacos"]])
    run(root, "study.cli", "advise", "--from", "storage", "--prior", "none", "--json", "advice.json")
    command = json.loads((root / "advice.json").read_text())
    params = load_params(str(root / "params.yaml"))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        evidence, _ = study_evidence(params, open_storage(params.search, JOURNAL))
    own = optuna.create_study(direction="maximize")
    for row in evidence.trials.itertuples():
        own.add_trial(optuna.trial.create_trial(value=row.val, user_attrs={"test": row.test}))
    callback = AdviceCallback(list(zip(evidence.reference["val"], evidence.reference["test"])),
                              budget=params.search.n_trials, objective=params.train.objective,
                              margin=command["margin"], prior=Prior.flat(params.train.objective), stop=False,
                              price_per_training=evidence.price)
    callback(own, own.trials[-1])
    said = own.user_attrs["advice"]
    assert len(evidence.trials) == params.search.n_trials and len(evidence.reference) == 3
    assert said["decision"] == command["decision"] and said["choice"] == command["choice"]
    for key in ("difference", "low", "high"):
        assert said[key] == pytest.approx(command[key], rel=1e-9, abs=1e-12)
