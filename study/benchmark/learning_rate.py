"""The learning-rate check (benchmarks/learning_rate.py): every method of a converged cell at lr/3, lr and 3·lr, one
run per class split at seed 0. Does any ranking of methods by test score change with the learning rate, and which
learning rate would val choose for each method?

Pure computation on a table of runs (RUN_COLUMNS: one row per configuration, method, learning-rate factor and class
split), so that the benchmark's report can read the same numbers as the script writes:

- `summary_table`: per configuration, learning rate and method, val and test means over the class splits, the test
  mean's t interval and its rank among the methods at that learning rate;
- `swap_table`: every pair of methods whose order by mean test score reverses between two learning rates, with the
  paired (same class split) difference at each and whether the reversal is beyond noise;
- `chosen_learning_rates`: the learning rate the best mean val score picks for each method;
- `learning_rate_sections`: the sentences and tables of the markdown summary, all computed from the three above.

A run that diverged has no test score in the cell it is compared with (no checkpoint is kept), so diverged runs are
left out of every mean, as in the cells' own reports; `splits` says how many runs a mean has.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

import study.report.formats as fmt
from study.plateau import PLATEAU_RISE
from study.learning_rates import choose_rate
from study.report.document import Section, Table
from study.report.formats import method_name, metric_name
from study.statistics import mean_ci, paired_difference

# The project's learning rate times these: the check asked for lr/3, lr and 3·lr. 1 is the cell's own runs.
LR_FACTORS = (1 / 3, 1.0, 3.0)
BASELINE_FACTOR = 1.0
COMPLETED = "completed"

# status: the run's (completed, diverged); plateau_rise: the plateau rule's statistic of its val curve (NaN where its
# curve is not at hand: the cell's own runs at lr).
RUN_COLUMNS = ["configuration", "method", "lr", "lr_factor", "split", "status", "val_score", "test_score",
               "plateau_rise"]
# splits: the completed runs averaged; test_low/test_high: the 95% t interval of the test mean over those splits;
# rank: of test_mean among the methods at that learning rate, 1 the best (ties share the better rank).
SUMMARY_COLUMNS = ["configuration", "method", "lr", "lr_factor", "splits", "val_mean", "test_mean", "test_low",
                   "test_high", "rank"]
# ahead is ahead of behind by mean test score at factor_a and behind it at factor_b; difference_a (positive) and
# difference_b (negative) are mean(ahead − behind) over the splits both completed at that learning rate, each with
# its paired t interval; beyond_noise: both intervals exclude 0 (each order is resolved at its learning rate).
SWAP_COLUMNS = ["configuration", "factor_a", "factor_b", "ahead", "behind", "splits_a", "difference_a", "low_a",
                "high_a", "splits_b", "difference_b", "low_b", "high_b", "beyond_noise"]
# lr_factor: the factor whose mean val score is best among those at which the method completed every class split
# (NaN: at none); val_mean/test_mean: at that factor.
CHOSEN_COLUMNS = ["configuration", "method", "lr_factor", "lr", "val_mean", "test_mean"]


def factor_label(factor: float) -> str:
    """A learning-rate factor as the report writes it: 1 → 'lr', 3 → '3·lr', 1/3 → 'lr/3'."""
    if math.isclose(factor, 1.0):
        return "lr"
    if factor > 1:
        return f"{factor:g}·lr"
    return f"lr/{1 / factor:.3g}"


def selected_values(landscape: pd.DataFrame, loss: str, split: int) -> dict[str, float]:
    """The (s, m) a cell's search selected by val for `loss` on class split `split` (its landscape.csv: the one row
    of that loss and split whose `best` is true); only the values the loss has (NormFace has no m). A ValueError
    when there is not exactly one such row."""
    best = landscape[(landscape["loss"] == loss) & landscape["best"].astype(bool) & (landscape["split"] == split)]
    if len(best) != 1:
        raise ValueError(f"{len(best)} selected {loss} trials for class split {split}, where one was expected")
    row = best.iloc[0]
    return {name: float(row[name]) for name in ("s", "m") if name in row and pd.notna(row[name])}


def _completed(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that completed with finite scores: the only ones averaged or paired."""
    done = runs[(runs["status"] == COMPLETED) & np.isfinite(runs["test_score"].astype(float))
                & np.isfinite(runs["val_score"].astype(float))]
    return done.assign(lr_factor=done["lr_factor"].astype(float))


def _factors(frame: pd.DataFrame) -> list[float]:
    return sorted(set(frame["lr_factor"].astype(float)))


def _methods(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["method"]))


def summary_table(runs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per configuration, learning-rate factor and method (in the runs' order): completed splits, mean val, mean test
    with its t interval over splits, and the rank of the mean test among the methods at that learning rate."""
    done, rows = _completed(runs), []
    for configuration in dict.fromkeys(runs["configuration"]):
        planned = runs[runs["configuration"] == configuration]
        for factor in _factors(planned):
            at_factor = planned[planned["lr_factor"].astype(float) == factor]
            for method in _methods(at_factor):
                scores = done[(done["configuration"] == configuration) & (done["lr_factor"] == factor)
                              & (done["method"] == method)]
                mean, low, high = mean_ci(scores["test_score"], confidence) if len(scores) else (math.nan,) * 3
                rows.append({"configuration": configuration, "method": method,
                             "lr": float(at_factor["lr"].iloc[0]), "lr_factor": factor, "splits": len(scores),
                             "val_mean": float(scores["val_score"].mean()) if len(scores) else math.nan,
                             "test_mean": mean, "test_low": low, "test_high": high})
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS[:-1])
    ranks = summary.groupby(["configuration", "lr_factor"], sort=False)["test_mean"].rank(ascending=False,
                                                                                          method="min")
    return summary.assign(rank=ranks)[SUMMARY_COLUMNS]


def _paired(done: pd.DataFrame, ahead: str, behind: str, confidence: float) -> dict:
    """mean(ahead − behind) over the class splits both completed, with its paired t interval."""
    scores = done.pivot_table(index="split", columns="method", values="test_score", aggfunc="mean")
    if ahead not in scores or behind not in scores:
        return {"splits": 0, "difference": math.nan, "low": math.nan, "high": math.nan}
    pairs = scores[[ahead, behind]].dropna()
    if pairs.empty:
        return {"splits": 0, "difference": math.nan, "low": math.nan, "high": math.nan}
    result = paired_difference(pairs[ahead], pairs[behind], confidence)
    return {"splits": len(pairs), "difference": result["difference"], "low": result["low"], "high": result["high"]}


def swap_table(runs: pd.DataFrame, summary: pd.DataFrame | None = None, confidence: float = 0.95) -> pd.DataFrame:
    """Every pair of methods whose order by mean test score is strictly reversed between two learning rates of one
    configuration (ties reverse nothing), for every pair of learning rates: a reversal between lr/3 and 3·lr can be
    resolved at both although each against lr is within noise. Beyond noise: the paired interval of ahead − behind
    lies above 0 at factor_a and below 0 at factor_b."""
    summary = summary_table(runs, confidence) if summary is None else summary
    done, rows = _completed(runs), []
    for configuration, table in summary.groupby("configuration", sort=False):
        means = table.set_index(["method", "lr_factor"])["test_mean"].unstack()  # NaN kept: no runs, no order
        for factor_a, factor_b in itertools.combinations(sorted(means.columns), 2):
            for first, second in itertools.combinations(_methods(table), 2):
                a_gap = means.at[first, factor_a] - means.at[second, factor_a]
                b_gap = means.at[first, factor_b] - means.at[second, factor_b]
                if not (a_gap * b_gap < 0):  # NaN (a method without runs) or no reversal
                    continue
                ahead, behind = (first, second) if a_gap > 0 else (second, first)
                at = {factor: _paired(done[(done["configuration"] == configuration) & (done["lr_factor"] == factor)],
                                      ahead, behind, confidence) for factor in (factor_a, factor_b)}
                a, b = at[factor_a], at[factor_b]
                rows.append({"configuration": configuration, "factor_a": factor_a, "factor_b": factor_b,
                             "ahead": ahead, "behind": behind, "splits_a": a["splits"], "difference_a": a["difference"],
                             "low_a": a["low"], "high_a": a["high"], "splits_b": b["splits"],
                             "difference_b": b["difference"], "low_b": b["low"], "high_b": b["high"],
                             "beyond_noise": bool(a["low"] > 0 and b["high"] < 0)})
    return pd.DataFrame(rows, columns=SWAP_COLUMNS)


def chosen_learning_rates(runs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and method, the learning rate val would choose: the best mean val score among the factors at
    which the method completed every class split of the configuration (a mean missing a diverged split would flatter
    that learning rate); on a tie, the factor nearest lr."""
    done, rows = _completed(runs), []
    for configuration in dict.fromkeys(runs["configuration"]):
        planned = runs[runs["configuration"] == configuration]
        splits = planned["split"].nunique()
        for method in _methods(planned):
            own = done[(done["configuration"] == configuration) & (done["method"] == method)]
            means = own.groupby("lr_factor").agg(runs=("split", "nunique"), val_mean=("val_score", "mean"),
                                                 test_mean=("test_score", "mean"), lr=("lr", "first"))
            # A factor short of a split counts as a diverged run there: never chosen.
            factor = choose_rate({f: list(own.loc[own["lr_factor"] == f, "val_score"].astype(float))
                                  + [math.nan] * (splits - int(means.at[f, "runs"])) for f in means.index}, 1.0)
            if factor is None:
                rows.append({"configuration": configuration, "method": method, "lr_factor": math.nan, "lr": math.nan,
                             "val_mean": math.nan, "test_mean": math.nan})
                continue
            best = means.loc[factor]
            rows.append({"configuration": configuration, "method": method, "lr_factor": float(factor),
                         "lr": float(best["lr"]), "val_mean": float(best["val_mean"]),
                         "test_mean": float(best["test_mean"])})
    return pd.DataFrame(rows, columns=CHOSEN_COLUMNS)


def ranking_changes(swaps: pd.DataFrame, configuration: str) -> str:
    """'none' (no pair of methods reverses its order), 'within noise' (some do, none resolved at both learning
    rates) or 'beyond noise' (at least one does, resolved at both)."""
    own = swaps[swaps["configuration"] == configuration]
    if own.empty:
        return "none"
    return "beyond noise" if own["beyond_noise"].astype(bool).any() else "within noise"


def ranking_order(summary: pd.DataFrame, configuration: str, factor: float) -> list[str]:
    """The methods of one configuration at one learning rate, best mean test score first (no score: left out)."""
    own = summary[(summary["configuration"] == configuration) & (summary["lr_factor"] == factor)]
    return list(own.dropna(subset=["test_mean"]).sort_values("test_mean", ascending=False, kind="stable")["method"])


def _difference(difference: float, low: float, high: float) -> str:
    return f"{fmt.signed(difference)} {fmt.interval(low, high)}"


def swap_sentence(swap: dict) -> str:
    """One reversal in words: who leads at which learning rate, by how much, and whether it is beyond noise."""
    a, b = factor_label(swap["factor_a"]), factor_label(swap["factor_b"])
    ahead, behind = method_name(swap["ahead"]), method_name(swap["behind"])
    noise = ("beyond noise: resolved at both" if swap["beyond_noise"]
             else "within noise: not resolved at both")
    return (f"between {a} and {b}, {ahead} and {behind} swap ({noise}; {ahead} − {behind} "
            f"{_difference(swap['difference_a'], swap['low_a'], swap['high_a'])} at {a}, "
            f"{_difference(swap['difference_b'], swap['low_b'], swap['high_b'])} at {b})")


def verdict_sentence(swaps: pd.DataFrame, configuration: str) -> str:
    """Whether the ranking changes, and what that means for the protocol."""
    change = ranking_changes(swaps, configuration)
    own = swaps[swaps["configuration"] == configuration]
    if change == "none":
        return ("The ranking of the methods by test score is the same at every learning rate checked: the single "
                "learning rate stands.")
    pairs = fmt.plural(len(own), "reversal")
    if change == "within noise":
        return (f"The ranking changes only within noise ({pairs}, none resolved at both learning rates): no ranking "
                "is shown to depend on the learning rate, and the single learning rate stands.")
    resolved = int(own["beyond_noise"].astype(bool).sum())
    return (f"The ranking changes beyond noise ({resolved} of {pairs} resolved at both learning rates): choosing "
            "the learning rate by val for every method becomes part of the protocol.")


def chosen_sentence(chosen: pd.DataFrame, configuration: str) -> str:
    """Which learning rate val would choose per method, grouped by learning rate."""
    own = chosen[chosen["configuration"] == configuration]
    parts = []
    for factor, group in own.dropna(subset=["lr_factor"]).groupby("lr_factor", sort=True):
        names = ", ".join(method_name(m) for m in group["method"])
        parts.append(f"{factor_label(factor)} ({group['lr'].iloc[0]:.3g}) for {names}")
    sentence = "Val (best mean val score) would choose " + ("; ".join(parts) if parts else "no learning rate")
    unchosen = own[own["lr_factor"].isna()]["method"]
    if len(unchosen):
        sentence += (f"; none for {', '.join(method_name(m) for m in unchosen)} (no learning rate with every class "
                     "split completed)")
    return sentence + "."


def chosen_ranking_sentence(summary: pd.DataFrame, chosen: pd.DataFrame, configuration: str) -> str:
    """The ranking by test score with each method at the learning rate val chose, against the ranking at lr."""
    own = chosen[chosen["configuration"] == configuration].dropna(subset=["test_mean"])
    at_choice = list(own.sort_values("test_mean", ascending=False, kind="stable")["method"])
    at_lr = [m for m in ranking_order(summary, configuration, BASELINE_FACTOR) if m in at_choice]
    listing = ", ".join(method_name(m) for m in at_choice)
    same = "the same order as" if at_choice == at_lr else "not the order of"
    return f"With each method at its val-chosen learning rate, test ranks them {listing}: {same} every method at lr."


def divergence_sentence(runs: pd.DataFrame, configuration: str) -> str:
    """The runs that did not complete (left out of every mean), or '' when every run completed."""
    own = runs[runs["configuration"] == configuration]
    failed = own[own["status"] != COMPLETED]
    if failed.empty:
        return ""
    splits = own["split"].nunique()
    parts = [f"{method_name(method)} at {factor_label(factor)} on {len(group)} of {splits} class splits"
             for (method, factor), group in failed.groupby(["method", "lr_factor"], sort=False)]
    return f"Left out of every mean, as runs that did not complete ({', '.join(sorted(set(failed['status'])))}): " \
           + "; ".join(parts) + "."


def plateau_sentence(runs: pd.DataFrame, configuration: str) -> str:
    """How many of the retrained runs meet the plateau rule at each learning rate (the cell's own runs at lr were
    judged in its report); '' where no run has its plateau statistic."""
    own = runs[(runs["configuration"] == configuration) & runs["plateau_rise"].notna()]
    if own.empty:
        return ""
    parts = [f"{int((group['plateau_rise'] < PLATEAU_RISE).sum())} of {len(group)} at {factor_label(factor)}"
             for factor, group in own.groupby("lr_factor", sort=True)]
    return (f"Runs whose best val rose by less than {100 * PLATEAU_RISE:.0f}% over their second half (the plateau "
            f"rule): {', '.join(parts)}.")


def _score_cell(row) -> str:
    if fmt.missing(row["test_mean"]):
        return "n/a"
    interval = "" if fmt.missing(row["test_low"]) else f" [{row['test_low']:.4f}, {row['test_high']:.4f}]"
    return f"{row['test_mean']:.4f}{interval} (#{int(row['rank'])})"


def score_table(summary: pd.DataFrame, configuration: str) -> pd.DataFrame:
    """Methods × learning rates: mean test score, its interval and its rank at that learning rate."""
    own = summary[summary["configuration"] == configuration]
    factors = sorted(set(own["lr_factor"]))
    rows = []
    for method in _methods(own):
        cells = {"method": method_name(method)}
        for factor in factors:
            row = own[(own["method"] == method) & (own["lr_factor"] == factor)]
            cells[factor_label(factor)] = _score_cell(row.iloc[0]) if len(row) else "not run"
        rows.append(cells)
    return pd.DataFrame(rows)


def reversal_table(swaps: pd.DataFrame) -> pd.DataFrame:
    """The reversals as the report shows them: who leads where, each difference with its interval, and the verdict."""
    return pd.DataFrame([{"between": f"{factor_label(swap['factor_a'])} and {factor_label(swap['factor_b'])}",
                          "pair (ahead − behind at the first)": f"{method_name(swap['ahead'])} − "
                                                               f"{method_name(swap['behind'])}",
                          "at the first": _difference(swap["difference_a"], swap["low_a"], swap["high_a"]),
                          "at the second": _difference(swap["difference_b"], swap["low_b"], swap["high_b"]),
                          "beyond noise": "yes" if swap["beyond_noise"] else "no"}
                         for swap in swaps.to_dict("records")])


def configuration_section(runs: pd.DataFrame, summary: pd.DataFrame, swaps: pd.DataFrame, chosen: pd.DataFrame,
                          configuration: str, objective: str = "") -> Section:
    """One configuration's answer: whether the ranking changes (and which pairs swap), val's choice, the scores."""
    own = swaps[swaps["configuration"] == configuration]
    resolved = own[own["beyond_noise"].astype(bool)]
    blocks = [verdict_sentence(swaps, configuration)]
    if not resolved.empty:  # the reversals that decide, in words; every reversal is in the table below
        blocks.append("Resolved: " + "; ".join(swap_sentence(swap) for swap in resolved.to_dict("records")) + ".")
    blocks += [chosen_sentence(chosen, configuration), chosen_ranking_sentence(summary, chosen, configuration)]
    blocks += [text for text in (plateau_sentence(runs, configuration), divergence_sentence(runs, configuration))
               if text]
    scored = f"test {metric_name(objective)}" if objective else "test score"
    blocks.append(Table(score_table(summary, configuration),
                        caption=f"Mean {scored} over class splits (seed 0), 95% t interval, rank at that learning "
                                "rate."))
    if not own.empty:
        blocks.append(Table(reversal_table(own), caption="Every pair of methods whose order by mean test score "
                            "reverses: the paired difference (same class splits) at each learning rate, 95% t "
                            "interval."))
    return Section(configuration, blocks)


def learning_rate_sections(runs: pd.DataFrame, summary: pd.DataFrame, swaps: pd.DataFrame, chosen: pd.DataFrame,
                           objectives: dict[str, str] | None = None) -> list[Section]:
    """One section per configuration, in the runs' order."""
    objectives = objectives or {}
    return [configuration_section(runs, summary, swaps, chosen, configuration, objectives.get(configuration, ""))
            for configuration in dict.fromkeys(runs["configuration"])]


def learning_rate_sentences(results: Path) -> list[str]:
    """For the benchmark's report: per configuration the check ran on (results/learning_rate/runs.csv), whether any
    ranking of the methods changes at lr/3 or 3·lr, and which learning rate val would choose."""
    path = Path(results) / "learning_rate" / "runs.csv"
    if not path.is_file():
        return []
    runs = pd.read_csv(path)
    summary = summary_table(runs)
    swaps, chosen = swap_table(runs, summary), chosen_learning_rates(runs)
    return [f"On {configuration}, every method trained again at a third and at three times the shared learning rate "
            f"(benchmarks/results/learning_rate.md). {verdict_sentence(swaps, configuration)} "
            f"{chosen_sentence(chosen, configuration)} {chosen_ranking_sentence(summary, chosen, configuration)}"
            for configuration in runs["configuration"].unique()]
