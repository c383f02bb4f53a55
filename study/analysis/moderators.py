"""Where tuning pays: whether tuned ArcFace − Fixed AdaCos moves with a property of the configuration, one moderator
at a time, with the data source as a level (docs/analysis.md, "Where tuning pays: declared moderators").

Model: yᵢⱼ = β₀ + β₁xᵢⱼ + aᵢ + eᵢⱼ for configuration j of source i, aᵢ ~ (0, τ²) shared by a source's configurations,
eᵢⱼ ~ (0, seᵢⱼ²) the cell's own noise: generalised least squares with V = diag(se²) + τ²·S (S = 1 where two cells
share a source), τ² by REML (Harville 1977), and a Knapp–Hartung interval (Knapp & Hartung 2003) with t on
sources − 2 df, since the sources, not the cells, are the independent units. Each source is left out in turn to see
whether the slope keeps its sign and how well the rest predicts it. With few sources (six here) the interval is
approximate; tests/test_moderators.py measures its coverage on simulated benchmarks of that size.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, stats

from study.analysis.pooling import estimates_and_errors, source_membership
from study.config import AnalysisConfig
from study.statistics import check_probability

# name → (how x is read from the tuned rows, the words for "tuning pays more" at a higher / lower x, the slope's unit)
MODERATORS = {
    "log10 training classes": (lambda rows: np.log10(rows["train_classes"].astype(float)),
                               "the more training classes", "the fewer training classes", "per tenfold C"),
    "log10 images per class": (lambda rows: np.log10(rows["images_per_class"].astype(float)),
                               "the more images each class has", "the fewer images each class has",
                               "per tenfold images per class"),
    "Fixed AdaCos error": (lambda rows: 1.0 - rows["reference_test_mean"].astype(float),
                           "the more Fixed AdaCos errs", "the less Fixed AdaCos errs", "per unit of 1 − score"),
    "made by people": (lambda rows: rows["by_people"].astype(bool).astype(float),
                       "on images made by people than on images rendered by code",
                       "on images rendered by code than on images made by people",
                       "made by people against rendered by code"),
    "log10 tuned s / s_f": (lambda rows: np.log10(rows["s_ratio_median"].astype(float)),
                            "the higher the tuned s sits above s_f", "the lower the tuned s sits below s_f",
                            "per tenfold s / s_f"),
}
MARGIN = AnalysisConfig().score_share("retrieval")  # the declared relevance margin, +2% of the score
_TRAIN_SPLIT = re.compile(r"^\| train \| (\d+) \| (\d+) \|", re.MULTILINE)


def images_per_class(cell_directory: str | Path) -> float:
    """Train images per train class of one benchmark cell, from the split table of its reports/report.md (the
    committed copy of its data manifest); NaN where the report or its table is missing."""
    report = Path(cell_directory) / "reports" / "report.md"
    found = _TRAIN_SPLIT.search(report.read_text()) if report.is_file() else None
    return int(found.group(1)) / int(found.group(2)) if found else math.nan


def with_images_per_class(rows: pd.DataFrame, cells_root: str | Path = "benchmarks/cells") -> pd.DataFrame:
    """`rows` with the column images_per_class read for each row's cell under `cells_root`."""
    per_cell = {cell: images_per_class(Path(cells_root) / str(cell)) for cell in rows["cell"].unique()}
    return rows.assign(images_per_class=rows["cell"].map(per_cell).astype(float))


def _gls(y: np.ndarray, se: np.ndarray, design: np.ndarray, same: np.ndarray, tau2: float | None):
    """(β̂, (XᵀV⁻¹X)⁻¹, rᵀV⁻¹r, τ²) with V = diag(se²) + τ²·same; τ² by REML where None, its criterion
    log|V| + log|XᵀV⁻¹X| + rᵀV⁻¹r minimised on a grid over [0, 10·max(var y, max se²)] and refined."""
    def fit(t2: float):
        inverse = np.linalg.inv(np.diag(se ** 2) + t2 * same)
        information = design.T @ inverse @ design
        covariance = np.linalg.inv(information)
        beta = covariance @ design.T @ inverse @ y
        residual = y - design @ beta
        criterion = -np.linalg.slogdet(inverse)[1] + np.linalg.slogdet(information)[1] + residual @ inverse @ residual
        return beta, covariance, float(residual @ inverse @ residual), float(criterion)

    if tau2 is None:
        upper = 10.0 * max(float(np.var(y)), float(np.max(se ** 2)))
        grid = np.concatenate([[0.0], upper * np.logspace(-6, 0, 49)])
        best = int(np.argmin([fit(t2)[3] for t2 in grid]))
        tau2 = float(grid[best])
        if best > 0:  # refined on log τ², so that a small τ² is found as precisely as a large one
            bounds = (math.log(grid[max(best - 1, 1)] / 10.0), math.log(grid[min(best + 1, grid.size - 1)]))
            refined = optimize.minimize_scalar(lambda u: fit(math.exp(u))[3], method="bounded", bounds=bounds,
                                               options={"xatol": 1e-10})
            tau2 = math.exp(refined.x) if refined.fun < fit(tau2)[3] else tau2
    return (*fit(tau2)[:3], tau2)


def source_meta_regression(estimates, standard_errors, covariate, sources, confidence: float = 0.95,
                           tau2: float | None = None) -> dict:
    """The slope of the estimates on `covariate` with a between-source random effect (the module's model): GLS β̂₁,
    Knapp–Hartung SE √(max(1, rᵀV⁻¹r/(n − 2))·[(XᵀV⁻¹X)⁻¹]₁₁), t on sources − 2 df; `tau2` fixed where given (0:
    weighted least squares with weights 1/se²). NaN below 3 sources or at one covariate value."""
    check_probability(confidence, "confidence")
    y, se = estimates_and_errors(estimates, standard_errors, positive=True)
    x = np.asarray(covariate, dtype=float).ravel()
    names, membership = source_membership(sources)
    result = {"slope": math.nan, "intercept": math.nan, "low": math.nan, "high": math.nan, "standard_error": math.nan,
              "tau2": math.nan, "df": len(names) - 2, "sources": len(names), "cells": int(y.size),
              "confidence": confidence}
    if x.size != y.size or not np.all(np.isfinite(x)):
        raise ValueError(f"give one finite covariate value per estimate; got {x.size} for {y.size} estimates")
    if len(names) < 3 or np.ptp(x) == 0:
        return result
    design = np.column_stack([np.ones_like(x), x])
    beta, covariance, quadratic, tau2 = _gls(y, se, design, membership @ membership.T, tau2)
    standard_error = math.sqrt(max(1.0, quadratic / (y.size - 2)) * covariance[1, 1])
    half = float(stats.t.ppf(0.5 + confidence / 2.0, len(names) - 2)) * standard_error
    return {**result, "slope": float(beta[1]), "intercept": float(beta[0]), "low": float(beta[1]) - half,
            "high": float(beta[1]) + half, "standard_error": standard_error, "tau2": tau2}


def _intercept_only(y: np.ndarray, se: np.ndarray, sources: np.ndarray) -> float:
    """The random-effects mean over sources (the intercept-only model of the same kind)."""
    _, membership = source_membership(sources)
    return float(_gls(y, se, np.ones((y.size, 1)), membership @ membership.T, None)[0][0])


def _leave_one_source_out(y, se, x, sources, confidence) -> dict:
    """Each source left out in turn: the refit slopes, and the root mean square error of predicting the left-out
    source's cells by the refit line (its source effect unknown, so 0) against that of the intercept-only refit."""
    slopes, errors, baseline = [], [], []
    for source in dict.fromkeys(sources):
        kept = sources != source
        fit = source_meta_regression(y[kept], se[kept], x[kept], sources[kept], confidence)
        slopes.append(fit["slope"])
        errors.extend(y[~kept] - fit["intercept"] - fit["slope"] * x[~kept])
        baseline.extend(y[~kept] - _intercept_only(y[kept], se[kept], sources[kept]))
    return {"slopes": np.array(slopes), "rmse": math.sqrt(np.mean(np.square(errors))),
            "intercept_rmse": math.sqrt(np.mean(np.square(baseline)))}


def moderator_table(tuned_rows: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """One row per declared moderator for the headline's tuned-ArcFace rows (relative, relative_se, source and the
    moderators' columns; images_per_class from with_images_per_class): the slope with its interval at the
    Bonferroni-corrected level 1 − (1 − confidence)/5, the leave-one-source-out slopes' range and sign agreement,
    their prediction error beside the intercept-only model's, and `supported` (interval excludes 0 and every
    leave-one-out slope keeps the sign). A moderator unknown for some cell is dropped, its `note` saying so."""
    check_probability(confidence, "confidence")
    level = 1.0 - (1.0 - confidence) / len(MODERATORS)
    y, se = tuned_rows["relative"].to_numpy(float), tuned_rows["relative_se"].to_numpy(float)
    sources = tuned_rows["source"].astype(str).to_numpy()
    table = []
    for name, (read, *_words) in MODERATORS.items():
        try:
            x = np.asarray(read(tuned_rows), dtype=float)
        except KeyError:
            x = np.full(y.size, math.nan)
        row = {"moderator": name, "level": level, "sources": len(set(sources)), "cells": int(y.size), "note": ""}
        if len(set(sources)) < 3:  # a slope over sources and its leave-one-out need three of them
            table.append({**row, "supported": False,
                          "note": f"not tested: {len(set(sources))} sources, the slope needs at least 3"})
            continue
        if not np.all(np.isfinite(x)):
            missing = ", ".join(tuned_rows["cell"].astype(str)[~np.isfinite(x)])
            table.append({**row, "supported": False, "note": f"dropped: unknown for {missing}"})
            continue
        fit = source_meta_regression(y, se, x, sources, level)
        out = _leave_one_source_out(y, se, x, sources, level)
        same_sign = bool(np.all(np.sign(out["slopes"]) == np.sign(fit["slope"])))
        excludes_zero = fit["low"] > 0 or fit["high"] < 0
        table.append({**row, "slope": fit["slope"], "low": fit["low"], "high": fit["high"], "df": fit["df"],
                      "tau2": fit["tau2"], "leave_one_source_out_min": float(np.min(out["slopes"])),
                      "leave_one_source_out_max": float(np.max(out["slopes"])),
                      "leave_one_source_out_same_sign": same_sign, "leave_one_source_out_rmse": out["rmse"],
                      "intercept_only_rmse": out["intercept_rmse"], "supported": bool(excludes_zero and same_sign)})
    return pd.DataFrame(table)


def _configurations(rows: pd.DataFrame) -> str:
    """'glyphs (C = 100, 1,000) and fashion-mnist (C = 50)' ('' for no rows), as the answer card names cells."""
    named = [f"{source} (C = {', '.join(f'{c:,}' for c in sorted(group['train_classes'].astype(int)))})"
             for source, group in rows.groupby("source", sort=False)]
    return " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)


def moderator_sentence(table: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The conditional sentence for each supported moderator; where none is, the configurations (of the tuned rows
    `rows`) where tuned ArcFace led beyond +2% (its interval, else its point estimate) and that no tested property
    explains them."""
    supported = table[table["supported"].astype(bool)]
    if len(supported):
        return " ".join(
            f"Tuning ArcFace pays more {MODERATORS[row.moderator][1 if row.slope > 0 else 2]}: "
            f"{100 * row.slope:+.1f}% of the score {MODERATORS[row.moderator][3]} "
            f"[{100 * row.low:+.1f}%, {100 * row.high:+.1f}%] ({100 * row.level:.0f}%, Bonferroni over "
            f"{len(MODERATORS)}), its sign kept leaving out any one source."
            for row in supported.itertuples())
    relative_low = rows["low"].astype(float) / rows["reference_test_mean"].astype(float)
    beyond = _configurations(rows[relative_low >= MARGIN])
    point = _configurations(rows[(relative_low < MARGIN) & (rows["relative"].astype(float) >= MARGIN)])
    led = ", and ".join(part for part in (f"with its interval on {beyond}" if beyond else "",
                                          f"by its point estimate only on {point}" if point else "") if part)
    tested = ", ".join(name for name in MODERATORS if name not in set(table.loc[table["note"] != "", "moderator"]))
    return (f"Tuned ArcFace led Fixed AdaCos by more than +{100 * MARGIN:.0f}% {led or 'on no configuration'}"
            + f"; no tested property ({tested}) explains where: no slope's Bonferroni-corrected interval excludes 0 "
              "with its sign kept leaving out any one source.")
