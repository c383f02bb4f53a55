"""The learning rate chosen by val, for every method alike (train.learning_rates; docs/analysis.md).

A hyperparameter-free method trains its seeds at every listed rate and keeps, per class split, the rate whose runs
score best on val on average (with train.choose_at, at that share of the length: every rate trains that far, only the
chosen one on to the end, its runs' first part the very runs val chose by); a searched loss draws its rate with
(s, m) and its val-selected trial brings it along. Test never chooses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

# The name of the searched learning rate among a trial's parameters (beside s and m).
LEARNING_RATE = "lr"


def choose_rate(val_scores: Mapping[float, Sequence[float]], centre: float) -> float | None:
    """The rate val chooses among `val_scores` (each rate's runs' val scores, NaN for a run that diverged): the best
    mean among the rates whose every run completed (a mean without its diverged runs would flatter an unstable
    rate), a tie going to the rate nearest `centre` on a log scale; None when no rate completed every run."""
    complete = {rate: float(np.mean(scores)) for rate, scores in val_scores.items()
                if len(scores) and np.all(np.isfinite(np.asarray(scores, dtype=float)))}
    if not complete:
        return None
    return min(complete, key=lambda rate: (-complete[rate], abs(math.log(rate / centre))))


def split_searched(hyperparameters: dict) -> tuple[dict, float | None]:
    """A searched trial's parameters as (the loss's hyperparameters, its learning rate or None when not searched)."""
    loss_hyperparameters = {k: v for k, v in hyperparameters.items() if k != LEARNING_RATE}
    return loss_hyperparameters, hyperparameters.get(LEARNING_RATE)


def chosen_words(runs: pd.DataFrame, rates: Sequence[float], choose_at: float | None = None) -> str:
    """What val chose, method by method, from the final runs' table (method, split, lr), in words: e.g. "Fixed AdaCos:
    0.009 (splits 0, 1), 0.003 (split 2)"; with `choose_at` (train.choose_at), where val chose and what trained on."""
    from study.report.formats import method_name

    parts = []
    for method, own in runs.drop_duplicates(["method", "split"]).groupby("method", sort=False):
        by_rate = own.groupby("lr", sort=True)["split"].apply(lambda s: ", ".join(map(str, sorted(s))))
        parts.append(f"{method_name(method)}: " + ", ".join(
            f"{rate:g} (split{'s' if ',' in splits else ''} {splits})" for rate, splits in by_rate.items()))
    when = ("" if choose_at is None else
            f" at {choose_at:.0%} of the length (every rate trained that far, the chosen one alone on to the end)")
    return (f"chosen by val per method and class split from {', '.join(f'{r:g}' for r in rates)}{when}, "
            f"a searched loss's drawn with (s, m) between the smallest and the largest; " + "; ".join(parts))
