"""study/analysis/design.py against closed forms, brute force and simulation: what more sources can and cannot settle,
and the next study on the same data."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.analysis import recommend
from study.analysis.design import design_limits, next_design, seeds_per_split, trials_within_margin
from study.cautions import split_caution
from study.class_splits import disjoint_test_splits
from test_decision import run_scores
from test_price import params_with


def test_one_configuration_per_source_reads_the_closed_forms():
    # One configuration per source, equal standard errors: the source means are the estimates themselves.
    y = np.array([0.01, -0.02, 0.03, 0.015, 0.0, 0.025])
    se = np.full(y.size, 0.004)
    limits = design_limits(y, se, [f"s{i}" for i in range(y.size)])
    s2 = y.var(ddof=1)
    z = stats.norm.ppf(0.975)
    assert limits.sources == 6 and limits.source_sd == pytest.approx(math.sqrt(s2))
    assert limits.spread == pytest.approx(math.sqrt(s2 - 0.004 ** 2))  # cell noise taken out
    assert limits.floor_half_width == pytest.approx(z * math.sqrt(s2))
    assert limits.noise_free_half_width == pytest.approx(z * limits.spread)
    # The spread's interval: (k − 1)s²/χ² with the noise taken out, the usual normal-variance interval.
    high = math.sqrt(5 * s2 / stats.chi2.ppf(0.025, 5) - 0.004 ** 2)
    assert limits.spread_high == pytest.approx(high)
    # Sources for the mean's CI to exclude 0: the smallest k with t_{k−1}·s/√k < |mean|, by brute force.
    k = 2
    while stats.t.ppf(0.975, k - 1) * math.sqrt(s2 / k) >= abs(y.mean()):
        k += 1
    assert limits.sources_to_exclude_zero == k
    assert limits.sources_for_power == pytest.approx(((z + stats.norm.ppf(0.8)) * math.sqrt(s2) / y.mean()) ** 2)


def test_the_spread_interval_covers_the_true_spread_in_simulated_benchmarks():
    """Worlds of 6 sources with one to three configurations each, a source and a configuration effect and cell noise:
    the 95% interval of the new configuration's spread holds the true √(σ²_s + σ²_c) about 95% of the time."""
    rng = np.random.default_rng(1)
    counts = [1, 1, 1, 3, 1, 2]
    sources = [f"s{i}" for i, n in enumerate(counts) for _ in range(n)]
    sigma_s, sigma_c, noise = 0.012, 0.008, 0.006
    truth = math.hypot(sigma_s, sigma_c)
    held = []
    for _ in range(600):
        effects = np.repeat(rng.normal(0, sigma_s, len(counts)), counts)
        y = 0.01 + effects + rng.normal(0, sigma_c, effects.size) + rng.normal(0, noise, effects.size)
        limits = design_limits(y, np.full(y.size, noise), sources)
        held.append(limits.spread_low <= truth <= limits.spread_high)
    assert 0.90 <= np.mean(held) <= 0.99  # Monte Carlo error about ±0.9 points


# The next study on the same data (next_design), against hand counts, brute force and the comparison's own rule.

def test_a_search_needs_the_fewest_trials_whose_expected_score_comes_within_the_margin_of_its_whole():
    curve = [0.405, 0.439, 0.457, 0.470, 0.479, 0.486, 0.490, 0.4917]  # the default study's search, n = 1..8
    n = np.arange(1, 9)
    assert trials_within_margin(n, curve, 0.00903) == (6, False)  # 0.4917 − 0.486 ≤ 0.00903 < 0.4917 − 0.479
    assert trials_within_margin(n[::-1], curve[::-1], 0.00903) == (6, False)  # in any order
    assert trials_within_margin(n, curve, 0.001) == (8, True)  # its last trial still gained 0.0017
    assert trials_within_margin(n, [-value for value in curve], 0.00903, higher_is_better=False) == (6, False)


@pytest.mark.parametrize("between, seed, trials, runs", [(1.0, 0.07, 8, 4), (0.2, 1.0, 8, 4), (0.05, 1.0, 24, 2),
                                                         (0.0, 1.0, 8, 4), (1.0, 1.0, 1, 6)])
def test_seeds_a_split_follow_cochrans_two_stage_allocation(between, seed, trials, runs):
    chosen = seeds_per_split(between, seed, trials, runs)
    # Brute force: the variance of the mean difference that a budget of trainings buys, over 2..10 seeds a split.
    budget = 10_000
    variance = {r: (between + seed / r) / (budget / (trials + r * runs)) for r in range(2, 11)}
    assert variance[chosen] == pytest.approx(min(variance.values()))
    # The continuous optimum √(seed·trials / (between·runs)) lies within a seed of it, where it lies in 2..10.
    optimum = math.sqrt(seed * trials / (between * runs)) if between else math.inf
    if 2 <= optimum <= 10:
        assert abs(chosen - optimum) < 1
    else:
        assert chosen == (2 if optimum < 2 else 10)


def test_at_this_studys_seeds_and_trials_the_next_design_asks_the_splits_its_comparison_asks():
    differences = [0.010, 0.012, -0.004, -0.001, 0.004, 0.007]  # 3 class splits of 2 seeds
    verdict = recommend(run_scores(differences, splits=[0, 0, 1, 1, 2, 2]), "map_at_r")
    row, sources = verdict["tuned"], verdict["variance_sources"]
    curve = pd.DataFrame({"n": [1, 2, 3], "expected_test": [0.40, 0.45, 0.50]})  # still gaining: keeps all 3 trials
    # Two final runs a seed and a costly search: two seeds a split is the allocation, as this study ran.
    design = next_design(sources, row, curve, runs_per_seed=2, independent=None, confidence=0.95, power=0.8)
    assert (design.trials, design.search_still_gaining, design.seeds) == (3, True, 2)
    assert design.splits == row["seeds_to_resolve"] and design.splits > 3 and design.proposed_splits == design.splits
    capped = next_design(sources, row, curve, runs_per_seed=2, independent=3, confidence=0.95, power=0.8)
    assert (capped.splits, capped.proposed_splits, capped.trainings) == (design.splits, 3, 3 * (3 + 2 * 2))
    assert design.split_sd == pytest.approx(row["standard_error"] * math.sqrt(3))
    assert design.trainings == design.splits * (3 + 2 * 2) and design.trainings_run == 3 * (3 + 2 * 2)
    # More seeds a split where a seed is noisy and the search dear: fewer splits for the same difference.
    noisy = next_design(sources | {"seed": 50 * sources["seed"]}, row, pd.DataFrame({"n": range(1, 41),
                        "expected_test": np.linspace(0.4, 0.5, 40)}), 2, None, 0.95, 0.8)
    assert noisy.seeds > 2
    # One class split (no split variance measured), or seeds without noise (nothing to weigh splits by): no design.
    assert next_design(sources, row | {"unit": "seeds"}, curve, 2, None, 0.95, 0.8) is None
    assert next_design(sources | {"seed": 0.0}, row, curve, 2, None, 0.95, 0.8) is None


def test_validate_warns_of_class_splits_beyond_the_disjoint_ones_naming_the_count():
    counts = {"train": 50, "val": 25, "test": 25}
    assert disjoint_test_splits("open", counts) == 4 and disjoint_test_splits("closed", counts) is None
    def declared(seeds, protocol="open"):
        return params_with(data={"seeds": seeds, "protocol": protocol}, train={"objective": "map_at_r"})

    line = split_caution(declared([0, 1, 2, 3, 4]), counts)
    assert line.startswith("data.seeds: 5 class splits, but these 100 classes make only 4 with disjoint test classes")
    assert split_caution(declared([0, 1, 2, 3]), counts) is None
    assert split_caution(declared([0, 1, 2, 3, 4], "closed"), counts) is None


def test_the_report_says_the_next_design_and_why_and_where_the_classes_run_out():
    from study.report.design import next_design_sentence

    design = {"trials": 6, "trials_run": 8, "search_still_gaining": False, "seeds": 2, "splits": 6,
              "independent_splits": 4, "proposed_splits": 4, "trainings": 56, "split_sd": 0.0137, "splits_run": 3,
              "seeds_run": 2, "trainings_run": 48, "between_to_seed": 3.53}
    assert next_design_sentence({"next_design": design}) == (
        "A next study on these data, from this one's point estimates: 6 trials a split (a search of 6 is expected to "
        "score within the margin of one of 8), 2 seeds a split (its class split and search vary a split's mean 3.5 "
        "times as much as one seed does, and each split pays for a search: 2 give the narrowest interval per "
        "training) and 4 class splits, all these classes make with disjoint test classes, short of the 6 a "
        "difference of the size observed needs: 56 trainings (this one: 3 splits, 48); more classes, or another "
        "source, would settle it.")
    enough = next_design_sentence({"next_design": design | {"proposed_splits": 6, "trainings": 84}})
    assert enough.endswith("and 6 class splits to resolve a difference of the size observed: 84 trainings (this one: "
                           "3 splits, 48).")
    no_spread = next_design_sentence({"next_design": design | {"between_to_seed": 0.0, "seeds": 10}})
    assert ("10 seeds a split (beyond seed noise these splits and searches showed no spread of their own, so a seed "
            "costs less than a split: 10 give the narrowest interval per training)") in no_spread
    unresolved = next_design_sentence({"next_design": design | {"splits": None, "search_still_gaining": True}})
    assert "at least the 8 trials a split this one ran" in unresolved
    assert "and no practical number of class splits resolves a difference of the size observed." in unresolved
    assert next_design_sentence({"next_design": None}) is None
