"""benchmarks/device_study.py pairs two devices' default studies trial by trial: checked on storages written by hand."""

import importlib.util
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device_study.py"


@pytest.fixture(scope="module")
def device_study():
    spec = importlib.util.spec_from_file_location("device_study", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_storage(path: Path, search_vals: list[float], seeds: list[int], seconds: float) -> Path:
    """A study's storage as the stages write it: 'search/arcface/split0' with (s, m) trials, and one final run per
    seed in 'final/fixed_adacos/split0' with the seed and seconds as user attributes."""
    storage = JournalStorage(JournalFileBackend(str(path)))
    distributions = {"s": optuna.distributions.FloatDistribution(1.0, 128.0, log=True),
                     "m": optuna.distributions.FloatDistribution(0.0, 1.0)}
    search = optuna.create_study(study_name="search/arcface/split0", storage=storage, direction="maximize")
    for number, val in enumerate(search_vals):
        search.add_trial(optuna.trial.create_trial(params={"s": 2.0 ** number, "m": 0.1 * number},
                                                   distributions=distributions, value=val,
                                                   user_attrs={"seconds": seconds}))
    final = optuna.create_study(study_name="final/fixed_adacos/split0", storage=storage, direction="maximize")
    for seed in seeds:
        final.add_trial(optuna.trial.create_trial(value=0.5 + seed / 100, user_attrs={"seed": seed,
                                                                                       "seconds": seconds}))
    return path


def test_pairs_what_both_finished_and_names_what_one_lacks(device_study, tmp_path, capsys):
    other = write_storage(tmp_path / "cuda.log", [0.30, 0.41, 0.35], seeds=[0, 1], seconds=3.0)
    here = write_storage(tmp_path / "cpu.log", [0.31, 0.40, 0.36], seeds=[0, 1, 2], seconds=12.0)
    pairs = device_study.compare(other, here)
    assert "1 finished only here" in capsys.readouterr().out and "runs/fixed_adacos/0/2" not in pairs.to_string()
    assert len(pairs) == 5  # 3 search trials and seeds 0 and 1
    device_study.summarise(pairs, "cuda", "cpu")
    printed = capsys.readouterr().out
    assert "the searches drew the same (s, m)" in printed
    assert "split 0: best trial 1 on cuda, 1 on cpu" in printed
    assert "val apart by at most 0.0100" in printed  # |0.30-0.31|, |0.41-0.40|, |0.35-0.36|; the runs agree
    assert "a training took 3.0 s (median) on cuda, 12.0 s on cpu" in printed


def test_a_different_best_trial_is_reported(device_study, tmp_path, capsys):
    other = write_storage(tmp_path / "cuda.log", [0.42, 0.41], seeds=[0], seconds=3.0)
    here = write_storage(tmp_path / "cpu.log", [0.40, 0.41], seeds=[0], seconds=12.0)
    device_study.summarise(device_study.compare(other, here))
    assert "split 0: best trial 0 on other, 1 on here" in capsys.readouterr().out


def test_a_study_kept_aside_is_never_paired(device_study, tmp_path):
    """Trials kept aside under 'name@digest' ran with other settings: they are left out, not read as a split."""
    other = write_storage(tmp_path / "cuda.log", [0.30], seeds=[0], seconds=3.0)
    storage = JournalStorage(JournalFileBackend(str(other)))
    aside = optuna.create_study(study_name="search/arcface/split0@0123456789", storage=storage, direction="maximize")
    aside.add_trial(optuna.trial.create_trial(value=0.9, user_attrs={"seconds": 1.0}))
    rows = device_study.finished_trials(other)
    assert len(rows) == 2 and 0.9 not in rows["val"].tolist()  # the search trial and the final run only


def test_a_missing_journal_names_the_fix(device_study, tmp_path):
    with pytest.raises(SystemExit, match="journal.log of a study's results/trials"):
        device_study.finished_trials(tmp_path / "absent.log")
