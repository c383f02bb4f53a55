"""Every input `study advise` and its Optuna callback read, checked before any advice is given: the arguments (alpha,
margin, price, the callback's Fixed AdaCos runs), the scores themselves, and the tables it reads (the benchmark's
cells as the prior, a finished study's landscape.csv and run_scores.csv). A damaged or mismatched input ends in one
AdviceError naming the file or argument, the problem and the fix (tests/hostile_cases.md, "The advice")."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd


class AdviceError(ValueError):
    """An input the advice cannot judge from, or cannot judge yet: the message names it, the problem and the fix."""


class NotYetJudged(AdviceError):
    """The evidence is sound but too little to judge yet (a running study): run the study further and ask again."""


# Scores on the same scale lie within this factor of each other (a median of one set over the other's); percent
# against fractions is a factor of 100.
SCALE_FACTOR = 10.0


def check_probability(value, name: str) -> float:
    """An error rate's bound strictly between 0 and 1 (`name`: the argument as the user gave it)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1:
        raise AdviceError(f"{name} is {value!r}: give the error rate's bound as a probability strictly between 0 and "
                          f"1, e.g. 0.05")
    return float(value)


def check_margin(value, name: str) -> float:
    """The equivalence margin, a positive share of Fixed AdaCos's score below 1."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1:
        raise AdviceError(f"{name} is {value!r}: give the smallest difference that matters as a positive share of "
                          f"Fixed AdaCos's score, below 1, e.g. 0.02 for 2%")
    return float(value)


def check_price(value, name: str) -> float:
    """The price of one training, a share of Fixed AdaCos's score, 0 or more and below 1."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise AdviceError(f"{name} is {value!r}: give what one training is worth as a share of Fixed AdaCos's score, "
                          f"0 or more and below 1, e.g. 0.001 for 0.1% (analysis.price_per_training)")
    return float(value)


def check_reference_pairs(reference, minimum: int) -> list[tuple[float, float]]:
    """The callback's Fixed AdaCos runs: at least `minimum` (val, test) pairs of finite numbers."""
    example = "e.g. reference=[(0.61, 0.60), (0.62, 0.59)]"
    try:
        pairs = [tuple(pair) for pair in reference]
    except TypeError:
        raise AdviceError(f"reference is {reference!r}: give your Fixed AdaCos runs' (val, test) scores, {example}")
    if len(pairs) < minimum:
        raise AdviceError(f"reference holds {len(pairs)} Fixed AdaCos run(s): the advice needs at least {minimum}, "
                          f"whose seed noise it measures differences against; give each run's (val, test) scores, "
                          f"{example}")
    for index, pair in enumerate(pairs):
        numbers = len(pair) == 2 and all(isinstance(value, (int, float)) and not isinstance(value, bool)
                                         for value in pair)
        if not numbers or not all(math.isfinite(value) for value in pair):
            raise AdviceError(f"reference[{index}] is {pair!r}: every Fixed AdaCos run needs a finite val and test "
                              f"score, {example} (a diverged run is left out, or given at the metric's floor)")
    return [(float(val), float(test)) for val, test in pairs]


def check_scores(trials: pd.DataFrame, reference: pd.DataFrame, metric: str, bounded: bool) -> None:
    """The evidence's scores: finite, within [0, 1] for the suite's metrics (`bounded`), and the Fixed AdaCos runs
    on the trials' scale (percent against fractions), with a positive mean test score (the relative scale's unit)."""
    named = {"trials": "ArcFace trials", "reference": "Fixed AdaCos runs"}
    for name, frame in (("trials", trials), ("reference", reference)):
        for column in ("val", "test"):
            values = pd.to_numeric(frame[column], errors="coerce").to_numpy(float)
            bad = ~np.isfinite(values)
            if bad.any():
                row = frame.iloc[int(np.argmax(bad))]
                raise AdviceError(f"the {named[name]} hold a {column} score of {frame[column].iloc[int(np.argmax(bad))]!r} "
                                  f"(split {row['split']}): every one needs finite val and test scores (a diverged trial "
                                  f"at the metric's floor); find what wrote it")
            if bounded and len(values) and (values.min() < 0 or values.max() > 1):
                worst = values[np.argmax(np.abs(values - 0.5))]
                raise AdviceError(f"the {named[name]}' {column} scores reach {worst:g}, and {metric} lies in [0, 1]: "
                                  f"give scores as fractions{' (these look like percent)' if worst > 1 else ''}")
    if len(trials) and len(reference):
        ours, theirs = (float(np.median(np.abs(frame["test"].to_numpy(float)))) for frame in (reference, trials))
        if max(ours, theirs) > SCALE_FACTOR * max(min(ours, theirs), 1e-12) and max(ours, theirs) > 1:
            raise AdviceError(f"the Fixed AdaCos runs' test scores (median {ours:g}) and the ArcFace trials' (median "
                              f"{theirs:g}) are on different scales (percent against fractions?): give both on one "
                              f"scale, as fractions")
    if len(reference) and not reference["test"].to_numpy(float).mean() > 0:
        raise AdviceError(f"the Fixed AdaCos runs' mean test score is {reference['test'].to_numpy(float).mean():g}: "
                          f"the advice reads every difference as a share of it, which needs a score above 0 (a metric "
                          f"that is better when higher)")


def read_table(path: Path, columns: tuple[str, ...], fix: str) -> pd.DataFrame:
    """A table the advice reads, or AdviceError naming it: missing, empty, cut mid-line, unreadable as a table
    (/etc/passwd), without `columns`, or without rows. `fix` says how to get a whole one."""
    path = Path(path)
    if not path.is_file():
        raise AdviceError(f"{path} is missing: {fix}")
    data = path.read_bytes()
    if not data.strip():
        raise AdviceError(f"{path} is empty: {fix}")
    if not data.endswith(b"\n"):  # every table the suite writes ends its last line
        raise AdviceError(f"{path} ends mid-line (it was cut short): {fix}")
    try:
        table = pd.read_csv(io.BytesIO(data))
    except (ValueError, UnicodeDecodeError) as error:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise AdviceError(f"{path} is not a readable table ({str(error).splitlines()[0][:120]}): {fix}") from None
    missing = [column for column in columns if column not in table.columns]
    if missing:
        raise AdviceError(f"{path} lacks the column(s) {', '.join(missing)}, so it is not the table the advice reads: "
                          f"{fix}")
    if table.empty:
        raise AdviceError(f"{path} has no rows: {fix}")
    return table


PRIOR_COLUMNS = ("cell", "configuration", "source", "method", "metric", "primary", "regime", "converged", "iterations",
                 "longer_of", "difference", "standard_error", "reference_test_mean", "relative", "relative_se")
PRIOR_FIX = ("give the benchmark's cells table (reports/benchmark/tables/cells.csv: `git checkout --` it, or `study "
             "benchmark --report-only` writes it again), or --prior none")


def read_prior_table(path: Path, objective: str) -> pd.DataFrame:
    """The benchmark's cells.csv as the prior reads it, checked: whole, and on every tuned ArcFace row of the
    objective a finite relative difference with a positive SE, each the cell's absolute difference (and SE) over
    Fixed AdaCos's mean test score (a table scaled to percent is not), that mean in [0, 1]."""
    table = read_table(path, PRIOR_COLUMNS, PRIOR_FIX)
    rows = table[(table["method"] == "arcface_tuned") & (table["metric"] == f"test_{objective}")]
    numbers = {column: pd.to_numeric(rows[column], errors="coerce").to_numpy(float)
               for column in ("relative", "relative_se", "difference", "standard_error", "reference_test_mean")}

    def first(bad: np.ndarray) -> str:
        return str(rows["cell"].iloc[int(np.argmax(bad))])

    for column in ("relative", "relative_se", "reference_test_mean"):
        bad = ~np.isfinite(numbers[column])
        if bad.any():
            raise AdviceError(f"--prior {path}: cell {first(bad)}'s tuned ArcFace {column} is not a number: "
                              f"{PRIOR_FIX}")
    bad = numbers["relative_se"] <= 0
    if bad.any():
        raise AdviceError(f"--prior {path}: cell {first(bad)}'s tuned ArcFace relative_se is "
                          f"{numbers['relative_se'][bad][0]:g}, and a standard error is above 0: {PRIOR_FIX}")
    reference = numbers["reference_test_mean"]
    bad = (reference <= 0) | (reference > 1)
    if bad.any():
        raise AdviceError(f"--prior {path}: cell {first(bad)}'s Fixed AdaCos test mean is {reference[bad][0]:g}, "
                          f"outside (0, 1]{' (in percent?)' if reference[bad][0] > 1 else ''}: {PRIOR_FIX}")
    for share, absolute in (("relative", "difference"), ("relative_se", "standard_error")):
        bad = ~np.isclose(numbers[share], numbers[absolute] / reference, rtol=1e-6, atol=1e-12)
        if bad.any():
            ratio = numbers[share][bad][0] / (numbers[absolute][bad][0] / reference[bad][0])
            raise AdviceError(f"--prior {path}: cell {first(bad)}'s tuned ArcFace {share} is {ratio:.3g}× its "
                              f"{absolute} over Fixed AdaCos's test mean, which it is by definition (scaled"
                              f"{' to percent' if abs(ratio - 100) < 1 else ''} or edited): {PRIOR_FIX}")
    return table
