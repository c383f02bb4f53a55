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
stops as futile (`settle_chance` below FUTILITY): no claim about the difference, only that more trials of this design
would not buy an answer (more class splits would). The prior is the benchmark's predictive
distribution of a new source's difference (its between-source spread integrated out:
study.analysis.true_effect.new_source_mixture); `prior_weight` says how much it moves the answer. Error rates in
worlds calibrated from the benchmark's cells: benchmarks/advise_simulation.py, docs/analysis.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import integrate, special, stats

from study.analysis.true_effect import _mixture_quantiles, new_source_mixture

EVIDENCE_COLUMNS = ("split", "val", "test", "seconds")
GAIN_TRIALS = (5, 10, 20)
# Below these no variance can be estimated: two trials a split for the jackknife, two Fixed AdaCos runs for seed noise.
MIN_ROUND = 2
MIN_REFERENCE_RUNS = 2
DECISIONS = {
    "tuning_pays": "stop: tuning pays",
    "equivalent": "stop: equivalent within the margin",
    "adacos_better": "stop: Fixed AdaCos is better",
    "budget_spent": "stop: the budget is spent and the answer is not known",
    "futile": "stop: the rest of the budget is unlikely to settle it",
    "run_more": "run more: the answer is not known yet",
}
# Declared with the futility stop, before its error rates were simulated: stop when the chance that the budget's last
# look settles the question (tuning pays, equivalent or Fixed AdaCos better) is below this.
FUTILITY = 0.10


class AdviceError(ValueError):
    """The evidence cannot be judged yet, or the prior does not fit it: the message names what is missing."""


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

    def __post_init__(self):
        for name in ("trials", "reference"):
            frame = getattr(self, name)
            missing = [column for column in EVIDENCE_COLUMNS if column not in frame.columns]
            if missing:
                raise AdviceError(f"the {name} lack the columns {missing}: give {list(EVIDENCE_COLUMNS)}")
        if self.budget < MIN_ROUND:
            raise AdviceError(f"a budget of {self.budget} trials per split leaves nothing to decide early: give at "
                              f"least {MIN_ROUND} (search.n_trials)")

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
    from study.benchmark.meta import converged_cells

    if regime not in PRIOR_REGIMES:
        raise AdviceError(f"unknown prior regime {regime!r}: give one of {', '.join(PRIOR_REGIMES)}")
    if not isinstance(cells, pd.DataFrame):
        path = Path(cells)
        if not path.is_file():
            raise AdviceError(f"no benchmark at {path}: run `study benchmark --report-only` (or give --prior none)")
        cells = pd.read_csv(path)
    pooled = (converged_cells(cells) if regime == "converged" else
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


def _weights(size: int, n: int) -> np.ndarray:
    """P(the best of n draws with replacement from `size` ranked items is the i-th lowest), i = 1…size."""
    rank = np.arange(1, size + 1, dtype=float)
    return (rank / size) ** n - ((rank - 1) / size) ** n


def _ranked(val, test) -> np.ndarray:
    """Test scores in ascending order of val."""
    return np.asarray(test, dtype=float)[np.argsort(np.asarray(val, dtype=float), kind="stable")]


def _jackknife(ranked: np.ndarray, inner: np.ndarray) -> float:
    """Delete-one jackknife variance of Σ w(i)·e₍ᵢ₎ in closed form, `inner` the weights of size − 1 items: leaving out
    the trial of val rank k shifts the ranks above it down by one, so its estimate is Σ_{i<k} w'(i)·e₍ᵢ₎ +
    Σ_{i>k} w'(i−1)·e₍ᵢ₎. NaN for fewer than two trials."""
    size = ranked.size
    if size < 2:
        return math.nan
    below = np.concatenate([[0.0], np.cumsum(inner * ranked[:-1])])  # Σ_{i<k}, k = 1…size
    above = np.concatenate([np.cumsum((inner * ranked[1:])[::-1])[::-1], [0.0]])  # Σ_{i>k}
    leave_one_out = below + above
    return float((size - 1) / size * np.sum((leave_one_out - leave_one_out.mean()) ** 2))


def selected_difference(val, test, n: int) -> tuple[float, float]:
    """D(n) from centred trials and its delete-one jackknife variance (NaN for fewer than two trials)."""
    ranked = _ranked(val, test)
    return float(_weights(ranked.size, n) @ ranked), _jackknife(ranked, _weights(max(ranked.size - 1, 1), n))


@dataclass(frozen=True)
class Centred:
    """Trials and Fixed AdaCos runs centred on their split's Fixed AdaCos means, and the scale of the relative
    difference (Fixed AdaCos's mean test score)."""

    val: np.ndarray
    test: np.ndarray
    split_of_trial: np.ndarray
    reference_val: np.ndarray  # the runs' deviations from their split's means, inflated as within_split's
    reference_test: np.ndarray
    reference_variance: float
    runs_per_split: pd.Series
    scale: float


def centre(trials: pd.DataFrame, reference: pd.DataFrame) -> Centred:
    """Every split's trials and runs less its Fixed AdaCos means (val and test)."""
    return centre_arrays(*(frame[column].to_numpy() for frame in (trials, reference) for column in ("split", "val",
                                                                                                       "test")))


def centre_arrays(trial_split, trial_val, trial_test, run_split, run_val, run_test) -> Centred:
    """`centre` on plain arrays (what the simulated studies of benchmarks/advise_simulation.py give it)."""
    run_split = np.asarray(run_split)
    splits, index, runs = np.unique(run_split, return_inverse=True, return_counts=True)
    runs_val, runs_test = np.asarray(run_val, dtype=float), np.asarray(run_test, dtype=float)
    mean_val, mean_test = np.bincount(index, runs_val) / runs, np.bincount(index, runs_test) / runs
    of_trial = np.searchsorted(splits, trial_split)
    centred_val, centred_test = runs_val - mean_val[index], runs_test - mean_test[index]
    residual_df = runs_test.size - splits.size
    variance = float(np.sum(centred_test ** 2) / residual_df) if residual_df > 0 else math.nan
    # As within_split does for trials: a deviation from the mean of r runs has lost (r − 1)/r of the spread.
    inflate = np.sqrt(np.where(runs > 1, runs / np.maximum(runs - 1, 1), 1.0))[index]
    return Centred(np.asarray(trial_val, dtype=float) - mean_val[of_trial],
                   np.asarray(trial_test, dtype=float) - mean_test[of_trial], np.asarray(trial_split),
                   centred_val * inflate, centred_test * inflate, variance, pd.Series(runs, index=splits),
                   float(runs_test.mean()))


def within_split(centred: Centred) -> tuple[np.ndarray, np.ndarray]:
    """Each trial's val and test less its split's trial means, times √(r/(r − 1)) for the r trials of its split (the
    spread a deviation from the mean of r draws loses): draws of one distribution whatever each split's level."""
    val, test = centred.val.copy(), centred.test.copy()
    for split in np.unique(centred.split_of_trial):
        mine = centred.split_of_trial == split
        inflate = math.sqrt(mine.sum() / (mine.sum() - 1)) if mine.sum() > 1 else 1.0
        val[mine] = (val[mine] - val[mine].mean()) * inflate
        test[mine] = (test[mine] - test[mine].mean()) * inflate
    return val, test


def difference_at(centred: Centred, n: int, trials_per_split: int | None = None) -> tuple[float, float]:
    """D(n) in the metric's units and its variance, in two parts. What selection buys over a split's average trial:
    the selected-test curve of the trials' deviations from their split's means, pooled over splits (a split's level
    cancels, so val cannot select a split), with its jackknife variance. The average trial less Fixed AdaCos, averaged
    over splits: its variance from the splits' spread (which holds any method-by-split interaction), never below what
    the trials' and runs' noise within splits implies.

    With `trials_per_split`, the variance projected to every split having that many trials (projected_difference)."""
    estimate, now, then = projected_difference(centred, n, trials_per_split)
    return estimate, now if trials_per_split is None else then


def projected_difference(centred: Centred, n: int, trials_per_split: int | None) -> tuple[float, float, float]:
    """difference_at's D(n), its variance now, and its variance once every split has `trials_per_split` trials (the
    Fixed AdaCos runs as they are; None: the variance now again): the jackknife part shrinks as one over the trials,
    the noise within splits as one over a split's trials, and the splits' spread keeps what it holds beyond that
    noise (an interaction more trials cannot remove)."""
    val, test = within_split(centred)
    gain, gain_variance = selected_difference(val, test, n)
    luck, luck_variance = seed_luck(centred, n)
    splits, counts = np.unique(centred.split_of_trial, return_counts=True)
    levels = np.array([centred.test[centred.split_of_trial == split].mean() for split in splits])
    runs = centred.runs_per_split.reindex(splits).to_numpy(float)
    noise = np.array([centred.test[centred.split_of_trial == split].var(ddof=1) if count > 1 else math.nan
                      for split, count in zip(splits, counts)])
    within = float(np.nansum(noise / counts + centred.reference_variance / runs)) / splits.size ** 2
    between = float(levels.var(ddof=1)) / splits.size if splits.size > 1 else 0.0
    estimate = gain - luck + float(levels.mean())
    now = gain_variance + luck_variance + max(within, between)
    if trials_per_split is None:
        return estimate, now, now
    later = float(np.nansum(noise / trials_per_split + centred.reference_variance / runs)) / splits.size ** 2
    shrink = counts.sum() / (trials_per_split * splits.size)
    return estimate, now, gain_variance * shrink + luck_variance + max(later, between - within + later)


@functools.cache
def expected_maximum(n: int) -> float:
    """E[max of n independent standard normals]."""
    return integrate.quad(lambda x: x * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1), -np.inf, np.inf)[0]


def seed_luck(centred: Centred, n: int) -> tuple[float, float]:
    """What picking the best of n Fixed AdaCos seeds by val adds on test (the budget-matched control: as many
    trainings of the untuned loss), with normal seed noise: E[max of n]·cov(val, test)/sd(val), from the runs'
    deviations from their split's means; its delete-one jackknife variance over runs. It extrapolates past the runs
    seen, which the order statistics of two runs a split cannot."""
    def luck(val: np.ndarray, test: np.ndarray) -> float:
        spread = math.sqrt(float(np.mean(val ** 2)))
        return expected_maximum(n) * float(np.mean(val * test)) / spread if spread > 0 else 0.0

    val, test = centred.reference_val, centred.reference_test
    estimate = luck(val, test)
    if val.size < 3:
        return estimate, math.nan
    leave_one_out = np.array([luck(np.delete(val, i), np.delete(test, i)) for i in range(val.size)])
    return estimate, float((val.size - 1) / val.size * np.sum((leave_one_out - leave_one_out.mean()) ** 2))


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

    def as_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        """The advice in plain order: what to use now, the difference, more trials' worth, the decision."""
        percent = lambda value: f"{100 * value:+.1f}%"  # noqa: E731
        lines = [f"Use now: {self.use}.",
                 f"Tuned ArcFace − Fixed AdaCos at {self.budget} trainings each (the trial val selects against the "
                 f"seed val selects): {percent(self.difference)} of Fixed AdaCos's score, "
                 f"[{percent(self.low)}, {percent(self.high)}] at {100 * self.level:.2f}% "
                 f"(valid however often it is read: round {self.round} of {self.budget}, {self.splits} split(s), "
                 f"{self.trainings} trainings; margin ±{100 * self.margin:.1f}%; the prior ({self.prior}) weighs "
                 f"{100 * self.prior_weight:.0f}%)."]
        for gain in self.gains:
            interval = (f"[{percent(gain.low)}, {percent(gain.high)}]" if math.isfinite(gain.low) else
                        "(no valid interval: it rests on the few best trials)")
            lines.append(f"{gain.trials} more trials per split: {percent(gain.gain)} {interval} expected on test "
                         f"with seed luck removed ({percent(gain.seed_luck)} is what picking among as many seeds "
                         f"gives), {gain.trainings} trainings, about {gain.seconds:,.0f} device-seconds.")
        lines.append(f"Decision: {self.says}.")
        return lines


def _quantiles(probabilities, centres, spreads, levels) -> list[float]:
    return [float(value[0]) for value in _mixture_quantiles(probabilities[None, :], centres[None, :],
                                                            spreads[None, :], levels)]


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
        effective = 1.0 / float(np.sum(_weights(val.size, round_ + more) ** 2))
        variance = _gain_variance(val, test, round_, round_ + more) if effective >= MIN_EFFECTIVE_TRIALS else math.nan
        half = z * math.sqrt(variance) if math.isfinite(variance) else math.nan
        gains.append(Gain(more, gain / scale, (gain - half) / scale, (gain + half) / scale,
                          (seed_later - seed_now) / scale, more * splits, more * splits * seconds))
    return gains


def _gain_variance(val, test, n_now: int, n_later: int) -> float:
    """Delete-one jackknife variance of D(n_later) − D(n_now)."""
    ranked = _ranked(val, test)
    size = max(ranked.size - 1, 1)
    return _jackknife(ranked, _weights(size, n_later) - _weights(size, n_now))


@dataclass(frozen=True)
class Judged:
    decision: str
    low: float
    middle: float
    high: float
    prior_weight: float
    settle_chance: float = math.nan


def carries(trials: int, budget: int) -> bool:
    """Whether `trials` pooled trials carry D(budget): its weights spread over MIN_EFFECTIVE_TRIALS of them or more
    (about trials ≥ 3·budget). Below, D(budget) rests on the few best trials seen and understates what the unseen
    ones may bring: fine for showing that tuning pays, not for showing that it will not."""
    from study.analysis.tuning import MIN_EFFECTIVE_TRIALS

    return 1.0 / float(np.sum(_weights(trials, budget) ** 2)) >= MIN_EFFECTIVE_TRIALS


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


def judge(centred: Centred, budget: int, last: bool, margin: float, prior: Prior, level: float,
          futility: float = FUTILITY) -> Judged:
    """The decision on D(budget), relative, from the posterior's `level` and 1 − `level` quantiles: tuning pays above
    the margin; once the trials carry D(budget) (`carries`), Fixed AdaCos better below minus the margin and
    equivalent within it; else, at the `last` look, the budget is spent; before it, futile if the chance that the last
    look settles it is below `futility` (`settle_chance`; 0: never futile), else run more."""
    difference, variance = difference_at(centred, budget)
    probabilities, centres, spreads, weight = posterior(prior, difference / centred.scale,
                                                        variance / centred.scale ** 2)
    low, middle, high = _quantiles(probabilities, centres, spreads, (level, 0.5, 1.0 - level))
    carried = carries(centred.val.size, budget)
    chance = math.nan
    if low > margin:
        decision = "tuning_pays"
    elif carried and high < -margin:
        decision = "adacos_better"
    elif carried and -margin < low and high < margin:
        decision = "equivalent"
    elif last:
        decision = "budget_spent"
    else:
        chance = settle_chance(centred, budget, margin, prior, level) if futility > 0 else math.nan
        decision = "futile" if chance < futility else "run_more"
    return Judged(decision, low, middle, high, weight, chance)


def advise(evidence: Evidence, margin: float, prior: Prior, alpha: float = 0.05, best: str = "",
           futility: float = FUTILITY) -> Advice:
    """The advice at the evidence's last whole round (see the module's docstring); AdviceError names what is missing.

    `margin` is relative (a share of Fixed AdaCos's score); `best` names the best trial's (s, m) for "use now"."""
    if prior.metric != evidence.metric:
        raise AdviceError(f"the prior is about {prior.metric} and the study's objective is {evidence.metric}: give a "
                          f"benchmark on the same metric, or --prior none")
    round_ = evidence.round()
    trials, reference = evidence.at_round(round_)
    without_runs = [split for split in evidence.splits if (reference["split"] == split).sum() < 1]
    if without_runs:
        raise AdviceError(f"no Fixed AdaCos run on split(s) {without_runs} yet: run the study further (`dvc repro` "
                          f"or `study worker`) and ask again")
    if round_ < MIN_ROUND or len(reference) < MIN_REFERENCE_RUNS + len(evidence.splits) - 1:
        counts = evidence.trials.groupby("split").size().to_dict()
        raise AdviceError(
            f"too little evidence to judge: every split needs {MIN_ROUND} finished ArcFace trials (have "
            f"{ {split: counts.get(split, 0) for split in evidence.splits} }) and Fixed AdaCos runs, {MIN_REFERENCE_RUNS} "
            f"on one split at least (have {len(reference)}); run the study further (`dvc repro` or `study worker`) "
            f"and ask again")
    centred, level = centre(trials, reference), alpha / evidence.budget  # each side, at each of the budget's looks
    judged = judge(centred, evidence.budget, round_ >= evidence.budget, margin, prior, level, futility)
    decision, low, middle, high = judged.decision, judged.low, judged.middle, judged.high
    seconds = float(np.nanmean(trials["seconds"].to_numpy(float))) if len(trials) else math.nan
    if decision == "tuning_pays":
        says = (f"{DECISIONS[decision]} (+{100 * low:.1f}% at least, for "
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
                  judged.settle_chance)


class AdviceCallback:
    """The advice as a callback of one's own `study.optimize` (one search: one class split), with one's own Fixed
    AdaCos runs given as (val, test) pairs. Each trial must record its test score as the user attribute `test_attr`.
    After every trial the advice goes into the study's user attributes ("advice": what optuna-dashboard shows); with
    `stop`, the study stops once the advice says stop. Too little evidence yet: the attribute says what is missing."""

    def __init__(self, reference: list[tuple[float, float]], budget: int, objective: str, margin: float = 0.02,
                 prior: Prior | None = None, test_attr: str = "test", stop: bool = True, alpha: float = 0.05):
        self.reference = pd.DataFrame([{"split": 0, "val": val, "test": test, "seconds": math.nan}
                                       for val, test in reference], columns=EVIDENCE_COLUMNS)
        self.budget, self.objective, self.margin = budget, objective, margin
        self.prior = prior or Prior.flat(objective)
        self.test_attr, self.stop, self.alpha = test_attr, stop, alpha

    def __call__(self, study, trial) -> None:
        import optuna

        rows = [{"split": 0, "val": t.value, "test": t.user_attrs.get(self.test_attr, math.nan),
                 "seconds": t.duration.total_seconds() if t.duration else math.nan}
                for t in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])]
        missing = [row for row in rows if not math.isfinite(row["test"])]
        if missing:
            raise AdviceError(f"{len(missing)} trial(s) lack the user attribute {self.test_attr!r}: record each "
                              f"trial's test score with trial.set_user_attr({self.test_attr!r}, score)")
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise AdviceError("the advice reads scores that are better when higher: create the study with "
                              "direction='maximize'")
        evidence = Evidence(pd.DataFrame(rows, columns=EVIDENCE_COLUMNS), self.reference, (0,), self.budget,
                            self.objective)
        try:
            advice = advise(evidence, self.margin, self.prior, self.alpha,
                            best=f"(s, m) = {study.best_trial.params}" if rows else "")
        except AdviceError as error:
            study.set_user_attr("advice", {"decision": "run_more", "says": str(error)})
            return
        study.set_user_attr("advice", {key: value for key, value in advice.as_dict().items() if key != "gains"}
                            | {"lines": advice.lines()})
        if self.stop and advice.decision != "run_more":
            study.stop()


def replay(evidence: Evidence, margin: float, prior: Prior, alpha: float = 0.05, futility: float = FUTILITY) -> Advice:
    """The advice read after every round of a finished study, as if it had run live: the first that said stop (or
    the last round's)."""
    for round_ in range(MIN_ROUND, evidence.round() + 1):
        shown = dataclasses.replace(evidence, trials=evidence.trials.groupby("split", sort=False).head(round_))
        advice = advise(shown, margin, prior, alpha, futility=futility)
        if advice.decision != "run_more":
            break
    return advice
