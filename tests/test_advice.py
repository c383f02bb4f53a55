"""study/advice.py against independent computations: the selected difference and its jackknife by enumerating every
draw and deleting every trial, the posterior against the conjugate normal-normal closed form and scipy's densities,
the decisions on evidence whose answer is clear, the errors on evidence that cannot be judged, and the benchmark
prior against bayesian_true_effect's prediction interval."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from study.advice import (CHOICES, DEFAULT_PRICE, FUTILITY, GAIN_TRIALS, Advice, AdviceError, Centred, Evidence,
                          NotYetJudged, Prior, Projection, _gain_variance, advise, benchmark_prior, difference_at,
                          expected_maximum, judge, more_trials_worth, posterior, replay, seed_luck,
                          selected_difference, settle_chance, within_split)
from study.analysis.true_effect import _mixture_quantiles, bayesian_true_effect

CELLS_CSV = "reports/benchmark/tables/cells.csv"
MARGIN = 0.02


def brute_selected(val, test, n):
    """The mean test score of the highest-val trial over every ordered draw of n trials with replacement."""
    draws = list(itertools.product(range(len(val)), repeat=n))
    return np.mean([test[max(draw, key=lambda i: val[i])] for draw in draws])


def brute_jackknife(statistic, val, test):
    """(size − 1)/size · Σ(θ₋ᵢ − mean)², θ₋ᵢ the statistic with trial i deleted."""
    size = len(val)
    left_out = np.array([statistic(np.delete(val, i), np.delete(test, i)) for i in range(size)])
    return (size - 1) / size * np.sum((left_out - left_out.mean()) ** 2)


def trials_with_distinct_vals(size, seed=0):
    rng = np.random.default_rng(seed)
    return rng.permutation(size) + rng.uniform(0, 0.5, size), rng.normal(size=size)


@pytest.mark.parametrize("n", range(1, 7))
def test_selected_difference_is_the_enumerated_expectation_and_its_jackknife(n):
    val, test = trials_with_distinct_vals(4, seed=n)
    estimate, variance = selected_difference(val, test, n)
    assert estimate == pytest.approx(brute_selected(val, test, n), rel=1e-12)
    jackknife = brute_jackknife(lambda v, t: selected_difference(v, t, n)[0], val, test)
    assert variance == pytest.approx(jackknife, rel=1e-10)


def test_one_trial_has_its_own_score_and_no_variance():
    estimate, variance = selected_difference([0.3], [0.7], 5)
    assert estimate == pytest.approx(0.7) and math.isnan(variance)


@pytest.mark.parametrize("size, n_now, n_later", [(4, 1, 3), (5, 2, 7), (6, 3, 23)])
def test_gain_variance_is_the_jackknife_of_the_curve_difference(size, n_now, n_later):
    val, test = trials_with_distinct_vals(size, seed=size)
    gain = lambda v, t: selected_difference(v, t, n_later)[0] - selected_difference(v, t, n_now)[0]  # noqa: E731
    assert _gain_variance(val, test, n_now, n_later) == pytest.approx(brute_jackknife(gain, val, test), rel=1e-10)


def mixture(probabilities, centres, spreads, metric="map_at_r"):
    return Prior(np.array(probabilities, float), np.array(centres, float), np.array(spreads, float), metric, "test")


def test_one_component_posterior_is_the_conjugate_normal():
    centre, prior_sd, estimate, variance = 0.1, 0.05, -0.02, 0.03 ** 2
    probabilities, centres, spreads, weight = posterior(mixture([1.0], [centre], [prior_sd]), estimate, variance)
    precision = 1 / prior_sd ** 2 + 1 / variance
    assert probabilities == pytest.approx([1.0])
    assert centres[0] == pytest.approx((centre / prior_sd ** 2 + estimate / variance) / precision)
    assert spreads[0] ** 2 == pytest.approx(1 / precision)
    assert weight == pytest.approx(variance / (variance + prior_sd ** 2))


def test_mixture_posterior_weights_are_the_components_marginal_likelihoods():
    prior = mixture([0.3, 0.7], [-0.05, 0.08], [0.02, 0.06])
    estimate, variance = 0.01, 0.025 ** 2
    probabilities, _, _, _ = posterior(prior, estimate, variance)
    marginal = prior.probabilities * stats.norm.pdf(estimate, prior.centres, np.sqrt(prior.spreads ** 2 + variance))
    assert probabilities == pytest.approx(marginal / marginal.sum(), rel=1e-12)


def test_a_flat_prior_weighs_nothing():
    *_, weight = posterior(Prior.flat("map_at_r"), 0.05, 0.01 ** 2)
    assert weight == pytest.approx(0.0, abs=1e-9)


def centred(val_by_split, test_by_split, reference_variance=1e-6, runs=3, scale=0.5):
    """A Centred from per-split trials (already centred); the reference runs only need the right count."""
    splits = np.repeat(np.arange(len(test_by_split)), [len(test) for test in test_by_split])
    reference = np.zeros(runs * len(test_by_split))
    return Centred(np.concatenate(val_by_split).astype(float), np.concatenate(test_by_split).astype(float), splits,
                   reference, reference, reference_variance, pd.Series(runs, index=range(len(test_by_split))), scale)


def test_within_split_deviations_have_zero_mean_and_the_small_sample_inflation():
    val = [np.array([1.0, 2.0, 6.0]), np.array([0.0, 4.0])]
    test = [np.array([0.5, -1.0, 2.0]), np.array([3.0, 1.0])]
    deviations_val, deviations_test = within_split(centred(val, test))
    for split, (first, last) in enumerate([(0, 3), (3, 5)]):
        r = last - first
        for got, given in ((deviations_val, val[split]), (deviations_test, test[split])):
            assert got[first:last].mean() == pytest.approx(0.0, abs=1e-12)
            assert got[first:last] == pytest.approx((given - given.mean()) * math.sqrt(r / (r - 1)))


def test_difference_at_on_identical_splits_is_the_selection_gain_plus_the_level_by_hand():
    val, test = np.array([0.3, 0.1, 0.4, 0.2]), np.array([0.02, -0.01, 0.05, 0.0])
    splits, runs, reference_variance, n = 3, 2, 4e-4, 5
    inflate = math.sqrt(4 / 3)
    gain = brute_selected(val, (test - test.mean()) * inflate, n)
    estimate, variance = difference_at(centred([val] * splits, [test] * splits, reference_variance, runs), n)
    assert estimate == pytest.approx(gain + test.mean(), rel=1e-12)
    # No spread between identical splits: the level's variance is the noise within them, averaged over splits.
    within = splits * (test.var(ddof=1) / 4 + reference_variance / runs) / splits ** 2
    gain_variance = selected_difference(np.tile((val - val.mean()) * inflate, splits),
                                        np.tile((test - test.mean()) * inflate, splits), n)[1]
    assert variance == pytest.approx(gain_variance + within, rel=1e-12)


def test_a_constant_on_every_trial_moves_the_estimate_by_it_and_not_its_variance():
    rng = np.random.default_rng(1)
    val, test = [rng.normal(size=5) for _ in range(3)], [rng.normal(size=5) for _ in range(3)]
    before = difference_at(centred(val, test), 10)
    after = difference_at(centred([v + 0.3 for v in val], [t + 0.3 for t in test]), 10)
    assert after[0] == pytest.approx(before[0] + 0.3, rel=1e-12)
    assert after[1] == pytest.approx(before[1], rel=1e-12)


def drawn(mean, noise, splits, trials, seed=0):
    """Trials per split drawn around `mean` (already centred), val tracking test."""
    rng = np.random.default_rng(seed)
    test = [mean + noise * rng.normal(size=trials) for _ in range(splits)]
    return centred([t + 0.5 * noise * rng.normal(size=trials) for t in test], test)


@pytest.mark.parametrize("mean, noise, splits, trials, last, decision", [
    (0.05, 0.005, 4, 20, False, "tuning_pays"),
    (0.0, 0.0005, 4, 20, False, "equivalent"),
    (-0.05, 0.005, 4, 20, False, "adacos_better"),
    (0.0, 0.05, 2, 3, False, "run_more"),
    (0.0, 0.05, 2, 3, True, "budget_spent"),
])
def test_judge_decides_where_the_answer_is_clear(mean, noise, splits, trials, last, decision):
    budget = 10
    judged = judge(drawn(mean, noise, splits, trials), budget, last, MARGIN, Prior.flat("map_at_r"), 0.05 / budget)
    assert judged.decision == decision
    assert judged.low <= judged.middle <= judged.high


def test_the_variance_projected_to_the_trials_seen_is_the_variance_now():
    for spread in (0.0, 0.2):  # the noise within splits dominates; the splits' spread does
        rng = np.random.default_rng(3)
        test = [level + 0.05 * rng.normal(size=6) for level in spread * rng.normal(size=4)]
        evidence = centred([t + 0.01 * rng.normal(size=6) for t in test], test)
        assert difference_at(evidence, 12, trials_per_split=6) == pytest.approx(difference_at(evidence, 12), rel=1e-12)
        # More trials narrow it, never below what the splits' spread holds beyond their noise.
        _, later = difference_at(evidence, 12, trials_per_split=600)
        assert later < difference_at(evidence, 12)[1]
        levels = np.array([t.mean() for t in test])
        noise = np.array([t.var(ddof=1) for t in test])
        assert later >= levels.var(ddof=1) / 4 - np.sum(noise / 6) / 16 - 1e-15


def test_the_settle_chance_under_a_flat_prior_is_the_normal_closed_form():
    """Flat prior: the last look's estimate is normal about the estimate now with the variance the trials to come
    remove, and each decision is the estimate beyond the margin by z of its final standard error."""
    budget, level = 12, 0.05 / 12
    for mean in (0.0, 0.02, 0.05):
        evidence = drawn(mean, 0.02, 4, 4, seed=5)
        estimate, now = (value / evidence.scale ** k for value, k in zip(difference_at(evidence, budget), (1, 2)))
        final = difference_at(evidence, budget, trials_per_split=budget)[1] / evidence.scale ** 2
        sd, half = math.sqrt(now - final), stats.norm.ppf(1 - level) * math.sqrt(final)
        below = lambda x: stats.norm.cdf((x - estimate) / sd)  # noqa: E731
        expected = (1 - below(MARGIN + half) + below(-MARGIN - half)
                    + max(below(MARGIN - half) - below(-MARGIN + half), 0.0))
        got = settle_chance(evidence, budget, MARGIN, Prior.flat("map_at_r"), level)
        assert got == pytest.approx(expected, abs=1e-6)


def test_the_settle_chance_predicts_how_often_the_last_look_settles_it():
    """Studies of a normal world, their true difference drawn wide: at round 3 of 12 the predicted chance, against
    whether the last look really settled it (the predictive ignores that the variances are estimated: within 0.1)."""
    rng = np.random.default_rng(11)
    budget, level, splits, flat = 12, 0.05 / 12, 4, Prior.flat("map_at_r")
    predicted, settled = [], []
    for _ in range(300):
        truth = rng.uniform(-0.1, 0.1) * 0.5  # in score units; the scale is 0.5
        interaction = 0.01 * rng.normal(size=(splits, 1))
        test = truth + interaction + 0.03 * rng.normal(size=(splits, budget))
        val = test + 0.01 * rng.normal(size=(splits, budget))
        early = centred(list(val[:, :3]), list(test[:, :3]))
        predicted.append(settle_chance(early, budget, MARGIN, flat, level))
        settled.append(judge(centred(list(val), list(test)), budget, True, MARGIN, flat, level).decision
                       != "budget_spent")
    predicted, settled = np.array(predicted), np.array(settled)
    assert 0.2 < settled.mean() < 0.8  # the worlds span both answers
    assert abs(predicted.mean() - settled.mean()) < 0.1
    high, low = predicted > 0.7, predicted < 0.3
    assert settled[high].mean() > 0.7 and settled[low].mean() < 0.3


def test_a_study_the_budget_cannot_settle_stops_as_futile_and_says_so():
    # Splits far apart: 12 trials a split cannot bring the interval inside the margin, nor past it.
    rng = np.random.default_rng(2)
    test = [level + 0.01 * rng.normal(size=3) for level in (-0.08, 0.1, -0.05, 0.07)]
    evidence = centred([t + 0.001 * rng.normal(size=3) for t in test], test)
    judged = judge(evidence, 12, False, MARGIN, Prior.flat("map_at_r"), 0.05 / 12, futility=FUTILITY)
    assert judged.decision == "futile" and judged.settle_chance < FUTILITY and judged.choice == "fixed_adacos"
    assert judge(evidence, 12, False, MARGIN, Prior.flat("map_at_r"), 0.05 / 12, futility=0.0,
                 value_stop=False).decision == "run_more"
    assert judge(evidence, 12, True, MARGIN, Prior.flat("map_at_r"), 0.05 / 12).decision == "budget_spent"
    # The default, the price stop: no number of more trials is worth its price here, so it stops and answers.
    judged = judge(evidence, 12, False, MARGIN, Prior.flat("map_at_r"), 0.05 / 12)
    assert judged.decision == "not_worth_it" and judged.choice == "fixed_adacos"
    assert all(worth.net < 0 for worth in judged.worth) and len(judged.worth) == 12 - 3


def frame(rows):
    return pd.DataFrame(rows, columns=["split", "val", "test", "seconds"])


def evidence(trials_per_split=(4, 5, 6), runs_per_split=(2, 2, 2), budget=10, metric="map_at_r", seed=0):
    rng = np.random.default_rng(seed)
    trials = [(split, *rng.uniform(0.4, 0.6, 2), 30.0) for split, count in enumerate(trials_per_split)
              for _ in range(count)]
    runs = [(split, *rng.uniform(0.45, 0.55, 2), 30.0) for split, count in enumerate(runs_per_split)
            for _ in range(count)]
    return Evidence(frame(trials), frame(runs), tuple(range(len(trials_per_split))), budget, metric)


@pytest.mark.parametrize("study, missing", [
    (dict(trials_per_split=(4, 1, 6)), "finished ArcFace trials"),
    (dict(runs_per_split=(2, 0, 2)), "Fixed AdaCos run"),
])
def test_advise_names_the_missing_evidence(study, missing):
    with pytest.raises(AdviceError, match=missing):
        advise(evidence(**study), MARGIN, Prior.flat("map_at_r"))


def test_advise_refuses_a_prior_on_another_metric():
    with pytest.raises(AdviceError) as error:
        advise(evidence(metric="accuracy"), MARGIN, Prior.flat("map_at_r"))
    assert "map_at_r" in str(error.value) and "accuracy" in str(error.value)


def test_a_budget_below_two_is_refused():
    with pytest.raises(AdviceError, match="budget"):
        evidence(budget=1)


def test_advise_on_good_evidence():
    advice = advise(evidence(), MARGIN, Prior.flat("map_at_r"))
    assert isinstance(advice, Advice)
    lines = advice.lines()
    assert lines[0].startswith(CHOICES[advice.choice] + ":") and lines[-1].startswith("Evidence:")
    assert advice.price == DEFAULT_PRICE and advice.search_cost == pytest.approx(DEFAULT_PRICE * 9)
    assert advice.round == 4 and advice.trainings == 3 * 4 + 3 * 2
    assert [gain.trials for gain in advice.gains] == list(GAIN_TRIALS)
    assert [gain.trainings for gain in advice.gains] == [k * 3 for k in GAIN_TRIALS]


def test_round_and_at_round_keep_the_first_trials_of_every_split_in_order():
    rows = [(0, 0.1, 0.0, 1.0), (1, 0.2, 0.0, 1.0), (1, 0.3, 0.0, 1.0), (0, 0.4, 0.0, 1.0), (1, 0.5, 0.0, 1.0),
            (1, 0.6, 0.0, 1.0), (0, 0.7, 0.0, 1.0), (1, 0.8, 0.0, 1.0)]
    study = Evidence(frame(rows), frame([(0, 0.5, 0.5, 1.0), (1, 0.5, 0.5, 1.0)]), (0, 1), 10, "map_at_r")
    assert study.round() == 3
    trials, _ = study.at_round(3)
    assert list(trials.loc[trials["split"] == 0, "val"]) == [0.1, 0.4, 0.7]
    assert list(trials.loc[trials["split"] == 1, "val"]) == [0.2, 0.3, 0.5]
    assert Evidence(frame(rows), frame([]), (0, 1), 2, "map_at_r").round() == 2  # capped at the budget


def test_benchmark_prior_from_the_committed_cells():
    cells = pd.read_csv(CELLS_CSV)
    tuned = cells[(cells["method"] == "arcface_tuned") & cells["converged"].astype(bool)]["relative"]
    prior = benchmark_prior(CELLS_CSV, "map_at_r")
    assert prior.probabilities.sum() == pytest.approx(1.0)
    assert tuned.min() <= float(prior.probabilities @ prior.centres) <= tuned.max()
    with pytest.raises(AdviceError) as error:
        benchmark_prior(CELLS_CSV, "accuracy")
    assert "map_at_r" in str(error.value) and "accuracy" in str(error.value)


def test_benchmark_prior_without_a_benchmark_names_the_path(tmp_path):
    with pytest.raises(AdviceError, match="nowhere.csv"):
        benchmark_prior(tmp_path / "nowhere.csv", "map_at_r")


def test_benchmark_prior_is_bayesian_true_effects_prediction(tmp_path):
    pooled = pd.DataFrame({
        "configuration": ["a1", "a2", "b1", "c1", "c2", "d1"], "source": ["a", "a", "b", "c", "c", "d"],
        "relative": [0.03, 0.01, -0.02, 0.06, 0.04, 0.0], "relative_se": [0.01, 0.02, 0.015, 0.01, 0.03, 0.02]})
    common = dict(primary=True, regime="short", converged=True, longer_of=np.nan, iterations=100,
                  method="arcface_tuned", metric="test_map_at_r", reference_test_mean=0.5)
    left_out = [dict(configuration="e1", source="e", relative=0.9, relative_se=0.01, converged=False),
                dict(configuration="f1", source="f", relative=-0.9, relative_se=0.01, method="p2sgrad")]
    cells = pd.concat([pooled.assign(**common), pd.DataFrame([common | row for row in left_out])])
    # As the aggregate writes them: a cell per configuration, each difference and SE also in the metric's units.
    cells = cells.assign(cell=cells["configuration"], difference=cells["relative"] * 0.5,
                         standard_error=cells["relative_se"] * 0.5)
    path = tmp_path / "cells.csv"
    cells.to_csv(path, index=False)
    prior = benchmark_prior(path, "map_at_r")
    low, high = (float(q[0]) for q in _mixture_quantiles(prior.probabilities[None, :], prior.centres[None, :],
                                                          prior.spreads[None, :], (0.025, 0.975)))
    expected = bayesian_true_effect(pooled["relative"], pooled["relative_se"], pooled["source"])
    assert (low, high) == pytest.approx((expected.prediction_low, expected.prediction_high), rel=1e-6)
    assert prior.metric == "map_at_r" and "4 sources" in prior.source


@pytest.mark.parametrize("n", [1, 2, 3, 12])
def test_expected_maximum_matches_closed_forms_and_simulation(n):
    known = {1: 0.0, 2: 1 / math.sqrt(math.pi), 3: 1.5 / math.sqrt(math.pi)}  # E[max] of 2 and 3 normals
    draws = np.random.default_rng(n).standard_normal((200_000, n)).max(axis=1)
    assert expected_maximum(n) == pytest.approx(known.get(n, draws.mean()), abs=1e-9 if n in known else 0.01)


def test_seed_luck_is_what_picking_the_best_of_n_seeds_by_val_adds_on_test():
    # Val and test seed noise with sd 0.02 and 0.03, correlation 0.6: the best of n by val gains E[max]·ρ·σ_test.
    rng = np.random.default_rng(0)
    runs = rng.multivariate_normal([0, 0], [[4e-4, 0.6 * 6e-4], [0.6 * 6e-4, 9e-4]], size=4000)
    reference = Centred(np.zeros(2), np.zeros(2), np.zeros(2, int), runs[:, 0], runs[:, 1], 9e-4,
                        pd.Series(4000, index=[0]), 0.5)
    estimate, variance = seed_luck(reference, 12)
    assert estimate == pytest.approx(expected_maximum(12) * 0.6 * 0.03, rel=0.05)
    # Its jackknife variance is the spread of the estimate over independent sets of runs (checked on sets of 8).
    sets = [rng.multivariate_normal([0, 0], [[4e-4, 3.6e-4], [3.6e-4, 9e-4]], size=8) for _ in range(400)]
    small = [Centred(np.zeros(2), np.zeros(2), np.zeros(2, int), s[:, 0], s[:, 1], 9e-4, pd.Series(8, index=[0]), 0.5)
             for s in sets]
    spread = np.var([seed_luck(one, 12)[0] for one in small])
    assert np.mean([seed_luck(one, 12)[1] for one in small]) == pytest.approx(spread, rel=0.5)


def test_the_benchmark_replay_counts_its_trainings_and_sets_the_full_design_beside_it():
    import json
    from pathlib import Path

    from study.benchmark.report import read_cells
    from study.benchmark.replay import advice_replay, replay_sentences

    cells_dir = Path(__file__).resolve().parents[1] / "benchmarks" / "cells"
    plan = json.loads((cells_dir / "plan.json").read_text())
    # A few of the committed cells searched at random, not all 44: reading a cell costs a third of a second.
    plan["cells"] = [cell for cell in plan["cells"] if cell["sampler"] == "random"][:6]
    rows = read_cells(plan, cells_dir)
    chosen = rows[(rows["method"] == "arcface_tuned") & (rows["sampler"] == "random")].iloc[:3]
    assert len(chosen) == 3
    replayed = advice_replay(rows[rows["cell"].isin(chosen["cell"])], cells_dir)
    assert list(replayed["cell"]) == list(chosen["cell"])
    for row, cell in zip(replayed.itertuples(), chosen.itertuples()):
        runs = pd.read_csv(cells_dir / cell.cell / "reports" / "tables" / "run_scores.csv")
        fixed_runs = int((runs["method"] == "fixed_adacos").sum())
        assert row.trainings == row.stopped_round * row.splits + fixed_runs
        assert row.design_trainings == cell.splits * (cell.n_trials + 2 * cell.seeds)
        assert row.full_design == cell.outcome and row.low <= row.difference <= row.high
    assert replay_sentences(replayed)[0].startswith(f"Replayed round by round on {len(replayed)} finished")
    # A pruned search's stopped trials are not whole draws: its cells are not replayed.
    assert advice_replay(rows[rows["cell"].isin(chosen["cell"])].assign(pruner="halving"), cells_dir).empty


def test_what_more_trials_are_worth_is_the_monte_carlo_value_of_the_answer_they_may_change():
    """The closed form of more_trials_worth against a Monte Carlo of its own model: the true difference drawn from
    the posterior now (normal prior, normal evidence), the later look's estimate from it with the information the
    trials to come add, the later look's posterior and its rule (tuned ArcFace where its lower bound clears the bar),
    and the value (D − cost) where it says tune."""
    projection = Projection(estimate=0.03, gain_variance=4e-5, luck_variance=1e-6, noise=np.full(4, 4e-4),
                            counts=np.full(4, 3), runs=np.full(4, 2.0), reference_variance=1e-4, between=0.0)
    centre, spread, level, budget, round_, cost, bar = 0.01, 0.015, 0.05 / 12, 12, 3, 0.011, 0.02
    prior = Prior(np.ones(1), np.array([centre]), np.array([spread]), "map_at_r", "normal")
    worth = more_trials_worth(projection, 1.0, round_, budget, 4, bar, cost, prior, level, 0.001)
    assert [item.trials for item in worth] == list(range(1, budget - round_ + 1))
    rng = np.random.default_rng(0)
    now = projection.variance()
    believed_variance = 1 / (1 / spread ** 2 + 1 / now)
    believed = believed_variance * (centre / spread ** 2 + projection.estimate / now)
    z = stats.norm.ppf(1 - level)
    for item in worth[::3]:
        then = projection.variance(round_ + item.trials)
        added = 1 / then - 1 / now
        truth = rng.normal(believed, math.sqrt(believed_variance), 400_000)
        later = (projection.estimate / now + added * rng.normal(truth, math.sqrt(1 / added))) * then
        variance = 1 / (1 / spread ** 2 + 1 / then)
        tune = variance * (centre / spread ** 2 + later / then) - z * math.sqrt(variance) > bar
        values = (truth - cost) * tune
        assert item.value == pytest.approx(values.mean(), abs=4 * values.std() / math.sqrt(values.size) + 1e-7)
        assert item.trainings == 4 * item.trials and item.net == pytest.approx(item.value - 0.001 * item.trainings)
    assert worth[-1].value > 1e-3  # the setting is one where more trials may well change the answer


def test_keep_tuning_while_more_trials_are_worth_their_price_and_stop_with_fixed_adacos_when_not():
    evidence = drawn(0.01, 0.01, 4, 3, seed=7)  # +2% of the score, round 3 of 12: either answer may come
    cheap = judge(evidence, 12, False, MARGIN, Prior.flat("map_at_r"), 0.05 / 12, price=1e-6)
    dear = judge(evidence, 12, False, MARGIN, Prior.flat("map_at_r"), 0.05 / 12, price=0.01)
    assert (cheap.decision, cheap.choice) == ("run_more", "keep_tuning") and max(w.net for w in cheap.worth) > 0
    assert (dear.decision, dear.choice) == ("not_worth_it", "fixed_adacos") and max(w.net for w in dear.worth) <= 0


def test_tuning_pays_only_beyond_the_margin_and_the_price_of_its_search():
    evidence = drawn(0.05, 0.005, 4, 20)
    judged = judge(evidence, 10, False, MARGIN, Prior.flat("map_at_r"), 0.05 / 10)
    assert (judged.decision, judged.choice) == ("tuning_pays", "arcface_tuned") and judged.low > MARGIN
    # At 2% of the score a training, a search of 10 costs 18%: more than tuning is shown to add (about 11%).
    priced = judge(evidence, 10, True, MARGIN, Prior.flat("map_at_r"), 0.05 / 10, price=0.02)
    assert priced.search_cost == pytest.approx(0.18) and MARGIN < priced.low < 0.18
    assert priced.choice == "fixed_adacos"


@pytest.mark.parametrize("mean, noise, trials, last", [(0.05, 0.005, 20, False), (0.0, 0.0005, 20, False),
                                                       (-0.05, 0.005, 20, False), (0.0, 0.05, 3, False),
                                                       (0.0, 0.05, 3, True), (0.02, 0.02, 5, True)])
def test_every_advice_is_a_decision_whose_first_line_a_user_can_act_on(mean, noise, trials, last):
    rng = np.random.default_rng(3)
    rows = [(split, 0.5 + mean + noise * rng.normal(), 0.5 + mean + noise * rng.normal(), 10.0)
            for split in range(4) for _ in range(trials)]
    runs = [(split, 0.5 + 0.001 * rng.normal(), 0.5 + 0.001 * rng.normal(), 10.0) for split in range(4) for _ in range(2)]
    advice = advise(Evidence(frame(rows), frame(runs), tuple(range(4)), trials if last else 20, "map_at_r"), MARGIN,
                    Prior.flat("map_at_r"))
    first = advice.lines()[0]
    assert advice.choice in CHOICES and first.startswith(CHOICES[advice.choice] + ":")
    assert "undecided" not in first and "%" in first and "training" in first
    assert advice.choice != "keep_tuning" or not last


def test_a_replay_with_fewer_trials_than_a_round_says_what_is_missing():
    # One trial on split 1: no round the advice judges is complete (a pruned search keeps that few whole trials).
    with pytest.raises(NotYetJudged, match="too little evidence to judge"):
        replay(evidence(trials_per_split=(3, 1, 3)), MARGIN, Prior.flat("map_at_r"))
