"""D(n), the difference a search of n trials is worth against as many trainings of Fixed AdaCos, with its variance
(study/advice.py's docstring gives the design): the order-statistic estimate with its jackknife, the seed luck of the
budget-matched control, and the variance projected to more trials per split."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from study.statistics import expected_maximum


def best_of_n_weights(size: int, n: int) -> np.ndarray:
    """P(the best of n draws with replacement from `size` ranked items is the i-th lowest), i = 1…size."""
    rank = np.arange(1, size + 1, dtype=float)
    return (rank / size) ** n - ((rank - 1) / size) ** n


def ranked_by_val(val, test) -> np.ndarray:
    """Test scores in ascending order of val."""
    return np.asarray(test, dtype=float)[np.argsort(np.asarray(val, dtype=float), kind="stable")]


def jackknife_variance(ranked: np.ndarray, inner: np.ndarray) -> float:
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
    ranked = ranked_by_val(val, test)
    return float(best_of_n_weights(ranked.size, n) @ ranked), jackknife_variance(ranked, best_of_n_weights(max(ranked.size - 1, 1), n))


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
    projection = Projection.of(centred, n)
    now = projection.variance()
    return projection.estimate, now, now if trials_per_split is None else projection.variance(trials_per_split)


@dataclass(frozen=True)
class Projection:
    """The parts of D(n) and of its variance (projected_difference), computed once so that the variance at any number
    of trials per split is a few operations (what more_trials_worth reads at every k)."""

    estimate: float
    gain_variance: float
    luck_variance: float
    noise: np.ndarray  # the trials' test variance within each split
    counts: np.ndarray  # trials per split
    runs: np.ndarray  # Fixed AdaCos runs per split
    reference_variance: float
    between: float

    @classmethod
    def of(cls, centred: Centred, n: int) -> "Projection":
        val, test = within_split(centred)
        gain, gain_variance = selected_difference(val, test, n)
        luck, luck_variance = seed_luck(centred, n)
        splits, counts = np.unique(centred.split_of_trial, return_counts=True)
        levels = np.array([centred.test[centred.split_of_trial == split].mean() for split in splits])
        runs = centred.runs_per_split.reindex(splits).to_numpy(float)
        noise = np.array([centred.test[centred.split_of_trial == split].var(ddof=1) if count > 1 else math.nan
                          for split, count in zip(splits, counts)])
        between = float(levels.var(ddof=1)) / splits.size if splits.size > 1 else 0.0
        return cls(gain - luck + float(levels.mean()), gain_variance, luck_variance, noise, counts, runs,
                   centred.reference_variance, between)

    def _within(self, trials: np.ndarray | float) -> float:
        return float(np.nansum(self.noise / trials + self.reference_variance / self.runs)) / self.counts.size ** 2

    def variance(self, trials_per_split: int | None = None) -> float:
        """The variance now (None), or once every split has `trials_per_split` trials."""
        within = self._within(self.counts)
        if trials_per_split is None:
            return self.gain_variance + self.luck_variance + max(within, self.between)
        later = self._within(trials_per_split)
        shrink = self.counts.sum() / (trials_per_split * self.counts.size)
        return (self.gain_variance * shrink + self.luck_variance
                + max(later, self.between - within + later))


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
