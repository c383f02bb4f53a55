"""The tuning-cost benchmark: its declaration, the generated pipelines, which cells are finished, each cell's numbers
read from its committed files, the pooled meta-verdict, the tuners at equal device-seconds, and a tiny benchmark run
end to end through DVC."""

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image
from scipy import stats

from study.analysis import DIFFERENCE_COLUMNS, random_effects, recommend
from study.analysis.comparison import differences_to_reference
from study.benchmark import (CELL_INPUTS, aggregate_benchmark, cell_finished, cells_to_run,
                             difference_standard_error, load_plan, loss_sentences, pooled_table, tuner_table,
                             value_at_seconds, write_benchmark)
from study.benchmark.cells import comparison_outcome
from study.benchmark.plan import planned_iterations
from study.search import tpe_startup_trials
from study.benchmark.report import lead_sentence, read_cells
from study.benchmark.pipelines import SweepError, plain_params
from conftest import dvc_study
from study.cli import main
from study.config import AnalysisConfig, load_params
from study.data import source_of, split_counts
from study.validation import planned_source

COPIED = ["dvc.yaml", "params.yaml", ".dvcignore", "stages", "study", "presets"]


# --- the declaration ---------------------------------------------------------------------------------------


def test_the_full_benchmark_covers_what_the_issue_asks():
    plan = load_plan("full")
    primary = [cell for cell in plan.cells if cell.primary]
    sources = {source_of(cell.params.data.dataset) for cell in primary}
    assert len(primary) >= 6 and len(sources) >= 6 and {"digits", "mnist", "fashion-mnist"} <= sources
    real_open = [cell for cell in primary if cell.params.data.protocol == "open" and cell.train_classes >= 50
                 and source_of(cell.params.data.dataset) in ("mnist", "fashion-mnist")]
    assert len(real_open) >= 2
    longer = [cell for cell in plan.cells if cell.longer_of]
    assert len(longer) >= 3 and not any(cell.primary for cell in longer)
    assert sum(source_of(cell.params.data.dataset) in ("digits", "mnist", "fashion-mnist") for cell in longer) >= 2
    short = {cell.configuration: cell for cell in primary}
    for cell in longer:
        assert planned_iterations(cell.params) >= 10 * planned_iterations(short[cell.longer_of].params)
    assert all("p2sgrad" in cell.params.runs.methods for cell in plan.cells)
    assert {cell.params.data.protocol for cell in primary} == {"closed", "open"}
    assert min(cell.train_classes for cell in primary) <= 10 and max(cell.train_classes for cell in primary) >= 1000
    assert all(len(cell.params.data.split_seeds()) >= 2 for cell in plan.cells)
    assert all("arcface" in cell.params.search.losses for cell in plan.cells)
    for loss in ("cosface", "sphereface"):
        assert sum(loss in cell.params.search.losses for cell in primary) >= 3
    compared = {}
    for cell in plan.cells:
        search = cell.params.search
        compared.setdefault(cell.configuration, set()).add((search.sampler, search.repeats >= 3 or search.sampler ==
                                                            "random", search.pruner))
    with_tuners = [tuners for tuners in compared.values() if len(tuners) >= 3]
    assert len(with_tuners) >= 2
    for tuners in with_tuners:
        assert ("random", True, "none") in tuners and ("tpe", True, "none") in tuners
        assert any(sampler == "tpe" and pruner in ("median", "hyperband") for sampler, _, pruner in tuners)
    assert {cell.params.train.objective for cell in plan.cells} == {"map_at_r"}
    for cell in plan.cells:  # TPE's budget lies well past its random start-up trials
        if cell.params.search.sampler == "tpe":
            assert cell.params.search.n_trials >= 3 * tpe_startup_trials(cell.params.search.n_trials)


def test_each_cell_has_exactly_its_training_class_count():
    for cell in load_plan("full").cells:
        data = cell.params.data
        source = planned_source(data)
        if source is None:  # an optional source not installed here
            continue
        total = data.classes or source[1].num_classes
        if data.protocol == "closed":
            assert cell.train_classes == total
        else:  # the data module's own class split of the classes
            assert split_counts(total, data.fractions)[0] == cell.train_classes


def test_the_quick_benchmark_has_every_kind_of_cell():
    plan = load_plan("quick")
    assert {cell.tuner for cell in plan.cells} == {"random", "tpe", "tpe-median"}
    assert len({cell.configuration for cell in plan.cells}) >= 3


def declaration(tmp_path, text: str) -> Path:
    """A benchmark declaration file holding `text`."""
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


TINY = """
title: A tiny benchmark
preset: default
set: {data.seeds: [0, 1], model.name: mlp, model.embedding_size: 16, train.epochs: 1, train.eval_every: 5,
      train.device: cpu, search.n_trials: 2, runs.seeds: [0, 1], runs.methods: [fixed_adacos],
      analysis.n_bootstrap: 100}
tuners:
  random: {search.sampler: random}
  tpe: {search.sampler: tpe, search.repeats: 2, search.losses: [arcface]}
configurations:
  - name: digits-closed
    dataset: digits
    train_classes: 10
    set: {data.protocol: closed, data.fractions: [0.6, 0.2, 0.2], search.losses: [arcface, cosface]}
    tuners: [random, tpe]
  - name: glyphs-open
    dataset: "glyphs:{total}:8"
    train_classes: 6
    set: {train.batch_size: 16}
"""


def test_a_declaration_makes_one_cell_per_configuration_and_tuner(tmp_path):
    plan = load_plan(declaration(tmp_path, TINY))
    assert [cell.name for cell in plan.cells] == ["digits-closed", "digits-closed-tpe", "glyphs-open"]
    assert [cell.primary for cell in plan.cells] == [True, False, True]
    tpe = plan.cells[1].params
    assert (tpe.search.sampler, tpe.search.repeats, tpe.search.losses) == ("tpe", 2, ("arcface",))
    assert plan.cells[0].params.search.losses == ("arcface", "cosface")
    assert plan.cells[2].params.data.dataset == "glyphs:11:8" and plan.cells[2].params.data.protocol == "open"
    assert plan.cells[0].params.data.classes == 10  # a source of fixed size keeps that many classes
    assert json.loads(plan.to_json())["cells"][2]["train_classes"] == 6


@pytest.mark.parametrize("text, message", [
    ("configurations: []", "declares no configurations"),
    ("cells: []", "unknown key cells"),
    ("configurations: [{name: Bad_Name, dataset: digits, train_classes: 10}]", "is not a cell name"),
    ("configurations: [{name: a, dataset: digits}]", "give train_classes"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, tuners: [tpe]}]", "not declared under tuners"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, set: {epochs: 3}}]", "not a dotted key"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10}, {name: a, dataset: mnist5k, "
     "train_classes: 10}]", "two cells are named a"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, set: {train.objective: accuracy, "
     "data.protocol: closed}}, {name: b, dataset: mnist5k, train_classes: 10}]", "train.objective differ"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, set: {train.epochs: 0}}]", "train.epochs"),
])
def test_bad_declarations_name_the_fix(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_plan(declaration(tmp_path, text))


def test_an_unknown_declaration_lists_the_shipped_ones():
    with pytest.raises(ValueError, match="full, quick"):
        load_plan("nonesuch")


# --- the pipelines -------------------------------------------------------------------------------------------


def test_the_benchmark_writes_each_cells_pipeline_and_an_aggregate_reading_committed_files(tmp_path, monkeypatch):
    root = dvc_study(tmp_path / "repo", COPIED, init=False)
    monkeypatch.chdir(root)
    plan = load_plan(declaration(tmp_path, TINY))
    benchmark = write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
    assert set(benchmark.cells) == {"digits-closed", "digits-closed-tpe", "glyphs-open"}
    cell = root / "bench" / "digits-closed"
    assert load_params(str(cell / "params.yaml")) == plan.cells[0].params
    pipeline = yaml.safe_load((cell / "dvc.yaml").read_text())
    assert set(pipeline["stages"]) == set(yaml.safe_load((root / "dvc.yaml").read_text())["stages"])
    assert "../../stages/search.py" in pipeline["stages"]["search"]["do"]["deps"]
    stage = yaml.safe_load((root / "bench" / "dvc.yaml").read_text())["stages"]["aggregate"]
    assert stage["cmd"] == ("python -m stages.benchmark_report --plan plan.json --report-dir ../reports/bench "
                            "--label bench --dpi 120")
    # Only files a finished cell commits: its report's metrics and tables (never data/ or results/).
    cell_deps = [dep for dep in stage["deps"] if dep.split("/")[0] in benchmark.cells]
    assert cell_deps == [f"{name}/{path.as_posix()}" for name in benchmark.cells for path in CELL_INPUTS]
    assert all(dep.split("/")[1] == "reports" for dep in cell_deps)
    assert "plan.json" in stage["deps"] and "../stages/benchmark_report.py" in stage["deps"]
    assert json.loads((root / "bench" / "plan.json").read_text())["title"] == "A tiny benchmark"
    assert "/*/results/trials/" in (root / "bench" / ".gitignore").read_text()
    before = {path: path.read_bytes() for path in (root / "bench").rglob("*") if path.is_file()}
    write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
    assert {path: path.read_bytes() for path in (root / "bench").rglob("*") if path.is_file()} == before
    (root / "mine").mkdir()
    (root / "mine" / "dvc.yaml").write_text("stages: {}\n")
    with pytest.raises(SweepError, match="was not written by `study benchmark`"):
        write_benchmark(plan, "mine", "reports/bench", log=lambda message: None)
    with pytest.raises(ValueError, match="--out must be a folder inside the repository"):
        write_benchmark(plan, ".", "reports/bench", log=lambda message: None)


# --- which cells are finished ------------------------------------------------------------------------------


def finished_cell(directory: Path, params) -> None:
    """A cell as a fresh clone holds it: params.yaml, dvc.lock and the report, no data/ or results/."""
    directory.mkdir(parents=True, exist_ok=True)
    plain = plain_params(params)
    (directory / "params.yaml").write_text(yaml.safe_dump(plain))
    (directory / "reports").mkdir(exist_ok=True)
    (directory / "reports" / "metrics.json").write_text('{"verdict": {}}\n')
    digest = hashlib.md5((directory / "reports" / "metrics.json").read_bytes()).hexdigest()
    lock = {"schema": "2.0", "stages": {
        "validate": {"cmd": "python -m stages.validate", "params": {"params.yaml": plain}},
        "search@arcface": {"cmd": "x", "params": {"params.yaml": {"search": plain["search"],
                                                                  "runs.seeds": plain["runs"]["seeds"]}}},
        "report": {"cmd": "python -m stages.report", "params": {"params.yaml": {"analysis": plain["analysis"]}},
                   "outs": [{"path": "reports/metrics.json", "hash": "md5", "md5": digest, "size": 1}]}}}
    (directory / "dvc.lock").write_text(yaml.safe_dump(lock))


def test_a_cell_is_finished_only_with_its_current_params_and_its_recorded_report(tmp_path):
    plan = load_plan(declaration(tmp_path, TINY))
    cell = tmp_path / "bench" / "digits-closed"
    finished_cell(cell, plan.cells[0].params)
    assert cell_finished(cell) and cell_finished(cell, plain_params(plan.cells[0].params))
    assert cells_to_run(plan, tmp_path / "bench") == ["digits-closed-tpe", "glyphs-open"]
    assert cells_to_run(plan, tmp_path / "bench", ["digits-closed"]) == [cell.name for cell in plan.cells]
    with pytest.raises(ValueError, match="no such cell"):
        cells_to_run(plan, tmp_path / "bench", ["nonesuch"])
    # Another plan for the same cell (more trials): its report is not this study's.
    more = plan.cells[0].params.replace(search=plan.cells[0].params.search.replace(n_trials=3))
    assert not cell_finished(cell, plain_params(more))
    (cell / "reports" / "metrics.json").write_text('{"verdict": {"changed": true}}\n')  # not the locked report
    assert not cell_finished(cell)
    (cell / "dvc.lock").unlink()
    assert not cell_finished(cell)


# --- one cell's numbers ---------------------------------------------------------------------------------------


def difference_row(method, metric, test, splits, pairs, difference, low, high, **more):
    """One row of a study's differences.csv (DIFFERENCE_COLUMNS), the given values filled in."""
    row = {column: np.nan for column in DIFFERENCE_COLUMNS}
    row.update({"method": method, "metric": metric, "test": test, "splits": splits, "pairs": pairs,
                "difference": difference, "low": low, "high": high, "higher_is_better": True, "p_value": 0.5,
                "p_holm": 0.5, "significant": False, "equivalent": False, "margin": 0.01, "tost_p_value": 0.5, **more})
    return pd.Series(row)


def test_the_standard_error_follows_the_interval_and_its_test():
    # Over 3 splits: half-width = t_{2}·SE.
    t2 = stats.t.ppf(0.975, 2)
    row = difference_row("arcface_tuned", "test_map_at_r", "split", 3, 9, 0.01, 0.01 - t2 * 0.004, 0.01 + t2 * 0.004)
    assert difference_standard_error(row, pd.DataFrame(), "arcface_tuned", "test_map_at_r", 0.95) == \
        pytest.approx((0.004, 2.0))
    t4 = stats.t.ppf(0.975, 4)
    row = difference_row("arcface_tuned", "test_map_at_r", "paired", 1, 5, 0.0, -t4 * 0.002, t4 * 0.002)
    assert difference_standard_error(row, pd.DataFrame(), "arcface_tuned", "test_map_at_r", 0.95) == \
        pytest.approx((0.002, 4.0))
    # Welch: recomputed from the runs (its df is not in the table).
    scores = pd.DataFrame({"method": ["arcface_tuned"] * 3 + ["fixed_adacos"] * 4,
                           "test_map_at_r": [0.5, 0.52, 0.55, 0.5, 0.49, 0.47, 0.51]})
    row = difference_row("arcface_tuned", "test_map_at_r", "Welch", 1, 0, 0.03, 0.0, 0.06)
    a, b = np.array([0.5, 0.52, 0.55]), np.array([0.5, 0.49, 0.47, 0.51])
    expected = math.sqrt(a.var(ddof=1) / 3 + b.var(ddof=1) / 4)
    assert difference_standard_error(row, scores, "arcface_tuned", "test_map_at_r", 0.95)[0] == pytest.approx(expected)
    # A table that carries the standard error itself is read, not inverted.
    row = difference_row("arcface_tuned", "test_map_at_r", "split", 3, 9, 0.01, -1.0, 1.0, standard_error=0.003, df=2)
    assert difference_standard_error(row, pd.DataFrame(), "arcface_tuned", "test_map_at_r", 0.95) == (0.003, 2.0)


def synthetic_run_scores(gain: float, seeds: int = 6, splits: int = 3, noise: float = 0.004, seed: int = 0):
    """run_scores.csv of a study where ArcFace tuned gains `gain` over Fixed AdaCos and CosFace tuned loses it."""
    rng = np.random.default_rng(seed)
    rows = []
    for split in range(splits):
        for run_seed in range(seeds):
            base = 0.6 + 0.01 * split + rng.normal(0, noise)
            for method, shift in (("fixed_adacos", 0.0), ("arcface_tuned", gain), ("cosface_tuned", -gain)):
                rows.append({"method": method, "split": split, "seed": run_seed, "status": "completed",
                             "val_score": base, "test_map_at_r": base + shift + rng.normal(0, noise / 4),
                             "test_accuracy": base})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("gain", [0.05, 0.0, -0.05, 0.004])
def test_each_losss_outcome_is_the_studys_own_rule(gain):
    scores = synthetic_run_scores(gain)
    verdict = recommend(scores, "map_at_r")
    differences = differences_to_reference(scores, ["fixed_adacos", "arcface_tuned", "cosface_tuned"],
                                           AnalysisConfig())
    reason, comparison = comparison_outcome(differences, "arcface", "test_map_at_r")
    assert reason == verdict["reason"] and comparison["difference"] == pytest.approx(verdict["tuned"]["difference"])
    mirrored, _ = comparison_outcome(differences, "cosface", "test_map_at_r")
    expected = {0.05: ("tuning_better_beyond_margin", "adacos_significantly_better"),
                -0.05: ("adacos_significantly_better", "tuning_better_beyond_margin")}
    if gain in expected:
        assert (reason, mirrored) == expected[gain]


# --- a finished benchmark's aggregate, on synthetic cells -------------------------------------------------------


def write_cell(directory: Path, losses, differences: dict, half_widths: dict, splits=3, reached=True,
               seconds_per_trial=2.0, curve_shift=0.0, reason="not_resolved"):
    """The committed files of a finished cell whose differences are as given (its study over `splits` splits)."""
    tables = directory / "reports" / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    quantile = stats.t.ppf(0.975, splits - 1)
    rows = []
    for loss in losses:
        difference, half = differences[loss], half_widths[loss]
        rows.append(difference_row(f"{loss}_tuned", "test_map_at_r", "split", splits, 3 * splits, difference,
                                   difference - half, difference + half, significant=abs(difference) > half,
                                   equivalent=abs(difference) + half < 0.01, detectable=half * 1.5,
                                   welch_difference=difference, seeds_to_resolve=4))
    pd.DataFrame(rows)[DIFFERENCE_COLUMNS].to_csv(tables / "differences.csv", index=False)
    verdict = {"recommendation": "undecided", "reason": reason, "objective": "map_at_r", "metric": "test_map_at_r",
               "confidence": 0.95, "reference_test_mean": 0.6, "tuned_loss": losses[0]}
    metrics = {"verdict": verdict, **{f"{loss}_tuned": {"test_map_at_r": {"mean": 0.6 + differences[loss]}}
                                      for loss in losses}}
    (directory / "reports" / "metrics.json").write_text(json.dumps(metrics))
    pd.DataFrame([{"loss": loss, "repeats": 1, "trials": 8 * splits, "complete": 8 * splits, "pruned": 0,
                   "seconds": 8 * splits * seconds_per_trial, "seconds_per_trial": seconds_per_trial}
                  for loss in losses]).to_csv(tables / "search.csv", index=False)
    methods = ["fixed_adacos", *(f"{loss}_tuned" for loss in losses)]
    pd.DataFrame([{"method": method, "metric": "test_map_at_r", "run_seconds": 2.0} for method in methods]
                 ).to_csv(tables / "final_test.csv", index=False)
    pd.DataFrame([{"method": method, "split": split, "seed": seed, "test_map_at_r": 0.6} for method in methods
                  for split in range(splits) for seed in range(2)]).to_csv(tables / "run_scores.csv", index=False)
    pd.DataFrame([{"loss": loss, "reference": "fixed_adacos", "target": 0.6, "trials": 3 if reached else None,
                   "trials_low": 2 if reached else None, "trials_high": 6 if reached else None, "valid_trials": 6,
                   "seconds": 3 * seconds_per_trial if reached else None, "reached": reached, "max_trials": 8}
                  for loss in losses]).to_csv(tables / "break_even.csv", index=False)
    n = np.arange(1, 9)
    pd.DataFrame({"method": "arcface", "kind": "search", "n": n, "expected_test": 0.55 + 0.01 * n + curve_shift,
                  "low": 0.54 + 0.01 * n + curve_shift, "high": 0.56 + 0.01 * n + curve_shift,
                  "expected_val": 0.5, "seconds": n * seconds_per_trial}).to_csv(tables / "tuning_curves.csv",
                                                                               index=False)


CELLS = [  # name, configuration, tuner, primary, C, losses, ArcFace's difference, its half-width
    ("digits", "digits", "random", True, 10, ["arcface", "cosface"], -0.004, 0.02),
    ("digits-tpe", "digits", "tpe", False, 10, ["arcface"], 0.001, 0.02),
    ("glyphs-c50", "glyphs-c50", "random", True, 50, ["arcface", "cosface"], 0.003, 0.01),
    ("glyphs-c300", "glyphs-c300", "random", True, 300, ["arcface"], 0.012, 0.008),
    ("glyphs-c1000", "glyphs-c1000", "random", True, 1000, ["arcface", "cosface"], 0.02, 0.03),
]


def synthetic_benchmark(root: Path) -> Path:
    """The CELLS as finished cells under `root`, and their plan.json."""
    facts = []
    for name, configuration, tuner, primary, classes, losses, difference, half in CELLS:
        write_cell(root / name, losses, {"arcface": difference, "cosface": -difference},
                   {"arcface": half, "cosface": half / 2}, reached=classes < 1000,
                   seconds_per_trial=3.0 if tuner == "tpe" else 2.0, curve_shift=0.01 if tuner == "tpe" else 0.0)
        facts.append({"name": name, "configuration": configuration, "tuner": tuner, "primary": primary,
                      "source": "glyphs", "protocol": "open", "train_classes": classes, "losses": losses,
                      "sampler": "tpe" if tuner == "tpe" else "random", "repeats": 4 if tuner == "tpe" else 1,
                      "pruner": "none", "n_trials": 8, "splits": [0, 1, 2], "seeds": [0, 1],
                      "model": "cnn", "epochs": 3 if classes < 1000 else 5})
    (root / "plan.json").write_text(json.dumps({"title": "A synthetic benchmark", "cells": facts}))
    return root / "plan.json"


def test_the_pooled_difference_is_random_effects_over_the_primary_cells(tmp_path):
    plan = synthetic_benchmark(tmp_path / "bench")
    rows = read_cells(json.loads(plan.read_text()), tmp_path / "bench")
    pooled = pooled_table(rows, 0.95)[0].set_index("loss")
    primary = [cell for cell in CELLS if cell[3]]
    t2 = stats.t.ppf(0.975, 2)
    expected = random_effects([cell[6] for cell in primary], [cell[7] / t2 for cell in primary])
    for key in ("estimate", "low", "high", "tau2", "i2", "prediction_low", "prediction_high"):
        assert pooled.loc["arcface", key] == pytest.approx(expected[key]), key
    assert pooled.loc["arcface", "configurations"] == 4  # the TPE cell compares tuners, it is not a configuration
    assert pooled.loc["cosface", "configurations"] == 3 and math.isnan(pooled.loc["cosface", "prediction_low"]) is False
    assert pooled.loc["arcface", "break_even_reached"] == 3 and pooled.loc["arcface", "break_even_trials_median"] == 3
    # Significant (half-width below |difference|) at C = 300 only; undecided elsewhere.
    assert rows.set_index(["cell", "loss"]).loc[("glyphs-c300", "arcface"), "outcome"] == "paid"
    assert pooled.loc["arcface", "paid"] == 1 and pooled.loc["arcface", "undecided"] == 3
    # The slope on log10 C by weighted least squares with the random-effects weights.
    x = np.log10([cell[4] for cell in primary])
    weights = 1 / (np.array([cell[7] / t2 for cell in primary]) ** 2 + expected["tau2"])
    assert pooled.loc["arcface", "slope_per_decade"] == pytest.approx(
        np.polyfit(x, [cell[6] for cell in primary], 1, w=np.sqrt(weights))[0])
    # The verdict reads the random-effects interval only where it held 93% in simulated benchmarks of these cells
    # (their standard errors on 2 df each); otherwise the equal-weight one, the plain t interval over the cells.
    arcface = pooled.loc["arcface"]
    assert arcface["judged_by"] == ("random effects" if arcface["dl_coverage"] >= 0.93 else "equal weights")
    if arcface["judged_by"] == "equal weights":
        interval = stats.ttest_1samp([cell[6] for cell in primary], 0.0).confidence_interval()
        assert (arcface["judged_low"], arcface["judged_high"]) == pytest.approx(tuple(interval))
    sentence = loss_sentences(pooled.reset_index().iloc[0].to_dict())
    assert "in simulated benchmarks of these cells" in sentence
    assert sentence.startswith("**ArcFace**: over 4 configurations") and "prediction interval" in sentence
    assert "tuning paid on 1 of 4 configurations" in sentence


@pytest.mark.parametrize("judged, expected", [
    (("equal weights", 0.02, 0.012, 0.028), "on average tuning pays: tuned is better than Fixed AdaCos by at least the "
                                           "margin (tuned − Fixed AdaCos +0.0200, 95% CI [+0.0120, +0.0280])"),
    (("equal weights", 0.008, 0.001, 0.015), "on average tuned is better, by less than the ±0.01 margin"),
    (("equal weights", 0.004, 0.001, 0.007), "on average the two are equivalent within ±0.01"),  # significant, too
    (("random effects", 0.001, -0.004, 0.006), "on average the two are equivalent within ±0.01"),
    (("random effects", -0.02, -0.03, -0.011), "on average Fixed AdaCos is better, by at least the margin"),
    (("equal weights", 0.002, -0.02, 0.024), "the average is not resolved"),
    (("", math.nan, math.nan, math.nan), "no pooled interval held its level"),
])
def test_the_lead_sentence_judges_the_interval_the_verdict_reads(judged, expected):
    by, estimate, low, high = judged
    # The random-effects numbers say otherwise every time: the lead must not read them.
    facts = {"loss": "arcface", "pooled_configurations": 5, "margin": 0.01, "estimate": 0.5, "low": 0.4, "high": 0.6,
             "judged_by": by, "judged_estimate": estimate, "judged_low": low, "judged_high": high,
             "predicted_by": "equal weights", "predicted_low": -0.03, "predicted_high": 0.05}
    lead = lead_sentence(facts)
    assert lead.startswith("**Tuning ArcFace's (s, m) against Fixed AdaCos over 5 configurations: ")
    assert expected in lead and lead.endswith("; on a new data set expect [-0.0300, +0.0500].**")


def test_tuners_are_compared_at_the_budget_every_one_reached():
    curve = pd.DataFrame({"n": [1, 2, 3], "expected_test": [0.5, 0.6, 0.7], "low": [0.4, 0.5, np.nan],
                          "high": [0.6, 0.7, 0.8], "seconds": [2.0, 4.0, 6.0]})
    assert value_at_seconds(curve, 3.0, "expected_test") == pytest.approx(0.55)
    assert value_at_seconds(curve, 4.0, "expected_test") == pytest.approx(0.6)
    assert math.isnan(value_at_seconds(curve, 7.0, "expected_test"))  # beyond the curve
    assert math.isnan(value_at_seconds(curve, 5.0, "low"))


def test_the_aggregate_writes_the_report_answer_and_forest_plot_first(tmp_path):
    plan = synthetic_benchmark(tmp_path / "bench")
    written = aggregate_benchmark(plan, tmp_path / "reports" / "benchmark", label="bench")
    markdown = written["report.md"].read_text()
    answer = markdown.index("## Answer")
    assert markdown.index("**ArcFace**", answer) < markdown.index("](figures/forest_arcface.png)") \
        < markdown.index("Tuning cost per loss") < markdown.index("## Other losses")
    assert "](figures/forest_cosface.png)" in markdown and "## Tuners at equal device-seconds" in markdown
    # The answer opens with one bold sentence: the judgement of the interval the verdict reads.
    pooled = pd.read_csv(tmp_path / "reports" / "benchmark" / "tables" / "pooled.csv").set_index("loss")
    lead = markdown[answer:].split("\n\n")[1]
    assert lead.startswith("**Tuning ArcFace's (s, m) against Fixed AdaCos over 4 configurations: ")
    assert f"{pooled.loc['arcface', 'judged_low']:+.4f}" in lead and lead.endswith(".**")
    # How far it carries, from the plan's primary cells (the TPE cell is not a configuration of its own).
    assert ("How far this carries: 4 configurations from 1 source (glyphs), the open protocol, C = 10–1,000 "
            "training classes; 3 class splits × 2 seeds per cell, searches of 8 trials per split, one model (cnn) "
            "trained 3–5 epochs.") in markdown
    assert "[report](../../bench/digits/reports/report.md)" in markdown
    html = written["report.html"].read_text()
    assert "data:image/png;base64," in html and 'src="figures/' not in html
    for name in ("forest_arcface.png", "forest_cosface.png", "tuners.png"):
        with Image.open(tmp_path / "reports" / "benchmark" / "figures" / name) as image:
            assert image.format == "PNG" and image.size[0] > 500
    facts = json.loads(written["benchmark.json"].read_text())
    pooled = pd.read_csv(tmp_path / "reports" / "benchmark" / "tables" / "pooled.csv").set_index("loss")
    assert set(facts["pooled"]) == {"arcface", "cosface"}
    assert facts["pooled"]["arcface"]["estimate"] == pytest.approx(pooled.loc["arcface", "estimate"])
    assert facts["method"].startswith("DerSimonian-Laird")
    tuners = pd.read_csv(tmp_path / "reports" / "benchmark" / "tables" / "tuners.csv")
    # The TPE cell costs 3 s a trial, random search 2 s: both reached 16 s per search, TPE's curve is 0.01 higher.
    assert tuners["budget_seconds"].tolist() == [16.0, 16.0]
    assert tuners["expected_test_at_budget"].tolist() == pytest.approx([0.63, 0.55 + 0.01 * 16 / 3 + 0.01])
    # Device-seconds: every cell's searches and own runs, Fixed AdaCos's runs once per configuration. A cell searches
    # 24 trials per loss (8 per split) at its seconds per trial, and each method runs 6 times (3 splits × 2 seeds) at
    # 2 s: digits, glyphs-c50 and glyphs-c1000 (two losses, 2 s) 96 + 36 s each, glyphs-c300 48 + 24 s, digits-tpe
    # (one loss, 3 s) 72 + 24 s; 564 s in all, of which digits-tpe's 12 s of Fixed AdaCos are digits' own runs.
    assert facts["device_seconds"] == pytest.approx({"cells": 564.0, "trained": 552.0})


def test_tuner_table_needs_two_tuners_of_one_configuration(tmp_path):
    plan = synthetic_benchmark(tmp_path / "bench")
    rows = read_cells(json.loads(plan.read_text()), tmp_path / "bench")
    table = tuner_table(rows[rows["configuration"] != "digits"], {})
    assert table.empty


# --- a tiny benchmark end to end through DVC --------------------------------------------------------------------


def ran_stages(output: str) -> set[str]:
    """The stages DVC ran, by DVC's name."""
    return {line.split("'")[1] for line in output.splitlines() if "Running stage '" in line}


def restored_stages(output: str) -> set[str]:
    """The stages DVC restored from its run cache instead of running them."""
    return {line.split("'")[1] for line in output.splitlines() if "is cached - skipping run" in line}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_tiny_benchmark_runs_through_dvc_resumes_and_never_retrains_a_finished_cell(tmp_path, monkeypatch, capsys):
    """SLOW (a few minutes on 2 cores): `study benchmark` runs three tiny cells (digits closed with ArcFace and
    CosFace, its TPE variant, glyphs open) through `dvc repro`, then the aggregate."""
    root = dvc_study(tmp_path / "repo", COPIED)
    plan = declaration(tmp_path, TINY)
    arguments = ["benchmark", "--plan", str(plan), "--out", "bench", "--report-dir", "reports/bench"]
    monkeypatch.chdir(root)
    assert main(arguments) == 0, capsys.readouterr().err
    output = capsys.readouterr().err
    ran = ran_stages(output)
    assert "bench/dvc.yaml:aggregate" in ran
    assert {f"bench/{cell}/dvc.yaml:report" for cell in ("digits-closed", "digits-closed-tpe", "glyphs-open")} <= ran
    # The TPE cell's prepared data and Fixed AdaCos runs are the random cell's, restored from DVC's run cache
    # (whichever of the two ran first trained them).
    reused = {stage.split(":")[1] for stage in restored_stages(output)}
    assert {"prepare", "runs@fixed_adacos"} <= reused
    report = root / "reports" / "bench"
    assert "## Answer" in (report / "report.md").read_text()
    cells = pd.read_csv(report / "tables" / "cells.csv")
    assert set(cells["cell"]) == {"digits-closed", "digits-closed-tpe", "glyphs-open"}
    assert np.isfinite(cells["difference"]).all() and (cells["cell_seconds"] > 0).all()
    assert set(cells.loc[cells["cell"] == "digits-closed", "loss"]) == {"arcface", "cosface"}
    tuners = pd.read_csv(report / "tables" / "tuners.csv")
    assert tuners["tuner"].tolist() == ["random", "tpe"] and np.isfinite(tuners["budget_seconds"]).all()
    written = report / "report.md"
    before = written.read_bytes()

    # (1) Again: nothing is out of date, nothing runs.
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == set()

    # (2) A fresh clone: only what git holds (no data/, results/ or DVC cache). Every cell is finished, so nothing is
    # retrained, and the aggregate (up to date) does not run either.
    for cell in ("digits-closed", "digits-closed-tpe", "glyphs-open"):
        for folder in ("data", "results/search", "results/runs", "results/evaluation", "results/trials"):
            shutil.rmtree(root / "bench" / cell / folder, ignore_errors=True)
    shutil.rmtree(root / ".dvc" / "cache")
    assert main(arguments) == 0
    output = capsys.readouterr().err
    assert ran_stages(output) == set() and "finished, kept as committed" in output
    assert written.read_bytes() == before

    # (3) A report change reaches the aggregate alone, from the committed files.
    (root / "bench" / "plan.json").write_text((root / "bench" / "plan.json").read_text())  # unchanged bytes
    code = root / "study" / "benchmark" / "report.py"
    code.write_text(code.read_text() + "# a comment: the aggregate's code changed\n")
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == {"bench/dvc.yaml:aggregate"}

    # (4) A cell whose params change is no longer finished: it is handed back to DVC.
    changed = plan.read_text().replace("train.batch_size: 16}", "train.batch_size: 16, search.n_trials: 3}")
    assert changed != plan.read_text()
    plan.write_text(changed)
    assert main([*arguments, "--list"]) == 0
    listing = capsys.readouterr().out
    assert "glyphs-open" in listing and "to run" in listing.split("glyphs-open")[1].splitlines()[0]
