"""The benchmark's answer card: what to use on new data, when that holds (training length, class count) and what
tuning costs, in at most three plain sentences, with its "how sure" rows; rendered by study.report.answer_card."""

from __future__ import annotations

import math

import pandas as pd

import study.report.formats as fmt
from study.benchmark.meta import RELATIVE_MARGIN, converged_cells
from study.report.answer_card import AnswerCard
from study.report.formats import method_name


def pct(value) -> str:
    """A share of Fixed AdaCos's score, signed: 0.0123 → '+1.2%'."""
    return "n/a" if fmt.missing(value) else f"{100 * value:+.1f}%"


def pct_interval(low, high) -> str:
    return "[n/a]" if fmt.missing(low) or fmt.missing(high) else f"[{pct(low)}, {pct(high)}]"


def new_source(facts: dict, prefix: str) -> str:
    """A pool's (`prefix`) 95% prediction for a new source and its sources: '[-4.1%, +6.1%] (6 sources)'."""
    return (f"{pct_interval(facts[f'{prefix}prediction_low'], facts[f'{prefix}prediction_high'])} "
            f"({fmt.plural(int(facts[f'{prefix}sources']), 'source')})")


def one_configuration(rows: pd.DataFrame) -> dict | None:
    """Where the cells hold one configuration only: tuned ArcFace − Fixed AdaCos in its headline cell (its longest
    converged one, else its first tuner's), in % of Fixed AdaCos's score with its interval; None otherwise."""
    tuned = rows[rows["method"] == "arcface_tuned"]
    data = tuned["longer_of"].where(tuned["longer_of"].notna(), tuned["configuration"])
    if data.nunique() != 1:
        return None
    converged = converged_cells(tuned)
    cell = (converged if len(converged) else tuned[tuned["primary"].astype(bool)]).iloc[-1:]
    if cell.empty:
        return None
    row = cell.iloc[0]
    return {"cell": row["cell"], "relative": row["relative"], "low": row["low"] / row["reference_test_mean"],
            "high": row["high"] / row["reference_test_mean"],
            "trained": "converged" if len(converged) else "trained short"}


def benchmark_card(arcface: dict, wins: list[dict], rows: pd.DataFrame) -> AnswerCard:
    """The answer card: what to use on new data, when that holds (training length, class count), what tuning costs."""
    margin = f"±{100 * RELATIVE_MARGIN:.0f}%"
    predicts = math.isfinite(arcface.get("prediction_low", math.nan))
    expected = pct_interval(arcface["prediction_low"], arcface["prediction_high"])
    # The first sentence names the training length it answers for: models trained until they stop improving.
    new = "on new data trained to convergence"
    pick = {"equivalent": f"Use Fixed AdaCos: {new}, tuned ArcFace is expected within {margin} of its score, and it "
                          "needs no tuning.",
            "slightly better": f"Use Fixed AdaCos: {new}, tuned ArcFace's expected gain stays inside the {margin} "
                               "margin.",
            "slightly worse": f"Use Fixed AdaCos: {new} it is expected to beat tuned ArcFace, by less than the "
                              "margin.",
            "better": f"Tune ArcFace: {new} it is expected to beat Fixed AdaCos by more than {margin} of the score.",
            "worse": f"Use Fixed AdaCos: {new} it is expected to beat tuned ArcFace by more than {margin}.",
            "open": f"No general pick yet: {new}, tuned ArcFace − Fixed AdaCos is expected in {expected}, across "
                    f"the {margin} margin."}
    converged = len(arcface["converged_cells"])
    first = (pick[arcface["judgement"]] if predicts else
             f"No general pick yet: tuned ArcFace and Fixed AdaCos converged in {fmt.plural(converged, 'cell')}, too "
             "few to predict new data.")
    pooled = converged_cells(rows[rows["method"] == "arcface_tuned"])["train_classes"]  # the cells it rests on
    condition = (f"It rests on {arcface['sources']} sources, {pooled.min():,}–{pooled.max():,} classes" if predicts else
                 f"Trained short, expect {pct_interval(arcface['short_prediction_low'], arcface['short_prediction_high'])}"
                 " on new data")
    own = one_configuration(rows)
    if rows["source"].nunique() == 1:  # nothing to pool across sources: say so, and what the one source showed
        first = (f"One data source only ({rows['source'].iloc[0]}), so nothing is pooled across sources and nothing "
                 "predicted for new data.")
        if own is not None:
            condition = (f"Here tuned ArcFace − Fixed AdaCos is {pct(own['relative'])} "
                         f"{pct_interval(own['low'], own['high'])} of its score ({own['cell']}, {own['trained']})")
    for win in wins[:1]:
        condition += (f"; from {win['from_classes']:,} classes {method_name(win['method'])} beats Fixed AdaCos by over "
                      f"{margin.lstrip('±')}" + (" only trained short" if win.get("longer_behind") else
                                                 " trained short" if predicts and win["regime"] == "short" else ""))
    searches = rows[(rows["method"] == "arcface_tuned") & (rows["primary"].astype(bool) | (rows["regime"] == "long"))]
    trials = (searches["n_trials"] * searches["repeats"].fillna(1)).astype(int)
    spent = f"{trials.min()}" if len(trials) and trials.min() == trials.max() else f"{trials.min()}–{trials.max()}"
    rates = sorted({int(n) for n in searches.get("rates", pd.Series(dtype=float)).dropna() if n > 1})
    each = f", or one per learning rate ({'–'.join(map(str, rates))}) where val chooses the rate" if rates else ""
    cost = (f"A random search took {spent} trainings per split here; Fixed AdaCos needs one{each}."
            if len(trials) else "No search finished, so what tuning costs is not known.")
    how_sure = [("tuned ArcFace − Fixed AdaCos on a new source, converged",
                 f"{expected} (95% prediction, {arcface['sources']} sources)" if predicts else
                 f"not estimable yet ({fmt.plural(converged, 'converged cell')})"),
                *([("the same, every method at one shared learning rate (sensitivity)",
                    new_source(arcface, "shared_rate_"))] if arcface.get("rate_chosen_cells") else []),
                *([("the same, with the long cells still improving (sensitivity)",
                    new_source(arcface, "long_"))] if arcface.get("still_improving_cells") else []),
                ("the same, trained short (sensitivity)", new_source(arcface, "short_")),
                ("the margin that matters", f"{margin} of Fixed AdaCos's score, on every data set"),
                ("evidence", f"{rows['cell'].nunique()} cells of {rows['source'].nunique()} independent data sources; "
                             "configurations of one source are not independent")]
    return AnswerCard([first, condition + ".", cost], how_sure)
