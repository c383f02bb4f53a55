"""Published same-setup comparisons of ArcFace against AdaCos, as a table and beside the benchmark's prediction.

The benchmark predicts what a new data source should expect from ArcFace − Fixed AdaCos as a share of Fixed AdaCos's
score (`study.benchmark.meta`); the published comparisons (`study.published.PUBLISHED_ARCFACE_ADACOS`) are such new
sources, each with ArcFace at its code's defaults, so they are read on the same relative scale. Near 100% accuracy a
relative difference hides how many more errors a method makes, so the ratio of remaining errors stands beside it.
"All inside" is only a test where an interval is narrow enough that rows from another distribution would miss it:
`inside_by_chance` says how narrow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd
from scipy import stats

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


@dataclass(frozen=True)
class InsideByChance:
    """How much "k of n published rows inside the prediction" says: the chance of it for rows that do not come from
    the predicted distribution, and the interval width below which it would be a test at level `alpha`."""

    rows: int  # n, the published rows (read as independent draws)
    inside: int  # k, those inside [low, high]
    width: float  # high − low, in the differences' unit (% of AdaCos's score)
    spread: float  # the sd of the other distribution: the published differences' own sample sd
    chance_one: float  # P(one such row lands inside) = 2Φ(width / (2·spread)) − 1
    chance: float  # P(at least k of n inside) = Σ_{j ≥ k} C(n, j) p^j (1 − p)^(n − j), p = chance_one
    alpha: float
    width_for_a_test: float  # the width below which n of n inside has a chance < alpha: 2·spread·Φ⁻¹((1 + α^(1/n)) / 2)

    @property
    def is_a_test(self) -> bool:
        """Whether "k of n inside" would be unlikely (< alpha) for rows from the other distribution."""
        return self.chance < self.alpha


def inside_by_chance(differences, low: float, high: float, alpha: float = 0.05) -> InsideByChance:
    """The power of counting published rows inside a prediction interval [low, high].

    The alternative: each published difference an independent normal draw with the published rows' own sample sd,
    centred on the interval's midpoint, the placement that lands most of it inside (so `chance` is the largest over
    centres at that sd). One row then falls inside with p = 2Φ(w / 2σ) − 1 and at least k of n with the binomial tail;
    n of n is a test at level α only where p^n < α, i.e. w < 2σ·Φ⁻¹((1 + α^(1/n)) / 2). Rows that share one training
    (one source's benchmarks) are not independent draws, so the real number of draws is smaller and the width for a
    test smaller still. NaN where a bound is NaN or fewer than two rows give no sd."""
    values = np.asarray([float(value) for value in differences], dtype=float)
    n = values.size
    inside = int(((low <= values) & (values <= high)).sum()) if not (math.isnan(low) or math.isnan(high)) else 0
    spread = float(values.std(ddof=1)) if n >= 2 else math.nan
    width = high - low
    known = not (math.isnan(width) or math.isnan(spread)) and spread > 0
    one = float(2 * stats.norm.cdf(width / (2 * spread)) - 1) if known else math.nan
    chance = float(stats.binom.sf(inside - 1, n, one)) if known else math.nan
    test_width = float(2 * spread * stats.norm.ppf((1 + alpha ** (1 / n)) / 2)) if known else math.nan
    return InsideByChance(rows=n, inside=inside, width=width, spread=spread, chance_one=one, chance=chance,
                          alpha=alpha, width_for_a_test=test_width)
