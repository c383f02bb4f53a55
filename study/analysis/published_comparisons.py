"""Published same-setup comparisons of ArcFace against AdaCos, as a table and beside the benchmark's prediction.

The benchmark predicts what a new data source should expect from ArcFace − Fixed AdaCos as a share of Fixed AdaCos's
score (`study.benchmark.meta`); the published comparisons (`study.published.PUBLISHED_ARCFACE_ADACOS`) are such new
sources, each with ArcFace at its code's defaults, so they are read on the same relative scale. Near 100% accuracy a
relative difference hides how many more errors a method makes, so the ratio of remaining errors stands beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, fields

import pandas as pd

from study.published import PUBLISHED_ARCFACE_ADACOS, PublishedArcFaceAdaCos

# One column per field of PublishedArcFaceAdaCos, in its order: what benchmarks/results/published_arcface_adacos.csv
# holds.
PUBLISHED_COLUMNS = [field.name for field in fields(PublishedArcFaceAdaCos)]
# difference_percent: (ArcFace − AdaCos) / AdaCos · 100; arcface_error, adacos_error: 100 − each score (the remaining
# error, in % of the test set); error_ratio: arcface_error / adacos_error; inside: difference_percent within the
# interval given (NA where a bound is NaN).
BESIDE_PREDICTION_COLUMNS = ["source", "benchmark", "adacos_variant", "arcface", "adacos", "difference_percent",
                             "arcface_error", "adacos_error", "error_ratio", "inside", "note"]


def published_table(comparisons: Sequence[PublishedArcFaceAdaCos] = PUBLISHED_ARCFACE_ADACOS) -> pd.DataFrame:
    """The published comparisons as numbers and their sources, one row each (the committed CSV's content)."""
    return pd.DataFrame([asdict(comparison) for comparison in comparisons], columns=PUBLISHED_COLUMNS)


def published_beside_prediction(low: float, high: float, *,
                                comparisons: Sequence[PublishedArcFaceAdaCos] = PUBLISHED_ARCFACE_ADACOS
                                ) -> pd.DataFrame:
    """Each published ArcFace − AdaCos in % of AdaCos's score, its ratio of remaining errors, and whether it lies in
    [low, high].

    `low` and `high` are in percent of AdaCos's score, like the difference: 100 × the benchmark's `prediction_low` and
    `prediction_high`, which are shares (0.02 is 2%). The published rows are ArcFace at its defaults, so the interval
    they answer is the benchmark's for `arcface_default`; set beside `arcface_tuned`'s, they show what tuning would
    have to add. Some rows' AdaCos is the dynamic one, the benchmark's reference is Fixed AdaCos (`adacos_variant`).
    The error ratio (100 − ArcFace) / (100 − AdaCos) is what a relative difference near 100% hides: LFW's −0.08% is
    23% more errors. `inside` is NA where a bound is NaN (the benchmark had too few sources for an interval).
    """
    if low > high:
        raise ValueError(f"the prediction interval must have low ≤ high, not [{low}, {high}]")
    known = not (math.isnan(low) or math.isnan(high))
    rows = []
    for comparison in comparisons:
        difference = (comparison.arcface - comparison.adacos) / comparison.adacos * 100
        arcface_error, adacos_error = 100 - comparison.arcface, 100 - comparison.adacos
        # A perfect AdaCos leaves no errors to compare with: any ArcFace error is infinitely more, none is no change.
        ratio = (arcface_error / adacos_error if adacos_error > 0
                 else math.inf if arcface_error > 0 else math.nan)
        rows.append({"source": comparison.source, "benchmark": comparison.benchmark,
                     "adacos_variant": comparison.adacos_variant, "arcface": comparison.arcface,
                     "adacos": comparison.adacos, "difference_percent": difference, "arcface_error": arcface_error,
                     "adacos_error": adacos_error, "error_ratio": ratio,
                     "inside": (low <= difference <= high) if known else pd.NA, "note": comparison.note})
    table = pd.DataFrame(rows, columns=BESIDE_PREDICTION_COLUMNS)
    table["inside"] = table["inside"].astype("boolean")
    return table
