"""`recommend`: the rule that weighs significance, relevance and cost, split-level intervals, relative margins, and
the variance decomposition, each against a hand computation or a simulated world with a known truth."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import equivalence_margin, margin_meaning, recommend, variance_sources
from study.analysis.coverage import decision_rates, simulated_run_scores
from study.config import AnalysisConfig, ConfigError


def run_scores(tuned_minus_fixed, fixed=None, splits=None):
    """A run_scores table: Fixed AdaCos and tuned ArcFace, paired by (split and) seed."""
    differences = np.asarray(tuned_minus_fixed, dtype=float)
    fixed = np.full(differences.size, 0.40) if fixed is None else np.asarray(fixed, dtype=float)
    splits = np.zeros(differences.size, dtype=int) if splits is None else np.asarray(splits)
    seeds = np.concatenate([np.arange((splits == split).sum()) for split in np.unique(splits)])
    rows = []
    for method, values in (("fixed_adacos", fixed), ("arcface_tuned", fixed + differences)):
        rows += [{"method": method, "split": int(split), "seed": int(seed), "status": "ok", "val_score": value,
                  "test_map_at_r": value} for split, seed, value in zip(splits, seeds, values)]
    return pd.DataFrame(rows)


def test_a_significant_gain_beyond_the_margin_recommends_tuning_and_says_what_it_costs():
    verdict = recommend(run_scores([0.030, 0.028, 0.032, 0.031, 0.029]), "map_at_r", AnalysisConfig(),
                        {"cost": {"trials": 4, "seconds": 40.0}})
    assert (verdict["recommendation"], verdict["reason"]) == ("arcface_tuned", "tuning_better_beyond_margin")
    assert verdict["cost"] == {"trials": 4, "seconds": 40.0}


def test_a_significant_gain_inside_the_margin_is_not_worth_tuning():
    # +0.004 ± tiny: significant, but TOST puts it inside ±0.01, so Fixed AdaCos (it costs no tuning).
    verdict = recommend(run_scores([0.0040, 0.0041, 0.0039, 0.0040, 0.0042]), "map_at_r")
    assert verdict["tuned"]["significant"] and verdict["tuned"]["equivalent"]
    assert (verdict["recommendation"], verdict["reason"]) == ("fixed_adacos", "gain_within_margin")


def test_a_significant_gain_not_shown_to_reach_the_margin_is_undecided():
    # +0.008 with spread: significant, not equivalent (its interval crosses +0.01), below the margin.
    verdict = recommend(run_scores([0.002, 0.014, 0.004, 0.012, 0.008, 0.006, 0.010]), "map_at_r")
    row = verdict["tuned"]
    assert row["significant"] and not row["equivalent"] and abs(row["difference"]) < row["margin"]
    assert (verdict["recommendation"], verdict["reason"]) == ("undecided", "gain_not_shown_relevant")


def test_over_several_splits_the_interval_is_a_t_interval_over_split_means():
    differences = [0.010, 0.012, 0.011, -0.004, -0.002, -0.003, 0.004, 0.006, 0.005]
    splits = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    row = recommend(run_scores(differences, splits=splits), "map_at_r")["tuned"]
    means = np.array([0.011, -0.003, 0.005])
    half = stats.t.ppf(0.975, 2) * means.std(ddof=1) / math.sqrt(3)
    assert row["test"] == "split" and row["splits"] == 3 and row["pairs"] == 9
    assert (row["difference"], row["low"], row["high"]) == (pytest.approx(means.mean()),
                                                            pytest.approx(means.mean() - half),
                                                            pytest.approx(means.mean() + half))
    # Pooling the nine pairs as if they were seeds of one split would claim a narrower interval.
    assert half > stats.t.ppf(0.975, 8) * np.std(differences, ddof=1) / 3


def test_detectable_difference_uses_the_level_holm_may_need():
    scores = run_scores([0.001, -0.002, 0.003, 0.0, -0.001, 0.002])
    scores["test_roc_auc"] = scores["test_map_at_r"] + 0.4  # a second metric: a family of two
    row = recommend(scores, "map_at_r")["tuned"]
    assert row["decision_alpha"] == pytest.approx(0.05 / 2)
    from study.statistics import minimum_detectable_difference
    sd = np.std([0.001, -0.002, 0.003, 0.0, -0.001, 0.002], ddof=1)
    assert row["detectable"] == pytest.approx(minimum_detectable_difference(sd, 6, 0.025, 0.8))
    assert row["detectable"] > minimum_detectable_difference(sd, 6, 0.05, 0.8)


def test_relative_margins_in_seed_sds_and_remaining_error():
    reference = np.array([0.38, 0.40, 0.42])
    config = AnalysisConfig.from_dict({"equivalence_margin": {"accuracy": 0.005, "retrieval": "0.5sd",
                                                              "verification": "5%"}})
    assert equivalence_margin("test_map_at_r", config, reference) == pytest.approx(0.5 * 0.02)
    assert equivalence_margin("test_roc_auc", config, reference) == pytest.approx(0.05 * 0.60)  # 5% of 1 − 0.40
    assert equivalence_margin("test_eer", config, reference) == pytest.approx(0.05 * 0.40)  # an error rate: its mean
    meaning = margin_meaning(0.01, "test_roc_auc", np.array([0.94, 0.95, 0.96]))
    assert meaning["margin_seed_sds"] == pytest.approx(1.0) and meaning["margin_error_share"] == pytest.approx(0.2)
    with pytest.raises(ConfigError, match="analysis.equivalence_margin.retrieval"):
        AnalysisConfig.from_dict({"equivalence_margin": {"accuracy": 0.005, "retrieval": "half", "verification": 0.01}})


def test_a_secondary_metric_disagrees_only_when_it_counts():
    # Objective level; TAR@FAR significantly higher by 0.005, inside its ±0.01 margin: no disagreement.
    scores = run_scores([0.001, -0.001, 0.0, 0.0005, -0.0005, 0.0])
    tuned = scores["method"] == "arcface_tuned"
    scores["test_tar_at_far_1e-3"] = 0.3 + np.where(tuned, 0.005, 0.0) + np.tile([0, 1e-4, -1e-4, 2e-4, -2e-4, 0], 2)
    verdict = recommend(scores, "map_at_r")
    assert verdict["tuned_better_metrics"] == [] and verdict["tuned_worse_metrics"] == []
    scores.loc[tuned, "test_tar_at_far_1e-3"] += 0.02  # now beyond the margin
    assert recommend(scores, "map_at_r")["tuned_better_metrics"] == ["test_tar_at_far_1e-3"]


def test_variance_sources_recover_a_known_world():
    # One user's difference = split effect (sd 0.010) + seed noise (sd 0.005); no search variance given.
    rng = np.random.default_rng(0)
    estimates = []
    for _ in range(200):
        split_effects = rng.normal(0, 0.010, 6)
        pairs = pd.DataFrame([{"split": j, "seed": k, "difference": split_effects[j] + rng.normal(0, 0.005)}
                              for j in range(6) for k in range(5)])
        estimates.append(variance_sources(pairs))
    assert np.mean([e["seed"] for e in estimates]) == pytest.approx(0.005 ** 2, rel=0.1)
    assert np.mean([e["split"] for e in estimates]) == pytest.approx(0.010 ** 2, rel=0.2)
    assert pd.Series([e["dominant"] for e in estimates]).value_counts().idxmax() == "split"
    one_split = variance_sources(pairs[pairs["split"] == 0])
    assert math.isnan(one_split["split"]) and one_split["dominant"] == "seed"


@pytest.mark.slow
def test_the_decision_rule_in_simulated_studies_of_ten_seeds():
    rates = decision_rates(AnalysisConfig(), seeds=10, studies=120, seed=1).set_index("world")
    assert rates.loc["no gain", "tune"] <= 0.025
    assert rates.loc["half the margin", "tune"] <= 0.10
    assert rates.loc["twice the margin", "tune"] >= 0.90
    assert rates.loc["dynamic a fifth of the margin", "changed"] <= 0.10


def test_simulated_studies_pair_methods_by_seed():
    scores = simulated_run_scores(0.01, 0.0, 50, np.random.default_rng(0))
    wide = scores.pivot(index="seed", columns="method", values="test_map_at_r")
    assert (wide["arcface_tuned"] - wide["fixed_adacos"]).std() == pytest.approx(0.0053, rel=0.25)
    assert (wide["arcface_tuned"] - wide["fixed_adacos"]).mean() == pytest.approx(0.01, abs=0.003)
