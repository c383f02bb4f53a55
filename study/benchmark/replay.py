"""`study advise` replayed round by round on every finished random-search cell of the benchmark (trials not pruned),
as if it had run live, beside the cell's full-design verdict (reports/benchmark/tables/advise_replay.csv and its
report section)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from study.benchmark.card import pct, pct_interval
from study.benchmark.meta import RELATIVE_MARGIN
from study.report import Bullets
from study.results import REPORT_DIR

# The advice's decisions in the full design's words (study.benchmark.cells.OUTCOMES).
ADVICE_OUTCOMES = {"tuning_pays": "paid", "equivalent": "equivalent", "adacos_better": "adacos_better",
                   "budget_spent": "undecided", "futile": "undecided", "not_worth_it": "undecided",
                   "run_more": "undecided"}
# The advice's early stops that claim nothing about the difference: more trials not worth their price (the default),
# or unlikely to settle it (the futile stop, where asked for).
EARLY_STOPS = ("not_worth_it", "futile")
REPLAY_COLUMNS = ["cell", "source", "regime", "converged", "splits", "budget", "stopped_round", "trainings",
                  "design_trainings", "decision", "difference", "low", "high", "prior_weight", "full_design",
                  "full_design_difference", "agrees", "without_futility_round", "without_futility_decision",
                  "without_futility_low"]


def advice_replay(rows: pd.DataFrame, cells_dir: Path) -> pd.DataFrame:
    """`study advise` replayed round by round on every random-search cell without a pruner, as if it had run live,
    its prior the benchmark without the cell's own source; beside it, the cell's full-design verdict on tuned
    ArcFace."""
    from study.advice import AdviceError, Prior, benchmark_prior, replay
    from study.advice_evidence import report_evidence

    table = []
    # The advice reads a search's trials as independent draws trained to the end: a pruned search's are neither.
    searched = rows[(rows["method"] == "arcface_tuned") & (rows["sampler"] == "random") & (rows["pruner"] == "none")]
    for cell in searched.itertuples():
        objective = cell.metric.removeprefix("test_")
        evidence = report_evidence(cells_dir / cell.cell / REPORT_DIR / "tables", objective, int(cell.n_trials))
        try:
            prior = benchmark_prior(rows, objective, leave_out_source=cell.source,
                                    regime="converged" if cell.regime == "long" else "short")
        except AdviceError:
            prior = Prior.flat(objective)
        advice = replay(evidence, RELATIVE_MARGIN, prior)
        # What the early stop gave up, if anything: the tests alone, to the budget.
        without = replay(evidence, RELATIVE_MARGIN, prior, futility=0.0, value_stop=False)
        outcome = ADVICE_OUTCOMES[advice.decision]
        table.append({"cell": cell.cell, "source": cell.source, "regime": cell.regime,
                      "converged": bool(cell.converged), "splits": advice.splits, "budget": advice.budget,
                      "stopped_round": advice.round, "trainings": advice.trainings,
                      "design_trainings": int(cell.splits) * (int(cell.n_trials) + 2 * int(cell.seeds)),
                      "decision": advice.decision, "difference": advice.difference, "low": advice.low,
                      "high": advice.high, "prior_weight": advice.prior_weight, "full_design": cell.outcome,
                      "full_design_difference": cell.relative, "agrees": outcome == cell.outcome,
                      "without_futility_round": without.round, "without_futility_decision": without.decision,
                      "without_futility_low": without.low})
    return pd.DataFrame(table, columns=REPLAY_COLUMNS)


def replay_sentences(replayed: pd.DataFrame) -> list:
    """What the replay shows, computed: how often the advice stopped early, what it saved, and (a bullet per cell)
    where it disagreed."""
    if replayed.empty:
        return ["No random-search cell is finished: the advice has nothing to replay."]
    early = replayed[replayed["stopped_round"] < replayed["budget"]]
    saved = int(((early["budget"] - early["stopped_round"]) * early["splits"]).sum())
    searched = int((replayed["budget"] * replayed["splits"]).sum())
    stopped = (f"stopped before the budget in {len(early)}, saving {saved} of the {searched} search trainings"
               if len(early) else f"never stopped before the budget ({searched} search trainings in all)")
    sentences = [f"Replayed round by round on {len(replayed)} finished random-search cells (its prior the benchmark's "
                 f"cells of the same training length without the cell's own source), the advice {stopped}; the full "
                 f"designs also retrain the best configuration, which the advice does not need (the trainings column)."]
    sentences.append(_without_futility(replayed))
    differ = replayed[~replayed["agrees"].astype(bool)]
    if differ.empty:
        sentences.append("Its decision matched the full design's verdict in every cell.")
        return sentences
    said = {"tuning_pays": "said tuning pays", "equivalent": "said equivalent", "budget_spent": "was still undecided",
            "adacos_better": "said Fixed AdaCos is better", "futile": "stopped as futile",
            "not_worth_it": "stopped as more trials were not worth their price",
            "run_more": "was still undecided"}
    found = {"paid": "found tuning pays", "equivalent": "found them equivalent", "undecided": "was undecided",
             "adacos_better": "found Fixed AdaCos better"}
    described = [f"{row.cell}: the advice {said[row.decision]} at round {row.stopped_round} of {row.budget} "
                 f"({pct(row.difference)} {pct_interval(row.low, row.high)}); the full design "
                 f"{found[row.full_design]}." for row in differ.itertuples()]
    same_sign = int((np.sign(differ["difference"]) == np.sign(differ["full_design_difference"])).sum())
    sentences += [f"It differed from the full design's verdict in {len(differ)} of {len(replayed)}:", Bullets(described)]
    sentences.append("The full design judges the best configuration retrained at fresh seeds with a t interval over "
                     "class splits, the advice the trial val selects within a search, pooled over splits, at "
                     f"α/budget a look; in {same_sign} of the {len(differ)} the two estimates have the same sign.")
    return sentences


def _without_futility(replayed: pd.DataFrame) -> str:
    """What the early stops gave up: the cells where the advice without them reached a decision."""
    futile = replayed[replayed["decision"].isin(EARLY_STOPS)]
    if futile.empty:
        return "The advice never stopped as futile here."  # nor as not worth more trials
    label = {"futile": "as futile", "not_worth_it": "as more trials were not worth their price"}.get(
        futile["decision"].iloc[0] if futile["decision"].nunique() == 1 else "", "early without a test's answer")
    stop = "the futile stop" if label == "as futile" else "the early stop"
    decided = futile[~futile["without_futility_decision"].isin(["budget_spent", "run_more"])]
    spent = int(((futile["without_futility_round"] - futile["stopped_round"]) * futile["splits"]).sum())
    if decided.empty:
        return (f"It stopped {label} in {len(futile)}; without that stop it would have trained {spent} more trials "
                "there and decided none of them.")
    named = "; ".join(f"{row.cell} ({row.without_futility_decision.replace('_', ' ')} at round "
                      f"{row.without_futility_round}, at least {pct(row.without_futility_low)})"
                      for row in decided.itertuples())
    return (f"It stopped {label} in {len(futile)}; without that stop it would have trained {spent} more trials there "
            f"and decided {len(decided)} of them: {named}. That is the power {stop} gives up.")


def replay_shown(replayed: pd.DataFrame) -> pd.DataFrame:
    """The replay table as the report shows it."""
    return pd.DataFrame({
        "cell": replayed["cell"], "regime": replayed["regime"],
        "stopped": [f"round {row.stopped_round} of {row.budget}" for row in replayed.itertuples()],
        "trainings": [f"{row.trainings} of {row.design_trainings}" for row in replayed.itertuples()],
        "advice": replayed["decision"].str.replace("_", " "),
        "tuned ArcFace − Fixed AdaCos": [f"{pct(row.difference)} {pct_interval(row.low, row.high)}"
                                        for row in replayed.itertuples()],
        "prior's weight": [f"{row.prior_weight:.0%}" for row in replayed.itertuples()],
        "full design": replayed["full_design"].str.replace("_", " "),
        "same": ["yes" if same else "no" for same in replayed["agrees"]]})
