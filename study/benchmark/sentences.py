"""The benchmark report's sentences, each computed from the pooled rows: the evidence behind the answer (every
method against Fixed AdaCos, short and converged), what tuning costs, trends in the class count, training length
and the learning-rate grid's edges, and the benchmark's scope."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

import study.report.formats as fmt
from study.analysis.headline import headline_cells, rate_chosen
from study.benchmark.card import pct, pct_interval
from study.benchmark.cells import NEAR_FLOOR_SCORE
from study.benchmark.meta import RELATIVE_MARGIN
from study.report import method_name
from study.report.judgements import JUDGEMENT_WORDS

TUNER_WORDS = {"random": "random search", "tpe": "TPE", "qmc": "QMC", "grid": "grid search"}


def tuner_label(sampler: str, repeats: int, pruner: str) -> str:
    """A tuner as the reader sees it: 'TPE + median pruner (3 repeats)'."""
    label = TUNER_WORDS.get(sampler, sampler) + ("" if pruner in (None, "none") else f" + {pruner} pruner")
    return label + (f" ({int(repeats)} repeats)" if repeats and repeats > 1 else "")


# --- words --------------------------------------------------------------------------------------------------


def lead_sentence(arcface: dict, best: dict, wins: list[dict]) -> str:
    """The answer in plain order: what a user who trains to convergence should expect from tuning ArcFace, what the
    short regime says (models stopped early: a sensitivity row), and the best choice that needs no tuning, with the
    class counts where another untuned loss beats Fixed AdaCos beyond the margin."""
    margin = f"±{100 * RELATIVE_MARGIN:.0f}% of the score"
    converged = arcface["converged_cells"]
    if math.isfinite(arcface.get("prediction_low", math.nan)):
        at_convergence = (f"At convergence, tuned ArcFace − Fixed AdaCos on a new data source is expected in "
                          f"{pct_interval(arcface['prediction_low'], arcface['prediction_high'])} of Fixed AdaCos's "
                          f"score ({arcface['sources']} sources): {JUDGEMENT_WORDS[arcface['judgement']]} of {margin}")
    else:
        at_convergence = (f"At convergence, not yet answered: Fixed AdaCos and tuned ArcFace converged in "
                          f"{len(converged)} cell{'' if len(converged) == 1 else 's'}"
                          + (" (" + "; ".join(f"{cell['cell']}: {pct(cell['relative'])} "
                                              f"{pct_interval(cell['low'], cell['high'])}" for cell in converged) + ")"
                             if converged else "")
                          + ", too few sources to predict a new one")
    converged_short = ("none" if not arcface["short_converged"] else str(arcface["short_converged"]))
    short = (f"Trained short ({converged_short} of the {arcface['short_configurations']} short cells converged), a new source "
             f"should expect {pct_interval(arcface['short_prediction_low'], arcface['short_prediction_high'])}: "
             f"{JUDGEMENT_WORDS[arcface['short_judgement']]} of {margin}")
    pool = "at convergence" if best["pool"] == "converged" else "trained short"
    if best["method"] == "fixed_adacos":
        untuned = f"Of the losses that need no tuning, none beats Fixed AdaCos on average {pool}"
    elif not best["distinct"]:  # the highest mean, but its interval covers Fixed AdaCos's
        untuned = (f"Of the losses that need no tuning, none is told apart from Fixed AdaCos on average {pool} (the "
                   f"highest, {method_name(best['method'])}: {pct(best['mean'])} "
                   f"{pct_interval(best['low'], best['high'])})")
    else:
        untuned = (f"Of the losses that need no tuning, {method_name(best['method'])} scores highest on average "
                   f"{pool} ({pct(best['mean'])} {pct_interval(best['low'], best['high'])})")
    for win in wins:
        untuned += (f", but {method_name(win['method'])} beats it by more than the margin at C ≥ "
                    f"{win['from_classes']:,} ({win['source']}, {win['regime']} training: "
                    f"{', '.join(pct(value) for value in win['relative'])})")
        if win.get("longer_behind"):
            longer = zip(win["longer_cells"], win["longer_relative"])
            untuned += (f", and falls behind it by more than the margin trained longer ("
                        f"{', '.join(f'{cell}: {pct(value)}' for cell, value in longer)})")
    if max(arcface["sources"], arcface["short_sources"]) <= 1:  # one source: there is nothing to pool across
        at_convergence = ("These cells come from one data source only, so nothing is pooled across sources and no "
                          "interval for a new source is estimated; each cell's own difference is in the Cells table. "
                          + at_convergence)
    return f"**{at_convergence}. {short}. {untuned}.**"


def method_sentence(facts: dict) -> str:
    """One method against Fixed AdaCos: the average over sources, a new source, and the sources made by people and
    rendered by code apart."""
    name = method_name(facts["method"])
    if not math.isfinite(facts.get("prediction_low", math.nan)):  # the converged cells do not predict yet
        converged = (f"{pct(facts['mean'])} over {fmt.plural(facts['configurations'], 'converged cell')}"
                     if facts["configurations"] else "no converged cell yet")
        return (f"**{name}** − Fixed AdaCos: {converged}. Trained short: {pct(facts['short_mean'])} "
                f"{pct_interval(facts['short_low'], facts['short_high'])} on average over "
                f"{facts['short_sources']} sources; on a new source "
                f"{pct_interval(facts['short_prediction_low'], facts['short_prediction_high'])}, "
                f"{JUDGEMENT_WORDS[facts['short_judgement']]}.")
    text = (f"**{name}** − Fixed AdaCos: {pct(facts['mean'])} {pct_interval(facts['low'], facts['high'])} on average "
            f"over {facts['sources']} sources ({facts['configurations']} configurations); on a new source "
            f"{pct_interval(facts['prediction_low'], facts['prediction_high'])}, "
            f"{JUDGEMENT_WORDS[facts['judgement']]}")
    if math.isfinite(facts.get("equivalent_from", math.nan)):
        text += f"; equivalent for any margin beyond ±{100 * facts['equivalent_from']:.1f}%"
    if math.isfinite(facts.get("reliable_gain", math.nan)):
        text += f"; it reliably gains at least {pct(facts['reliable_gain'])}"
    scopes = [f"{label} {pct(facts[f'{prefix}mean'])} {pct_interval(facts[f'{prefix}low'], facts[f'{prefix}high'])} "
              f"({facts[f'{prefix}sources']} sources)" for prefix, label in (("people_", "made by people"),
                                                                              ("code_", "rendered by code"))
              if facts[f"{prefix}sources"]]
    text += f". Apart: {'; '.join(scopes)}." if scopes else "."
    if facts.get("rate_chosen_cells"):  # the protocol's cells lead; the shared-rate pool is what it replaced
        text += sensitivity_clause(facts, "shared_rate_", "With every method at one shared learning rate instead")
    if facts.get("still_improving_cells"):  # what the plateau rule keeps out, pooled in
        text += sensitivity_clause(facts, "long_", "With the long cells still improving too "
                                                   f"({', '.join(facts['still_improving_cells'])})")
    return text


def sensitivity_clause(facts: dict, prefix: str, lead: str) -> str:
    """A sensitivity pool (`prefix`) after the headline's sentence: its mean with CI and a new source's prediction."""
    return (f" {lead}: {pct(facts[f'{prefix}mean'])} {pct_interval(facts[f'{prefix}low'], facts[f'{prefix}high'])}, "
            f"a new source {pct_interval(facts[f'{prefix}prediction_low'], facts[f'{prefix}prediction_high'])} "
            f"({fmt.plural(int(facts[f'{prefix}sources']), 'source')}; sensitivity).")


def cost_sentences(facts: dict) -> list[str]:
    """What the ArcFace search costs, against the budget-matched control and the one-run target, and its seed luck."""
    n = int(facts["matched_n"])
    return [
        f"At the same number of trainings ({n}), the trial val selects among {n} ArcFace trials scores "
        f"{fmt.signed(facts['matched_gap'])} {fmt.interval(facts['matched_low'], facts['matched_high'])} on test "
        f"against the best of {n} Fixed AdaCos runs picked by val (mean over configurations, 95% CI); the search "
        f"was ahead on {int(facts['matched_search_ahead'])} of {int(facts['matched_configurations'])} "
        "configurations.",
        f"Against one Fixed AdaCos run, the search's point estimate reached it within the search on "
        f"{int(facts['break_even_point'])} configurations, and its interval showed it on "
        f"{int(facts['break_even_shown'])}"
        + (f" (median {fmt.count(facts['break_even_trials_median'])} trials)." if facts["break_even_shown"] else "."),
        f"Seed luck: the trial val selected scored {fmt.signed(facts['seed_luck'])} "
        f"{fmt.interval(facts['seed_luck_low'], facts['seed_luck_high'])} on test above its own (s, m) retrained at "
        "fresh seeds (mean over configurations): that much of what a search reports is the selected trial's seed.",
    ]


def real_budget_sentences(results: Path) -> list[str]:
    """The budget-matched control at the search's real budget (benchmarks/budget_matched.py), per configuration where
    it was measured: the val-selected trial among n against the best of n Fixed AdaCos runs by val, up to n = N."""
    sentences = []
    for path in sorted(results.glob("*_gap.csv")):
        gaps = pd.read_csv(path)
        last = gaps.iloc[-1]
        shown = gaps[gaps["low"] > 0]
        sentences.append(
            f"On {last['cell']}, at the search's real budget: with {int(last['n'])} trainings each, the val-selected "
            f"ArcFace trial − the best of {int(last['n'])} Fixed AdaCos runs by val is {fmt.signed(last['gap'])} "
            f"{fmt.interval(last['low'], last['high'])} (over {int(last['splits'])} class splits); the search's point "
            f"estimate is ahead at {int((gaps['gap'] > 0).sum())} of {len(gaps)} n, its interval at "
            + (f"{len(shown)}, from n = {int(shown['n'].iloc[0])}." if len(shown) else "none."))
    return sentences


def slope_sentence(slope: dict) -> str:
    if not math.isfinite(slope["slope"]):
        return "No source has 3 or more class counts under the open protocol, so no trend in C is estimated."
    resolved = slope["low"] > 0 or slope["high"] < 0
    return (f"Within {slope['source']} (C = {', '.join(f'{c:,}' for c in slope['classes'])}), tuned ArcFace − Fixed "
            f"AdaCos moves by {fmt.signed(slope['slope'])} {fmt.interval(slope['low'], slope['high'])} per tenfold C "
            f"(least squares, t on {slope['k'] - 2} df){'' if resolved else '; not resolved'}. The slope is estimated "
            "within one source only: across sources C moves with the source.")


def longer_sentences(longer: pd.DataFrame) -> list[str]:
    """Seed 000's claim (AdaCos overtakes ArcFace only after about 20,000 iterations): does the difference, or the
    iterations each loss needs, change with training length?"""
    if longer.empty:
        return ["No long-regime cell has finished: training length is not yet answered."]
    sentences = []
    for (configuration, _), group in longer.groupby(["configuration", "long_cell"], sort=False):  # each longer cell
        tuned = group[group["method"] == "arcface_tuned"]
        if tuned.empty:
            continue
        row = tuned.iloc[0]
        resolved = row.change_low > 0 or row.change_high < 0
        sentences.append(
            f"On **{configuration}**, training {fmt.iterations(row.long_iterations)} iterations instead of "
            f"{fmt.iterations(row.short_iterations)}"
            + (" with each method at its val-chosen learning rate" if row.get("rate_chosen", False) else "")
            + ", tuned ArcFace − Fixed AdaCos moves from "
            f"{fmt.signed(row.short_difference)} to {fmt.signed(row.long_difference)} (change "
            f"{fmt.signed(row.change)} {fmt.interval(row.change_low, row.change_high)}"
            f"{'' if resolved else ', not resolved'}); 95% of its own best val score is reached, in the short and the "
            f"long regime, by Fixed AdaCos {_reached(row.reference_short_converged_at, row.reference_long_converged_at)}"
            f", by tuned ArcFace {_reached(row.short_converged_at, row.long_converged_at)}.")
    return sentences


def forest_pool(rows: pd.DataFrame, facts: dict) -> tuple[pd.DataFrame, dict, str]:
    """What a tuned method's forest draws: the cells its summary pools, with that summary, and a caption's words. The
    converged headline's cells where the method has a converged pool, else the short regime's (a sensitivity)."""
    own = rows[rows["method"] == facts["method"]]
    converged = headline_cells(own)
    shown = "" if math.isfinite(facts["prediction_low"]) and len(converged) else "short_"
    summary = facts | {key: facts[f"{shown}{key}"] for key in ("mean", "low", "high", "prediction_low",
                                                               "prediction_high", "sources")}
    if not shown:
        return converged, summary, " Drawn for the converged cells the headline pools."
    return (own[own["primary"].astype(bool)], summary,
            " Drawn for the short regime (a sensitivity row): no converged pool yet.")


def rate_edge_sentences(rows: pd.DataFrame) -> list[str]:
    """Per cell that chose the learning rate by val from a grid: the untuned methods for which val chose the grid's
    largest or smallest rate, on how many class splits (beyond that edge a rate may score higher still)."""
    sentences = []
    for cell, group in rows[rate_chosen(rows)].groupby("cell", sort=False):
        first = group.iloc[0]
        counts = [("fixed_adacos", first["reference_rate_top"], first["reference_rate_bottom"],
                   first["reference_rate_splits"])]
        counts += [(row.method, row.rate_top, row.rate_bottom, row.rate_splits) for row in group.itertuples()]
        edges = {edge: [f"{method_name(method)} on {int(at[index])} of {int(splits)}"
                        for method, *at, splits in counts if not fmt.missing(at[index]) and at[index] > 0]
                 for index, edge in enumerate(("largest", "smallest"))}
        if not edges["largest"] and not edges["smallest"]:
            sentences.append(f"On {cell}, val chose a learning rate inside its grid for every untuned method on "
                             "every class split.")
            continue
        said = "; ".join(f"its {edge} for {', '.join(methods)} class splits" for edge, methods in edges.items()
                         if methods)
        sentences.append(f"On {cell}, val chose the learning-rate grid's edge: {said}.")
    if any("grid's edge" in sentence for sentence in sentences):
        sentences.append("Beyond an edge a rate may score higher still: there the grid may hold those methods back. "
                         "`python benchmarks/rate_edges.py` trains each of them one grid step beyond and pools the "
                         "headline again (benchmarks/results/rate_edges.md).")
    return sentences


def _reached(short, long) -> str:
    """Iterations to a convergence target in the short and the long regime, as read: 'after 50 and 80 iterations',
    'in neither', 'only in the long one, after 880 iterations'."""
    if fmt.missing(short) and fmt.missing(long):
        return "in neither"
    if fmt.missing(short) or fmt.missing(long):
        return (f"only in the {'long' if fmt.missing(short) else 'short'} one, after "
                f"{fmt.iterations(long if fmt.missing(short) else short)} iterations")
    return f"after {fmt.iterations(short)} and {fmt.iterations(long)} iterations"


def scope_sentence(plan: dict, rows: pd.DataFrame) -> str:
    """How far this carries, computed from the plan's finished cells: the converged cells the headline pools, then the
    short regime's primary cells."""
    declared = {cell["name"]: cell for cell in plan["cells"]}
    cells = [declared[name] for name in dict.fromkeys(rows["cell"]) if declared[name]["primary"]]  # in CELL_ORDER
    sources = list(dict.fromkeys(cell["source"] for cell in cells))
    by_people = sorted({row.source for row in rows.itertuples() if row.by_people})
    floor = sorted(set(rows.loc[rows["near_floor"].astype(bool) & rows["primary"].astype(bool), "configuration"]))
    iterations = [cell.get("iterations") for cell in cells if cell.get("iterations")]
    pending = sorted(set(declared) - set(rows["cell"]))
    trained = f" trained {min(iterations):,}–{max(iterations):,} iterations per run" if iterations else ""
    classes = [cell["train_classes"] for cell in cells] or list(rows["train_classes"])
    pooled = [declared[name] for name in dict.fromkeys(
        headline_cells(rows).query("method == 'arcface_tuned'")["cell"])]
    chosen = sum(bool(c.get("learning_rates")) for c in pooled)
    rates = (f"; {chosen} of them with each method at its val-chosen learning rate, the protocol's, the others at one "
             "shared rate" if 0 < chosen < len(pooled) else "; each method at its val-chosen learning rate" if chosen
             else "; every method at one shared learning rate")
    converged = (f"The headline pools {len(pooled)} converged cells of {len({c['source'] for c in pooled})} sources "
                 f"(C = {min(c['train_classes'] for c in pooled):,}–{max(c['train_classes'] for c in pooled):,}, "
                 f"{min(c['iterations'] for c in pooled):,}–{max(c['iterations'] for c in pooled):,} iterations per "
                 f"run{rates}). " if pooled else "No cell has converged yet, so the headline pools none. ")
    return (f"How far this carries: {converged}The short regime: {len(cells)} configurations from {len(sources)} "
            f"independent sources ({', '.join(sources) or 'none'}; made by people: {', '.join(by_people) or 'none'}), "
            f"C = {min(classes):,}–{max(classes):,} training classes, one small CNN{trained}. Configurations of one "
            "source are not independent evidence: the intervals are over sources. The headline pools the cells where "
            "Fixed AdaCos and the method converged (the plateau rule of docs/analysis.md); no cell is left out for its "
            "score: the short regime's pool is a sensitivity row, "
            f"and so is that pool without the cells where Fixed AdaCos scores below {NEAR_FLOOR_SCORE} "
            f"({', '.join(floor) or 'none'}). Other architectures, pretrained backbones, larger images and C beyond "
            "these are outside it."
            + (f" Declared but not finished, so not in these numbers: {', '.join(pending)}." if pending else ""))


# --- the whole report ---------------------------------------------------------------------------------------
