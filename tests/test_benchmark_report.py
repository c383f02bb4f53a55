"""The benchmark's aggregate on synthetic finished cells: one cell's numbers against a direct computation from its
runs (the floored standard error, seed luck, the budget-matched gap by brute force, s/s_f, the importance of s),
the pooled row per method against a hand-made two-stage pool over data sources, the judgement against the relative
margin and its reading, the trend within one source, the tuners at equal trials and iterations, the long regime
against the short one, and the report end to end."""

import itertools
import json
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import stats

from study.analysis import DIFFERENCE_COLUMNS, recommend
from study.analysis.comparison import differences_to_reference
from study.benchmark import aggregate_benchmark, pooled_table, tuner_table
from study.benchmark.fingerprint import write_fingerprint
from study.benchmark.cells import (NEAR_FLOOR_SCORE, cell_plateau, cell_rows, comparison_outcome, convergence_iterations,
                                   tuning_curve)
from study.benchmark.rate_edges import rate_edges
from study.benchmark.shown import convergence_shown
from study.benchmark.cost import (benchmark_seconds, budget_sentences, cost_table, plateau_stop_sentences,
                                  plateau_stop_summary, plateau_stop_table)
from study.analysis.headline import headline_cells, long_cells
from study.benchmark.meta import (RELATIVE_MARGIN, best_untuned, beyond_margin_from, judgement, length_by_source,
                                  longer_table, margin_reading, trend_in_classes, value_at,
                                  wins_beyond_short_training)
from study.benchmark.card import benchmark_card, extra_trainings, pct, pct_interval
from study.benchmark.report import read_cells
from study.benchmark.sentences import forest_pool, method_sentence, rate_edge_sentences, scope_sentence
from study.report.judgements import JUDGEMENT_WORDS
from study.config import AnalysisConfig

METRIC = "test_map_at_r"
SPLITS, SEEDS = 3, 3
UNTUNED_METHODS = ("dynamic_adacos", "softmax", "p2sgrad", "arcface_default")


# --- synthetic finished cells -----------------------------------------------------------------------------------


def difference_row(method, metric, test, splits, pairs, difference, low, high, **more):
    """One row of a study's differences.csv (DIFFERENCE_COLUMNS), the given values filled in."""
    row = {column: np.nan for column in DIFFERENCE_COLUMNS}
    row.update({"method": method, "metric": metric, "test": test, "splits": splits, "pairs": pairs,
                "difference": difference, "low": low, "high": high, "higher_is_better": True, "p_value": 0.5,
                "p_holm": 0.5, "significant": False, "equivalent": False, "margin": 0.01, "tost_p_value": 0.5, **more})
    return pd.Series(row)


def method_scores(level: float, relative: dict[str, float], seed: int) -> dict[str, np.ndarray]:
    """Test scores (splits × seeds) of Fixed AdaCos around `level` and of each method shifted by `relative` × level,
    paired by split and seed (a shared split and seed effect) with each run's own noise."""
    rng = np.random.default_rng(seed)
    base = level + 0.01 * np.arange(SPLITS)[:, None] + rng.normal(0.0, 0.01, (SPLITS, SEEDS))
    return {"fixed_adacos": base, **{method: base + shift * level + rng.normal(0.0, 0.003, (SPLITS, SEEDS))
                                     for method, shift in relative.items()}}


def hand_difference(scores: dict[str, np.ndarray], method: str) -> dict:
    """A cell's method − Fixed AdaCos by hand: the mean of the split means, its SE the larger of the one over splits
    (k − 1 df) and the seed floor √(pooled within-split variance/(k·n)) (k(n − 1) df)."""
    d = scores[method] - scores["fixed_adacos"]
    k, n = d.shape
    means = d.mean(axis=1)
    se_splits = means.std(ddof=1) / math.sqrt(k)
    within = ((d - means[:, None]) ** 2).sum() / (k * (n - 1))
    se_floor = math.sqrt(within / (k * n))
    se, df, source = (se_splits, k - 1, "splits") if se_splits >= se_floor else (se_floor, k * (n - 1), "seed floor")
    reference = scores["fixed_adacos"].mean()
    half = stats.t.ppf(0.975, df) * se
    return {"difference": means.mean(), "standard_error": se, "df": df, "se_from": source, "reference": reference,
            "relative": means.mean() / reference, "relative_se": se / reference, "low": means.mean() - half,
            "high": means.mean() + half}


def search_trials(loss: str, split: int, count: int, iterations: int, rng, value_of=None, pruned: int = 0,
                  pruned_iterations: int = 0, level: float = 0.6) -> list[dict]:
    """One split's search in landscape.csv: `count` completed trials (val `value_of(s, m)` or random below `level`,
    a test score near it) and `pruned` trials that ran `pruned_iterations`; `best` marks the best completed trial by
    val."""
    s, m = np.exp(rng.uniform(0.0, math.log(64.0), count)), rng.uniform(0.1, 0.8, count)
    values = (rng.uniform(level - 0.05, level + 0.01, count) if value_of is None
              else value_of(s, m) + rng.normal(0.0, 1e-4, count))
    tests = values + rng.normal(0.0, 0.01, count)
    best = int(np.argmax(values))
    rows = [{"loss": loss, "split": split, "repeat": 0, "trial": trial, "state": "COMPLETE", "s": s[trial],
             "m": m[trial], "value": values[trial], "test_value": tests[trial], "seed": int(rng.integers(1 << 30)),
             "iterations": iterations, "seconds": 0.5, "best": trial == best} for trial in range(count)]
    rows += [{"loss": loss, "split": split, "repeat": 0, "trial": count + index, "state": "PRUNED", "s": 2.0, "m": 0.3,
              "value": np.nan, "test_value": np.nan, "seed": 7, "iterations": pruned_iterations, "seconds": 0.1,
              "best": False} for index in range(pruned)]
    return rows


def write_cell(directory: Path, scores: dict[str, np.ndarray], landscape: pd.DataFrame, *, curve: pd.DataFrame,
               convergence: dict[str, float] | None = None, detectable: dict[str, float] | None = None,
               converged: bool = True) -> None:
    """The committed files of a finished cell (reports/metrics.json and reports/tables/, params.yaml, dvc.lock with
    its report stage) whose runs scored `scores` and whose searches are `landscape`; its mean val curves flat over
    the second half of training (`converged`), or still rising 10% there."""
    tables = directory / "reports" / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    second_half = [1.0, 1.0] if converged else [1.05, 1.1]
    pd.DataFrame([{"method": method, "iteration": iteration, "mean": values.mean() * factor}
                  for method, values in scores.items()
                  for iteration, factor in zip((0, 50, 100, 150, 200), (0.2, 0.8, 1.0, *second_half))]
                 ).to_csv(tables / "curves.csv", index=False)
    # The study these tables came from: its splits, its search's trials per split and its seeds (what the advice replay checks).
    searched = landscape[landscape["loss"] == "arcface"].groupby("split").size()
    (directory / "params.yaml").write_text(f"data: {{seeds: {list(range(SPLITS))}}}\n"
                                           f"search: {{n_trials: {int(searched.max()) if len(searched) else 12}}}\n"
                                           f"runs: {{seeds: {list(range(SEEDS))}}}\n")
    (directory / "dvc.lock").write_text(json.dumps({"schema": "2.0", "stages": {"report": {"cmd": "report"}}}))
    rng = np.random.default_rng(zlib.crc32(directory.name.encode()))
    runs = [{"method": method, "split": split, "seed": seed, "status": "completed",
             "val_score": values[split, seed] + rng.normal(0.0, 0.005), METRIC: values[split, seed]}
            for method, values in scores.items() for split in range(SPLITS) for seed in range(SEEDS)]
    pd.DataFrame(runs).to_csv(tables / "run_scores.csv", index=False)
    # Each run's learning curve, shaped like the mean curves (what the pooled iterations count on).
    pd.DataFrame([{**run, "iteration": iteration, "val": run["val_score"] * factor, "test": run[METRIC] * factor}
                  for run in runs for iteration, factor in zip((0, 50, 100, 150, 200), (0.2, 0.8, 1.0, *second_half))]
                 )[["method", "split", "seed", "iteration", "val", "test"]].to_csv(tables / "learning_curves.csv",
                                                                                 index=False)
    landscape.to_csv(tables / "landscape.csv", index=False)
    rows = []
    for method in scores:
        if method == "fixed_adacos":
            continue
        hand = hand_difference(scores, method)
        significant = hand["low"] > 0 or hand["high"] < 0
        rows.append(difference_row(method, METRIC, "split", SPLITS, SPLITS * SEEDS, hand["difference"], hand["low"],
                                   hand["high"], significant=significant,
                                   equivalent=-0.01 < hand["low"] and hand["high"] < 0.01,
                                   detectable=(detectable or {}).get(method, 2.8 * hand["standard_error"])))
    pd.DataFrame(rows)[DIFFERENCE_COLUMNS].to_csv(tables / "differences.csv", index=False)
    verdict = {"recommendation": "undecided", "reason": "not_resolved", "objective": "map_at_r", "metric": METRIC,
               "confidence": 0.95}
    (directory / "reports" / "metrics.json").write_text(json.dumps({"verdict": verdict}))
    losses = list(dict.fromkeys(landscape["loss"]))
    searched = [{"loss": loss, "repeats": 1, "trials": int((landscape["loss"] == loss).sum()),
                 "complete": int(((landscape["loss"] == loss) & (landscape["state"] == "COMPLETE")).sum()),
                 "pruned": int(((landscape["loss"] == loss) & (landscape["state"] == "PRUNED")).sum()),
                 "seconds": float(landscape.loc[landscape["loss"] == loss, "seconds"].sum()),
                 "seconds_per_trial": float(landscape.loc[landscape["loss"] == loss, "seconds"].mean())}
                for loss in losses]
    pd.DataFrame(searched).to_csv(tables / "search.csv", index=False)
    pd.DataFrame([{"method": method, "metric": METRIC, "mean": values.mean(), "run_seconds": 2.0}
                  for method, values in scores.items()]).to_csv(tables / "final_test.csv", index=False)
    pd.DataFrame([{"loss": loss, "reference": "fixed_adacos", "target": scores["fixed_adacos"].mean(), "trials": 3,
                   "trials_low": 2, "trials_high": np.nan, "valid_trials": 6, "seconds": 1.5, "reached": True,
                   "max_trials": 8} for loss in losses]).to_csv(tables / "break_even.csv", index=False)
    pd.concat([curve.assign(method=loss, kind="search") for loss in losses]).to_csv(tables / "tuning_curves.csv",
                                                                                   index=False)
    converged = convergence or {method: 100.0 for method in scores}
    pd.DataFrame([{"method": method, "basis": basis, "fraction": fraction, "target": 0.5,
                   "median_iteration": iteration * factor, "low": np.nan, "high": np.nan, "seeds_reached": 9,
                   "seeds": 9}
                  for method, iteration in converged.items() for basis, fraction, factor in (("best", 0.95, 1), ("best", 0.99, 3),
                                                                        ("last", 0.95, 5))]
                 ).to_csv(tables / "convergence.csv", index=False)
    assert write_fingerprint(directory)  # as `study benchmark` does once a cell's report is the one its lock records


def linear_curve(start: float, step: float, trials: int) -> pd.DataFrame:
    """A tuning curve n = 1…trials, expected test start + step·n, its band ±0.01."""
    n = np.arange(1, trials + 1)
    return pd.DataFrame({"n": n, "expected_test": start + step * n, "low": start + step * n - 0.01,
                         "high": start + step * n + 0.01, "expected_val": 0.5, "seconds": 0.5 * n})


# Each configuration's ArcFace gain as a share of Fixed AdaCos's score: the mean over sources is small (its CI within
# ±2%), the spread within mnist and glyphs large, so a new source's prediction interval reaches past the margin.
ARCFACE = {"digits-closed": 0.004, "mnist-closed": -0.030, "mnist-pairs-open-c50": 0.038, "glyphs-open-c50": 0.040,
           "glyphs-open-c300": -0.040, "strokes-open-c100": 0.0, "glyphs-open-c1000": 0.2,
           "digits-closed-tpe-median": 0.01, "mnist-pairs-open-c50-long": -0.02}
# name, configuration, tuner, primary, source, protocol, C, Fixed AdaCos's score, losses, longer_of, iterations
CELLS = [
    ("digits-closed", "digits-closed", "random", True, "digits", "closed", 10, 0.85, ["arcface", "cosface"], None, 200),
    ("digits-closed-tpe-median", "digits-closed", "tpe-median", False, "digits", "closed", 10, 0.85, ["arcface"],
     None, 200),
    ("mnist-closed", "mnist-closed", "random", True, "mnist", "closed", 10, 0.80, ["arcface"], None, 200),
    ("mnist-pairs-open-c50", "mnist-pairs-open-c50", "random", True, "mnist", "open", 50, 0.60, ["arcface", "cosface"],
     None, 200),
    ("mnist-pairs-open-c50-long", "mnist-pairs-open-c50-long", "random", False, "mnist", "open", 50, 0.60, ["arcface"],
     "mnist-pairs-open-c50", 2000),
    ("glyphs-open-c50", "glyphs-open-c50", "random", True, "glyphs", "open", 50, 0.30, ["arcface"], None, 200),
    ("glyphs-open-c300", "glyphs-open-c300", "random", True, "glyphs", "open", 300, 0.20, ["arcface"], None, 200),
    ("glyphs-open-c1000", "glyphs-open-c1000", "random", True, "glyphs", "open", 1000, 0.10, ["arcface"], None, 200),
    ("strokes-open-c100", "strokes-open-c100", "random", True, "strokes", "open", 100, 0.40, ["arcface"], None, 200),
]
# Cells still improving at their end (the plateau rule): every other cell converged.
UNCONVERGED = ("glyphs-open-c1000", "mnist-pairs-open-c50-long")
HEADLINE = [cell[0] for cell in CELLS if cell[3] and cell[0] not in UNCONVERGED]  # the converged cells
SHORT = [cell[0] for cell in CELLS if cell[3]]  # the short regime's pool: every primary cell
OFF_FLOOR = [cell[0] for cell in CELLS if cell[3] and cell[7] >= NEAR_FLOOR_SCORE]
LONG = [cell[0] for cell in CELLS if cell[9]]  # the long cells, converged or not: a sensitivity pool


def cell_shifts(name: str, losses) -> dict[str, float]:
    """Every method's shift against Fixed AdaCos in a cell, as a share of its score: softmax the best untuned
    method (+3%, +40% at the floor), CosFace +1% where it was searched."""
    floor = name == "glyphs-open-c1000"
    shifts = {"arcface_tuned": ARCFACE[name], "dynamic_adacos": -0.005, "softmax": 0.4 if floor else 0.03,
              "p2sgrad": -0.05, "arcface_default": -0.2}
    return shifts | ({"cosface_tuned": 0.01} if "cosface" in losses else {})


def synthetic_benchmark(root: Path, cells=CELLS) -> tuple[Path, dict]:
    """The `cells` (by default every one of CELLS) as finished cells under `root`, their plan.json, and each cell's
    scores and landscape."""
    facts, made = [], {}
    for name, configuration, tuner, primary, source, protocol, classes, level, losses, longer_of, iterations in cells:
        scores = method_scores(level, cell_shifts(name, losses), zlib.crc32(name.encode()))
        rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
        pruned = tuner == "tpe-median"
        landscape = pd.DataFrame([row for loss in losses for split in range(SPLITS)
                                  for row in search_trials(loss, split, 8, iterations, rng, pruned=12 if pruned else 0,
                                                           pruned_iterations=50, level=level)])
        # The pruned TPE search draws 20 trials per split on average 110 iterations each, random search 8 of 200.
        curve = linear_curve(0.82, 0.005, 20) if pruned else linear_curve(0.8, 0.01, 8)
        long = longer_of is not None
        write_cell(root / name, scores, landscape, curve=curve, converged=name not in UNCONVERGED,
                   convergence={"fixed_adacos": 900.0 if long else 100.0, "arcface_tuned": 700.0 if long else 120.0},
                   detectable={"softmax": 2.5702, "p2sgrad": np.nan} if name == "glyphs-open-c1000" else None)
        made[name] = {"scores": scores, "landscape": landscape, "classes": classes, "source": source}
        facts.append({"name": name, "configuration": configuration, "tuner": tuner, "primary": primary,
                      "source": source, "dataset": source, "protocol": protocol, "train_classes": classes,
                      "objective": "map_at_r", "losses": losses, "sampler": "tpe" if tuner != "random" else "random",
                      "repeats": 1, "pruner": "median" if pruned else "none", "n_trials": 8,
                      "splits": list(range(SPLITS)), "seeds": list(range(SEEDS)),
                      "methods": ["fixed_adacos", *UNTUNED_METHODS], "epochs": 3, "model": "cnn",
                      "longer_of": longer_of, "iterations": iterations})
    (root / "plan.json").write_text(json.dumps({"title": "A synthetic benchmark", "cells": facts}))
    return root / "plan.json", made


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """The synthetic benchmark, its rows and its pooled table, read once for the module."""
    root = tmp_path_factory.mktemp("bench")
    plan, made = synthetic_benchmark(root)
    rows = read_cells(json.loads(plan.read_text()), root)
    return {"root": root, "plan": plan, "made": made, "rows": rows, "pooled": pooled_table(rows, 0.95)}


@pytest.fixture(scope="module")
def aggregate(synthetic, tmp_path_factory):
    """The aggregate of the synthetic benchmark, written once for the module."""
    report_dir = tmp_path_factory.mktemp("reports") / "benchmark"
    return report_dir, aggregate_benchmark(synthetic["plan"], report_dir, label="bench")


# --- one cell's numbers -------------------------------------------------------------------------------------------


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
    reason, comparison = comparison_outcome(differences, "arcface_tuned", "test_map_at_r")
    assert reason == verdict["reason"] and comparison["difference"] == pytest.approx(verdict["tuned"]["difference"])
    mirrored, _ = comparison_outcome(differences, "cosface_tuned", "test_map_at_r")
    expected = {0.05: ("tuning_better_beyond_margin", "adacos_significantly_better"),
                -0.05: ("adacos_significantly_better", "tuning_better_beyond_margin")}
    if gain in expected:
        assert (reason, mirrored) == expected[gain]


def expected_selected_by_brute_force(values, tests, n: int) -> float:
    """The test score of the best-by-val trial among n trials drawn without replacement, averaged over every
    n-subset of the trials (Tang et al.'s without-replacement estimator, by enumeration)."""
    values, tests = np.asarray(values), np.asarray(tests)
    return float(np.mean([tests[list(subset)][np.argmax(values[list(subset)])]
                          for subset in itertools.combinations(range(values.size), n)]))


def test_a_cells_numbers_are_computed_from_its_runs_and_its_search(tmp_path):
    rng = np.random.default_rng(3)
    fa = 0.6 + 0.01 * np.arange(SPLITS)[:, None] + rng.normal(0.0, 0.01, (SPLITS, SEEDS))
    scores = {"fixed_adacos": fa,
              # A split effect: the SE over splits is the larger.
              "arcface_tuned": fa + 0.02 + np.array([[-0.01], [0.0], [0.01]]) + rng.normal(0.0, 5e-4, fa.shape),
              # Equal split means, spread within splits: the seed floor is the larger.
              "dynamic_adacos": fa - 0.005 + np.array([[-0.004, 0.0, 0.004]] * SPLITS),
              "cosface_tuned": fa + rng.normal(0.0, 0.004, fa.shape), "softmax": fa - 0.03}
    # ArcFace's val score depends on s alone, CosFace's on m alone: 20 trials per split.
    landscape = pd.DataFrame(
        [row for split in range(SPLITS) for row in search_trials("arcface", split, 20, 100, rng,
                                                                 lambda s, m: 0.5 + 0.02 * np.log(s))]
        + [row for split in range(SPLITS) for row in search_trials("cosface", split, 20, 100, rng,
                                                                   lambda s, m: 0.5 + 0.2 * m)])
    write_cell(tmp_path / "cell", scores, landscape, curve=linear_curve(0.6, 0.01, 20))
    facts = {"name": "cell", "configuration": "cell", "tuner": "random", "primary": True, "source": "glyphs",
             "protocol": "open", "train_classes": 100, "splits": [0, 1, 2], "seeds": [0, 1, 2], "longer_of": None}
    rows = pd.DataFrame(cell_rows(facts, tmp_path / "cell")).set_index("method")
    assert set(rows.index) == {"arcface_tuned", "dynamic_adacos", "cosface_tuned", "softmax"}
    assert rows.loc["dynamic_adacos", "se_from"] == "seed floor" and rows.loc["arcface_tuned", "se_from"] == "splits"
    for method in rows.index:
        hand = hand_difference(scores, method)
        for key in ("difference", "standard_error", "df", "low", "high", "relative", "relative_se"):
            assert rows.loc[method, key] == pytest.approx(hand[key], rel=1e-9, abs=1e-12), (method, key)
        assert rows.loc[method, "se_from"] == hand["se_from"]
        assert rows.loc[method, "reference_test_mean"] == pytest.approx(fa.mean())
    assert not rows["by_people"].any() and not rows["near_floor"].any()
    run_scores = pd.read_csv(tmp_path / "cell" / "reports" / "tables" / "run_scores.csv")
    s_f = math.sqrt(2.0) * math.log(100 - 1)
    for loss in ("arcface", "cosface"):
        row, trials = rows.loc[f"{loss}_tuned"], landscape[landscape["loss"] == loss]
        best = trials[trials["best"]].set_index("split")
        # Seed luck: the selected trial's test score minus its (s, m) retrained (the tuned runs of that split).
        luck = [best.loc[split, "test_value"] - scores[f"{loss}_tuned"][split].mean() for split in range(SPLITS)]
        assert row["seed_luck"] == pytest.approx(np.mean(luck)) and row["seed_luck_splits"] == SPLITS
        # The budget-matched gap at n = 3 seeds: the search's expected selected test score minus the test score of
        # the Fixed AdaCos run val picks among the split's 3.
        gaps = []
        for split in range(SPLITS):
            searched = trials[trials["split"] == split]
            control = run_scores[(run_scores["method"] == "fixed_adacos") & (run_scores["split"] == split)]
            gaps.append(expected_selected_by_brute_force(searched["value"], searched["test_value"], SEEDS)
                        - control.loc[control["val_score"].idxmax(), METRIC])
        assert row["matched_gap"] == pytest.approx(np.mean(gaps)) and row["matched_n"] == SEEDS
        ratios = best["s"].to_numpy() / s_f
        assert (row["s_ratio_median"], row["s_ratio_low"], row["s_ratio_high"]) == pytest.approx(
            (np.median(ratios), ratios.min(), ratios.max()))
        assert row["search_iterations"] == 100 * 60 and row["search_trials"] == 60
    # The importance of s: all of the val score's variance where it depends on s alone, none where on m alone.
    assert rows.loc["arcface_tuned", "importance_s"] > 0.9 and rows.loc["cosface_tuned", "importance_s"] < 0.1
    assert math.isnan(rows.loc["softmax", "seed_luck"])  # an untuned method has no search


def test_a_cell_below_the_floor_score_is_flagged(synthetic):
    rows = synthetic["rows"].drop_duplicates("cell").set_index("cell")
    assert rows.loc["glyphs-open-c1000", "near_floor"] and rows.loc["glyphs-open-c1000", "reference_test_mean"] < 0.15
    assert not rows.drop(index="glyphs-open-c1000")["near_floor"].any()
    assert set(rows.index[rows["by_people"]]) == {"digits-closed", "digits-closed-tpe-median", "mnist-closed",
                                             "mnist-pairs-open-c50", "mnist-pairs-open-c50-long"}


# --- pooled over sources --------------------------------------------------------------------------------------------


def hand_pool(cells: dict[str, dict]) -> dict:
    """Two stages by hand: each source's plain mean of its configurations' relative differences, then the mean over
    the k source means with t on k − 1 df; a new source's configuration predicted from the source means' variance
    and the spread within sources less the cells' own noise."""
    if not cells:
        return {"mean": math.nan, "sources": 0, "configurations": 0}
    by_source: dict[str, list] = {}
    for cell in cells.values():
        by_source.setdefault(cell["source"], []).append((cell["relative"], cell["relative_se"]))
    means = np.array([np.mean([y for y, _ in members]) for members in by_source.values()])
    k = means.size
    pool = {"mean": means.mean(), "sources": k, "configurations": len(cells)}
    if k >= 2:
        half = stats.t.ppf(0.975, k - 1) * means.std(ddof=1) / math.sqrt(k)
        pool.update(low=means.mean() - half, high=means.mean() + half)
    within_df = sum(len(members) - 1 for members in by_source.values())
    if k >= 3:
        between = means.var(ddof=1)
        spread = 0.0
        if within_df:
            squares = sum(sum((y - np.mean([v for v, _ in members])) ** 2 for y, _ in members)
                          for members in by_source.values())
            noise = sum((1 - 1 / len(members)) * sum(se ** 2 for _, se in members) for members in by_source.values())
            spread = (1 - np.mean([1 / len(members) for members in by_source.values()])) * max(
                0.0, (squares - noise) / within_df)
        half = stats.t.ppf(0.975, k - 1) * math.sqrt(between * (1 + 1 / k) + spread)
        pool.update(prediction_low=means.mean() - half, prediction_high=means.mean() + half)
    return pool


def hand_cells(synthetic, method: str, names) -> dict[str, dict]:
    """hand_difference of `method` in each named cell that ran it, with its source."""
    made = synthetic["made"]
    return {name: hand_difference(made[name]["scores"], method) | {"source": made[name]["source"]}
            for name in names if method in made[name]["scores"]}


def check_pool(facts: dict, prefix: str, hand: dict) -> None:
    for key in ("mean", "low", "high", "prediction_low", "prediction_high"):
        if key in hand:
            assert facts[f"{prefix}{key}"] == pytest.approx(hand[key], rel=1e-9, nan_ok=True), \
                (facts["method"], prefix, key)
        else:
            assert math.isnan(facts[f"{prefix}{key}"]), (facts["method"], prefix, key)
    assert (facts[f"{prefix}sources"], facts[f"{prefix}configurations"]) == (hand["sources"], hand["configurations"])


@pytest.mark.parametrize("method", ["arcface_tuned", "cosface_tuned", *UNTUNED_METHODS])
def test_the_pooled_row_is_the_two_stage_pool_over_sources_of_the_headline_cells(synthetic, method):
    pooled = synthetic["pooled"].set_index("method", drop=False)
    facts = pooled.loc[method].to_dict()
    headline = hand_cells(synthetic, method, HEADLINE)
    check_pool(facts, "", hand_pool(headline))
    # The short regime's pool, with and without its near-floor cell (sensitivity rows); made by people and rendered by code apart.
    check_pool(facts, "short_", hand_pool(hand_cells(synthetic, method, SHORT)))
    check_pool(facts, "short_off_floor_", hand_pool(hand_cells(synthetic, method, OFF_FLOOR)))
    # The long cells whether or not they converged (sensitivity): here the one long cell, still improving.
    check_pool(facts, "long_", hand_pool(hand_cells(synthetic, method, LONG)))
    assert facts["still_improving_cells"] == list(hand_cells(synthetic, method, LONG))
    by_people = {name: cell for name, cell in headline.items() if cell["source"] in ("digits", "mnist")}
    check_pool(facts, "people_", hand_pool(by_people))
    check_pool(facts, "code_", hand_pool({name: cell for name, cell in headline.items() if name not in by_people}))
    assert facts["near_floor_configurations"] == len(hand_cells(synthetic, method, ["glyphs-open-c1000"]))
    # The absolute scale beside it, and the margin in score units.
    absolute = hand_pool({name: cell | {"relative": cell["difference"], "relative_se": cell["standard_error"]}
                          for name, cell in headline.items()})
    assert facts["absolute_mean"] == pytest.approx(absolute["mean"])
    references = [synthetic["made"][name]["scores"]["fixed_adacos"].mean() for name in HEADLINE
                  if method in synthetic["made"][name]["scores"]]
    assert facts["absolute_margin"] == pytest.approx(RELATIVE_MARGIN * np.mean(references))
    # The verdict reads the prediction interval (n/a below 3 sources), the mean's judgement the CI.
    pool = hand_pool(headline)
    assert facts["judgement"] == judgement(pool.get("prediction_low", math.nan), pool.get("prediction_high", math.nan))
    assert facts["mean_judgement"] == judgement(pool["low"], pool["high"])


def test_the_arcface_verdict_reads_the_prediction_interval_not_the_mean(synthetic):
    arcface = synthetic["pooled"].set_index("method").loc["arcface_tuned"]
    # Its mean over 4 sources is within ±2%, but a new source may land past the margin on either side.
    assert arcface["sources"] == 4 and arcface["configurations"] == 6
    assert arcface["mean_judgement"] == "equivalent" and arcface["judgement"] == "open"
    assert arcface["prediction_low"] < -RELATIVE_MARGIN and arcface["prediction_high"] > RELATIVE_MARGIN
    assert arcface["equivalent_from"] == pytest.approx(max(-arcface["prediction_low"], arcface["prediction_high"]))
    cosface = synthetic["pooled"].set_index("method").loc["cosface_tuned"]
    assert cosface["sources"] == 2 and cosface["judgement"] == "n/a" and math.isnan(cosface["equivalent_from"])


def test_every_method_is_pooled_tuned_first(synthetic):
    assert synthetic["pooled"]["method"].tolist() == ["arcface_tuned", "cosface_tuned", "dynamic_adacos", "p2sgrad",
                                                      "softmax", "arcface_default"]
    assert synthetic["pooled"]["tuned"].tolist() == [True, True, False, False, False, False]


@pytest.mark.parametrize("low, high, expected", [
    (0.02, 0.05, "better"), (0.021, 0.05, "better"), (0.019, 0.05, "slightly better"),
    (-0.05, -0.02, "worse"), (-0.05, -0.019, "slightly worse"),
    (-0.019, 0.019, "equivalent"), (0.001, 0.015, "equivalent"), (-0.02, 0.01, "open"), (-0.01, 0.02, "open"),
    (-0.03, 0.03, "open"), (0.005, 0.03, "slightly better"), (-0.03, -0.005, "slightly worse"),
    (math.nan, 0.01, "n/a"), (-0.01, math.inf, "n/a"),
])
def test_the_judgement_reads_an_interval_against_the_two_percent_margin(low, high, expected):
    assert RELATIVE_MARGIN == 0.02
    assert judgement(low, high) == expected


def test_a_wider_margin_changes_the_judgement():
    assert judgement(-0.03, 0.03) == "open" and judgement(-0.03, 0.03, margin=0.04) == "equivalent"
    assert judgement(0.03, 0.05, margin=0.04) == "slightly better"


@pytest.mark.parametrize("low, high, expected", [
    (-0.01, 0.03, (0.03, math.nan, math.nan)),
    (0.005, 0.03, (0.03, 0.005, math.nan)),
    (-0.04, -0.01, (0.04, math.nan, -0.01)),
    (math.nan, 0.03, (math.nan, math.nan, math.nan)),
])
def test_the_margin_reading_gives_the_smallest_margin_and_the_reliable_gain(low, high, expected):
    reading = margin_reading(low, high)
    got = (reading["equivalent_from"], reading["reliable_gain"], reading["reliable_loss"])
    assert got == pytest.approx(expected, nan_ok=True)
    if math.isfinite(reading["equivalent_from"]):  # just past that margin the interval shows equivalence
        assert judgement(low, high, margin=reading["equivalent_from"] + 1e-9) == "equivalent"
        assert judgement(low, high, margin=reading["equivalent_from"] - 1e-6) != "equivalent"


def untuned_table(entries) -> pd.DataFrame:
    return pd.DataFrame([{"method": method, "mean": mean, "low": low, "high": high}
                         for method, mean, low, high in entries])


def test_the_best_untuned_method_is_the_highest_untuned_mean():
    pooled = untuned_table([("arcface_tuned", 0.5, 0.4, 0.6), ("dynamic_adacos", 0.01, 0.005, 0.015),
                            ("softmax", 0.03, -0.01, 0.07), ("p2sgrad", math.nan, math.nan, math.nan)])
    assert best_untuned(pooled) == {"method": "softmax", "mean": 0.03, "low": -0.01, "high": 0.07, "distinct": False,
                                    "pool": "converged"}
    short = pooled.rename(columns={key: f"short_{key}" for key in ("mean", "low", "high")}).assign(
        mean=math.nan, low=math.nan, high=math.nan)
    assert best_untuned(short, "short_")["method"] == "softmax" and best_untuned(short)["method"] == "fixed_adacos"
    pooled = untuned_table([("dynamic_adacos", 0.01, 0.005, 0.015), ("softmax", -0.03, -0.05, -0.01)])
    assert best_untuned(pooled)["method"] == "dynamic_adacos" and best_untuned(pooled)["distinct"]
    # None above Fixed AdaCos: it stays the answer.
    pooled = untuned_table([("dynamic_adacos", -0.01, -0.02, 0.0), ("softmax", -0.03, -0.05, -0.01)])
    assert best_untuned(pooled)["method"] == "fixed_adacos"


def test_the_synthetic_benchmarks_best_untuned_method_is_softmax(synthetic):
    best = best_untuned(synthetic["pooled"])
    softmax = synthetic["pooled"].set_index("method").loc["softmax"]
    assert best["method"] == "softmax" and best["mean"] == pytest.approx(softmax["mean"])
    assert best["distinct"] == (softmax["low"] > 0)


def test_the_trend_in_classes_is_estimated_within_one_source_only():
    # Real sources at small C gain 10%, the glyphs gain about 1% whatever C: the slope across sources is steep, the
    # one within glyphs exactly 0 (its residuals are orthogonal to log C).
    classes = np.array([50.0, 100.0, 300.0, 1000.0])
    x = np.log10(classes)
    design = np.column_stack([np.ones(4), x])
    wiggle = np.array([1.0, -2.0, 0.5, 0.3])
    wiggle -= design @ np.linalg.lstsq(design, wiggle, rcond=None)[0]
    rows = pd.DataFrame(
        [{"primary": True, "method": "arcface_tuned", "protocol": "open", "source": "glyphs", "train_classes": c,
          "difference": 0.01 + 0.003 * w} for c, w in zip(classes, wiggle)]
        + [{"primary": True, "method": "arcface_tuned", "protocol": "open", "source": "mnist", "train_classes": c,
            "difference": d} for c, d in ((10, 0.10), (20, 0.09))]
        + [{"primary": True, "method": "arcface_tuned", "protocol": "closed", "source": "digits", "train_classes": 10,
            "difference": 0.2}, {"primary": False, "method": "arcface_tuned", "protocol": "open", "source": "glyphs",
                                 "train_classes": 10, "difference": 0.5}])
    every = rows[rows["primary"] & (rows["protocol"] == "open")]
    assert np.polyfit(np.log10(every["train_classes"]), every["difference"], 1)[0] < -0.03  # what must not leak in
    trend = trend_in_classes(rows, 0.95)
    assert trend["source"] == "glyphs" and trend["classes"] == [50, 100, 300, 1000] and trend["k"] == 4
    assert trend["slope"] == pytest.approx(0.0, abs=1e-12)
    residual = 0.003 * wiggle
    half = stats.t.ppf(0.975, 2) * math.sqrt(np.sum(residual ** 2) / 2 / np.sum((x - x.mean()) ** 2))
    assert (trend["low"], trend["high"]) == pytest.approx((-half, half))
    assert math.isnan(trend_in_classes(rows[rows["source"] == "digits"], 0.95)["slope"])


# --- tuners and the long regime -------------------------------------------------------------------------------------


def test_value_at_interpolates_between_points_and_is_nan_outside():
    curve = pd.DataFrame({"n": [1, 2, 3], "expected_test": [0.5, 0.6, 0.7], "low": [0.4, 0.5, np.nan]})
    assert value_at(curve, 1.25, "n", "expected_test") == pytest.approx(0.525)
    assert value_at(curve, 2.0, "n", "expected_test") == pytest.approx(0.6)
    assert value_at(curve, 1.0, "n", "expected_test") == pytest.approx(0.5)
    assert value_at(curve, 3.0, "n", "expected_test") == pytest.approx(0.7)
    for budget in (0.5, 3.5, math.nan):
        assert math.isnan(value_at(curve, budget, "n", "expected_test")), budget
    assert math.isnan(value_at(curve, 2.5, "n", "low"))  # a missing end point
    unknown = curve.assign(iterations=np.nan)  # a cell whose landscape does not record iterations
    assert math.isnan(value_at(unknown, math.nan, "iterations", "expected_test"))


def test_tuners_are_compared_at_equal_trials_and_at_equal_iterations(synthetic):
    rows, root = synthetic["rows"], synthetic["root"]
    curves = {cell: tuning_curve(root / cell, "arcface") for cell in rows.loc[rows["method"] == "arcface_tuned", "cell"]}
    table = tuner_table(rows, curves).set_index("tuner")
    assert set(table["configuration"]) == {"digits-closed"} and set(table.index) == {"random", "tpe-median"}
    # Random search: 8 completed trials of 200 iterations per split; the pruned TPE search 8 completed and 12 pruned
    # at 50 iterations per split, 110 iterations a trial on average. Both reached 8 trials; random search's curve
    # ends at 1,600 iterations, where TPE has run 1,600 / 110 trials.
    assert table.loc["random", "iterations_per_trial"] == pytest.approx(200.0)
    assert table.loc["tpe-median", "iterations_per_trial"] == pytest.approx(110.0)
    assert table["budget"].tolist() == [8, 8] and table["iterations_budget"].tolist() == pytest.approx([1600, 1600])
    assert table.loc["random", "test_at_budget"] == pytest.approx(0.8 + 0.01 * 8)
    assert table.loc["tpe-median", "test_at_budget"] == pytest.approx(0.82 + 0.005 * 8)
    assert table.loc["tpe-median", "high_at_budget"] == pytest.approx(0.82 + 0.005 * 8 + 0.01)
    trials = 1600.0 / 110.0
    assert table.loc["tpe-median", "trials_at_iterations"] == pytest.approx(trials)
    assert table.loc["random", "trials_at_iterations"] == pytest.approx(8.0)
    # Between the curve's points at 14 and 15 trials, linearly.
    assert table.loc["tpe-median", "test_at_iterations"] == pytest.approx(0.82 + 0.005 * trials)
    assert table.loc["tpe-median", "low_at_iterations"] == pytest.approx(0.82 + 0.005 * trials - 0.01)
    assert table.loc["random", "test_at_iterations"] == pytest.approx(0.88)
    assert table.loc["tpe-median", "pruned_trials"] == 36 and table.loc["tpe-median", "trials"] == 60


def test_tuner_table_needs_two_tuners_of_one_configuration(synthetic):
    rows = synthetic["rows"]
    assert tuner_table(rows[rows["cell"] != "digits-closed-tpe-median"], {}).empty


def test_the_long_regime_is_compared_with_its_short_configuration(synthetic):
    rows, root = synthetic["rows"], synthetic["root"]
    convergence = {cell: convergence_iterations(root / cell) for cell in rows["cell"].unique()}
    longer = longer_table(rows, convergence, 0.95).set_index("method")
    assert set(longer["long_cell"]) == {"mnist-pairs-open-c50-long"}
    assert set(longer["short_cell"]) == {"mnist-pairs-open-c50"}
    assert set(longer.index) == {"arcface_tuned", *UNTUNED_METHODS}
    made = synthetic["made"]
    for method in longer.index:
        long = hand_difference(made["mnist-pairs-open-c50-long"]["scores"], method)
        short = hand_difference(made["mnist-pairs-open-c50"]["scores"], method)
        row = longer.loc[method]
        change = long["difference"] - short["difference"]
        half = stats.t.ppf(0.975, min(long["df"], short["df"])) * math.hypot(long["standard_error"],
                                                                          short["standard_error"])
        assert (row["change"], row["change_low"], row["change_high"]) == pytest.approx(
            (change, change - half, change + half))
        assert (row["short_iterations"], row["long_iterations"]) == (200, 2000)
    # Convergence: the median run's iterations to 95% of its best val score, from each cell's convergence.csv.
    arcface = longer.loc["arcface_tuned"]
    assert (arcface["short_converged_at"], arcface["long_converged_at"]) == (120.0, 700.0)
    assert (arcface["reference_short_converged_at"], arcface["reference_long_converged_at"]) == (100.0, 900.0)
    assert math.isnan(longer.loc["softmax", "short_converged_at"])  # no convergence row for it


# --- the report end to end ------------------------------------------------------------------------------------------


def section(markdown: str, title: str) -> str:
    start = markdown.index(f"## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:end if end >= 0 else None]


def test_the_answer_leads_with_a_new_source_against_the_margin_and_the_best_untuned_method(aggregate):
    report_dir, written = aggregate
    details = written["details.md"].read_text()
    pooled = pd.read_csv(report_dir / "tables" / "pooled.csv").set_index("method")
    arcface, softmax = pooled.loc["arcface_tuned"], pooled.loc["softmax"]
    lead = section(details, "The evidence behind the answer").split("\n\n")[1]
    assert lead.startswith("At convergence, tuned ArcFace − Fixed AdaCos on a new data source is expected in "
                           f"{pct_interval(arcface['prediction_low'], arcface['prediction_high'])} of Fixed AdaCos's "
                           "score (4 sources): ")
    assert lead.endswith(".") and "±2% of the score" in lead
    assert JUDGEMENT_WORDS["open"] in lead and JUDGEMENT_WORDS["equivalent"] not in lead  # the prediction, not the CI
    assert ("Trained short (6 of the 7 short cells converged), a new source should expect "
            f"{pct_interval(arcface['short_prediction_low'], arcface['short_prediction_high'])}") in lead
    assert (f"Of the losses that need no tuning, Softmax scores highest on average at convergence "
            f"({pct(softmax['mean'])} {pct_interval(softmax['low'], softmax['high'])})") in lead


def test_the_report_has_every_method_in_its_table_and_its_scope(aggregate):
    report_dir, written = aggregate
    markdown = written["details.md"].read_text()
    answer = section(markdown, "The evidence behind the answer")
    table = answer[answer.index("| method | needs tuning |"):].split("\n\n")[0].splitlines()[2:]
    assert [line.split(" | ")[0].lstrip("| ") for line in table] == [
        "ArcFace tuned", "CosFace tuned", "Dynamic AdaCos", "P2SGrad", "Softmax", "ArcFace default"]
    # The converged cells the headline pools first, counted from the fixture's declaration, then the short regime's
    # configurations.
    pooled = [cell for cell in CELLS if cell[0] in HEADLINE]
    classes, sources = [cell[6] for cell in pooled], {cell[4] for cell in pooled}
    assert (f"How far this carries: The headline pools {len(pooled)} converged cells of {len(sources)} sources "
            f"(C = {min(classes)}–{max(classes)}, 200–200 iterations per run; every method at one shared learning "
            "rate). The short regime: 7 configurations from "
            "4 independent sources (digits, glyphs, mnist, strokes; made by people: digits, mnist), C = 10–1,000 "
            "training classes, one small CNN trained 200–200 iterations per run.") in answer
    assert f"scores below {NEAR_FLOOR_SCORE} (glyphs-open-c1000)" in answer
    # The search against the budget-matched control, counted over the configurations it was computed on.
    assert "the search was ahead on" in markdown and "of 7 configurations." in section(markdown, "What tuning costs, cell by cell")
    assert "On **mnist-pairs-open-c50**, training 2,000 iterations instead of 200" in markdown
    tuners = section(markdown, "Tuners at equal trials and iterations")
    assert "(8 trials)" in tuners and "(1,600 iterations)" in tuners and "| nan" not in tuners
    assert "Within glyphs (C = 50, 300, 1,000)" in markdown


def test_the_report_prints_no_number_outside_the_metrics_range(aggregate):
    _, written = aggregate
    markdown = written["report.md"].read_text() + written["details.md"].read_text()
    cells = section(written["details.md"].read_text(), "Cells")
    lines = [line.strip("|").split(" | ") for line in cells.splitlines() if line.startswith("| ")]
    header = [name.strip() for name in lines[0]]
    detectable = {(line[0].strip(), line[1].strip()): line[header.index("detectable")].strip() for line in lines[2:]}
    assert detectable[("glyphs-open-c1000", "Softmax")] == "not detectable with these splits"
    assert detectable[("glyphs-open-c1000", "P2SGrad")] == "n/a"  # no detectable difference known
    assert re.fullmatch(r"0\.\d{4}", detectable[("digits-closed", "Softmax")])
    assert "2.57" not in markdown
    scores = [float(number) for number in re.findall(r"[+-]?\d+\.\d{4}\b", markdown)]
    assert scores and max(abs(number) for number in scores) <= 1.0


def test_the_aggregate_writes_its_tables_json_and_figures(aggregate):
    report_dir, written = aggregate
    pooled = pd.read_csv(report_dir / "tables" / "pooled.csv").set_index("method")
    words = pd.read_csv(report_dir / "tables" / "pooled.csv", keep_default_na=False).set_index("method")
    facts = json.loads(written["benchmark.json"].read_text())
    assert facts["margin"] == RELATIVE_MARGIN and facts["best_untuned"]["method"] == "softmax"
    assert list(facts["pooled"]) == list(pooled.index)
    for method, numbers in facts["pooled"].items():
        for key in ("mean", "low", "high", "prediction_low", "prediction_high", "short_mean", "people_mean",
                    "code_mean", "absolute_mean", "equivalent_from"):
            expected = pooled.loc[method, key]
            assert (numbers[key] is None and math.isnan(expected)) or numbers[key] == pytest.approx(expected), \
                (method, key)
        assert numbers["judgement"] == words.loc[method, "judgement"]
    coverage = pd.read_csv(report_dir / "tables" / "pooled_coverage.csv")
    read = coverage[coverage["read"].astype(bool)]
    assert len(read) and {"arcface_tuned", "softmax"} <= set(read["method"])
    assert ((read["coverage"] >= 0) & (read["coverage"] <= 1)).all()
    cells = pd.read_csv(report_dir / "tables" / "cells.csv")
    assert set(cells["cell"]) == {cell[0] for cell in CELLS}
    html = written["report.html"].read_text()
    linked = re.findall(r'<img src="([^"]+)"', html)
    assert linked and all((report_dir / source).is_file() for source in linked) and "base64" not in html
    for name in ("methods.png", "forest_arcface_tuned.png", "forest_cosface_tuned.png", "tuners.png"):
        with Image.open(report_dir / "figures" / name) as image:
            assert image.format == "PNG" and image.size[0] > 500


def test_the_training_length_sentence_reads_each_convergence_as_reached_or_not():
    import math

    from study.benchmark.sentences import longer_sentences

    row = {"configuration": "glyphs-open-c100", "long_cell": "glyphs-open-c100-long", "method": "arcface_tuned",
           "short_iterations": 234, "long_iterations": 2340, "short_difference": -0.0074, "long_difference": 0.0535, "change": 0.0609,
           "change_low": 0.0292, "change_high": 0.0925, "reference_short_converged_at": math.nan,
           "reference_long_converged_at": math.nan, "short_converged_at": math.nan, "long_converged_at": 880.0}
    sentence, = longer_sentences(pd.DataFrame([row]))
    assert "moves from -0.0074 to +0.0535 (change +0.0609 [+0.0292, +0.0925])" in sentence  # resolved: no caveat
    assert "by Fixed AdaCos in neither, by tuned ArcFace only in the long one, after 880 iterations" in sentence
    sentence, = longer_sentences(pd.DataFrame([{**row, "change_low": -0.01, "reference_short_converged_at": 50.0,
                                                "reference_long_converged_at": 80.0}]))
    assert "not resolved" in sentence and "by Fixed AdaCos after 50 and 80 iterations" in sentence
    assert "learning rate" not in sentence
    sentence, = longer_sentences(pd.DataFrame([{**row, "rate_chosen": True}]))
    assert sentence.startswith("On **glyphs-open-c100**, training 2,340 iterations instead of 234 with each method at "
                               "its val-chosen learning rate, tuned ArcFace − Fixed AdaCos moves from -0.0074")


def test_the_answer_shows_the_pool_with_the_long_cells_still_improving_beside_the_headline(synthetic):
    facts = synthetic["pooled"].set_index("method", drop=False).loc["arcface_tuned"].to_dict()
    long = hand_pool(hand_cells(synthetic, "arcface_tuned", LONG))
    assert (f"With the long cells still improving too (mnist-pairs-open-c50-long): {pct(long['mean'])} [n/a], a new "
            "source [n/a] (1 source; sensitivity).") in method_sentence(facts)
    assert "still improving" not in method_sentence(facts | {"still_improving_cells": []})
    assert ("the same, with the long cells still improving (sensitivity)", "[n/a] (1 source)") in benchmark_card(
        facts, [], synthetic["rows"]).how_sure


def test_the_headline_takes_each_datas_longest_converged_cell():
    rows = pd.DataFrame([
        {"cell": "a", "configuration": "a", "longer_of": None, "primary": True, "regime": "short", "iterations": 100,
         "converged": True, "relative": 0.01, "relative_se": 0.01, "method": "arcface_tuned"},
        {"cell": "a-long", "configuration": "a-long", "longer_of": "a", "primary": False, "regime": "long",
         "iterations": 1000, "converged": True, "relative": 0.05, "relative_se": 0.01, "method": "arcface_tuned"},
        {"cell": "b", "configuration": "b", "longer_of": None, "primary": True, "regime": "short", "iterations": 100,
         "converged": False, "relative": 0.02, "relative_se": 0.01, "method": "arcface_tuned"},
        {"cell": "a-tpe", "configuration": "a", "longer_of": None, "primary": False, "regime": "short",
         "iterations": 100, "converged": True, "relative": 0.03, "relative_se": 0.01, "method": "arcface_tuned"}])
    assert headline_cells(rows)["cell"].tolist() == ["a-long"]  # b still improving; a-tpe another tuner's cell


def test_a_selected_s_near_either_end_of_the_log_range_counts_as_at_its_edge():
    from study.benchmark.cells import splits_at_edge

    # On [1, 128] (log-width ln 128), 5% of it is a factor 128 ** 0.05 ≈ 1.27 from either end.
    landscape = pd.DataFrame({"loss": "arcface", "best": [True, True, True, True, False],
                              "s": [1.2, 1.3, 100.0, 128.0, 1.0], "split": [0, 1, 2, 3, 0]})
    assert splits_at_edge(landscape, "arcface", (1.0, 128.0)) == 2  # 1.2 and 128; 1.3 and 100 inside; 1.0 not best
    assert splits_at_edge(landscape, "arcface", (0.25, 512.0)) == 0


def test_training_length_per_source_sets_the_short_mean_beside_the_converged_one():
    def cell(name, source, regime, iterations, converged, relative, longer_of=None):
        return {"cell": name, "configuration": name, "source": source, "longer_of": longer_of,
                "primary": regime == "short", "regime": regime, "iterations": iterations, "converged": converged,
                "relative": relative, "relative_se": 0.01, "method": "arcface_tuned"}
    rows = pd.DataFrame([cell("g50", "glyphs", "short", 100, False, 0.01),
                         cell("g100", "glyphs", "short", 200, False, 0.03),
                         cell("g100-conv", "glyphs", "long", 4000, True, 0.05, "g100"),
                         cell("d", "digits", "short", 96, False, -0.02)])
    table = length_by_source(rows).set_index("source")
    assert table.loc["glyphs", "short_relative"] == pytest.approx(0.02)
    assert table.loc["glyphs", "short_iterations"] == "100–200"
    assert table.loc["glyphs", "converged_relative"] == pytest.approx(0.05)
    assert table.loc["glyphs", "converged_cells"] == 1
    assert table.loc["digits", "converged_cells"] == 0 and math.isnan(table.loc["digits", "converged_relative"])


def test_a_class_count_range_where_a_method_beats_fixed_adacos_beyond_the_margin():
    def cell(name, classes, low, source="glyphs", longer_of=None):
        return {"cell": name, "configuration": name, "source": source, "train_classes": classes,
                "primary": longer_of is None, "method": "softmax", "low": low, "difference": low + 0.01,
                "high": low + 0.02, "reference_test_mean": 0.5, "regime": "long" if longer_of else "short",
                "longer_of": longer_of}
    rows = pd.DataFrame([cell("c50", 50, 0.02), cell("c100", 100, -0.01), cell("c300", 300, 0.015),
                         cell("c1000", 1000, 0.05), cell("digits", 10, 0.5, source="digits")])
    found = beyond_margin_from(rows, "softmax")
    # Beyond +2% of 0.5 (= 0.01 in score) from C = 300 on; C = 50 alone is no range; digits has one class count.
    assert found["from_classes"] == 300 and found["cells"] == ["c300", "c1000"]
    assert found["relative"] == pytest.approx([0.05, 0.12])
    assert found["longer_cells"] == [] and not found["longer_behind"]  # no longer cell: nothing said of one
    assert beyond_margin_from(rows.assign(low=0.0), "softmax") is None
    # The same configurations trained longer: behind by more than the margin in both (high ≤ −0.01), or not in one.
    behind = pd.concat([rows, pd.DataFrame([cell("c1000-conv", 1000, -0.06, longer_of="c1000"),
                                            cell("c300-conv", 300, -0.04, longer_of="c300")])], ignore_index=True)
    found = beyond_margin_from(behind, "softmax")
    assert found["cells"] == ["c300", "c1000"] and found["longer_cells"] == ["c300-conv", "c1000-conv"]
    assert found["longer_relative"] == pytest.approx([-0.06, -0.10]) and found["longer_behind"]
    level = behind.assign(high=np.where(behind["cell"] == "c300-conv", -0.005, behind["high"]))  # within 0.01
    assert not beyond_margin_from(level, "softmax")["longer_behind"]
    # The answer states a range only where cells trained beyond the short regime show it: all short here.
    assert wins_beyond_short_training(behind, ["softmax"]) == []
    mixed = rows.assign(regime=np.where(rows["cell"] == "c1000", "long", rows["regime"]))
    assert [win["cells"] for win in wins_beyond_short_training(mixed, ["softmax"])] == [["c300", "c1000"]]


def test_a_cells_convergence_is_read_from_its_curves(tmp_path):
    tables = tmp_path / "reports" / "tables"
    tables.mkdir(parents=True)
    pd.DataFrame({"method": ["fixed_adacos"] * 3 + ["softmax"] * 3, "iteration": [0, 50, 100] * 2,
                  "mean": [0.1, 0.5, 0.504, 0.1, 0.5, 0.6]}).to_csv(tables / "curves.csv", index=False)
    rises, basis = cell_plateau(tmp_path)
    assert basis == "mean curve" and rises["fixed_adacos"] == pytest.approx(0.008) and rises["softmax"] == pytest.approx(0.2)
    curves = pd.DataFrame({"method": "softmax", "split": 0, "seed": [0, 0, 1, 1], "iteration": [50, 100] * 2,
                           "val": [0.5, 0.5, 0.4, 0.6], "test": 0.0})
    curves.to_csv(tables / "learning_curves.csv", index=False)
    rises, basis = cell_plateau(tmp_path)  # every run's curve, once the cell kept them
    assert basis == "runs" and rises["softmax"] == pytest.approx((0.55 - 0.45) / 0.45)


def test_a_new_sources_true_effect_and_the_weighting_are_printed_beside_the_interval_read(synthetic):
    from study.analysis import bayesian_true_effect, weighting_sensitivity

    facts = synthetic["pooled"].set_index("method").loc["arcface_tuned"]
    cells = synthetic["rows"][(synthetic["rows"]["method"] == "arcface_tuned")
                              & synthetic["rows"]["cell"].isin(SHORT)]
    bayes = bayesian_true_effect(cells["relative"], cells["relative_se"], cells["source"])
    weights = weighting_sensitivity(cells["relative"], cells["relative_se"], cells["source"])
    assert (facts["short_true_low"], facts["short_true_high"]) == (pytest.approx(bayes.prediction_low),
                                                                     pytest.approx(bayes.prediction_high))
    assert facts["short_inverse_variance_mean"] == pytest.approx(weights.inverse_variance_mean)
    assert facts["short_judgement"] == judgement(facts["short_prediction_low"], facts["short_prediction_high"])


def test_the_replay_says_what_the_futile_stops_gave_up():
    from study.benchmark.replay import REPLAY_COLUMNS, replay_sentences

    def row(cell, decision, round_, without, without_round, low=0.0):
        return {"cell": cell, "source": "s", "regime": "long", "converged": True, "splits": 3, "budget": 10,
                "stopped_round": round_, "trainings": 3 * round_ + 6, "design_trainings": 42, "decision": decision,
                "difference": 0.01, "low": -0.05, "high": 0.06, "prior_weight": 0.5, "full_design": "undecided",
                "full_design_difference": 0.01, "agrees": True, "without_futility_round": without_round,
                "without_futility_decision": without, "without_futility_low": low}

    replayed = pd.DataFrame([row("a", "futile", 2, "budget_spent", 10), row("b", "futile", 3, "tuning_pays", 9, 0.024),
                             row("c", "tuning_pays", 5, "tuning_pays", 5, 0.03)], columns=REPLAY_COLUMNS)
    sentences = replay_sentences(replayed)
    # (10 − 2) + (9 − 3) rounds of 3 splits
    assert ("It stopped as futile in 2; without that stop it would have trained 42 more trials there and decided 1 of "
            "them: b (tuning pays at round 9, at least +2.4%).") in sentences[1]
    assert sentences[2] == "Its decision matched the full design's verdict in every cell."
    assert replay_sentences(replayed.iloc[2:])[1] == "The advice never stopped as futile here."
    # Where the advice and the full design disagree: one bullet per cell, not one growing sentence.
    disagree = replayed.assign(agrees=[False, True, False], full_design=["equivalent", "undecided", "paid"])
    blocks = replay_sentences(disagree)
    assert blocks[2] == "It differed from the full design's verdict in 2 of 3:"
    assert blocks[3].items == ["a: the advice stopped as futile at round 2 of 10 (+1.0% [-5.0%, +6.0%]); the full "
                               "design found them equivalent.",
                               "c: the advice said tuning pays at round 5 of 10 (+1.0% [-5.0%, +6.0%]); the full "
                               "design found tuning pays."]
    assert blocks[4].endswith("in 2 of the 2 the two estimates have the same sign.")


def test_a_converged_only_cell_is_read_in_the_long_regime_and_pooled_only_there(tmp_path):
    """A configuration with no short cell (`converged_only` in the plan): its rows are long-regime, and it enters the
    converged headline, not the short regime's pool."""
    cell = ("strokes-open-c100", "strokes-open-c100", "random", False, "strokes", "open", 100, 0.40, ["arcface"], None,
            4000)
    plan_path, _ = synthetic_benchmark(tmp_path, cells=[CELLS[0], cell])
    plan = json.loads(plan_path.read_text())
    plan["cells"][1]["converged_only"] = True
    rows = read_cells(plan, tmp_path)
    only = rows[rows["cell"] == "strokes-open-c100"]
    assert set(only["regime"]) == {"long"} and not only["primary"].any()
    assert "strokes-open-c100" in set(headline_cells(rows)["cell"])
    plan["cells"][1]["converged_only"] = False  # the same cell read as a plain non-primary one: in neither pool
    assert "strokes-open-c100" not in set(headline_cells(read_cells(plan, tmp_path))["cell"])


def test_a_cell_that_chose_the_learning_rate_by_val_leads_its_configuration_before_a_longer_one():
    """The protocol's cell (each method at its val-chosen rate) is the headline's for its data, even against a longer
    shared-rate cell; where it did not converge, no shared-rate cell takes its place (one protocol in every pooled
    number); the shared-rate pool keeps what the headline was before."""
    def row(cell, data, iterations, converged, chosen):
        return {"cell": cell, "configuration": cell, "longer_of": data, "primary": False, "regime": "long",
                "iterations": iterations, "converged": converged, "relative": 0.01, "relative_se": 0.01,
                "method": "arcface_tuned", "rates": 3 if chosen else 1}
    rows = pd.DataFrame([row("a-long", "a", 1000, True, False), row("a-lr", "a", 1000, True, True),
                         row("c-long", "c", 2000, True, False), row("c-lr", "c", 500, True, True),
                         row("d-long", "d", 1000, True, False), row("d-lr", "d", 3000, False, True)])
    assert sorted(headline_cells(rows)["cell"]) == ["a-lr", "c-lr"]
    assert sorted(headline_cells(rows[rows["rates"] == 1])["cell"]) == ["a-long", "c-long", "d-long"]
    assert "c-long" in set(headline_cells(rows.drop(columns="rates"))["cell"])  # rows before rates: longest
    # The sensitivity pool takes the same cells but whether or not they converged: d-lr, still improving, too.
    assert sorted(long_cells(rows)["cell"]) == ["a-lr", "c-lr", "d-lr"]


def chosen_rate_benchmark(root: Path) -> tuple[pd.DataFrame, dict, dict]:
    """The synthetic benchmark with one more cell of Double MNIST's data that chose each method's learning rate from
    three by val (tuned ArcFace −5% there): its rows, ArcFace's pooled row and the plan."""
    ARCFACE.setdefault("mnist-pairs-open-c50-lr", -0.05)
    lr_cell = ("mnist-pairs-open-c50-lr", "mnist-pairs-open-c50-lr", "random", False, "mnist", "open", 50, 0.60,
               ["arcface"], "mnist-pairs-open-c50", 2000)
    plan_path, _ = synthetic_benchmark(root, cells=[*CELLS, lr_cell])
    plan = json.loads(plan_path.read_text())
    plan["cells"][-1]["learning_rates"] = [0.003, 0.009, 0.027]
    rows = read_cells(plan, root)
    return rows, pooled_table(rows, 0.95).set_index("method").loc["arcface_tuned"].to_dict() | {
        "method": "arcface_tuned"}, plan


def test_the_headline_reads_the_chosen_rate_cell_and_keeps_the_shared_rate_pool_beside_it(tmp_path):
    rows, arcface, plan = chosen_rate_benchmark(tmp_path)
    shared = rows[rows["cell"] != "mnist-pairs-open-c50-lr"]
    before = pooled_table(shared, 0.95).set_index("method").loc["arcface_tuned"]
    headline = headline_cells(rows[rows["method"] == "arcface_tuned"])["cell"].tolist()
    assert "mnist-pairs-open-c50-lr" in headline and "mnist-pairs-open-c50" not in headline
    assert arcface["rate_chosen_cells"] == 1 and before["rate_chosen_cells"] == 0
    for key in ("mean", "prediction_low", "prediction_high", "sources"):
        assert arcface[f"shared_rate_{key}"] == pytest.approx(before[key])  # what the headline was before the cell
    assert arcface["mean"] < before["mean"]  # the chosen-rate cell's −5% replaced Double MNIST's +3.8%
    sentence = method_sentence(arcface)
    assert (f"With every method at one shared learning rate instead: {pct(before['mean'])} "
            f"{pct_interval(before['low'], before['high'])}, a new source "
            f"{pct_interval(before['prediction_low'], before['prediction_high'])}") in sentence
    assert "shared learning rate" not in method_sentence(before.to_dict() | {"method": "arcface_tuned"})
    card = benchmark_card(arcface, [], rows)
    # Fixed AdaCos needs one training per learning rate val chooses among (3), which the search's count is set against.
    chosen = extra_trainings(rows[rows["cell"] == "mnist-pairs-open-c50-lr"])
    assert chosen["reference"] == 3 and chosen["extra"] == chosen["trials"] - 3
    assert f"for {extra_trainings(rows)['extra']} more trainings per split" in card.sentences[0]
    assert ("the same, every method at one shared learning rate (sensitivity)",
            f"{pct_interval(before['prediction_low'], before['prediction_high'])} ({before['sources']} sources)"
            ) in card.how_sure
    assert ("1 of them with each method at its val-chosen learning rate, the protocol's, the others at one shared "
            "rate). ") in scope_sentence(plan, rows)


def test_an_untuned_method_trains_its_runs_at_every_rate_val_chose_among(tmp_path):
    """A cell's device-seconds count an untuned method's runs once per learning rate (val chose among them), a tuned
    method's once (its selected trial's rate)."""
    rows, _, plan = chosen_rate_benchmark(tmp_path)
    cell = rows[rows["cell"] == "mnist-pairs-open-c50-lr"].iloc[0]
    facts = next(c for c in plan["cells"] if c["name"] == "mnist-pairs-open-c50-lr")
    shared = {key: value for key, value in facts.items() if key != "learning_rates"}  # the same cell, one rate
    one_rate = cell_rows(shared, tmp_path / "mnist-pairs-open-c50-lr")[0]
    # write_cell: every run took 2.0 s, 9 runs per method; Fixed AdaCos and 4 untuned methods, ArcFace tuned
    untuned = 5 * 9 * 2.0
    assert cell["rates"] == 3 and one_rate["rates"] == 1
    assert cell["cell_seconds"] - one_rate["cell_seconds"] == pytest.approx(2 * untuned)
    assert cell["shared_final_seconds"] == pytest.approx(3 * untuned)


def test_the_rate_edges_count_the_splits_where_val_chose_the_grids_largest_or_smallest_rate():
    grid = [0.003, 0.009, 0.027]
    chosen = {"fixed_adacos": [0.027, 0.009, 0.027], "arcface_default": [0.027] * 3, "softmax": [0.003, 0.009, 0.009],
              "dynamic_adacos": [0.009] * 3, "arcface_tuned": [0.0097, 0.0165, 0.0147]}  # tuned: drawn, not a grid's
    runs = pd.DataFrame([{"method": method, "split": split, "lr": lr, "seed": seed}
                         for method, rates in chosen.items() for split, lr in enumerate(rates) for seed in (0, 1)])
    edges = rate_edges(runs, grid)
    assert edges == {"fixed_adacos": {"top": 2, "bottom": 0, "splits": 3},
                     "arcface_default": {"top": 3, "bottom": 0, "splits": 3},
                     "softmax": {"top": 0, "bottom": 1, "splits": 3},
                     "dynamic_adacos": {"top": 0, "bottom": 0, "splits": 3}}
    assert rate_edges(runs, None) == {} and rate_edges(runs.drop(columns="lr"), grid) == {}
    nothing = {"top": math.nan, "bottom": math.nan, "splits": math.nan}
    rows = pd.DataFrame([{"cell": "glyphs-lr", "method": method, "rates": 3,
                          **{f"reference_rate_{k}": v for k, v in edges["fixed_adacos"].items()},
                          **{f"rate_{k}": v for k, v in edges.get(method, nothing).items()}}
                         for method in chosen if method != "fixed_adacos"])
    sentence, beyond = rate_edge_sentences(rows)
    assert sentence == ("On glyphs-lr, val chose the learning-rate grid's edge: its largest for Fixed AdaCos on 2 of 3, "
                        "ArcFace default on 3 of 3 class splits; its smallest for Softmax on 1 of 3 class splits.")
    assert beyond.startswith("Beyond an edge a rate may score higher still") and "rate_edges.py" in beyond
    inside = rows.assign(reference_rate_top=0, rate_top=0, rate_bottom=0)
    assert rate_edge_sentences(inside) == ["On glyphs-lr, val chose a learning rate inside its grid for every untuned "
                                           "method on every class split."]
    assert rate_edge_sentences(rows.assign(rates=1)) == []


def test_an_untuned_method_ahead_within_noise_is_not_said_to_score_highest(synthetic):
    """The lead names the untuned method with the highest mean as such only where its interval excludes Fixed
    AdaCos's; within noise it says none is told apart, and gives that mean with its interval."""
    from study.benchmark.sentences import lead_sentence

    arcface = synthetic["pooled"].set_index("method").loc["arcface_tuned"].to_dict()
    best = {"method": "dynamic_adacos", "mean": 0.0004, "low": -0.0102, "high": 0.0110, "distinct": False,
            "pool": "converged"}
    lead = lead_sentence(arcface, best, [])
    assert ("Of the losses that need no tuning, none is told apart from Fixed AdaCos on average at convergence (the "
            "highest, Dynamic AdaCos: +0.0% [-1.0%, +1.1%]).**") in lead and "scores highest" not in lead
    lead = lead_sentence(arcface, best | {"mean": 0.03, "low": 0.01, "high": 0.05, "distinct": True}, [])
    assert "Dynamic AdaCos scores highest on average at convergence (+3.0% [+1.0%, +5.0%])" in lead


def test_the_device_seconds_are_split_by_regime_and_name_what_the_converged_headline_cost():
    """Hand counts: the untuned final runs a configuration's tuners share count once; the headline's cost is the
    chosen-rate converged cell's, not the shared-rate or unconverged long cells' beside it."""
    def cell(name, configuration, regime, seconds, shared, longer_of=None, converged=False, rates=1):
        return {"cell": name, "configuration": configuration, "regime": regime, "cell_seconds": seconds,
                "shared_final_seconds": shared, "longer_of": longer_of, "primary": regime == "short" and
                name == configuration, "iterations": 4000 if regime == "long" else 100, "relative": 0.01,
                "relative_se": 0.01, "converged": converged, "rates": rates, "method": "arcface_tuned"}

    rows = pd.DataFrame([cell("a", "a", "short", 100.0, 40.0), cell("a-tpe", "a", "short", 70.0, 40.0),
                         cell("a-conv", "a-conv", "long", 1000.0, 300.0, "a", True),
                         cell("a-conv-lr", "a-conv-lr", "long", 2500.0, 900.0, "a", True, 3),
                         cell("b-conv", "b-conv", "long", 500.0, 100.0, "b")])
    seconds = benchmark_seconds(rows)
    assert seconds["short"] == pytest.approx(60 + 30 + 40)  # a's shared untuned runs trained once
    assert seconds["longer"] == pytest.approx(4000)
    assert seconds["trained"] == pytest.approx(4130) and seconds["cells"] == pytest.approx(4170)
    assert (seconds["headline"], seconds["headline_cells"]) == (pytest.approx(2500), 1)


def test_a_cells_cost_counts_each_search_trial_at_its_iterations_and_each_final_run_at_every_rate(tmp_path):
    """Hand counts from what write_cell writes: 8 ArcFace trials a class split (3 splits) of the cell's iterations,
    0.5 s each, and 12 pruned ones of 50 iterations, 0.1 s each, in the pruned search; 9 final runs a method of 2.0 s,
    Fixed AdaCos and the 4 untuned methods at each learning rate val chose among, tuned ArcFace at its trial's one."""
    rows, _, _ = chosen_rate_benchmark(tmp_path)
    costs = cost_table(rows).set_index("cell")
    chosen = costs.loc["mnist-pairs-open-c50-lr"]  # 3 rates, 2,000 iterations
    finals = 5 * 9 * 3 + 9
    assert (chosen["trainings"], chosen["iterations_trained"]) == (24 + finals, (24 + finals) * 2000)
    assert chosen["seconds"] == pytest.approx(24 * 0.5 + finals * 2.0)
    assert chosen["seconds_per_iteration"] == pytest.approx(300 / 336_000)
    pruned = costs.loc["digits-closed-tpe-median"]  # one rate, 200 iterations
    assert (pruned["trainings"], pruned["iterations_trained"]) == (3 * 20 + 54, 3 * (8 * 200 + 12 * 50) + 54 * 200)
    assert pruned["seconds"] == pytest.approx(3 * (8 * 0.5 + 12 * 0.1) + 54 * 2.0)
    assert chosen["headline"] and not costs.loc["mnist-pairs-open-c50-long", "headline"]  # the latter unconverged


def test_the_cost_section_says_what_the_converged_answer_took_and_how_much_of_an_iteration_is_evaluation(tmp_path):
    """Hand-made cells: a's two longer cells train the same data to the same length at 10 and 20 ms an iteration;
    the learning-curve cell's runs spent a fifth of their seconds evaluating."""
    def cell(name, regime, seconds, iterations_trained, trainings, longer_of=None, converged=False, rates=1):
        return {"cell": name, "configuration": name, "source": "s", "train_classes": 50, "regime": regime,
                "cell_seconds": seconds, "cell_search_seconds": seconds / 4, "shared_final_seconds": 0.0,
                "longer_of": longer_of, "primary": regime == "short", "iterations": 4000 if regime == "long" else 100,
                "relative": 0.01, "relative_se": 0.01, "converged": converged, "rates": rates, "method": "arcface_tuned",
                "trainings": trainings, "iterations_trained": iterations_trained}

    rows = pd.DataFrame([cell("a", "short", 360.0, 6_000, 60),
                         cell("a-conv", "long", 1_000.0, 100_000, 25, "a", True),
                         cell("a-conv-lr", "long", 7_200.0, 360_000, 90, "a", True, 3),
                         cell("b-conv", "long", 500.0, 100_000, 25, "b")])
    runs = tmp_path / "curve-cell" / "reports" / "tables"
    runs.mkdir(parents=True)
    pd.DataFrame({"seconds": [100.0, 150.0], "eval_seconds": [20.0, 30.0], "iterations": [10_000, 15_000],
                  "device": ["cpu", "cpu"]}).to_csv(runs / "runs.csv", index=False)
    sentences = budget_sentences(benchmark_seconds(rows), cost_table(rows), ["c-conv2"], tmp_path / "curve-cell")
    assert sentences[1] == ("The converged answer's 1 cell trained 90 times: 2.0 h (7,200 s), about 1.0 h of a "
                            "2-core CPU's clock. Every longer cell, those still improving included (3): 2.4 h; the "
                            "short regime's 1 cell: 0.1 h. Not yet counted: 1 declared cell not finished (c-conv2).")
    assert sentences[2].startswith("An iteration cost 5.0–20.0 ms in the longer cells (median 10.0 ms), evaluation "
                                   "included; the same data trained to the same length cost up to 2.0× as much per "
                                   "iteration in one cell as in another")
    assert sentences[3] == ("How much of it is evaluation, measured on curve-cell (2 runs of 15,000 iterations, cpu): "
                            "8.0 ms an iteration without evaluation, 10.0 ms with its log-spaced evaluations of val "
                            "and test (25% more); evaluating more sparsely saves at most that share.")
    # Two converged cells: the costlier one priced apart from the rest (7,200 s; 1,800 s, half of it on the clock).
    two = rows.assign(converged=rows["converged"] | (rows["cell"] == "b-conv"),
                      cell_seconds=rows["cell_seconds"].where(rows["cell"] != "b-conv", 1_800.0))
    assert budget_sentences(benchmark_seconds(two), cost_table(two), [], tmp_path / "none")[1].startswith(
        "The converged answer's 2 cells trained 115 times: 2.5 h (9,000 s), about 1.2 h of a 2-core CPU's clock; its "
        "costliest cell, a-conv-lr (50 classes, 4,000 iterations a training), took 2.0 h of that, and the other 1 cell "
        "0.5 h, about 0.2 h of the clock. Every longer cell")
    alone = budget_sentences(benchmark_seconds(rows), cost_table(rows[rows["cell"] != "a-conv"]), [], tmp_path / "none")
    assert len(alone) == 3 and "as much per iteration" not in alone[2] and alone[1].endswith("0.1 h.")

    # The same runs on two GPUs, in a cell of their own: a run's seconds over its iterations and the runs sharing the
    # device, 60 / 10,000 / 12 = 0.5 ms and 40 / 10,000 / 4 = 1.0 ms, against the CPU's 100 / 10,000 / 2 = 5 ms (its
    # runs recorded no `parallel`: one per core of the 2-core CPU); the converged answer's 1.0 h of clock in 0.1–0.2 h.
    runs = tmp_path / "gpu-cell" / "reports" / "tables"
    runs.mkdir(parents=True)
    pd.DataFrame({"seconds": [60.0, 40.0, 40.0], "eval_seconds": [10.0] * 3, "iterations": [10_000] * 3,
                  "parallel": [12, 4, 4], "device": ["cuda:GPU X", "cuda:GPU Y", "cuda:GPU Y"]}).to_csv(
        runs / "runs.csv", index=False)
    on_gpu = budget_sentences(benchmark_seconds(rows), cost_table(rows), [], tmp_path / "curve-cell",
                              tmp_path / "gpu-cell")
    assert on_gpu[:4] == [*sentences[:1], sentences[1].split(" Not yet")[0], *sentences[2:4]]
    assert on_gpu[4] == ("On a GPU, the same runs trained again (gpu-cell) took 0.50 ms on GPU X (1 run, 12 at once) "
                         "and 1.00 ms on GPU Y (2 runs, 4 at once) of the device's clock an iteration (a run's seconds "
                         "over the runs sharing the device), against 5.00 ms on the 2-core CPU (2 at once): 5–10× "
                         "less. At that rate the converged answer's 1.0 h of 2-core clock would take 0.1–0.2 h of "
                         "such a GPU's; the small backbones leave a GPU waiting on the host, so more runs at once go "
                         "faster still.")
    # No GPU cell yet, or one with no runs: no sentence.
    assert budget_sentences(benchmark_seconds(rows), cost_table(rows), [], tmp_path / "curve-cell",
                            tmp_path / "no-gpu-cell") == on_gpu[:4]


def test_stopping_at_the_plateau_is_priced_from_the_curves_and_never_before_its_floor():
    """Hand counts: Fixed AdaCos levels off at iteration 80 of 160 (test 0.4 there, 0.5 at the end, where val peaks);
    tuned ArcFace's val rises 0.1 an evaluation and never stops. Not before a quarter of the length, Fixed AdaCos
    stops at 80: 480 of 640 iterations, tuned − Fixed goes from +10% (0.55 vs 0.5) to +37.5% (0.55 vs 0.4), Fixed
    AdaCos loses 20% of its score, and a quarter of the final runs' 800 s is saved. With no floor it stops at 10,
    where val has not moved, and keeps the test score at the start (0.05)."""
    steps = [0, 10, 20, 40, 80, 160]
    runs = {"fixed_adacos": ([0.1, 0.1, 0.3, 0.5, 0.502, 0.6], [0.05, 0.1, 0.2, 0.3, 0.4, 0.5]),
            "arcface_tuned": ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.05, 0.1, 0.2, 0.3, 0.4, 0.55])}
    curves = pd.DataFrame([(method, split, 0, step, value, test) for method, (val, tests) in runs.items()
                           for split in (0, 1) for step, value, test in zip(steps, val, tests)],
                          columns=["method", "split", "seed", "iteration", "val", "test"])
    stops = plateau_stop_table({"a": curves}, floors=(0.0, 0.25))
    quarter = stops[stops["earliest_share"] == 0.25].iloc[0]
    assert (quarter["iterations_trained"], quarter["iterations_stopped"]) == (640, 480)
    assert quarter["arcface_tuned_relative"] == pytest.approx(0.1)
    assert quarter["arcface_tuned_relative_stopped"] == pytest.approx(0.375)
    assert quarter["largest_loss"] == pytest.approx(-0.2) and quarter["largest_loss_method"] == "fixed_adacos"
    costs = pd.DataFrame({"cell": ["a"], "seconds": [1000.0], "search_seconds": [200.0]})
    summary = plateau_stop_summary(stops, costs)
    assert summary["iterations_kept"].tolist() == pytest.approx([340 / 640, 0.75])
    assert summary["seconds_saved"].tolist() == pytest.approx([800 * 300 / 640, 200.0])
    sentences = plateau_stop_sentences(summary, 3600.0)
    assert sentences[0] == (
        "Stopping at the plateau, a what-if read from the learning curves of the converged answer's 1 cells: had "
        "every final run stopped at the first evaluation where the plateau rule held on its curve so far, and not "
        "before a floor of 25% of its length, it would have trained 75% of their iterations, about 0.1 h less device "
        "time of 1.0 h. Tuned ArcFace − Fixed AdaCos would have moved by at most 27.50 percentage points in any "
        "cell, and no method's mean score would have lost more than 20.0% of Fixed AdaCos's (Fixed AdaCos on a, stopping no "
        "earlier than 25% of its length).")
    assert sentences[1] == ("Without a floor, runs stop at their first evaluations, where val has barely moved: 53% of "
                            "the iterations, and Fixed AdaCos's mean score on a falls by 90% of Fixed AdaCos's.")
    assert plateau_stop_sentences(summary[summary["earliest_share"] == 0], 3600.0) == []


def test_a_forest_draws_the_cells_its_summary_pools(tmp_path):
    """Tuned ArcFace's forest shows the converged headline's cells beside the converged mean; a loss with no converged
    cell shows the short regime's cells beside the short regime's mean."""
    rows, arcface, _ = chosen_rate_benchmark(tmp_path)
    drawn, summary, words = forest_pool(rows, arcface)
    assert set(drawn["cell"]) == set(headline_cells(rows[rows["method"] == "arcface_tuned"])["cell"])
    assert summary["prediction_low"] == arcface["prediction_low"] and "converged" in words
    short_only = arcface | {"prediction_low": math.nan}
    drawn, summary, words = forest_pool(rows, short_only)
    primary = rows[(rows["method"] == "arcface_tuned") & rows["primary"].astype(bool)]
    assert set(drawn["cell"]) == set(primary["cell"]) and drawn["regime"].eq("short").all()
    assert summary["mean"] == arcface["short_mean"] and "short regime" in words


def test_the_convergence_table_shows_a_rise_just_over_the_rule_as_over_it():
    """Fixed AdaCos's best val rose 1.04% (Triple MNIST at 18,720 iterations): one decimal would print the rule's own
    +1.0% beside "no"; the table prints the hundredth that decides it."""
    rows = pd.DataFrame([{"cell": "c", "iterations": 18_720, "regime": "long", "method": "arcface_tuned",
                          "primary": False, "reference_rise": 0.0104, "method_rise": 0.0093, "converged": False,
                          "plateau_basis": "runs"}])
    shown = convergence_shown(rows).iloc[0]
    assert (shown["Fixed AdaCos: rise over the second half"], shown["tuned ArcFace"]) == ("+1.04%", "+0.93%")
    assert shown["both converged (< 1%)"] == "no"


def test_the_rate_choice_bias_is_measured_per_cell_and_bounds_the_pooled_mean_at_fresh_seeds(tmp_path):
    """An untuned method reports the runs val chose its rate among (tuned ArcFace: fresh seeds). Each row carries the
    bound of study.analysis.rate_selection (0 where one rate was used or the method is tuned); the pooled mean at
    fresh seeds shifts by exactly a bias every cell shares (pooling is shift-equivariant), and the card states it."""
    from study.analysis.rate_selection import selection_bias_bound

    rows, _, _ = chosen_rate_benchmark(tmp_path)
    shared, chosen = rows[rows["rates"] == 1], rows[rows["rates"] > 1]
    assert (shared["selection_bias"] == 0).all() and (shared["reference_selection_bias"] == 0).all()
    assert (chosen.loc[chosen["tuned"], "selection_bias"] == 0).all()
    runs = pd.read_csv(tmp_path / "mnist-pairs-open-c50-lr" / "reports" / "tables" / "run_scores.csv")
    metric = chosen["metric"].iloc[0]
    reference = runs[runs["method"] == "fixed_adacos"]
    assert chosen["reference_selection_bias"].iloc[0] == pytest.approx(
        selection_bias_bound(reference, metric, 3) / reference[metric].mean())
    biased = rows.assign(selection_bias=np.where(rows["tuned"], 0.0, 0.001), reference_selection_bias=0.004)
    pooled = pooled_table(biased, 0.95).set_index("method")
    for method, facts in pooled.iterrows():
        assert facts["fresh_high_mean"] == pytest.approx(facts["mean"] + 0.004, abs=1e-12)
        own = 0.0 if facts["tuned"] else 0.001
        assert facts["fresh_low_mean"] == pytest.approx(facts["mean"] - own, abs=1e-12)
    arcface = pooled.loc["arcface_tuned"].to_dict() | {"method": "arcface_tuned"}
    said = dict(benchmark_card(arcface, [], biased).how_sure)["Fixed AdaCos's rate chosen among its own runs (a bias, "
                                                              "bounded)"]
    assert ("flatters it by at most 0.40% of its score on average (0.40%–0.40% by cell" in said
            and said.endswith(f"between {pct(arcface['mean'])} and {pct(arcface['mean'] + 0.004)} on average"))


def test_every_packaged_source_says_what_it_stands_in_for():
    """A source the plan can name (source_of of each packaged spec) has its role in the sources table; a new source
    without one would read as the user's own data there."""
    from study.benchmark.shown import SOURCE_ROLES
    from study.sources import SOURCES, source_of
    specs = ["digits", "mnist5k", "compose:2:40:mnist5k", "idx:/usr/share/datasets/fashion-mnist", "glyphs:10",
             "cjk:10", "strokes:10", "emoji:10", "wesnoth", "freedroid", "cards", "iconify:10"]
    assert {spec.split(":")[0] for spec in specs} == set(SOURCES) - {"torchvision", "folder"}  # a user's own data
    assert {source_of(spec) for spec in specs} <= set(SOURCE_ROLES)
