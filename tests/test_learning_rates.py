"""train.learning_rates: the learning rate chosen by val for every method alike. The rule against hand-worked cases;
on a real (tiny) study, the stage's choice against an independent reading of its own table, a rate that cannot
learn never chosen, and the searched loss's rate carried from its val-selected trial to its final runs."""

import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from study.config import StudyParams
from study.learning_rates import choose_rate, split_searched
from study.presets import write_params
from study.results import prepared_dir, runs_dir, search_dir
from study.sources import load_dataset
from study.splits import save_splits, split_dataset
from study.validation import study_cost
from tests.conftest import copy_study

SPLIT = (0.6, 0.2, 0.2)
RATES = [1e-7, 0.01]  # the first moves no weight in 24 steps: its runs stay at the untrained network's score


def test_the_best_mean_val_is_chosen():
    assert choose_rate({0.001: [0.5, 0.7], 0.003: [0.6, 0.7], 0.009: [0.2, 0.9]}, 0.003) == 0.003


def test_a_rate_with_a_diverged_run_is_never_chosen_however_good_its_other_runs():
    assert choose_rate({0.003: [0.5, 0.5], 0.009: [0.9, math.nan]}, 0.003) == 0.003
    assert choose_rate({0.003: [math.nan], 0.009: [math.nan]}, 0.003) is None


def test_a_tie_goes_to_the_rate_nearest_the_centre_on_a_log_scale():
    assert choose_rate({0.02: [0.5], 0.001: [0.5]}, 0.003) == 0.001  # ÷3 is nearer than ×6.7
    assert choose_rate({0.001: [0.5], 0.006: [0.5]}, 0.003) == 0.006  # ×2 is nearer than ÷3


def test_a_searched_rate_is_a_training_setting_not_the_losss():
    assert split_searched({"s": 30.0, "m": 0.5, "lr": 0.004}) == ({"s": 30.0, "m": 0.5}, 0.004)
    assert split_searched({"s": 30.0}) == ({"s": 30.0}, None)


def test_the_cost_counts_every_rate_of_the_hyperparameter_free_methods():
    params = StudyParams.from_dict({"train": {"learning_rates": [0.001, 0.003, 0.009]},
                                   "runs": {"seeds": [0, 1], "methods": ["fixed_adacos", "softmax"]}})
    cost = study_cost(params, None)
    assert cost.finals == 2 * (2 * 3 + 1)  # two methods at three rates, tuned ArcFace at its searched one


def run(root, *arguments):
    done = subprocess.run([sys.executable, "-m", *arguments], cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def study_at_two_rates(tmp_path_factory):
    root = tmp_path_factory.mktemp("rates")
    copy_study(root)
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed", "fractions": list(SPLIT), "seeds": None},
        "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": 3, "batch_size": 128, "eval_every": 4, "eval_points": None, "device": "cpu",
                  "lr": 0.01, "learning_rates": RATES, "objective": "accuracy", "threads": 1, "parallel": 1},
        "search": {"n_trials": 4}, "runs": {"seeds": [0, 1], "methods": ["fixed_adacos"]}})
    write_params(params, root / "params.yaml", "test")
    sets = split_dataset(load_dataset("digits"), "closed", SPLIT, seed=0)
    save_splits(sets, root / prepared_dir(0), source="digits", protocol="closed", seed=0, fractions=SPLIT)
    run(root, "stages.search", "--loss", "arcface")
    output = run(root, "stages.runs", "--method", "fixed_adacos")
    run(root, "stages.runs", "--tuned", "arcface")
    return root, output


@pytest.mark.slow
def test_val_chooses_each_methods_rate_and_its_runs_are_the_ones_kept(study_at_two_rates):
    root, output = study_at_two_rates
    tried = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "learning_rates.csv")
    assert sorted(zip(tried["lr"], tried["seed"])) == [(RATES[0], 0), (RATES[0], 1), (RATES[1], 0), (RATES[1], 1)]
    means = tried.groupby("lr")["val_score"].mean()
    assert means[RATES[1]] > means[RATES[0]] + 0.2  # the rate that learns is far ahead: the choice is not a coin
    chosen = means.idxmax()
    assert chosen == RATES[1] and set(tried.loc[tried["chosen"], "lr"]) == {chosen}
    assert f"val chose learning rate {chosen:g}" in output
    kept = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert set(kept["lr"]) == {chosen}
    pd.testing.assert_series_equal(kept.sort_values("seed")["val_score"].reset_index(drop=True),
                                   tried[tried["chosen"]].sort_values("seed")["val_score"].reset_index(drop=True))
    assert all((root / path).is_file() for path in kept["checkpoint"])


@pytest.mark.slow
def test_the_searched_rate_comes_from_the_val_selected_trial_to_the_tuned_runs(study_at_two_rates):
    root, _ = study_at_two_rates
    trials = pd.read_csv(root / search_dir("arcface", 0) / "trials.csv")
    assert trials["lr"].between(min(RATES), max(RATES)).all() and trials["lr"].nunique() == len(trials)
    best = json.loads((root / search_dir("arcface", 0) / "best.json").read_text())
    assert best["hyperparameters"]["lr"] == trials.loc[trials["value"].idxmax(), "lr"]
    tuned = pd.read_csv(root / runs_dir("arcface_tuned", 0) / "runs.csv")
    assert set(tuned["lr"]) == {best["hyperparameters"]["lr"]}
    assert not (root / runs_dir("arcface_tuned", 0) / "learning_rates.csv").exists()


@pytest.mark.parametrize("rates, said", [
    ([1e6, 1e9], "train.learning_rates: 1e+09 is beyond 1"),  # issue 55's LR7: every run "completed" at chance
    ([0.001, 1.5], "train.learning_rates: 1.5 is beyond 1"),
    # LR11: one printed name (lr0.001) for two rates, a shared study and a KeyError traceback
    ([0.001, 0.0010000001], "train.learning_rates: 0.001, 0.0010000001 both print as 0.001"),
    ([0.003, 0.009, 0.00900000004], "train.learning_rates: 0.009, 0.00900000004 both print as 0.009"),
    ([0.001, 0.003, 0.001], "train.learning_rates: 0.001 is listed 2 times; list each rate once"),
], ids=["1e6 and 1e9", "1.5", "0.001 and 0.0010000001", "alike among three", "listed twice"])
def test_a_rate_grid_beyond_1_or_with_rates_that_print_alike_is_refused_in_one_line(rates, said):
    with pytest.raises(ValueError) as error:
        StudyParams.from_dict({"train": {"learning_rates": rates}})
    message = str(error.value)
    assert message.startswith(said) and len(message.splitlines()) == 1, message
    assert "e.g. [0.001, 0.003, 0.009]" in message, message


def test_a_rate_grid_up_to_1_and_distinct_as_printed_is_taken():
    assert StudyParams.from_dict({"train": {"learning_rates": [0.0010001, 0.001, 1]}}).train.learning_rates == (
        0.0010001, 0.001, 1.0)


def test_stopping_early_refuses_a_study_that_chooses_its_rates():
    with pytest.raises(ValueError, match="train.learning_rates: must be null"):
        StudyParams.from_dict({"train": {"learning_rates": [0.001, 0.003]}, "search": {"stop_early": "flat"}})


def test_the_reports_words_name_each_methods_rate_on_each_split():
    from study.learning_rates import chosen_words

    runs = pd.DataFrame({"method": ["fixed_adacos"] * 4 + ["arcface_tuned"] * 2, "split": [0, 0, 1, 2, 0, 1],
                         "lr": [0.009, 0.009, 0.003, 0.009, 0.0042, 0.0051]})
    words = chosen_words(runs, [0.001, 0.003, 0.009])
    assert "from 0.001, 0.003, 0.009" in words
    assert "Fixed AdaCos: 0.003 (split 1), 0.009 (splits 0, 2)" in words
    assert "ArcFace tuned: 0.0042 (split 0), 0.0051 (split 1)" in words
