"""What every part of the study's analysis shares: the reference method, the test-metric prefix and direction,
the trial states that cost device time, the small helpers on scores that all of them use, and the mapping access
their frozen results share (ResultFields)."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd

from study.config import HYPERPARAMETER_FREE_LOSSES
from study.adacos_scale import fixed_adacos_scale
from study.results import is_tuned
from study.workers import INTERRUPTED, NOT_RUN

REFERENCE_METHOD = "fixed_adacos"
LOWER_IS_BETTER_METRICS = frozenset({"eer"})
TEST_PREFIX = "test_"
# Trials that ran to an end and spent their device time; RUNNING ones were interrupted and left no cost.
FINISHED_STATES = ("COMPLETE", "PRUNED", "FAIL")
# Failed trials that are no evidence about their (s, m): a dead worker interrupted them (and they were retried),
# or they found the budget taken and trained nothing (study/workers.py). The analysis leaves them out.
NOT_EVIDENCE_STATUSES = (INTERRUPTED, NOT_RUN)


# Every test metric and objective is a score in [0, 1] (EER included), so no difference between two exceeds 1 in size.
# Intervals are cut to that range (the truth always lies inside, so what they cover is unchanged), and a "detectable
# difference" beyond it means that nothing is detectable.
METRIC_RANGE = 1.0


def within_range(values, difference: bool = True):
    """`values` cut to what a difference of two scores (−1 … 1) or, with `difference` False, a score (0 … 1) can be;
    NaN stays NaN."""
    return np.clip(values, -METRIC_RANGE if difference else 0.0, METRIC_RANGE)


def is_evidence(trials: pd.DataFrame) -> pd.Series:
    """Which trials say something about their hyperparameters: all but the interrupted and the never run."""
    status = trials["status"] if "status" in trials else pd.Series("", index=trials.index)
    return ~status.isin(NOT_EVIDENCE_STATUSES)
# The pairs of the convergence claim ("AdaCos overtakes ArcFace only late"), each compared where both are present.
ADACOS_METHODS = ("fixed_adacos", "dynamic_adacos")
ARCFACE_METHODS = ("arcface_tuned", "arcface_default")

# Curves are built by floating-point sums, so a curve that reaches its target exactly can
# land one rounding step below it; "reached" forgives that much and no more.
_REACH_RTOL = 1e-9
_REACH_ATOL = 1e-12


def reaches(values: np.ndarray, target) -> np.ndarray:
    """Elementwise values ≥ target (a number, or an array that broadcasts), forgiving rounding; NaN never reaches."""
    tolerance = _REACH_ATOL + _REACH_RTOL * abs(target)
    return values >= target - tolerance


def split_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's class split (the data seed); a table from a one-split study has none, and is split 0."""
    return frame["split"] if "split" in frame else pd.Series(0, index=frame.index)


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of the metric (with or without the test_ prefix) is better; EER is not."""
    return metric.removeprefix(TEST_PREFIX) not in LOWER_IS_BETTER_METRICS


def fixed_scale_of(num_classes: int | None) -> float | None:
    """AdaCos's s_f for C training classes, or None where C is unknown or below 3."""
    if num_classes is None or num_classes < 3:
        return None
    return fixed_adacos_scale(num_classes)


def finite_values(values) -> np.ndarray:
    """The finite entries of values as a float array (NaN marks a diverged run or an unfinished trial)."""
    array = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(dtype=float)
    return array[np.isfinite(array)]


def mean_or_nan(values) -> float:
    """The mean of the finite entries of values, or NaN where there are none."""
    finite = finite_values(values)
    return float(finite.mean()) if finite.size else math.nan


def untuned_methods(methods) -> list[str]:
    """The methods that cost no search: hyperparameter-free losses first, then fixed runs as they appear."""
    methods = list(dict.fromkeys(methods))
    return ([m for m in HYPERPARAMETER_FREE_LOSSES if m in methods]
            + [m for m in methods if m not in HYPERPARAMETER_FREE_LOSSES and not is_tuned(m)])


def count_or_none(value) -> int | None:
    """A trial count as a plain int, or None where it is not reached (inf) or unknown."""
    return int(value) if value is not None and not pd.isna(value) and np.isfinite(value) else None


def primary_loss(searched_losses: list[str]) -> str | None:
    """ArcFace when it was searched (the study's question is about it), else the first searched loss."""
    if "arcface" in searched_losses:
        return "arcface"
    return searched_losses[0] if searched_losses else None


class ResultFields:
    """Mapping access to a frozen result's fields: result["mean"] is result.mean, and dict(result) has them all."""

    def keys(self) -> tuple[str, ...]:
        return tuple(self.__dataclass_fields__)

    def __getitem__(self, key: str):
        if key not in self.__dataclass_fields__:
            raise KeyError(f"{key!r} is not a field; the fields are {', '.join(self.__dataclass_fields__)}")
        return getattr(self, key)

    def as_dict(self) -> dict:
        return asdict(self)
