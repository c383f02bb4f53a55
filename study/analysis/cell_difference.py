"""A benchmark cell's differences to Fixed AdaCos: each method − Fixed AdaCos paired by class split and seed, and
their mean over splits with a standard error that never falls below the cell's own seed noise (standard_error_floor).
The cell is what study/analysis/pooling.py then pools across configurations and data sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from study.analysis.common import REFERENCE_METHOD, ResultFields
from study.statistics import check_probability


def paired_differences(run_scores: pd.DataFrame, method: str, metric: str,
                       reference: str = REFERENCE_METHOD) -> pd.DataFrame:
    """method − reference on `metric` per class split and seed (runs of one split and seed pair: same
    initialisation and data order): what standard_error_floor takes."""
    return _paired(_by_split_and_seed(run_scores, metric), method, reference)


def _by_split_and_seed(run_scores: pd.DataFrame, metric: str) -> pd.DataFrame:
    """`metric` of every method (columns) per class split and seed (rows)."""
    scores = run_scores[run_scores[metric].notna()] if metric in run_scores else run_scores.iloc[:0]
    split = scores["split"] if "split" in scores else 0
    return scores.assign(split=split).pivot_table(index=["split", "seed"], columns="method", values=metric)


def _paired(table: pd.DataFrame, method: str, reference: str) -> pd.DataFrame:
    """method − reference per class split and seed of _by_split_and_seed's table, where both ran."""
    if method not in table or reference not in table:
        return pd.DataFrame(columns=["split", "seed", "difference"])
    return (table[method] - table[reference]).dropna().rename("difference").reset_index()


def differences_to_fixed_adacos(run_scores: pd.DataFrame, metric: str, confidence: float = 0.95) -> pd.DataFrame:
    """Every method − Fixed AdaCos on `metric` as a benchmark cell forms it: paired by split and seed, a split's seeds
    averaged, standard_error_floor's interval over splits, and in % of Fixed AdaCos's mean score (relative)."""
    reference = float(run_scores.loc[run_scores["method"] == REFERENCE_METHOD, metric].mean())
    table = _by_split_and_seed(run_scores, metric)  # once for every method
    rows = []
    for method in dict.fromkeys(run_scores["method"]):
        if method == REFERENCE_METHOD:
            continue
        estimate = standard_error_floor(_paired(table, method, REFERENCE_METHOD), confidence)
        rows.append({"method": method, "reference_test_mean": reference, "difference": estimate.estimate,
                     "low": estimate.low, "high": estimate.high, "standard_error": estimate.standard_error,
                     "df": estimate.df, "se_splits": estimate.se_splits, "se_floor": estimate.se_floor,
                     "se_from": estimate.se_from, "relative": estimate.estimate / reference,
                     "relative_se": estimate.standard_error / reference})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class FlooredStandardError(ResultFields):
    """standard_error_floor's result (fields also readable as result["standard_error"])."""

    estimate: float
    standard_error: float
    df: float
    se_splits: float
    se_floor: float
    se_from: str
    low: float
    high: float
    within_variance: float
    within_df: int
    splits: int
    pairs: int
    confidence: float


def standard_error_floor(differences: pd.DataFrame, confidence: float = 0.95) -> FlooredStandardError:
    """A cell's mean difference over class splits with a standard error that never falls below its seed noise.

    `differences` has one row per class split and seed: split, seed, difference (a method − Fixed AdaCos, paired by
    split and seed); NaN differences are left out. The estimate is the mean of the k split means d̄ᵢ; over splits its
    SE is s_splits/√k on k − 1 df. With k = 2–4 that is itself noisy and can fall far below what the seed noise alone
    implies, SE_floor = √(s²_within·Σᵢ1/nᵢ)/k (= √(s²_within/(k·n)) with n seeds per split), s²_within the
    within-split variance of the differences pooled over splits on Σᵢ(nᵢ − 1) df. The SE is the larger of the two:
    max(MS_between, MS_within)/(k·n) in the balanced case, the split variance component truncated at 0. Its df is
    the df of the mean square it rests on (the Satterthwaite df of that truncated estimate): k − 1 from the splits,
    Σ(nᵢ − 1) from the floor; `se_from` says which. The t interval uses that df. NaN where neither can be
    computed (one split of one seed, or no rows).
    """
    check_probability(confidence, "confidence")
    missing_columns = {"split", "seed", "difference"} - set(getattr(differences, "columns", ()))
    if missing_columns:
        raise ValueError(f"give a table with columns split, seed, difference; missing {sorted(missing_columns)}")
    rows = differences[differences["difference"].notna()]
    if np.any(np.isinf(rows["difference"].to_numpy(dtype=float))):
        raise ValueError("differences must be finite (or NaN for a pair to leave out)")
    if rows.duplicated(["split", "seed"]).any():
        raise ValueError("give one difference per split and seed")
    groups = [group["difference"].to_numpy(dtype=float) for _, group in rows.groupby("split", sort=True)]
    k = len(groups)
    nan = math.nan
    if not k:
        return FlooredStandardError(nan, nan, nan, nan, nan, "", nan, nan, nan, 0, 0, 0, confidence)
    means = np.array([values.mean() for values in groups])
    sizes = np.array([values.size for values in groups])
    estimate = float(means.mean())
    se_splits = float(means.std(ddof=1) / math.sqrt(k)) if k > 1 else nan
    within_df = int(np.sum(sizes - 1))
    within = float(sum(np.sum((values - values.mean()) ** 2) for values in groups) / within_df) if within_df else nan
    se_floor = math.sqrt(within * np.sum(1.0 / sizes)) / k if within_df else nan
    if math.isfinite(se_splits) and not se_floor > se_splits:
        se, df, source = se_splits, float(k - 1), "splits"
    elif math.isfinite(se_floor):
        se, df, source = se_floor, float(within_df), "seed floor"
    else:
        se, df, source = nan, nan, ""
    half = float(stats.t.ppf(0.5 + confidence / 2.0, df)) * se if math.isfinite(se) else nan
    return FlooredStandardError(estimate, se, df, se_splits, se_floor, source, estimate - half, estimate + half,
                                within, within_df, k, int(sizes.sum()), confidence)
