"""train.learning_rates: the learning rate chosen by val for every method alike. The rule against hand-worked cases;
on a real (tiny) study, the stage's choice against an independent reading of its own table, a rate that cannot
learn never chosen, and the searched loss's rate carried from its val-selected trial to its final runs."""

import json
import math

import optuna
import pandas as pd
import pytest

from study.benchmark.cells import cell_device_seconds, cell_trainings
from study.config import StudyParams
from study.learning_rates import choose_rate, split_searched
from study.presets import write_params
from study.results import JOURNAL, prepared_dir, runs_dir, search_dir
from study.sources import load_dataset
from study.splits import load_splits, save_splits, split_dataset
from study.storage import open_storage
from study.training import choice_iteration, planned_iterations
from study.validation import study_cost
from tests.conftest import copy_study, run_stages

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
    params = StudyParams.from_dict({"train": {"learning_rates": [0.001, 0.003, 0.009], "choose_at": None},
                                   "runs": {"seeds": [0, 1], "methods": ["fixed_adacos", "softmax"]}})
    cost = study_cost(params, None)
    assert cost.finals == 2 * (2 * 3 + 1)  # two methods at three rates, tuned ArcFace at its searched one


def test_the_cost_of_choosing_early_counts_every_rate_until_the_choice_and_the_chosen_one_to_the_end():
    params = StudyParams.from_dict({"train": {"learning_rates": [0.001, 0.003, 0.009], "epochs": 10,
                                              "batch_size": 50, "choose_at": 0.3},
                                   "data": {"seeds": [0]}, "search": {"n_trials": 5},
                                   "runs": {"seeds": [0, 1], "methods": ["fixed_adacos", "softmax"]}})
    cost = study_cost(params, [1000])  # 20 steps an epoch, 200 a run; val chooses at step 60
    assert (cost.trials, cost.finals, cost.early) == (5, 2 * (2 * 3 + 2 + 1), 2 * 2 * 3)
    # 5 trials and 2 seeds × (2 chosen rates + tuned ArcFace) whole; 2 seeds × 2 methods × 3 rates until step 60
    assert cost.iterations == (5 + 2 * 3) * 200 + 12 * 60
    assert "18 final runs, 12 of them until val chooses the learning rate" in str(cost)
    whole = study_cost(params.replace(train=params.train.replace(choose_at=None)), [1000])
    assert whole.iterations == (5 + 2 * 7) * 200 and whole.early == 0


def study_at_two_rates(root, choose_at, tuned=True):
    """A tiny study at RATES trained in `root` (val choosing at `choose_at`); its params and the stages' output."""
    copy_study(root)
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed", "fractions": list(SPLIT), "seeds": None},
        "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": 3, "batch_size": 128, "eval_every": 4, "eval_points": None, "device": "cpu",
                  "lr": 0.01, "learning_rates": RATES, "choose_at": choose_at, "objective": "accuracy",
                  "threads": 1, "parallel": 1},
        "search": {"n_trials": 4}, "runs": {"seeds": [0, 1], "methods": ["fixed_adacos"], "plateau_cap": 1}})
    write_params(params, root / "params.yaml", "test")
    sets = split_dataset(load_dataset("digits"), "closed", SPLIT, seed=0)
    save_splits(sets, root / prepared_dir(0), source="digits", protocol="closed", seed=0, fractions=SPLIT)
    commands = [["stages.runs", "--method", "fixed_adacos"]]
    if tuned:
        commands = [["stages.search", "--loss", "arcface"], *commands, ["stages.runs", "--tuned", "arcface"]]
    return params, run_stages(root, commands).stdout


@pytest.fixture(scope="module")
def trained_to_the_end(tmp_path_factory):
    root = tmp_path_factory.mktemp("rates")
    return root, study_at_two_rates(root, choose_at=None)[1]


@pytest.fixture(scope="module")
def chosen_early(tmp_path_factory):
    root = tmp_path_factory.mktemp("early")
    return (root, *study_at_two_rates(root, choose_at=0.3, tuned=False))


@pytest.mark.slow
def test_val_chooses_each_methods_rate_and_its_runs_are_the_ones_kept(trained_to_the_end):
    root, output = trained_to_the_end
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
def test_val_chooses_early_and_only_the_chosen_rate_trains_on_its_runs_first_part_the_very_runs_val_chose_by(
        chosen_early):
    root, params, output = chosen_early
    tried = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "learning_rates.csv")
    total = planned_iterations(len(load_splits(root / prepared_dir(0))["train"]), params.train)
    choice = choice_iteration(total, params.train)
    assert choice == round(0.3 * total) and set(tried["iterations"]) == {choice}
    assert sorted(zip(tried["lr"], tried["seed"])) == [(RATES[0], 0), (RATES[0], 1), (RATES[1], 0), (RATES[1], 1)]
    chosen = tried.groupby("lr")["val_score"].mean().idxmax()
    assert chosen == RATES[1] and set(tried.loc[tried["chosen"], "lr"]) == {chosen}
    assert f"val chose learning rate {chosen:g} of 1e-07, 0.01 at iteration {choice}, which alone trains on" in output
    kept = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert set(kept["lr"]) == {chosen} and set(kept["iterations"]) == {total}
    assert all((root / path).is_file() for path in kept["checkpoint"])
    # The kept runs' first part is the runs val chose by: the best val up to the choice, read from their curves.
    history = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "history.csv")
    before = history[history["iteration"] <= choice].groupby("seed")["accuracy"].max()
    early = tried[tried["chosen"]].set_index("seed")["val_score"]
    pd.testing.assert_series_equal(before.sort_index(), early.sort_index(), check_names=False)
    # The rate val did not choose never trained past the choice: it has no full-length study.
    names = {summary.study_name for summary in optuna.get_all_study_summaries(open_storage(params.search,
                                                                                           root / JOURNAL))}
    assert {f"final/fixed_adacos/split0/lr{rate:g}/early" for rate in RATES} <= names
    assert f"final/fixed_adacos/split0/lr{chosen:g}" in names and f"final/fixed_adacos/split0/lr{RATES[0]:g}" not in names


@pytest.mark.slow
def test_the_searched_rate_comes_from_the_val_selected_trial_to_the_tuned_runs(trained_to_the_end):
    root, _ = trained_to_the_end
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


def test_a_benchmark_cell_that_chose_early_counts_its_rates_runs_as_that_share_of_a_training():
    # 2 untuned runs of Fixed AdaCos and 2 of tuned ArcFace, 3 rates, 1,000 iterations a run, 2 search trials.
    runs = pd.DataFrame({"method": ["fixed_adacos"] * 2 + ["arcface_tuned"] * 2})
    landscape = pd.DataFrame({"iterations": [1000, 400]})  # the second trial pruned at 400
    final = pd.DataFrame({"method": ["fixed_adacos", "arcface_tuned"], "run_seconds": [10.0, 12.0]})
    search = pd.DataFrame({"seconds": [11.0, 5.0]})
    assert cell_trainings(landscape, runs, 1000, rates=3) == {"trainings": 2 + 2 + 6,
                                                              "iterations_trained": 1400 + 8 * 1000}
    assert cell_trainings(landscape, runs, 1000, rates=3, choose_at=0.3) == pytest.approx(
        {"trainings": 2 + 2 + 8, "iterations_trained": 1400 + 2000 + 2 * 1.9 * 1000})
    early = cell_device_seconds(search, final, runs, rates=3, choose_at=0.3)
    assert early["finals"] == pytest.approx({"fixed_adacos": 2 * 1.9 * 10.0, "arcface_tuned": 24.0})
    assert early["total"] == pytest.approx(16.0 + 38.0 + 24.0)
    assert cell_device_seconds(search, final, runs, rates=3)["finals"]["fixed_adacos"] == 60.0
