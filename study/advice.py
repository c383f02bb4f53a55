"""`study advise`: on the user's own data, whether tuning ArcFace pays over Fixed AdaCos, read while the study runs,
and when to stop tuning.

The evidence is a study's ArcFace random-search trials and its Fixed AdaCos runs, per class split, each score less
its split's Fixed AdaCos mean. One search of n trials is worth, in expectation, the test difference of the trial val
selects among n draws, D(n), estimated in two parts (difference_at): what selection buys over a split's average
trial, from the trials' deviations from their split's means pooled over splits (so that val cannot select a split),
Σᵢ wₙ(i)·e₍ᵢ₎ with the order-statistic weights with replacement (Dodge et al., EMNLP 2019), which also extrapolate
past the trials seen; and the average trial less Fixed AdaCos, averaged over splits. Against the budget-matched
control (as many trainings of Fixed AdaCos, the seed val selects kept), less that control's seed luck, E[max of n]·
cov(val, test)/sd(val) of Fixed AdaCos's seed noise (seed_luck). Its variance: the delete-one jackknifes over trials
and runs, plus the splits' spread of the second part (never below its noise within splits).

The decision is about a search of `budget` trials per split (search.n_trials, declared before the study runs), on
the relative scale every verdict of this suite reads (a share of Fixed AdaCos's test score), against the one margin
(analysis.equivalence_margin: 2% of the score). The evidence is judged in rounds (round r: r trials on every split
and the Fixed AdaCos runs); a read between rounds sees the last whole round, so a study has at most `budget`
states of evidence, each judged at α/budget a side (Bonferroni over looks), however often it is read. Tuning
"pays" as soon as the lower bound clears the margin; that it does not (equivalent, or Fixed AdaCos better) is
judged only once the trials carry D(budget) (`carries`: about 3·budget trials pooled), because before that the
estimate rests on the few best trials seen and cannot know the unseen ones. A study the budget is unlikely to settle
may stop as futile (`settle_chance` below `futility`; off by default). Beside these tests, a price: one training is
worth `price` of the score (analysis.price_per_training). Tuning pays only where its lower bound also clears the price
of its search, price·(budget − 1) (a search of `budget` trainings against Fixed AdaCos's one; seed luck credited to
neither), and the study keeps tuning only while k more trials per split are expected to be worth more than their
price·k·splits (`more_trials_worth`: the expected net value of the answer they may change); once no k up to the budget
is, it stops and says to use Fixed AdaCos. Every state of the evidence ends in one of three things to do
(`Advice.choice`): use Fixed AdaCos, keep tuning, or use tuned ArcFace, with the expected gain and its price. The prior
is the benchmark's predictive
distribution of a new source's difference (its between-source spread integrated out:
study.analysis.true_effect.new_source_mixture); `prior_weight` says how much it moves the answer. Error rates in
worlds calibrated from the benchmark's cells: benchmarks/advise_simulation.py, docs/analysis.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special

from study.advice_difference import (Centred, Projection, best_of_n_weights, centre, centre_arrays, difference_at,
                                     expected_maximum, jackknife_variance, projected_difference, ranked_by_val,
                                     seed_luck, selected_difference, within_split)
from study.advice_inputs import (AdviceError, NotYetJudged, check_margin, check_price, check_probability,
                                 check_reference_pairs, check_scores, read_prior_table)
from study.analysis.true_effect import new_source_mixture
from study.config import METRIC_KIND, AnalysisConfig, price_share

# Defined in study.advice_inputs and study.advice_difference, imported from here by the stages, benchmarks and tests.
__all__ = ["AdviceError", "NotYetJudged", "Centred", "centre_arrays", "difference_at", "expected_maximum"]

EVIDENCE_COLUMNS = ("split", "val", "test", "seconds")
GAIN_TRIALS = (5, 10, 20)
# Below these no variance can be estimated: two trials a split for the jackknife, two Fixed AdaCos runs on one split
# for seed noise, and three in all for the delete-one jackknife of the control's seed luck (seed_luck).
MIN_ROUND = 2
MIN_REFERENCE_RUNS = 2
MIN_LUCK_RUNS = 3
DECISIONS = {
    "tuning_pays": "stop: tuning pays",
    "equivalent": "stop: equivalent within the margin",
    "adacos_better": "stop: Fixed AdaCos is better",
    "budget_spent": "stop: the budget is spent and the answer is not known",
    "futile": "stop: the rest of the budget is unlikely to settle it",
    "not_worth_it": "stop: more trials are not expected to be worth their price",
    "run_more": "run more: the answer is not known yet",
}
# What to do, whatever the evidence: never "undecided".
CHOICES = {"fixed_adacos": "Use Fixed AdaCos", "keep_tuning": "Keep tuning", "arcface_tuned": "Use tuned ArcFace"}
# Declared with the futility stop, before its error rates were simulated: stop when the chance that the budget's last
# look settles the question (tuning pays, equivalent or Fixed AdaCos better) is below this. Off by default since the
# price stop (more_trials_worth) took its place; `futility=FUTILITY` brings it back.
FUTILITY = 0.10
# analysis.price_per_training's default, as a share of the score.
DEFAULT_PRICE = price_share(AnalysisConfig.model_fields["price_per_training"].default)


@dataclass(frozen=True)
class Prior:
    """A normal mixture Σ p_g·N(centre_g, spread_g²) over the relative difference, and where it comes from."""

    probabilities: np.ndarray
    centres: np.ndarray
    spreads: np.ndarray
    metric: str
    source: str

    @classmethod
    def flat(cls, metric: str) -> "Prior":
        """No prior knowledge: one component far wider than any score difference (a share of 1,000)."""
        return cls(np.ones(1), np.zeros(1), np.full(1, 1e3), metric, "none (flat)")


@dataclass(frozen=True)
class Evidence:
    """A study's evidence: ArcFace trials and Fixed AdaCos runs, each a frame of EVIDENCE_COLUMNS in the order they
    finished within their split (a diverged trial at the metric's floor), the planned splits and trials per split."""

    trials: pd.DataFrame
    reference: pd.DataFrame
    splits: tuple[int, ...]
    budget: int
    metric: str
    price: float = DEFAULT_PRICE  # what one training is worth, a share of the score (analysis.price_per_training)

    def __post_init__(self):
        for name in ("trials", "reference"):
            frame = getattr(self, name)
            missing = [column for column in EVIDENCE_COLUMNS if column not in frame.columns]
            if missing:
                raise AdviceError(f"the {name} lack the columns {missing}: give {list(EVIDENCE_COLUMNS)}")
        if not isinstance(self.budget, (int, np.integer)) or self.budget < MIN_ROUND:
            raise AdviceError(f"a budget of {self.budget} trials per split leaves nothing to decide early: give at "
                              f"least {MIN_ROUND} (search.n_trials)")
        if not self.splits:
            raise AdviceError("the study plans no class split: give at least one (data.seeds)")
        check_price(self.price, "the price of a training (analysis.price_per_training)")
        check_scores(self.trials, self.reference, self.metric, bounded=self.metric in METRIC_KIND)

    def round(self) -> int:
        """Trials every planned split has (capped at the budget): the round whose evidence is judged."""
        counts = self.trials.groupby("split").size()
        return int(min([counts.get(split, 0) for split in self.splits] + [self.budget]))

    def at_round(self, round_: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The first `round_` trials of every planned split and every Fixed AdaCos run of those splits."""
        trials = self.trials[self.trials["split"].isin(self.splits)]
        return (trials.groupby("split", sort=False).head(round_),
                self.reference[self.reference["split"].isin(self.splits)])


PRIOR_REGIMES = ("converged", "short")


def benchmark_prior(cells: str | Path | pd.DataFrame, objective: str, leave_out_source: str | None = None,
                    regime: str = "converged") -> Prior:
    """The benchmark's predictive distribution of a new source's tuned ArcFace − Fixed AdaCos (relative), from the
    cells its headline pools (reports/benchmark/tables/cells.csv, or that table) at the study's training length
    (`regime`: the converged cells, or the short regime's primary cells), on the study's objective; without
    `leave_out_source`'s cells (a replay on one of its own cells must not see itself)."""
    from study.analysis.headline import headline_cells

    if regime not in PRIOR_REGIMES:
        raise AdviceError(f"unknown prior regime {regime!r}: give one of {', '.join(PRIOR_REGIMES)}")
    if not isinstance(cells, pd.DataFrame):
        path = Path(cells)
        if not path.is_file():
            raise AdviceError(f"no benchmark at {path}: run `study benchmark --report-only` (or give --prior none)")
        cells = read_prior_table(path, objective)
    pooled = (headline_cells(cells) if regime == "converged" else
              cells[cells["primary"].astype(bool) & (cells["regime"] == "short")
                    & (cells["relative_se"].astype(float) > 0)])
    pooled = pooled[(pooled["method"] == "arcface_tuned") & (pooled["source"] != leave_out_source)]
    metrics = sorted(set(pooled["metric"]))
    pooled = pooled[pooled["metric"] == f"test_{objective}"]
    if pooled.empty:
        raise AdviceError(f"the benchmark pools {', '.join(metrics) or 'no converged cell'}, not test_{objective}, "
                          f"the study's objective: give a benchmark on {objective} or --prior none")
    probabilities, centres, spreads = new_source_mixture(pooled["relative"], pooled["relative_se"], pooled["source"])
    return Prior(probabilities, centres, spreads, objective,
                 f"the benchmark's {pooled['source'].nunique()} sources, {len(pooled)} {regime} cells")


def posterior(prior: Prior, estimate: float, variance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The prior mixture updated by one normal observation: (p, centres, spreads) and the prior's weight, the share
    of the posterior mean that comes from the prior (0: the data alone, 1: the prior alone)."""
    prior_variance = prior.spreads ** 2
    total = prior_variance + variance
    log_evidence = -0.5 * (np.log(total) + (estimate - prior.centres) ** 2 / total)
    probabilities = prior.probabilities * np.exp(log_evidence - log_evidence.max())
    probabilities /= probabilities.sum()
    shrink = prior_variance / total  # the data's share in each component's posterior mean
    centres = prior.centres + shrink * (estimate - prior.centres)
    spreads = np.sqrt(shrink * variance)
    return probabilities, centres, spreads, float(np.sum(probabilities * (1.0 - shrink)))


@dataclass(frozen=True)
class Gain:
    """What k more trials per split are expected to add to one search's selected test score, relative, with seed
    luck removed (what as many more Fixed AdaCos seeds picked by val would add), and what they cost."""

    trials: int
    gain: float
    low: float
    high: float
    seed_luck: float
    trainings: int
    seconds: float


@dataclass(frozen=True)
class Worth:
    """What k more trials per split are expected to be worth (more_trials_worth): the expected net value of the
    answer they may change, in shares of the score, against their price (price × trainings)."""

    trials: int
    trainings: int
    value: float
    price: float
    net: float


def _share(value: float) -> str:
    return f"{100 * value:.2f}%"


def _percent(value: float) -> str:
    return f"{100 * value:+.1f}%"


@dataclass(frozen=True)
class Advice:
    decision: str
    says: str
    use: str
    round: int
    budget: int
    splits: int
    trainings: int
    difference: float
    low: float
    high: float
    level: float
    margin: float
    prior_weight: float
    prior: str
    seconds_per_trial: float
    gains: list[Gain] = field(default_factory=list)
    settle_chance: float = math.nan  # that the budget's last look settles it, where the decision read it
    choice: str = "fixed_adacos"  # what to do: one of CHOICES, never undecided
    price: float = DEFAULT_PRICE  # one training, as a share of Fixed AdaCos's score
    search_cost: float = math.nan  # price × (budget − 1): a search's trainings beyond Fixed AdaCos's one
    worth: list[Worth] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def first_line(self) -> str:
        """The decision, as a user acts on it: what to use (or to keep tuning), the expected gain and its price."""
        cost = (f"{self.budget - 1} more trainings than Fixed AdaCos's one, worth {_share(self.search_cost)} of the "
                f"score at {_share(self.price)} a training")
        expected = f"{_percent(self.difference)} [{_percent(self.low)}, {_percent(self.high)}]"
        if self.choice == "arcface_tuned":
            return (f"Use tuned ArcFace: {self.use.removeprefix('ArcFace at ')} adds {_percent(self.low)} of Fixed "
                    f"AdaCos's score at least ({_percent(self.difference)} expected) for {cost}.")
        best = max(self.worth, key=lambda worth: worth.net) if self.worth else None
        if self.choice == "keep_tuning":
            return (f"Keep tuning: {best.trials} more trial(s) per split ({best.trainings} trainings, worth "
                    f"{_share(best.price)}) are expected to be worth {_share(best.value)} of the score in a better "
                    f"answer; until then use Fixed AdaCos (tuned ArcFace is expected to add {expected} for {cost}).")
        reasons = {
            "equivalent": f"the two are equivalent within the margin (±{100 * self.margin:.1f}%)",
            "adacos_better": "Fixed AdaCos is better beyond the margin",
            "budget_spent": "the budget is spent and tuning is not shown to pay",
            "futile": f"the rest of the budget is unlikely to settle it ({100 * self.settle_chance:.0f}% chance)",
            "tuning_pays": "tuning pays beyond the margin but not beyond its price",
            "not_worth_it": ("no more trials are expected to be worth their price" + (
                f" (at best {best.trials} more per split, worth {_share(best.value)} for {_share(best.price)})"
                if best else "")),
        }
        return f"Use Fixed AdaCos: tuned ArcFace is expected to add {expected} of its score for {cost}; " \
               f"{reasons.get(self.decision, 'tuning is not shown to pay')}."

    def lines(self) -> list[str]:
        """The advice in plain order: the decision, the difference, more trials' worth and price, the evidence."""
        lines = [self.first_line(),
                 f"Tuned ArcFace − Fixed AdaCos at {self.budget} trainings each (the trial val selects against the "
                 f"seed val selects): {_percent(self.difference)} of Fixed AdaCos's score, "
                 f"[{_percent(self.low)}, {_percent(self.high)}] at {100 * self.level:.2f}% "
                 f"(valid however often it is read: round {self.round} of {self.budget}, {self.splits} split(s), "
                 f"{self.trainings} trainings; margin ±{100 * self.margin:.1f}%; the prior ({self.prior}) weighs "
                 f"{100 * self.prior_weight:.0f}%)."]
        for gain in self.gains:
            interval = (f"[{_percent(gain.low)}, {_percent(gain.high)}]" if math.isfinite(gain.low) else
                        "(no valid interval: it rests on the few best trials)")
            lines.append(f"{gain.trials} more trials per split: {_percent(gain.gain)} {interval} expected on test "
                         f"with seed luck removed ({_percent(gain.seed_luck)} is what picking among as many seeds "
                         f"gives), {gain.trainings} trainings, about {gain.seconds:,.0f} device-seconds.")
        if self.worth:
            shown = [worth for worth in self.worth if worth.trials in (1, 2, 5, 10) or worth is self.worth[-1]]
            lines.append(f"Net value of more trials per split at {_share(self.price)} of the score a training "
                         "(what they are expected to change in the answer, less their price): "
                         + "; ".join(f"{worth.trials}: {_share(worth.value)} − {_share(worth.price)} = "
                                     f"{100 * worth.net:+.2f}%" for worth in shown) + ".")
        lines.append(f"Evidence: {self.says}.")
        return lines


def _quantiles(probabilities, centres, spreads, levels) -> list[float]:
    """Quantiles of the mixture Σ p_g·N(centre_g, spread_g²), each by Brent's method on its CDF within ±12 spreads of
    every component (what study.analysis.true_effect._mixture_quantiles finds by 60 halvings, in a fifth of the CDF
    evaluations: the simulation reads thousands)."""
    low, high = float(np.min(centres - 12.0 * spreads)), float(np.max(centres + 12.0 * spreads))

    def cdf(value: float) -> float:
        return float(probabilities @ special.ndtr((value - centres) / spreads))

    return [optimize.brentq(lambda value: cdf(value) - level, low, high, xtol=1e-13, rtol=1e-12)
            for level in levels]


def _gains(centred: Centred, round_: int, z: float, splits: int, seconds: float) -> list[Gain]:
    """GAIN_TRIALS more trials per split: D(round + k) − D(round) of the trials' within-split deviations, less the same
    of the Fixed AdaCos runs' (what picking among as many seeds gives). Its interval, a jackknife one, only where the
    weights at round + k spread over MIN_EFFECTIVE_TRIALS trials or more; beyond, it rests on the few best trials
    and no interval of this kind covers (study.analysis.tuning), so it is NaN."""
    from study.analysis.tuning import MIN_EFFECTIVE_TRIALS

    val, test, scale = *within_split(centred), centred.scale
    now, _ = selected_difference(val, test, round_)
    seed_now, _ = seed_luck(centred, round_)
    gains = []
    for more in GAIN_TRIALS:
        later, _ = selected_difference(val, test, round_ + more)
        seed_later, _ = seed_luck(centred, round_ + more)
        gain = (later - now) - (seed_later - seed_now)
        effective = 1.0 / float(np.sum(best_of_n_weights(val.size, round_ + more) ** 2))
        variance = _gain_variance(val, test, round_, round_ + more) if effective >= MIN_EFFECTIVE_TRIALS else math.nan
        half = z * math.sqrt(variance) if math.isfinite(variance) else math.nan
        gains.append(Gain(more, gain / scale, (gain - half) / scale, (gain + half) / scale,
                          (seed_later - seed_now) / scale, more * splits, more * splits * seconds))
    return gains


def _gain_variance(val, test, n_now: int, n_later: int) -> float:
    """Delete-one jackknife variance of D(n_later) − D(n_now)."""
    ranked = ranked_by_val(val, test)
    size = max(ranked.size - 1, 1)
    return jackknife_variance(ranked, best_of_n_weights(size, n_later) - best_of_n_weights(size, n_now))


@dataclass(frozen=True)
class Judged:
    decision: str
    low: float
    middle: float
    high: float
    prior_weight: float
    settle_chance: float = math.nan
    choice: str = "fixed_adacos"
    search_cost: float = math.nan
    worth: tuple[Worth, ...] = ()


def carries(trials: int, budget: int) -> bool:
    """Whether `trials` pooled trials carry D(budget): its weights spread over MIN_EFFECTIVE_TRIALS of them or more
    (about trials ≥ 3·budget). Below, D(budget) rests on the few best trials seen and understates what the unseen
    ones may bring: fine for showing that tuning pays, not for showing that it will not."""
    from study.analysis.tuning import MIN_EFFECTIVE_TRIALS

    return 1.0 / float(np.sum(best_of_n_weights(trials, budget) ** 2)) >= MIN_EFFECTIVE_TRIALS


def settle_chance(centred: Centred, budget: int, margin: float, prior: Prior, level: float) -> float:
    """The chance that the budget's last look (every split at `budget` trials) settles the question, predicted from
    the evidence now: its estimate of D(budget) then is normal about what the evidence and the prior now expect, with
    the variance the trials still to come remove (difference_at's projection). The prior enters as the normal of its
    mean and variance, an approximation used only for this prediction; the decisions read the mixture itself."""
    difference, variance, final = projected_difference(centred, budget, budget)
    now, variance, final = difference / centred.scale, variance / centred.scale ** 2, final / centred.scale ** 2
    centre = float(np.sum(prior.probabilities * prior.centres))
    spread = float(np.sum(prior.probabilities * (prior.spreads ** 2 + prior.centres ** 2))) - centre ** 2
    believed_variance = 1.0 / (1.0 / spread + 1.0 / variance)  # of the true difference, now
    believed = believed_variance * (centre / spread + now / variance)
    if final >= variance:  # the trials to come cannot narrow it: the last look sees what this one sees
        expected, predicted_sd = now, 0.0
    else:
        information_now, information_then = 1.0 / variance, 1.0 / final
        added = information_then - information_now
        expected = (information_now * now + added * believed) / information_then
        predicted_sd = math.sqrt((added / information_then) ** 2 * (1.0 / added + believed_variance))
    # At the last look the posterior is normal with the data's share `share`: each of its edges crosses a bound at
    # one estimate then.
    share = spread / (spread + final)
    half = float(special.ndtri(1.0 - level)) * math.sqrt(spread * final / (spread + final))

    def threshold(bound: float) -> float:
        return centre + (bound - centre) / share

    def below(value: float) -> float:
        if predicted_sd == 0.0:
            return float(expected < value)
        return float(special.ndtr((value - expected) / predicted_sd))

    chance = 1.0 - below(threshold(margin + half))  # tuning pays
    if carries(np.unique(centred.split_of_trial).size * budget, budget):
        chance += below(threshold(-margin - half))  # Fixed AdaCos better
        low, high = threshold(-margin + half), threshold(margin - half)
        chance += max(below(high) - below(low), 0.0)  # equivalent
    return min(chance, 1.0)


def _normal_prior(prior: Prior) -> tuple[float, float]:
    """The prior mixture's mean and variance (the normal the predictions of the last look read)."""
    centre = float(np.sum(prior.probabilities * prior.centres))
    return centre, float(np.sum(prior.probabilities * (prior.spreads ** 2 + prior.centres ** 2))) - centre ** 2


def more_trials_worth(projection: Projection, scale: float, round_: int, budget: int, splits: int, bar: float,
                      cost: float, prior: Prior, level: float, price: float) -> list[Worth]:
    """The expected net value of k = 1 … budget − round more trials per split, in shares of the score: what the look
    after them is expected to change in the answer, less their price (price × k × splits trainings).

    Stopping now uses Fixed AdaCos (worth 0, the unit); the look after k more uses tuned ArcFace where its lower bound
    clears `bar` (the margin, or the search's price where higher), which is then worth D − `cost` (a search's
    trainings beyond Fixed AdaCos's one, priced). With the normal of the prior's mean and variance, as settle_chance
    predicts the last look: D now ~ N(μ, v), and that look's estimate X = (I₀x₀ + a·Y)/I_k with Y ~ N(D, 1/a), the
    information a = I_k − I₀ its trials add (projected_difference's variance), so X ~ N(e, s²) with cov(D, X) = (a/I_k)·v.
    Its value is the expectation of (D − cost) where X clears the threshold T:
        (μ − cost)·(1 − Φ(u)) + cov(D, X)/s · φ(u),   u = (T − e)/s,
    a one-step look-ahead (the knowledge gradient's form; Frazier et al. 2008) for each horizon k."""
    estimate, now = projection.estimate / scale, projection.variance() / scale ** 2
    centre, spread = _normal_prior(prior)
    believed_variance = 1.0 / (1.0 / spread + 1.0 / now)
    believed = believed_variance * (centre / spread + estimate / now)
    z = float(special.ndtri(1.0 - level))
    worth = []
    for more in range(1, budget - round_ + 1):
        then = projection.variance(round_ + more) / scale ** 2
        value = 0.0
        if then < now:  # else the trials to come add nothing this look can see
            information_now, information_then = 1.0 / now, 1.0 / then
            added = information_then - information_now
            weight = added / information_then
            expected = (information_now * estimate + added * believed) / information_then
            sd = weight * math.sqrt(1.0 / added + believed_variance)
            share = spread / (spread + then)
            threshold = centre + (bar + z * math.sqrt(spread * then / (spread + then)) - centre) / share
            u = (threshold - expected) / sd
            density = math.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
            value = (believed - cost) * float(special.ndtr(-u)) + weight * believed_variance / sd * density
        trainings = more * splits
        worth.append(Worth(more, trainings, value, price * trainings, value - price * trainings))
    return worth


def judge(centred: Centred, budget: int, last: bool, margin: float, prior: Prior, level: float,
          futility: float = 0.0, price: float = DEFAULT_PRICE, value_stop: bool = True) -> Judged:
    """The decision on D(budget), relative, from the posterior's `level` and 1 − `level` quantiles: tuning pays where
    the lower bound clears the margin and the price of a search (price × (budget − 1)); once the trials carry D(budget)
    (`carries`), Fixed AdaCos better below minus the margin and equivalent within it; else, at the `last` look, the
    budget is spent; before it, futile if the chance that the last look settles it is below `futility`
    (`settle_chance`; 0, the default: never futile), not worth it where no number of more trials is expected to be
    worth its price (more_trials_worth; `value_stop` False: never), else run more. Its `choice`: tuned ArcFace where
    tuning pays, keep tuning where it runs more, else Fixed AdaCos."""
    projection = Projection.of(centred, budget)
    difference, variance = projection.estimate, projection.variance()
    probabilities, centres, spreads, weight = posterior(prior, difference / centred.scale,
                                                        variance / centred.scale ** 2)
    low, middle, high = _quantiles(probabilities, centres, spreads, (level, 0.5, 1.0 - level))
    carried = carries(centred.val.size, budget)
    cost = price * (budget - 1)
    chance, worth = math.nan, []
    splits, counts = np.unique(centred.split_of_trial, return_counts=True)
    if not last and value_stop:
        worth = more_trials_worth(projection, centred.scale, int(counts.min()), budget, splits.size,
                                  max(margin, cost), cost, prior, level, price)
    if low > max(margin, cost):
        decision = "tuning_pays"
    elif carried and high < -margin:
        decision = "adacos_better"
    elif carried and -margin < low and high < margin:
        decision = "equivalent"
    elif last:
        decision = "budget_spent"
    else:
        chance = settle_chance(centred, budget, margin, prior, level) if futility > 0 else math.nan
        if chance < futility:
            decision = "futile"
        elif value_stop and max(item.net for item in worth) <= 0:
            decision = "not_worth_it"
        else:
            decision = "run_more"
    choice = {"tuning_pays": "arcface_tuned", "run_more": "keep_tuning"}.get(decision, "fixed_adacos")
    return Judged(decision, low, middle, high, weight, chance, choice, cost, tuple(worth))


def advise(evidence: Evidence, margin: float, prior: Prior, alpha: float = 0.05, best: str = "",
           futility: float = 0.0, price: float | None = None, value_stop: bool = True) -> Advice:
    """The advice at the evidence's last whole round (see the module's docstring). AdviceError names a damaged
    argument; NotYetJudged, what a running study still lacks.

    `margin` is relative (a share of Fixed AdaCos's score); `best` names the best trial's (s, m) for "use now";
    `price` (a share of the score per training) defaults to the evidence's (analysis.price_per_training)."""
    check_probability(alpha, "alpha (study advise --alpha)")
    check_margin(margin, "the margin (analysis.equivalence_margin, or AdviceCallback's margin)")
    price = evidence.price if price is None else check_price(price, "price")
    if prior.metric != evidence.metric:
        raise AdviceError(f"the prior is about {prior.metric} and the study's objective is {evidence.metric}: give a "
                          f"benchmark on the same metric, or --prior none")
    round_ = evidence.round()
    trials, reference = evidence.at_round(round_)
    without_runs = [split for split in evidence.splits if (reference["split"] == split).sum() < 1]
    if without_runs:
        raise NotYetJudged(f"no Fixed AdaCos run on split(s) {without_runs} yet: run the study further (`dvc repro` "
                           f"or `study worker`) and ask again")
    if round_ < MIN_ROUND or len(reference) < max(MIN_REFERENCE_RUNS + len(evidence.splits) - 1, MIN_LUCK_RUNS):
        counts = evidence.trials.groupby("split").size().to_dict()
        raise NotYetJudged(
            f"too little evidence to judge: every split needs {MIN_ROUND} finished ArcFace trials (have "
            f"{ {split: counts.get(split, 0) for split in evidence.splits} }) and Fixed AdaCos runs, {MIN_REFERENCE_RUNS} "
            f"on one split and {MIN_LUCK_RUNS} in all at least (have {len(reference)}); run the study further "
            f"(`dvc repro` or `study worker`) and ask again, or, where its runs have all finished, add seeds to "
            f"runs.seeds")
    centred, level = centre(trials, reference), alpha / evidence.budget  # each side, at each of the budget's looks
    judged = judge(centred, evidence.budget, round_ >= evidence.budget, margin, prior, level, futility, price,
                   value_stop)
    decision, low, middle, high = judged.decision, judged.low, judged.middle, judged.high
    seconds = float(np.nanmean(trials["seconds"].to_numpy(float))) if trials["seconds"].notna().any() else math.nan
    if decision == "tuning_pays":
        says = (f"{DECISIONS[decision]} (+{100 * low:.1f}% at least, beyond the margin and the search's price, for "
                f"{evidence.budget * seconds:,.0f} device-seconds of search a split)")
        use = f"ArcFace at the best trial's {best}" if best else "ArcFace at the best trial's (s, m)"
    else:
        says = DECISIONS[decision] + (f" (a {100 * judged.settle_chance:.0f}% chance by round {evidence.budget}; "
                                      "more class splits would narrow the interval)" if decision == "futile" else "")
        use = "Fixed AdaCos (it costs no tuning)" if decision in ("equivalent", "adacos_better") or middle <= 0 else \
            f"Fixed AdaCos (it costs no tuning; tuning leads by {100 * middle:+.1f}% but is not shown to pay)"
    gains = _gains(centred, round_, float(special.ndtri(1.0 - level)), len(evidence.splits), seconds)
    return Advice(decision, says, use, round_, evidence.budget, len(evidence.splits), len(trials) + len(reference),
                  middle, low, high, 1.0 - 2.0 * level, margin, judged.prior_weight, prior.source, seconds, gains,
                  judged.settle_chance, judged.choice, price, judged.search_cost, list(judged.worth))


class AdviceCallback:
    """The advice as a callback of one's own `study.optimize` (one search: one class split), with one's own Fixed
    AdaCos runs given as (val, test) pairs. Each trial must record its test score as the user attribute `test_attr`.
    After every trial the advice goes into the study's user attributes ("advice": what optuna-dashboard shows); with
    `stop`, the study stops once the advice says stop. Too little evidence yet: the attribute says what is missing.
    Every argument is checked here, and every trial's scores as they come: a bad one raises AdviceError, naming it."""

    def __init__(self, reference: list[tuple[float, float]], budget: int, objective: str, margin: float = 0.02,
                 prior: Prior | None = None, test_attr: str = "test", stop: bool = True, alpha: float = 0.05,
                 price_per_training: float = DEFAULT_PRICE):
        pairs = check_reference_pairs(reference, MIN_LUCK_RUNS)
        self.reference = pd.DataFrame([{"split": 0, "val": val, "test": test, "seconds": math.nan}
                                       for val, test in pairs], columns=EVIDENCE_COLUMNS)
        self.budget, self.objective = budget, objective
        self.margin = check_margin(margin, "margin")
        self.alpha = check_probability(alpha, "alpha")
        self.price = check_price(price_per_training, "price_per_training")
        self.prior = prior or Prior.flat(objective)
        self.test_attr, self.stop = test_attr, stop
        # The study's scores are checked as they come; the reference's own now (its range, its mean above 0).
        Evidence(pd.DataFrame(columns=EVIDENCE_COLUMNS), self.reference, (0,), budget, objective, self.price)

    def __call__(self, study, trial) -> None:
        import optuna

        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise AdviceError("the advice reads scores that are better when higher: create the study with "
                              "direction='maximize'")
        finished = study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
        rows = [{"split": 0, "val": t.value, "test": t.user_attrs.get(self.test_attr, math.nan),
                 "seconds": t.duration.total_seconds() if t.duration else math.nan} for t in finished]
        missing = [t.number for t, row in zip(finished, rows)
                   if not isinstance(row["test"], (int, float)) or not math.isfinite(row["test"])]
        if missing:
            raise AdviceError(f"{len(missing)} trial(s) (number {missing[0]} first) have no finite user attribute "
                              f"{self.test_attr!r}: record each trial's test score with "
                              f"trial.set_user_attr({self.test_attr!r}, score)")
        evidence = Evidence(pd.DataFrame(rows, columns=EVIDENCE_COLUMNS), self.reference, (0,), self.budget,
                            self.objective, self.price)
        try:
            advice = advise(evidence, self.margin, self.prior, self.alpha,
                            best=f"(s, m) = {study.best_trial.params}" if rows else "")
        except NotYetJudged as error:
            study.set_user_attr("advice", {"decision": "run_more", "choice": "keep_tuning", "says": str(error)})
            return
        study.set_user_attr("advice", {key: value for key, value in advice.as_dict().items()
                                       if key not in ("gains", "worth")} | {"lines": advice.lines()})
        if self.stop and advice.decision != "run_more":
            study.stop()


def replay(evidence: Evidence, margin: float, prior: Prior, alpha: float = 0.05, futility: float = 0.0,
           price: float | None = None, value_stop: bool = True) -> Advice:
    """The advice read after every round of a finished study, as if it had run live: the first that said stop (or
    the last round's). Where no split has MIN_ROUND trials yet, `advise` says what is missing (NotYetJudged)."""
    for round_ in range(MIN_ROUND, max(evidence.round(), MIN_ROUND) + 1):
        shown = dataclasses.replace(evidence, trials=evidence.trials.groupby("split", sort=False).head(round_))
        advice = advise(shown, margin, prior, alpha, futility=futility, price=price, value_stop=value_stop)
        if advice.decision != "run_more":
            break
    return advice
