"""The verdict: sentences chosen by the analysis's numbers, the recommendation first, and the numbers behind it."""

from __future__ import annotations

import math

import pandas as pd

from study.analysis import REFERENCE_METHOD, StudyAnalysis
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name, trials_interval


def _break_even_clause(even: dict, seconds_word: bool = True) -> str:
    """'after 5 trials (95% interval [2, 12]; about 40 s)' or 'not within 32 trials (…)'."""
    interval = trials_interval(even["trials_low"], even["trials_high"], even["max_trials"], even.get("valid_trials"))
    if even["reached"]:
        cost = f"; about {fmt.seconds(even['seconds'])} of device time" if seconds_word and even["seconds"] else ""
        return f"after {fmt.plural(even['trials'], 'trial')} (interval {interval}{cost})"
    return f"not within the {fmt.plural(even['max_trials'], 'trial')} run (interval {interval})"


def _how_paired(row: dict) -> str:
    """How a difference was estimated: over class splits, paired by seed, or Welch."""
    if row["test"] == "split":
        return (f"over {row['splits']} class splits of {row['pairs'] // max(row['splits'], 1)} seeds, paired by split "
                "and seed, so the interval carries split and search variance")
    if row["test"] == "paired":
        return f"paired over {row['pairs']} seeds of one split"
    return "Welch, unpaired"


def _comparison_clause(row: dict, confidence: float) -> str:
    """'+0.0030 (95% CI [-0.0016, +0.0076], paired over 10 seeds, p = 0.16 after Holm)'."""
    how = _how_paired(row)
    return (f"{fmt.signed(row['difference'])} ({confidence:.0%} CI {fmt.interval(row['low'], row['high'])}, {how}, "
            f"p = {fmt.p_value(row['p_holm'])} after Holm)")


def margin_words(row: dict) -> str:
    """The margin in the metric's own terms: '±0.01 (0.5 of Fixed AdaCos's seed sd, 1.6% of its remaining error)'."""
    parts = []
    if not fmt.missing(row.get("margin_seed_sds")):
        parts.append(f"{row['margin_seed_sds']:.2g} of Fixed AdaCos's seed-to-seed sd")
    if not fmt.missing(row.get("margin_error_share")):
        parts.append(f"{row['margin_error_share']:.1%} of its remaining error")
    return f"±{row['margin']:.3g}" + (f" ({', '.join(parts)})" if parts else "")


def _judgement(row: dict) -> str:
    """Significant and beyond the margin, significant within it, equivalent within the margin, or neither."""
    if row["significant"] and abs(row["difference"]) >= row["margin"]:
        return f"significant and beyond the margin ±{row['margin']:.3g}"
    if row["significant"]:
        return f"significant, but not shown to reach the margin ±{row['margin']:.3g}"
    if row["equivalent"]:
        return f"equivalent within ±{row['margin']:g} (TOST p = {fmt.p_value(row['tost_p_value'])})"
    if fmt.missing(row["low"]):
        return "too few seeds to judge"
    return f"neither significant nor equivalent within ±{row['margin']:g}"


def _gain_clause(even: dict, confidence: float) -> str:
    """What the search buys over one Fixed AdaCos run: at the largest n with a valid interval, and at all N trials."""
    whole = (f"the whole search of {fmt.plural(even['max_trials'], 'trial')} buys {fmt.signed(even['gain'])} over one "
             "Fixed AdaCos run")
    if not even.get("gain_n"):
        return whole + " (no valid interval: too few trials, or one realisation of a sequential search)."
    if even["gain_n"] == even["max_trials"]:
        return whole + f" ({confidence:.0%} interval {fmt.interval(even['gain_low'], even['gain_high'])})."
    return (f"a search of {fmt.plural(even['gain_n'], 'trial')} buys {fmt.signed(even['gain_at_n'])} ({confidence:.0%} "
            f"interval {fmt.interval(even['gain_low'], even['gain_high'])}), the largest search these trials give a "
            f"valid interval for; {whole}, with no valid interval (its estimate rests on the top few trials).")


def verdict(analysis: StudyAnalysis) -> str:
    """The verdict: the recommendation and the numbers behind it, every clause chosen by the analysis's numbers."""
    return " ".join(verdict_sentences(analysis))


def verdict_sentences(analysis: StudyAnalysis) -> list[str]:
    """The verdict's sentences, the recommendation first."""
    facts = analysis.verdict_facts
    metric = metric_name(facts["metric"])
    searched = loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "the searched loss"
    tuned = f"tuned {searched}"
    row = facts["tuned"]
    confidence = analysis.confidence
    sentences = [_recommendation_sentences(facts, searched, metric, confidence)]
    variance = variance_sentence(facts)
    if variance:
        sentences.append(variance)

    even = facts["break_even"]
    if even and even["max_trials"]:
        reach = ("scores on test {metric} what one Fixed AdaCos run scores ({target}) {clause}" if even["reached"]
                 else "does not reach on test {metric} what one Fixed AdaCos run scores ({target}): {clause}")
        sentence = (f"What a search buys: the trial that val selects among n {searched} trials "
                    + reach.format(metric=metric, target=fmt.score(even["target"]), clause=_break_even_clause(even))
                    + "; " + _gain_clause(even, confidence))
        control = facts["control"]
        if control:
            sentence += (f" For comparison, keeping the best of {control['seeds']} Fixed AdaCos seeds by val buys "
                         f"{fmt.signed(control['gain'])} over one run, with no hyperparameter to tune.")
        if not fmt.missing(even["old_val_gain"]) and even["old_val_gain"] > 0:
            old = (f"after {fmt.plural(even['old_trials'], 'trial')}" if even["old_trials"] is not None
                   else f"not within {even['max_trials']}")
            sentence += (f" The classic expected-best val curve claims {fmt.signed(even['old_val_gain'])} over Fixed "
                         f"AdaCos's mean val and a break-even {old}; it includes the maximum of n draws of seed "
                         "noise, so it is not what a user gets on held-out data.")
        elif not fmt.missing(even["old_val_gain"]):
            sentence += (f" Even the classic expected-best val curve, which includes the maximum of seed noise, ends "
                         f"below Fixed AdaCos's mean val ({fmt.signed(even['old_val_gain'])}).")
        sentences.append(sentence)

    if row and facts["other_metrics"]:
        sentences.append(_other_metrics_sentence(facts, tuned))

    default = facts["default"]
    if default:
        values = facts["default_hyperparameters"]
        where = (f" (s = {values['s']:g}, m = {values['m']:g} rad)" if {"s", "m"} <= set(values)
                 and not any(math.isnan(v) for v in values.values()) else "")
        clause = (f"{searched} at the usual defaults{where} scores {fmt.score(facts['default_test_mean'])}, "
                  f"{_comparison_clause(default, confidence)} against Fixed AdaCos: {_judgement(default)}")
        if facts["default_diverged"]:
            clause += f"; {facts['default_diverged']} of its {facts['default_runs']} runs diverged"
        sentences.append(clause + ".")

    speed = facts["convergence"]
    if speed:
        fraction = f"{speed['fraction']:.0%}"
        if speed["faster"]:
            who = "Fixed AdaCos" if speed["faster"] == REFERENCE_METHOD else tuned
            verb = f"{who} converges faster"
        else:
            verb = "neither converges measurably faster"
        sentences.append(
            f"To reach {fraction} of its own final val score, {tuned} needs {fmt.signed_iterations(speed['difference'])} "
            f"iterations against Fixed AdaCos in the median ({confidence:.0%} bootstrap interval "
            f"[{fmt.signed_iterations(speed['low'])}, {fmt.signed_iterations(speed['high'])}] over seeds): {verb}.")
    return sentences


def _recommendation_sentences(facts: dict, searched: str, metric: str, confidence: float) -> str:
    """The recommendation first, then the comparison that decides it, by the rule the sentence states."""
    row, reason = facts["tuned"], facts["reason"]
    tuned = f"tuned {searched}"
    if reason == "no_tuned_comparison":
        return (f"Recommendation: undecided. No {tuned} runs finished with a test {metric} to compare with Fixed "
                "AdaCos, so this study cannot say whether tuning pays.")
    comparison = f"On test {metric}, {tuned} − Fixed AdaCos = {_comparison_clause(row, confidence)}"
    margin = margin_words(row)
    if reason == "tuning_better_beyond_margin":
        return (f"Recommendation: tune {searched}. {comparison}: a significant gain at least the margin {margin}, so "
                f"the search pays for itself on this data{_cost_clause(facts)}.")
    if reason == "adacos_significantly_better":
        return (f"Recommendation: use Fixed AdaCos. {comparison}: Fixed AdaCos is significantly better, and it "
                "costs no tuning.")
    if reason in ("equivalent", "gain_within_margin"):
        real = " The gain is significant but smaller than what matters." if reason == "gain_within_margin" else ""
        return (f"Recommendation: use Fixed AdaCos. {comparison}.{real} The two are equivalent within {margin}, "
                f"by two one-sided tests (p = {fmt.p_value(row['tost_p_value'])}), and Fixed AdaCos costs no tuning.")
    if reason == "alternative_better_than_fixed_adacos":
        alternative = method_name(facts["recommendation"])
        return (f"Recommendation: use {alternative}. {comparison}: {_judgement(row)}; {alternative} is "
                f"significantly better than Fixed AdaCos on test {metric} by at least the margin and, like it, costs "
                "no tuning.")
    if fmt.missing(row["low"]):
        return (f"Recommendation: undecided. {comparison}: with one seed per method nothing is known about "
                "seed-to-seed spread, so no difference can be judged; list more seeds in runs.seeds.")
    unit = row.get("unit") or "seeds"
    more = (f"about {row['seeds_to_resolve']:,} {unit} would resolve a difference of this size (to significance or "
            "to equivalence)" if row["seeds_to_resolve"] else f"no practical number of {unit} would resolve it")
    detectable = "n/a" if row["detectable"] is None else f"{row['detectable']:.4f}"
    found = ("a significant gain that is not shown to reach the margin " + margin if reason == "gain_not_shown_relevant"
             else f"neither a significant difference nor equivalence within {margin}")
    replicates = row["splits"] if unit == "splits" else row["pairs"]
    return (f"Recommendation: undecided. {comparison}: {found}; TOST p = {fmt.p_value(row['tost_p_value'])}. That "
            f"is not \"no difference\": with {replicates} {unit} the smallest difference this study detects with "
            f"{facts.get('power', 0.8):.0%} power at the level Holm's first step uses (α = "
            f"{fmt.p_value(row['decision_alpha'])}) is {detectable}, and {more}.")


def _cost_clause(facts: dict) -> str:
    """'; it breaks even with one Fixed AdaCos run after 3 trials ([2, 6], about 40 s of device time)'."""
    cost = facts.get("cost")
    if not cost or not cost.get("max_trials"):
        return ""
    interval = trials_interval(cost["trials_low"], cost["trials_high"], cost["max_trials"], cost.get("valid_trials"))
    if not cost["reached"]:
        return f"; but its val-selected trial did not match one Fixed AdaCos run within {cost['max_trials']} trials"
    seconds = f", about {fmt.seconds(cost['seconds'])} of device time" if cost.get("seconds") else ""
    return (f"; it matches one Fixed AdaCos run after {fmt.plural(cost['trials'], 'trial')} ({interval}{seconds}), "
            f"and the whole search cost {fmt.seconds(cost['search_seconds'])}" if cost.get("search_seconds") else "")


def variance_sentence(facts: dict) -> str | None:
    """Which source of variance dominates the tuned − Fixed AdaCos difference one user meets."""
    sources = facts.get("variance_sources")
    if not sources or not sources.get("dominant"):
        return None
    names = {"split": "the class split", "search": "the search", "seed": "the training seed"}
    shares = ", ".join(f"{names[source]} {share:.0%}" for source, share in sources["shares"].items()
                       if share is not None)
    missing = " (the split's share is not measured: one split ran; set data.seeds)" if sources["split"] is None else ""
    return (f"Of the variance of the tuned − Fixed AdaCos difference one user meets (one split, one search, one "
            f"seed), {shares}{missing}: {names[sources['dominant']]} dominates.")


def _other_metrics_sentence(facts: dict, tuned: str) -> str:
    """Where the test metrics besides the objective disagree with it: significant differences either way."""
    better, worse = facts["tuned_better_metrics"], facts["tuned_worse_metrics"]
    total = facts["other_metrics"]
    objective = metric_name(facts["objective"])
    if not better and not worse:
        return (f"On none of the other {total} test metrics does {tuned} differ from Fixed AdaCos significantly "
                "(Holm-corrected) and by at least that metric's margin.")
    parts = []
    if better:
        parts.append(f"significantly better than Fixed AdaCos, by at least the margin, on {fmt.listing(better)}")
    if worse:
        parts.append(f"significantly worse {'' if better else 'than Fixed AdaCos '}by at least the margin on "
                     f"{fmt.listing(worse)}")
    row = facts["tuned"]
    disagree = ""
    decided_for_tuning = facts["reason"] == "tuning_better_beyond_margin"
    decided_against = facts["reason"] in ("adacos_significantly_better", "equivalent", "gain_within_margin")
    if row and ((decided_for_tuning and worse) or (decided_against and better)
                or (not decided_for_tuning and not decided_against and (better or worse))):
        disagree = (f" The objective ({objective}) and these metrics disagree: if what you deploy is judged by "
                    "them, search on that metric (train.objective) before deciding.")
    return (f"Of the other {total} test metrics (Holm-corrected), {tuned} (tuned for val {objective}) is "
            + " and ".join(parts) + "." + disagree)


def key_numbers(analysis: StudyAnalysis) -> pd.DataFrame:
    """The numbers the recommendation rests on, each with its interval and what the interval covers."""
    facts = analysis.verdict_facts
    confidence = f"{analysis.confidence:.0%}"
    metric = metric_name(facts["metric"])
    searched = loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "searched loss"
    rows = []
    row = facts["tuned"]
    if row:
        rows.append({"number": f"tuned {searched} − Fixed AdaCos, test {metric}", "value": fmt.signed(row["difference"]),
                     f"{confidence} interval": fmt.interval(row["low"], row["high"]),
                     "what the interval covers": f"{_how_paired(row)}; {_judgement(row)}; Holm p = "
                                                 f"{fmt.p_value(row['p_holm'])}; margin {margin_words(row)}"})
    even = facts["break_even"]
    if even and even["max_trials"]:
        rows.append({"number": f"{searched} trials until the val-selected trial matches one Fixed AdaCos run on test",
                     "value": fmt.count(even["trials"]) if even["reached"] else f"not within {even['max_trials']}",
                     f"{confidence} interval": trials_interval(even["trials_low"], even["trials_high"],
                                                                even["max_trials"], even.get("valid_trials")),
                     "what the interval covers": f"the gain's interval inverted over the n that have one "
                                                 f"(n ≤ {even.get('valid_trials') or 0}); a new search on these splits"
                                                 + (f"; about {fmt.seconds(even['seconds'])} of device time"
                                                    if even["reached"] and even["seconds"] else "")})
        at = even.get("gain_n")
        rows.append({"number": f"test {metric} gain of a search of {fmt.plural(at or even['max_trials'], 'trial')} "
                               "over one Fixed AdaCos run",
                     "value": fmt.signed(even["gain_at_n"] if at else even["gain"]),
                     f"{confidence} interval": fmt.interval(even["gain_low"], even["gain_high"]),
                     "what the interval covers": ("studentised (jackknife); a new search on these splits, with "
                                                  "Fixed AdaCos's seed noise" if at else "no valid interval")
                     + (f"; the whole search of {even['max_trials']} buys {fmt.signed(even['gain'])}, with no valid "
                        "interval" if at and at < even["max_trials"] else "")})
    if row and row["detectable"] is not None:
        unit = row.get("unit") or "seeds"
        replicates = row["splits"] if unit == "splits" else row["pairs"]
        rows.append({"number": f"smallest difference in test {metric} these {replicates} {unit} detect "
                               f"({facts['power']:.0%} power)", "value": f"{row['detectable']:.4f}",
                     f"{confidence} interval": "—",
                     "what the interval covers": f"t-test at α = {fmt.p_value(row['decision_alpha'])} (Holm's "
                                                 "strictest step, the level the decision may need)"
                     + (f"; about {row['seeds_to_resolve']:,} {unit} would resolve the observed difference"
                        if row["seeds_to_resolve"] and not (row["significant"] or row["equivalent"]) else "")})
    default = facts["default"]
    if default:
        rows.append({"number": f"{searched} at the usual defaults − Fixed AdaCos, test {metric}",
                     "value": fmt.signed(default["difference"]),
                     f"{confidence} interval": fmt.interval(default["low"], default["high"]),
                     "what the interval covers": f"{_how_paired(default)}; {_judgement(default)}"})
    return pd.DataFrame(rows)
