"""The verdict: sentences chosen by the analysis's numbers, the recommendation first, and the numbers behind it."""

from __future__ import annotations

import math

import pandas as pd

from study.analysis import REFERENCE_METHOD, StudyAnalysis
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name, trials_interval


def _break_even_clause(even: dict, seconds_word: bool = True) -> str:
    """'after 5 trials (95% interval [2, 12]; about 40 s)' or 'not within 32 trials (…)'."""
    interval = trials_interval(even["trials_low"], even["trials_high"], even["max_trials"])
    if even["reached"]:
        cost = f"; about {fmt.seconds(even['seconds'])} of device time" if seconds_word and even["seconds"] else ""
        return f"after {fmt.plural(even['trials'], 'trial')} (bootstrap interval {interval}{cost})"
    return f"not within the {fmt.plural(even['max_trials'], 'trial')} run (bootstrap interval {interval})"


def _comparison_clause(row: dict, confidence: float) -> str:
    """'+0.0030 (95% CI [-0.0016, +0.0076], paired over 10 seeds, p = 0.16 after Holm)'."""
    how = f"paired over {row['pairs']} seeds" if row["test"] == "paired" else "Welch, unpaired"
    return (f"{fmt.signed(row['difference'])} ({confidence:.0%} CI {fmt.interval(row['low'], row['high'])}, {how}, "
            f"p = {fmt.p_value(row['p_holm'])} after Holm)")


def _judgement(row: dict) -> str:
    """Significant, equivalent within the margin, or neither."""
    if row["significant"]:
        return "significant"
    if row["equivalent"]:
        return f"equivalent within ±{row['margin']:g} (TOST p = {fmt.p_value(row['tost_p_value'])})"
    if fmt.missing(row["low"]):
        return "too few seeds to judge"
    return f"neither significant nor equivalent within ±{row['margin']:g}"


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

    even = facts["break_even"]
    if even and even["max_trials"]:
        reach = ("scores on test {metric} what one Fixed AdaCos run scores ({target}) {clause}" if even["reached"]
                 else "does not reach on test {metric} what one Fixed AdaCos run scores ({target}): {clause}")
        sentence = (f"What a search buys: the trial that val selects among n {searched} trials "
                    + reach.format(metric=metric, target=fmt.score(even["target"]), clause=_break_even_clause(even))
                    + f"; the whole search of {fmt.plural(even['max_trials'], 'trial')} buys "
                    f"{fmt.signed(even['gain'])} ({confidence:.0%} interval {fmt.interval(even['gain_low'], even['gain_high'])}"
                    ") over one Fixed AdaCos run.")
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
    if reason == "tuning_significantly_better":
        return (f"Recommendation: tune {searched}. {comparison}: a significant gain, so the search pays for "
                "itself on this data.")
    if reason == "adacos_significantly_better":
        return (f"Recommendation: use Fixed AdaCos. {comparison}: Fixed AdaCos is significantly better, and it "
                "costs no tuning.")
    if reason == "equivalent":
        return (f"Recommendation: use Fixed AdaCos. {comparison}: the two are equivalent within ±{row['margin']:g} "
                f"(two one-sided tests, p = {fmt.p_value(row['tost_p_value'])}), and Fixed AdaCos costs no tuning.")
    if reason == "alternative_better_than_fixed_adacos":
        alternative = method_name(facts["recommendation"])
        return (f"Recommendation: use {alternative}. {comparison}: {_judgement(row)}; {alternative} is "
                f"significantly better than Fixed AdaCos on test {metric} and, like it, costs no tuning.")
    if fmt.missing(row["low"]):
        return (f"Recommendation: undecided. {comparison}: with one seed per method nothing is known about "
                "seed-to-seed spread, so no difference can be judged; list more seeds in runs.seeds.")
    seeds = (f"about {row['seeds_to_resolve']:,} seeds would resolve a difference of this size (to significance or "
             "to equivalence)" if row["seeds_to_resolve"] else "no practical number of seeds would resolve it")
    detectable = ("n/a" if row["detectable"] is None else f"{row['detectable']:.4f}")
    return (f"Recommendation: undecided. {comparison}: neither a significant difference nor equivalence within "
            f"±{row['margin']:g} (TOST p = {fmt.p_value(row['tost_p_value'])}). That is not \"no difference\": with "
            f"{row['pairs']} seeds the smallest difference this study detects with {facts.get('power', 0.8):.0%} "
            f"power is {detectable}, and {seeds}.")


def _other_metrics_sentence(facts: dict, tuned: str) -> str:
    """Where the test metrics besides the objective disagree with it: significant differences either way."""
    better, worse = facts["tuned_better_metrics"], facts["tuned_worse_metrics"]
    total = facts["other_metrics"]
    objective = metric_name(facts["objective"])
    if not better and not worse:
        return (f"On none of the other {total} test metrics does {tuned} differ significantly from Fixed AdaCos "
                "(Holm-corrected).")
    parts = []
    if better:
        parts.append(f"significantly better than Fixed AdaCos on {fmt.listing(better)}")
    if worse:
        parts.append(f"significantly worse {'' if better else 'than Fixed AdaCos '}on {fmt.listing(worse)}")
    row = facts["tuned"]
    disagree = ""
    if row and ((row["significant"] and row["favours_method"] and worse)
                or (row["significant"] and not row["favours_method"] and better)
                or (not row["significant"] and (better or worse))):
        disagree = (f" The objective ({objective}) and these metrics disagree: if what you deploy is judged by "
                    "them, search on that metric (train.objective) before deciding.")
    return (f"Of the other {total} test metrics (Holm-corrected), {tuned} (tuned for val {objective}) is "
            + " and ".join(parts) + "." + disagree)


def key_numbers(analysis: StudyAnalysis) -> pd.DataFrame:
    """The three to five numbers the recommendation rests on, each with its interval and what the interval covers."""
    facts = analysis.verdict_facts
    confidence = f"{analysis.confidence:.0%}"
    metric = metric_name(facts["metric"])
    searched = loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "searched loss"
    rows = []
    row = facts["tuned"]
    if row:
        rows.append({"number": f"tuned {searched} − Fixed AdaCos, test {metric}", "value": fmt.signed(row["difference"]),
                     f"{confidence} interval": fmt.interval(row["low"], row["high"]),
                     "what the interval covers": f"seed-to-seed variation, {row['test']} over {row['pairs']} seeds; "
                                                 f"{_judgement(row)}; Holm p = {fmt.p_value(row['p_holm'])}"})
    even = facts["break_even"]
    if even and even["max_trials"]:
        rows.append({"number": f"{searched} trials until the val-selected trial matches one Fixed AdaCos run on test",
                     "value": fmt.count(even["trials"]) if even["reached"] else f"not within {even['max_trials']}",
                     f"{confidence} interval": trials_interval(even["trials_low"], even["trials_high"],
                                                                even["max_trials"]),
                     "what the interval covers": "bootstrap over the search's trials and Fixed AdaCos's seeds"
                                                 + (f"; about {fmt.seconds(even['seconds'])} of device time"
                                                    if even["reached"] and even["seconds"] else "")})
        rows.append({"number": f"test {metric} gain of the whole search ({fmt.plural(even['max_trials'], 'trial')}) "
                               "over one Fixed AdaCos run", "value": fmt.signed(even["gain"]),
                     f"{confidence} interval": fmt.interval(even["gain_low"], even["gain_high"]),
                     "what the interval covers": "bootstrap over the search's trials and Fixed AdaCos's seeds"})
    if row and row["detectable"] is not None:
        rows.append({"number": f"smallest difference in test {metric} these {row['pairs']} seeds detect "
                               f"({facts['power']:.0%} power)", "value": f"{row['detectable']:.4f}",
                     f"{confidence} interval": "—",
                     "what the interval covers": f"paired t-test at {1 - analysis.confidence:.0%}"
                     + (f"; about {row['seeds_to_resolve']:,} seeds would resolve the observed difference"
                        if row["seeds_to_resolve"] and not (row["significant"] or row["equivalent"]) else "")})
    default = facts["default"]
    if default:
        rows.append({"number": f"{searched} at the usual defaults − Fixed AdaCos, test {metric}",
                     "value": fmt.signed(default["difference"]),
                     f"{confidence} interval": fmt.interval(default["low"], default["high"]),
                     "what the interval covers": f"seed-to-seed variation, {default['test']} over {default['pairs']} "
                                                 f"seeds; {_judgement(default)}"})
    return pd.DataFrame(rows)
