"""The search layer: resuming, what counts toward the budget, failed trials, study identity, samplers."""

import math

import optuna
import pytest

import study.search as search
from study.config import StudyParams
from study.sources import load_dataset
from study.splits import split_dataset
from study.storage import journal_storage, open_storage
from study.workers import this_process
import torch

from study.training import RunResult, evaluate, train

optuna.logging.set_verbosity(optuna.logging.WARNING)


def params_with(**sections) -> StudyParams:
    base = {"data": {"dataset": "digits", "protocol": "closed", "seeds": None},  # one class split: data.seed
            "model": {"name": "mlp", "embedding_size": 16},
            "train": {"epochs": 1, "batch_size": 128, "eval_every": 5, "device": "cpu", "lr": 0.01,
                      "objective": "accuracy"},
            "search": {"n_trials": 3}}
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return StudyParams.from_dict(base)


def journal(folder):
    """A study storage of its own for one test: a journal file in `folder`."""
    return journal_storage(folder / "journal.log")


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)


@pytest.mark.slow
def test_a_resumed_search_keeps_its_trials_and_runs_only_the_missing_ones(digits, tmp_path):
    params = params_with()
    first = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(first, "arcface", params, digits)
    first_points = [t.params for t in first.trials]
    assert len(first_points) == 3

    bigger = params_with(search={"n_trials": 5})
    assert search.study_name("arcface", bigger) == first.study_name
    resumed = search.open_study("arcface", bigger, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(resumed, "arcface", bigger, digits)
    assert [t.params for t in resumed.trials][:3] == first_points
    assert search.count_trials(resumed, search.FINISHED) == 5
    # The resumed sampler does not draw the first points again.
    assert not any(t.params in first_points for t in resumed.trials[3:])

    table = search.trials_table("arcface", [resumed], "accuracy")
    assert list(table["state"]) == ["COMPLETE"] * 5
    assert (table["seconds"] > 0).all() and (table["iterations"] == 8).all() and set(table["device"]) == {"cpu"}
    assert (table["cpu_seconds"] > 0).all()  # the CPU time of the process each trial trained in
    assert table["s"].between(1, 128).all() and table["m"].between(0, 1).all()
    history = search.history_table("arcface", [resumed])
    assert sorted(history["trial"].unique()) == [0, 1, 2, 3, 4]
    best = search.best_trial("arcface", resumed, "accuracy")
    assert best["value"] == table["value"].max()


@pytest.mark.slow
def test_each_trial_trains_at_its_own_seed_and_records_its_test_score(digits, tmp_path):
    params = params_with(runs={"seeds": [0, 1, 2]})
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    table = search.trials_table("arcface", [study], "accuracy")
    seeds = table["seed"].astype(int).tolist()
    assert len(set(seeds)) == 3 and not set(seeds) & set(params.runs.seeds)
    assert seeds == [search.trial_seed(0, 0, number, params.runs.seeds) for number in range(3)]
    # The test score a trial records is what its (s, m) at its seed scores on test when trained again here,
    # through the plain training and evaluation functions.
    row = table.iloc[1]
    again = train(digits, loss_name="arcface", hyperparameters={"s": row["s"], "m": row["m"]},
                  model_config=params.model, config=params.train.replace(seed=int(row["seed"])))
    test = evaluate(again.model, again.loss, digits, "test", params.train, torch.device("cpu"), full=True)
    assert row["test_value"] == pytest.approx(test["accuracy"], abs=1e-6)
    assert row["test_map_at_r"] == pytest.approx(test["map_at_r"], abs=1e-6)
    assert row["value"] == pytest.approx(again.final["accuracy"], abs=1e-6)


def test_a_trial_seed_never_collides_with_a_final_seed():
    taken = search.trial_seed(0, 0, 5)
    assert search.trial_seed(0, 0, 5, final_seeds=(taken,)) != taken
    assert len({search.trial_seed(seed, repeat, number) for seed in range(3) for repeat in range(3)
                for number in range(50)}) == 450


def test_repeats_are_independent_studies_with_their_own_draws(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed"] * 6)
    params = params_with(search={"repeats": 2, "sampler": "random"})
    studies = [search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0, repeat=repeat)
               for repeat in range(2)]
    for repeat, study in enumerate(studies):
        search.run_search(study, "arcface", params, digits, repeat=repeat)
    assert studies[0].study_name != studies[1].study_name
    table = search.trials_table("arcface", studies, "accuracy")
    assert table["repeat"].tolist() == [0, 0, 0, 1, 1, 1]
    first, second = (table[table["repeat"] == r][["s", "m"]].values.tolist() for r in (0, 1))
    assert first != second  # different sampler seeds
    assert len(set(table["seed"])) == 6  # and different training seeds


def test_changing_what_a_trial_means_changes_the_search_s_meaning_and_not_its_name():
    base = params_with()
    meaning = search.search_meaning("arcface", base)
    assert search.search_meaning("arcface", params_with(train={"lr": 0.02})) != meaning
    assert search.search_meaning("arcface", params_with(search={"s_range": [2.0, 64.0]})) != meaning
    assert search.search_meaning("cosface", base) != meaning
    assert search.search_meaning("arcface", params_with(search={"n_trials": 50, "storage": "sqlite:///x.db"})) == meaning
    # Its own margin range gives a trial its meaning; another loss's range does not.
    assert search.search_meaning("arcface", params_with(search={"m_range": {"arcface": [0.0, 0.5]}})) != meaning
    assert search.search_meaning("arcface", params_with(
        search={"m_range": {"arcface": [0.0, 1.0], "cosface": [0.1, 0.3]}})) == meaning
    # The name says which search it is, the same whatever the settings: what they are is the study's MEANING.
    assert search.study_name("arcface", params_with(train={"lr": 0.02})) == search.study_name("arcface", base) == \
        "search/arcface/split0"


def use_fake_training(monkeypatch, statuses):
    """Training and test scoring replaced by stand-ins, so the test controls each trial's status."""
    monkeypatch.setattr(search, "train", fake_train(statuses))
    monkeypatch.setattr(search, "evaluate", lambda *args, **kwargs: {"accuracy": 0.5})


def fake_train(statuses):
    """A stand-in for training that returns the given statuses in turn, so the test controls failures."""
    calls = iter(statuses)

    def train(sets, *, loss_name, hyperparameters, callback=None, **_):
        status = next(calls)
        history = [{"iteration": 0, "accuracy": 0.1}, {"iteration": 10, "accuracy": hyperparameters["m"]}]
        if callback:
            for row in history:
                callback(row)
        reason = "non-finite loss (nan) at iteration 7" if status == "diverged" else ""
        return RunResult(status=status, reason=reason, history=history, iterations=10, seconds=0.5, device="cpu")

    return train


def test_diverged_trials_are_failed_with_their_reason_and_do_not_count(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed", "diverged", "completed", "diverged", "completed"])
    params = params_with()
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    table = search.trials_table("arcface", [study], "accuracy")
    assert list(table["state"]) == ["COMPLETE", "FAIL", "COMPLETE", "FAIL", "COMPLETE"]
    failed = table[table["state"] == "FAIL"]
    assert (failed["status"] == "diverged").all() and failed["reason"].str.contains("iteration 7").all()
    assert failed["value"].isna().all()


def test_too_many_failures_stop_with_a_clear_error_and_keep_the_trials(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["diverged"] * 10)
    params = params_with(search={"max_failed_trials": 2})
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    with pytest.raises(RuntimeError, match="max_failed_trials"):
        search.run_search(study, "arcface", params, digits)
    assert search.count_trials(study, (optuna.trial.TrialState.FAIL,)) == 3
    with pytest.raises(RuntimeError, match="no trial .* completed"):
        search.best_trial("arcface", study, "accuracy")


def test_pruned_trials_count_toward_the_budget(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["stopped", "completed", "stopped"])
    params = params_with()
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    assert [t.state.name for t in study.trials] == ["PRUNED", "COMPLETE", "PRUNED"]


def test_grid_sampler_covers_its_grid_and_stops(digits, tmp_path, monkeypatch):
    use_fake_training(monkeypatch, ["completed"] * 10)
    params = params_with(search={"sampler": "grid", "grid_points": 2, "n_trials": 10})
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    points = sorted((round(t.params["s"], 6), t.params["m"]) for t in study.trials)
    assert points == [(1.0, 0.0), (1.0, 1.0), (128.0, 0.0), (128.0, 1.0)]


@pytest.mark.parametrize("sampler", ["random", "qmc", "tpe"])
def test_samplers_stay_inside_the_search_space(digits, tmp_path, monkeypatch, sampler):
    use_fake_training(monkeypatch, ["completed"] * 6)
    params = params_with(search={"sampler": sampler, "n_trials": 6, "s_range": [2.0, 8.0],
                                 "m_range": {"arcface": [0.1, 0.2]}})
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    assert all(2.0 <= t.params["s"] <= 8.0 and 0.1 <= t.params["m"] <= 0.2 for t in study.trials)
    assert all(not math.isnan(t.value) for t in study.trials)


# --- workers joining a study from other processes ------------------------------------------------


def study_folder(root, digits, **search_values):
    """A study's folder as a worker on another machine sees it: params.yaml and the prepared split."""
    from study.presets import write_params
    from study.results import prepared_dir
    from study.splits import save_splits

    params = params_with(search={"n_trials": 4, **search_values})
    write_params(params, root / "params.yaml", "test")
    save_splits(digits, root / prepared_dir(0), source="digits", protocol="closed", seed=0,
                fractions=(0.6, 0.2, 0.2))
    return params


def start_worker(root, trials=None):
    import subprocess
    import sys

    command = [sys.executable, "-m", "study.cli", "worker", "--loss", "arcface", "--params", str(root / "params.yaml")]
    return subprocess.Popen(command + (["--trials", str(trials)] if trials else []), cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished(process):
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    return output


@pytest.mark.slow
def test_two_workers_share_the_default_journal_and_meet_the_budget(digits, tmp_path):
    params = study_folder(tmp_path, digits, n_trials=6)
    # Each worker runs at most half the budget, so both must contribute however fast the other starts.
    workers = [start_worker(tmp_path, trials=3), start_worker(tmp_path, trials=3)]
    for worker in workers:
        assert "finished trials in the study" in finished(worker)
    study = search.open_study("arcface", params, journal(tmp_path / "results" / "trials"), len(digits["train"]),
                              seed=None)
    table = search.trials_table("arcface", [study], "accuracy")
    assert (table["state"] == "COMPLETE").sum() == 6 and set(table["state"]) == {"COMPLETE"}
    assert table["worker"].nunique() == 2
    assert {worker.pid for worker in workers} == {int(name.rsplit(":", 1)[1]) for name in table["worker"]}


@pytest.mark.slow
def test_a_worker_joins_a_study_in_a_database_and_finishes_its_budget(digits, tmp_path):
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    params = study_folder(tmp_path, digits, storage=url)
    first = search.open_study("arcface", params, open_storage(params.search, tmp_path / "unused" / "journal.log"),
                              len(digits["train"]), seed=0)
    search.run_search(first, "arcface", params, digits, max_trials=1)
    assert not (tmp_path / "unused").exists()  # a database URL is used as given, no journal file made
    worker = start_worker(tmp_path)
    assert "4 finished trials in the study" in finished(worker)
    shared = optuna.load_study(study_name=search.study_name("arcface", params), storage=url)
    table = search.trials_table("arcface", [shared], "accuracy")
    assert list(table["state"]) == ["COMPLETE"] * 4
    assert table["worker"].tolist() == [this_process()["worker"]] + [table["worker"].iloc[1]] * 3
    assert table["worker"].iloc[1].endswith(f":{worker.pid}")


# --- Optuna's conventions: a named objective, histories out of `optuna trials`, one line per study ----------------


@pytest.mark.parametrize("kind", ["journal", "database"])
def test_histories_stay_out_of_optuna_trials_and_the_objective_is_named(digits, tmp_path, monkeypatch, kind):
    use_fake_training(monkeypatch, ["completed"] * 3)
    params = params_with()
    storage = journal(tmp_path) if kind == "journal" else open_storage(
        params_with(search={"storage": f"sqlite:///{tmp_path / 'studies.db'}"}).search, tmp_path / "unused")
    study = search.open_study("arcface", params, storage, len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    assert study.metric_names == ["accuracy"]
    listed = study.trials_dataframe(attrs=("number", "user_attrs"))  # what `optuna trials` lists
    assert not [column for column in listed.columns if "history" in column]
    if kind == "journal":  # a file per trial beside the journal
        assert sorted(path.name for path in (tmp_path / "histories" / study.study_name).iterdir()) == \
            ["trial0.json", "trial1.json", "trial2.json"]
    history = search.history_table("arcface", [study])
    assert history.groupby("trial")["iteration"].apply(list).tolist() == [[0, 10]] * 3


def test_a_study_opened_again_says_nothing_of_optuna_s_own(digits, tmp_path, caplog):
    optuna.logging.set_verbosity(optuna.logging.INFO)
    optuna.logging.enable_propagation()  # so that pytest sees Optuna's lines
    try:
        with caplog.at_level("INFO"):
            for _ in range(2):  # created, then opened again (a resumed stage, a packed worker)
                search.open_study("arcface", params_with(), journal(tmp_path), len(digits["train"]), seed=0)
    finally:
        optuna.logging.disable_propagation()
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert not [line for line in caplog.messages if "study" in line.lower()], caplog.messages


def test_each_class_split_searches_its_own_points_at_its_own_trial_seeds():
    # Searches that drew the same (s, m) points on every split would leave the search-to-search variance out of
    # the split-level interval; split 0 keeps search.seed, so a one-split study draws what it always drew.
    params = StudyParams.from_dict({"data": {"dataset": "digits", "protocol": "closed", "seeds": [0, 1, 2]}})
    seeds = [search.split_search_seed(params.for_split(split)) for split in params.data.split_seeds()]
    assert seeds[0] == params.search.seed and len(set(seeds)) == 3
    points = [search.make_sampler("arcface", params, search.sampler_seed(seed, 0, 0)) for seed in seeds]
    drawn = [optuna.create_study(sampler=sampler).ask().suggest_float("s", 1.0, 128.0, log=True) for sampler in points]
    assert len(set(drawn)) == 3
    assert len({search.trial_seed(seed, 0, 0) for seed in seeds}) == 3


def test_a_retry_keeps_the_slot_of_the_trial_it_retries_and_a_new_trial_takes_the_next_free_one():
    import warnings

    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from study.search import trial_slots
    from optuna.trial import TrialState

    from study.workers import INTERRUPTED, NOT_RUN

    def trial(state, **attrs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            system = {"failed_trial": attrs.pop("retries"), "retry_history": [attrs["retried"]]} \
                if "retries" in attrs else {}
            attrs.pop("retried", None)
            return create_trial(state=state, params={"s": 10.0}, distributions={"s": FloatDistribution(1, 100)},
                                value=0.5 if state == TrialState.COMPLETE else None, user_attrs=attrs,
                                system_attrs=system)

    study = optuna.create_study()
    for frozen in (trial(TrialState.COMPLETE, slot=0, seed=7),                   # 0: slot 0
                   trial(TrialState.FAIL, slot=1, seed=8, status=INTERRUPTED),   # 1: Ctrl-C in slot 1
                   trial(TrialState.FAIL, status=INTERRUPTED),                   # 2: killed before naming its slot
                   trial(TrialState.COMPLETE, slot=1, retries=1, retried=1),     # 3: retry of 1
                   trial(TrialState.COMPLETE, retries=2, retried=2),             # 4: retry of 2, before its slot
                   trial(TrialState.FAIL, status=NOT_RUN),                       # 5: found its place taken
                   trial(TrialState.COMPLETE)):                                  # 6: a new one
        study.add_trial(frozen)
    # Uninterrupted, the search would have filled slots 0, 1, 2, 3: so does this one, whatever Optuna's numbers.
    assert trial_slots(study.get_trials()) == {0: 0, 1: 1, 2: 2, 3: 1, 4: 2, 5: None, 6: 3}


@pytest.mark.slow
def test_halving_judges_each_trial_at_its_first_evaluation_past_the_rung_and_keeps_a_third(digits, tmp_path):
    params = params_with(train={"epochs": 4, "eval_every": 4, "eval_points": None, "choose_at": 0.3, "threads": 1,
                                "parallel": 1},
                         search={"n_trials": 9, "pruner": "halving", "s_range": [1.0, 64.0]})
    rung = search.halving_rung(len(digits["train"]), params.train)
    assert rung == round(0.3 * 32)  # 8 steps an epoch, 4 epochs
    study = search.open_study("arcface", params, journal(tmp_path), len(digits["train"]), seed=0)
    search.run_search(study, "arcface", params, digits)
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    assert len(trials) == 9 and {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}

    def at_rung(trial, step):
        first = min(s for s in trial.intermediate_values if s >= step)
        return first, trial.intermediate_values[first]

    # ASHA's rule read independently from the recorded values, trial by trial in the order they ran: at each rung a
    # trial goes on when its value is among the best third of the values recorded there so far (its own included),
    # the best alone while fewer than three are there.
    for rung_step in (rung, 3 * rung):
        seen = []
        for trial in trials:
            if max(trial.intermediate_values) < rung_step:
                continue  # pruned at an earlier rung
            step, value = at_rung(trial, rung_step)
            seen.append(value)
            keep = sorted(seen, reverse=True)[max(len(seen) // 3 - 1, 0)]
            goes_on = max(trial.intermediate_values) > step
            assert goes_on == (value >= keep) or trial.state.name == "COMPLETE" and step == max(
                trial.intermediate_values), (trial.number, rung_step, value, seen)
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert pruned and all(t.user_attrs["iterations"] < 32 for t in pruned)
    assert any(t.state.name == "COMPLETE" and t.user_attrs["iterations"] == 32 for t in trials)
