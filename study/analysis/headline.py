"""Which cells the headline pools: one protocol for every pooled number, read by the benchmark, the advice and the
default study alike.

The rule, declared in docs/analysis.md before the converged runs: per configuration's data, the cells that chose
every method's learning rate by val (the protocol) wherever one exists, never a shared-rate cell in its place; among
them the longest in which Fixed AdaCos and every tuned loss converged by the plateau rule. Every method reads that
one cell, and a method that had not converged there is pooled with the flag `still_improving`, not replaced by a
cell of another protocol.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def rate_chosen(rows: pd.DataFrame) -> pd.Series:
    """Whether each row's cell chose every method's learning rate by val among several (train.learning_rates), as
    the protocol asks (docs/analysis.md); False for rows written before cells could."""
    rates = rows["rates"] if "rates" in rows else pd.Series(1, index=rows.index)
    return rates.fillna(1).astype(float) > 1


def _estimable(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a finite difference and a positive standard error."""
    return rows[np.isfinite(rows["relative"].astype(float)) & (rows["relative_se"].astype(float) > 0)]


def _data(rows: pd.DataFrame) -> pd.Series:
    """The data each cell trains: a long cell trains its short one's."""
    return rows["longer_of"].where(rows["longer_of"].notna(), rows["configuration"])


def _qualifies(cell: pd.DataFrame) -> bool:
    """Whether a cell's Fixed AdaCos and tuned losses converged (its own rows' convergence where no tuned row is
    among them)."""
    tuned = cell[cell["method"].astype(str).str.endswith("_tuned")]
    judged = tuned if len(tuned) else cell
    reference = bool(cell["reference_converged"].astype(bool).all()) if "reference_converged" in cell else True
    return reference and bool(judged["converged"].astype(bool).all())


def headline_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """The headline's rows: per configuration's data, one cell (a primary or a long-regime one) chosen by the rule
    of this module's docstring, with every method's row of it and `still_improving` where the method had not
    converged there."""
    candidates = _estimable(rows[rows["primary"].astype(bool) | (rows["regime"] == "long")])
    candidates = candidates.assign(data=_data(candidates), chosen=rate_chosen(candidates))
    protocol = candidates.groupby("data")["chosen"].transform("any")
    candidates = candidates[candidates["chosen"] | ~protocol]  # the protocol's cells wherever the data has one
    cells = candidates.drop_duplicates("cell").sort_values(["data", "iterations"], kind="stable")
    picked = [cell for cell, group in candidates.groupby("cell", sort=False) if _qualifies(group)]
    longest = cells[cells["cell"].isin(picked)].drop_duplicates("data", keep="last")["cell"]
    headline = candidates[candidates["cell"].isin(set(longest))]
    return headline.assign(still_improving=~headline["converged"].astype(bool)).drop(columns=["data", "chosen"])


def long_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """A sensitivity pool beside the headline: per configuration's data and method, its long-regime cell that chose
    the learning rate by val before one at a shared rate, then the longest, whether or not it converged."""
    candidates = _estimable(rows[rows["regime"] == "long"])
    ranked = candidates.assign(data=_data(candidates), chosen=rate_chosen(candidates))
    ranked = ranked.sort_values(["chosen", "iterations"], kind="stable")
    return ranked.drop_duplicates(["data", "method"], keep="last").drop(columns=["data", "chosen"])
