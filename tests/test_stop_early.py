"""search.stop_early's inputs checked before anything trains (issue 55's SE7): with `benchmark`, the search stage
trained the Fixed AdaCos runs for 20 minutes, then read a prior on another objective and ended in a traceback whose
fix was a `study advise` flag."""

import shutil
from pathlib import Path

import pytest

from study.config import ConfigError, StudyParams
from study.stop_early import BENCHMARK_CELLS, stop_early_problems
from study.validation import validate_study

REPO = Path(__file__).resolve().parents[1]
STOPPING = {"search": {"stop_early": "benchmark", "sampler": "random", "repeats": 1, "n_trials": 4}}


def stopping_study(objective: str, **data) -> StudyParams:
    return StudyParams.from_dict({**STOPPING, "train": {"objective": objective},
                                  "data": {"dataset": "digits", **data}})


def with_the_benchmark(root: Path) -> Path:
    """`root` holding the committed benchmark's cells table where the search stage reads its prior (map_at_r)."""
    (root / BENCHMARK_CELLS).parent.mkdir(parents=True)
    shutil.copy(REPO / BENCHMARK_CELLS, root / BENCHMARK_CELLS)
    return root


def test_a_benchmark_prior_on_another_objective_is_refused_before_training(tmp_path):
    study = stopping_study("accuracy", protocol="closed", fractions=[0.6, 0.2, 0.2])
    assert stop_early_problems(study, with_the_benchmark(tmp_path)) == [
        f"search.stop_early: benchmark reads its prior from {tmp_path / BENCHMARK_CELLS}, whose cells score "
        "test_map_at_r, not test_accuracy (train.objective: accuracy); set search.stop_early: flat, which needs no "
        "benchmark, or train.objective to one the benchmark scores (map_at_r)"]
    assert stop_early_problems(stopping_study("map_at_r"), tmp_path) == []  # the objective the benchmark pools
    flat = study.replace(search=study.search.replace(stop_early="flat"))
    assert stop_early_problems(flat, tmp_path / "elsewhere") == []  # a flat prior reads no benchmark


def test_a_missing_or_cut_benchmark_table_is_named_with_its_fix(tmp_path):
    study = stopping_study("map_at_r")
    [missing] = stop_early_problems(study, tmp_path)
    assert missing == (f"search.stop_early: benchmark reads its prior from {tmp_path / BENCHMARK_CELLS}, which is not "
                       "here; `study benchmark --report-only` writes it, or set search.stop_early: flat, which needs "
                       "no benchmark")
    with_the_benchmark(tmp_path)
    (tmp_path / BENCHMARK_CELLS).write_text("configuration,tuner\nx,random\n")  # not the cells' table
    [cut] = stop_early_problems(study, tmp_path)
    assert cut.startswith(f"search.stop_early: benchmark reads its prior from {tmp_path / BENCHMARK_CELLS}, which is "
                          "not the benchmark's table of cells (KeyError: 'method'); `git checkout -- ") and "\n" not in cut


def test_the_validate_stage_says_it_in_one_line(tmp_path, monkeypatch):
    import study.validation

    monkeypatch.setattr(study.validation, "study_problems", lambda params, journal: ([], None))  # its data: seconds
    (with_the_benchmark(tmp_path) / "params.yaml").write_text(
        "data: {dataset: digits, protocol: closed, fractions: [0.6, 0.2, 0.2]}\n"
        "model: {name: mlp, embedding_size: 16}\n"
        "train: {objective: accuracy, epochs: 1, device: cpu}\n"
        "search: {stop_early: benchmark, sampler: random, repeats: 1, n_trials: 4}\n")
    with pytest.raises(ConfigError) as error:
        validate_study(tmp_path / "params.yaml")
    assert str(error.value).startswith("search.stop_early: benchmark reads its prior from ") and \
        "not test_accuracy" in str(error.value) and len(str(error.value).splitlines()) == 1, error.value
