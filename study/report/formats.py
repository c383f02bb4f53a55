"""Names and numbers as the reader sees them: 'arcface' → 'ArcFace', 0.01234 → '+0.0123', [2, 12] trials."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from study.analysis import TEST_PREFIX, count_or_none


LOSS_NAMES = {"arcface": "ArcFace", "cosface": "CosFace", "normface": "NormFace", "sphereface": "SphereFace",
              "softmax": "Softmax",
              "fixed_adacos": "Fixed AdaCos", "dynamic_adacos": "Dynamic AdaCos", "p2sgrad": "P2SGrad"}


METHOD_NAMES = {"fixed_adacos": "Fixed AdaCos", "dynamic_adacos": "Dynamic AdaCos", "p2sgrad": "P2SGrad",
                "softmax": "Softmax",
                "arcface_default": "ArcFace default"}


METRIC_NAMES = {"accuracy": "accuracy", "knn_accuracy": "1-NN accuracy", "precision_at_1": "precision@1",
                "r_precision": "R-precision", "map_at_r": "MAP@R", "roc_auc": "ROC AUC", "eer": "EER",
                "tar_at_far_1e-2": "TAR@FAR=1e-2", "tar_at_far_1e-3": "TAR@FAR=1e-3",
                "verification_accuracy": "verification accuracy"}


def loss_name(loss: str) -> str:
    """A loss as written in prose: 'arcface' → 'ArcFace'."""
    return LOSS_NAMES.get(loss, loss)


def method_name(method: str) -> str:
    """A method as written in prose: 'arcface_tuned' → 'ArcFace tuned'."""
    if method in METHOD_NAMES:
        return METHOD_NAMES[method]
    if method.endswith("_tuned"):
        return f"{loss_name(method.removesuffix('_tuned'))} tuned"
    return method


def metric_name(metric: str) -> str:
    """A metric as written in prose, with or without the test_ prefix: 'test_map_at_r' → 'MAP@R'."""
    bare = metric.removeprefix(TEST_PREFIX)
    return METRIC_NAMES.get(bare, bare)


def missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and not math.isfinite(value))


def score(value) -> str:
    return "n/a" if missing(value) else f"{value:.4f}"


def signed(value) -> str:
    return "n/a" if missing(value) else f"{value:+.4f}"


def interval(low, high) -> str:
    return "[n/a]" if missing(low) or missing(high) else f"[{low:+.4f}, {high:+.4f}]"


def seconds(value) -> str:
    if missing(value):
        return "n/a"
    if value == 0:
        return "0 s"
    return f"{value:,.0f} s" if abs(value) >= 100 else f"{value:.1f} s"


def device_time(seconds_, cpu_seconds=None) -> str:
    """'334 s of device time', with the CPU time of the training processes beside it where recorded: '334 s of device
    time, 310 s of CPU time' (a loaded machine stretches the first, not the second)."""
    said = f"{seconds(seconds_)} of device time"
    return said if missing(cpu_seconds) else f"{said}, {seconds(cpu_seconds)} of CPU time"


def count(value) -> str:
    return "n/a" if missing(value) else f"{int(value):,}"


def iteration_number(value) -> str:
    """An iteration as written in prose, with thousands separators: 20000 → '20,000'; a median may fall
    between two evaluations: 1237.5 → '1,237.5'."""
    if missing(value) or pd.isna(value):
        return "n/a"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def iterations(value) -> str:
    """Iterations to a convergence target, where missing means the target was never reached."""
    return "not reached" if missing(value) else iteration_number(value)


def signed_iterations(value) -> str:
    """A difference in iterations with its sign; ±inf where one side never reached the target."""
    if value is None or pd.isna(value):
        return "n/a"
    if np.isinf(value):
        return "+∞ (not reached)" if value > 0 else "−∞"
    return f"{value:+,.0f}"


def p_value(value) -> str:
    return "n/a" if missing(value) else f"{value:.3g}"


def percent(value) -> str:
    return "n/a" if missing(value) else f"{value:.2f}"


def rise(value) -> str:
    """A plateau-rule rise, to the hundredth of a percent: a rise of 1.04% must not read as the rule's 1%."""
    return "n/a" if missing(value) else f"{100 * value:+.2f}%"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def listing(metrics: list[str]) -> str:
    names = [metric_name(metric) for metric in metrics]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def trials_interval(low, high, max_trials, valid_trials=None) -> str:
    """A break-even interval in trials. Bounds come from the trials with a valid interval: a missing lower end reads
    "beyond V" (not shown to be reachable within the V valid trials), a missing upper end "not within V"."""
    valid = max_trials if valid_trials is None or pd.isna(valid_trials) else int(valid_trials)
    if valid == 0:
        return "[no valid interval]"
    lower, upper = count_or_none(low), count_or_none(high)
    if lower is None:
        return f"[beyond {valid}]"
    return f"[{lower}, {f'not within {valid}' if upper is None else upper}]"
