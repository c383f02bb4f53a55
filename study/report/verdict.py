"""The verdict: the answer in plain order (the difference, whether it matters, what to use, what it costs), the
statistics behind it, then the numbers, each sentence chosen by the analysis's numbers."""

from __future__ import annotations

import math

import pandas as pd

from study.analysis import REFERENCE_METHOD, StudyAnalysis, count_or_none
import study.report.formats as fmt
from study.report.formats import loss_name, method_name, metric_name, trials_interval
from study.report.answer_card import corrected_away, price_clause, share
from study.report.design import next_design_sentence


def _how_paired(row: dict) -> str:
    """How a difference was estimated: over class splits (its standard error floored at the seed noise where that is
    larger), paired by seed, or Welch."""
    if row["test"] == "split":
        floor = ("; its standard error is the floor the within-split seed noise sets, larger than the splits' own"
                 if row.get("se_from") == "seed floor" else "")
        return (f"over {row['splits']} class splits of {row['pairs'] // max(row['splits'], 1)} seeds, paired by split "
                f"and seed, so the interval carries split and search variance{floor}")
    if row["test"] == "paired":
        return f"paired over {row['pairs']} seeds of one split"
    return "Welch, unpaired"


def _comparison_clause(row: dict, confidence: float) -> str:
    """'+0.0030 (95% CI [-0.0016, +0.0076], paired over 10 seeds, p = 0.16 after Holm)'."""
    how = _how_paired(row)
    return (f"{fmt.signed(row['difference'])} ({confidence:.0%} CI {fmt.interval(row['low'], row['high'])}, {how}, "
            f"p = {fmt.p_value(row['p_holm'])} after Holm)")


def margin_meaning_words(row: dict, with_sd: bool = True) -> str:
    """The margin in the metric's own terms: '0.44 of Fixed AdaCos's seed-to-seed sd within a split (0.0229 on 4
    df), 1.6% of its remaining error' ('' where neither is known); `with_sd` False leaves out the sd itself."""
    parts = []
    if not fmt.missing(row.get("margin_score_share")):
        parts.append(f"{row['margin_score_share']:.1%} of Fixed AdaCos's score")
    if not fmt.missing(row.get("margin_seed_sds")):
        parts.append(f"{row['margin_seed_sds']:.2g} of Fixed AdaCos's seed-to-seed sd within a split"
                     + (f" ({row['seed_sd']:.4f} on {row['seed_sd_df']} df)" if with_sd else ""))
    if not fmt.missing(row.get("margin_error_share")):
        parts.append(f"{row['margin_error_share']:.1%} of its remaining error")
    return ", ".join(parts)


def margin_words(row: dict) -> str:
    """The margin with its meaning: '±0.01 (0.44 of Fixed AdaCos's seed-to-seed sd within a split (0.0229 on 4
    df), 1.6% of its remaining error)'."""
    meaning = margin_meaning_words(row)
    return f"±{row['margin']:.3g}" + (f" ({meaning})" if meaning else "")


def detectable_words(row) -> str:
    """The smallest difference a comparison detects, as printed: '0.0065', or 'not detectable with these splits' where
    no difference inside the metric's range is (a number beyond it would mean nothing)."""
    unit = row.get("unit") or "seeds"
    if row.get("not_detectable") is True or row.get("not_detectable") == 1:
        return f"not detectable with these {unit}"
    return "n/a" if fmt.missing(row.get("detectable")) or pd.isna(row.get("detectable")) else f"{row['detectable']:.4f}"


def _tost_p(row: dict) -> float:
    """The equivalence test's p value that decides: Holm-corrected over the metric family (the raw one in tables
    written before equivalence was corrected)."""
    return row["tost_p_holm"] if not fmt.missing(row.get("tost_p_holm")) else row["tost_p_value"]


def _judgement(row: dict) -> str:
    """Significant and beyond the margin, significant within it, equivalent within the margin, or neither."""
    if row["significant"] and abs(row["difference"]) >= row["margin"]:
        return f"significant and beyond the margin ±{row['margin']:.3g}"
    if row["significant"]:
        return f"significant, but not shown to reach the margin ±{row['margin']:.3g}"
    if row["equivalent"]:
        return f"equivalent within ±{row['margin']:.3g} (TOST p = {fmt.p_value(_tost_p(row))} after Holm)"
    if fmt.missing(row["low"]):
        return "too few seeds to judge"
    return f"neither significant nor equivalent within ±{row['margin']:.3g}"


def _reach_clause(trials, shown: bool, interval: str, target: str, limit: str, seconds=None) -> str:
    """'matches {target} after 3 trials (interval [2, 5]; about 40 s of device time)', or its point estimate only, or
    not within `limit`: "reached" is said only where the interval shows it."""
    if trials is None:
        return f"does not match {target} within {limit}" + ("" if "no valid" in interval else f" (interval {interval})")
    cost = f"; about {fmt.seconds(seconds)} of device time" if seconds else ""
    if shown:
        return f"matches {target} after {fmt.plural(trials, 'trial')} (interval {interval}{cost})"
    return (f"matches {target} after {fmt.plural(trials, 'trial')} by its point estimate only: the interval ({interval}) "
            "does not show it")


def _control_interval(even: dict) -> str:
    """The budget-matched break-even's interval in trials; no interval from one class split."""
    valid = even["control_n"] if (even.get("control_splits") or 0) > 1 else 0
    return trials_interval(even["control_trials_low"], even["control_trials_high"], even["control_n"], valid)


def _one_run_interval(even: dict) -> str:
    return trials_interval(even["trials_low"], even["trials_high"], even["max_trials"], even.get("valid_trials"))


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


def _cost_sentences(facts: dict, searched: str, metric: str, confidence: float) -> list[str]:
    """What a search costs: against the budget-matched control (the best of n Fixed AdaCos seeds by val, the same
    number of trainings), beside one Fixed AdaCos run, the selected trial's seed luck and the classic quantity."""
    even = facts["break_even"]
    sentences = []
    if even.get("control_n"):
        n, splits = even["control_n"], even.get("control_splits") or 0
        gap = fmt.signed(even["control_gap"]) + (f" {fmt.interval(even['control_low'], even['control_high'])}"
                                                 if splits > 1 else "")
        over = (f"mean over {splits} class splits, {confidence:.0%} t interval over them" if splits > 1
                else "one class split: no interval")
        reach = _reach_clause(even["control_trials"], even["control_trials_high"] is not None, _control_interval(even),
                              "that control", f"the {fmt.plural(n, 'training')} it ran per split",
                              even.get("control_seconds"))
        extend = "" if even["control_trials_high"] is not None else "; more runs.seeds would compare at larger n"
        sentences.append(
            f"What tuning costs: at an equal number of trainings, the trial val selects among {n} {searched} trials "
            f"scores {gap} on test {metric} against the best of {n} Fixed AdaCos seeds picked by val ({over}); the "
            f"search {reach}{extend}.")
    control = facts["control"]
    if control:
        sentences.append(f"Keeping the best of {control['seeds']} Fixed AdaCos seeds by val buys "
                         f"{fmt.signed(control['gain'])} over one run, with no hyperparameter to tune.")
    reach = _reach_clause(even["trials"], bool(even.get("shown")), _one_run_interval(even), "it",
                          f"the {fmt.plural(even['max_trials'], 'trial')} run", even["seconds"])
    sentences.append(f"Beside it, the one-run target: against one Fixed AdaCos run ({fmt.score(even['target'])} on "
                     f"test {metric}), the trial val selects among n {searched} trials {reach}; "
                     + _gain_clause(even, confidence))
    luck = facts.get("seed_luck")
    if luck and not fmt.missing(luck["seed_luck"]):
        interval = (f" {fmt.interval(luck['seed_luck_low'], luck['seed_luck_high'])} (mean over "
                    f"{luck['seed_luck_splits']} class splits, {confidence:.0%} t interval)"
                    if luck["seed_luck_splits"] > 1 else " (one class split: no interval)")
        sentences.append(f"Seed luck: the trial the search selected scored {fmt.signed(luck['seed_luck'])}{interval} on "
                         f"test {metric} against its own (s, m) retrained at fresh seeds: that much of the search's "
                         "own score was its training seed, which a user retraining the found values does not keep.")
    if not fmt.missing(even["old_val_gain"]) and even["old_val_gain"] > 0:
        old = (f"after {fmt.plural(even['old_trials'], 'trial')}" if even["old_trials"] is not None
               else f"not within {even['max_trials']}")
        sentences.append(f"The classic expected-best val curve claims {fmt.signed(even['old_val_gain'])} over Fixed "
                         f"AdaCos's mean val and a break-even {old}; it includes the maximum of n draws of seed noise, "
                         "so it is not what a user gets on held-out data.")
    elif not fmt.missing(even["old_val_gain"]):
        sentences.append(f"Even the classic expected-best val curve, which includes the maximum of seed noise, ends "
                         f"below Fixed AdaCos's mean val ({fmt.signed(even['old_val_gain'])}).")
    return sentences


def verdict(analysis: StudyAnalysis) -> str:
    """The verdict: the answer in plain words, the statistics behind it, then the rest, each chosen by the numbers."""
    return " ".join(verdict_sentences(analysis))


def verdict_sentences(analysis: StudyAnalysis) -> list[str]:
    """The verdict's sentences: the lead (the difference, whether it matters, what to use, what it costs), then the
    statistics behind it, then what the search costs, the other metrics, the defaults and convergence."""
    facts = analysis.verdict_facts
    metric = metric_name(facts["metric"])
    searched = loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "the searched loss"
    tuned = f"tuned {searched}"
    row = facts["tuned"]
    confidence = analysis.confidence
    sentences = [lead_sentence(facts, searched, metric)]
    if row:
        sentences.append(statistics_sentence(facts, confidence))
    sentences += [sentence for sentence in (variance_sentence(facts), next_design_sentence(facts)) if sentence]

    even = facts["break_even"]
    if even and even["max_trials"]:
        sentences += _cost_sentences(facts, searched, metric, confidence)

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
        sentences.append(convergence_sentence(speed, tuned))
    return sentences


def convergence_sentence(speed: dict, tuned: str) -> str:
    """Iterations to a fraction of each method's own final val score, tuned − Fixed AdaCos: the difference of medians
    as a point estimate (or who never reached it), and who is faster by the exact sign test over paired seeds."""
    fraction = f"{speed['fraction']:.0%}"
    if speed["reached"] == "neither":
        where = "neither median run reaches it"
    elif speed["reached"] == "both":
        where = f"{tuned} needs {fmt.signed_iterations(speed['difference'])} iterations against Fixed AdaCos in the median"
    else:
        who = tuned if speed["reached"] == "method" else "Fixed AdaCos"
        where = f"only {who}'s median run reaches it"
    pairs = speed["faster_seeds"] + speed["slower_seeds"] + speed["tied_seeds"]
    count = (f"{tuned} is sooner on {speed['faster_seeds']} and later on {speed['slower_seeds']} of {pairs} paired "
             f"seeds (exact sign test p = {fmt.p_value(speed['p_value'])})")
    if speed["faster"]:
        verdict_words = f"{'Fixed AdaCos' if speed['faster'] == REFERENCE_METHOD else tuned} converges faster"
    else:
        verdict_words = "neither converges measurably faster"
    return (f"To reach {fraction} of its own final val score, {where} (a point estimate); {count}: "
            f"{verdict_words}.")


def _difference_words(row: dict, tuned: str, metric: str) -> str:
    """'Tuned ArcFace scores 0.0045 above Fixed AdaCos on test MAP@R' (below, for a negative difference)."""
    size = abs(row["difference"])
    side = "above" if row["favours_method"] else "below"
    if size == 0:
        return f"{tuned[0].upper()}{tuned[1:]} scores the same as Fixed AdaCos on test {metric}"
    return f"{tuned[0].upper()}{tuned[1:]} scores {size:.4f} {side} Fixed AdaCos on test {metric}"


def _matters(row: dict) -> str:
    """Whether the difference matters against the margin, in words, by the rule the recommendation uses."""
    meaning = margin_meaning_words(row, with_sd=False)
    margin = f"the ±{row['margin']:.3g} that matters" + (f" ({meaning})" if meaning else "")
    if fmt.missing(row["low"]):
        return f"and with one seed per method nothing can be judged against {margin}"
    if row["significant"] and abs(row["difference"]) >= row["margin"]:
        return f"at least {margin}"
    if row["significant"] and row["equivalent"]:
        return f"a real difference, but inside {margin}"
    if row["significant"]:
        return f"a real difference, not shown to reach {margin}"
    if row["equivalent"]:
        return f"inside {margin}"
    if corrected_away(row):
        return (f"but not significantly once corrected for the other test metrics (Holm), so this study cannot yet "
                f"tell whether that reaches {margin}")
    return f"and this study cannot yet tell whether that reaches {margin}"


def _search_cost(facts: dict, searched: str) -> str:
    """'the ArcFace search cost 48 trials and 334 s of device time, 310 s of CPU time' (or nothing where no search
    finished; the CPU time where its trials recorded it)."""
    trials, seconds = facts.get("search_trials"), facts.get("search_seconds")
    if not trials:
        return ""
    return (f"the {searched} search cost {fmt.plural(trials, 'trial')}"
            + (f" and {fmt.device_time(seconds, facts.get('search_cpu_seconds'))}" if not fmt.missing(seconds) else ""))


def lead_sentence(facts: dict, searched: str, metric: str) -> str:
    """The answer in plain order, with no statistic in it: the difference, whether it matters against the margin,
    what to use, and what it costs (the statistics follow in statistics_sentence)."""
    row, reason = facts["tuned"], facts["reason"]
    tuned = f"tuned {searched}"
    cost = _search_cost(facts, searched)
    if reason == "nothing_learned":
        chance = ", ".join(f"{method_name(method)} {fmt.score(found['mean'])} {fmt.interval(found['low'], found['high'])}"
                           for method, found in facts["at_chance"].items())
        return ("The models learned nothing: test ROC AUC is at chance (0.5) for every method compared "
                f"({chance}), so no loss can be told from another here and nothing is recommended. Likely causes: "
                "labels that do not match the images, too few images per class, or training far too short; check "
                "the data before tuning anything.")
    if reason == "no_tuned_comparison":
        return (f"No {tuned} runs finished with a test {metric} to compare with Fixed AdaCos, so this study cannot "
                "say whether tuning pays: use Fixed AdaCos, which needs no tuning.")
    said = f"{_difference_words(row, tuned, metric)}, {_matters(row)}"
    if reason == "tuning_better_beyond_margin":
        even = facts.get("cost") or {}
        matched, shown = "", even.get("control_trials_high")
        if shown:
            seconds = (f" (about {fmt.seconds(even['control_seconds'])})"
                       if even.get("control_seconds") and shown == even.get("control_trials") else "")
            matched = (f"; from {fmt.plural(shown, 'trial')}{seconds} its val-selected trial beats the best of as "
                       "many Fixed AdaCos seeds picked by val")
        elif even.get("control_n"):
            n = even["control_n"]
            matched = (f"; at {fmt.plural(n, 'trial')} its val-selected trial is not shown to beat the best of {n} "
                       "Fixed AdaCos seeds picked by val")
        return f"{said}: tune {searched}; {cost or 'its search cost is not recorded'}{matched}."
    if reason == "alternative_better_than_fixed_adacos":
        alternative = method_name(facts["recommendation"])
        return (f"{said}; {alternative} beats Fixed AdaCos by at least its margin: use {alternative}, which needs "
                f"no tuning{'; ' + cost if cost else ''}.")
    if reason in ("adacos_significantly_better", "equivalent", "gain_within_margin"):
        return f"{said}: use Fixed AdaCos, which needs no tuning{'; ' + cost if cost else ''}."
    # Open evidence: the option that costs no tuning, with what the costly one is expected to add and its price.
    priced = price_clause(facts)
    return (f"{said}: use Fixed AdaCos, which needs no tuning; tuning is expected to add "
            f"{share(row['difference'], facts.get('reference_test_mean'))} of its score"
            f"{' ' + priced if priced else ''}{'; ' + cost if cost else ''}.")


# How statistics_sentence opens: the report shows the same claims as the numbers table's rows instead.
STATISTICS_OPENING = "The statistics:"


def statistics_sentence(facts: dict, confidence: float) -> str:
    """The statistics behind the lead: the interval and how it was made, the equivalence test against the margin and
    the Holm-corrected test against zero, reconciled where they seem to disagree."""
    row = facts["tuned"]
    if fmt.missing(row["low"]):
        return (f"{STATISTICS_OPENING} {fmt.signed(row['difference'])} with no interval (one seed per method: nothing is "
                "known about seed-to-seed spread; list more seeds in runs.seeds).")
    family = facts["other_metrics"] + 1
    tost = (f"equivalent within ±{row['margin']:.3g} by two one-sided tests (p = {fmt.p_value(_tost_p(row))} after "
            "Holm)" if row["equivalent"] else
            f"not shown equivalent within ±{row['margin']:.3g} (two one-sided tests, p = "
            f"{fmt.p_value(_tost_p(row))} after Holm)")
    holm = (f"against zero, p = {fmt.p_value(row['p_holm'])} after Holm's correction over the "
            f"{fmt.plural(family, 'test metric')}: " + ("significant" if row["significant"] else "not significant"))
    excludes_zero = row["low"] > 0 or row["high"] < 0
    if excludes_zero and not row["significant"]:
        holm += (" (the interval is one metric's own, uncorrected: it excludes zero, but corrected for the "
                 f"{family} metrics the difference from zero is not significant)")
    sentence = (f"{STATISTICS_OPENING} {confidence:.0%} CI {fmt.interval(row['low'], row['high'])}, {_how_paired(row)}; "
                f"{tost}; {holm}.")
    if not (row["significant"] or row["equivalent"]):
        unit = row.get("unit") or "seeds"
        replicates = row["splits"] if unit == "splits" else row["pairs"]
        detectable = detectable_words(row)
        found = (f"is none inside the metric's range: {detectable}" if row.get("not_detectable")
                 else f"is {detectable}")
        sentence += (f" That is not \"no difference\": with {replicates} {unit} the smallest difference this study "
                     f"detects with {facts.get('power', 0.8):.0%} power at the level Holm's first step uses (α = "
                     f"{fmt.p_value(row['decision_alpha'])}) {found}"
                     + (f", and about {row['seeds_to_resolve']:,} {unit} would resolve a difference of this size (to "
                        "significance or to equivalence)" + _beyond_independent(row, facts) + "."
                        if row["seeds_to_resolve"] else f", and no practical number of {unit} would resolve it."))
    return sentence


def _beyond_independent(row: dict, facts: dict) -> str:
    """Where the class splits that would resolve a difference are more than the source's classes make with disjoint
    test classes (study.analysis.design.independent_splits): say so, and what would settle it instead."""
    most = facts.get("independent_splits")
    if row.get("unit") != "splits" or not most or row["seeds_to_resolve"] <= most:
        return ""
    return (f", but these classes make only {most} splits with disjoint test classes, and splits beyond those test on "
            "classes already tested: more classes, or another source, would settle it, not more splits of these")


def variance_sentence(facts: dict) -> str | None:
    """Which source of variance dominates the tuned − Fixed AdaCos difference one user meets, flagged as point
    estimates (moment estimates with no interval), with the shares that were truncated at zero named."""
    sources = facts.get("variance_sources")
    if not sources or not sources.get("dominant"):
        return None
    names = {"split": "the class split", "search": "the search", "seed": "the training seed"}
    shares = ", ".join(f"{names[source]} {share:.0%}" for source, share in sources["shares"].items()
                       if share is not None)
    missing = " (the split's share is not measured: one split ran; set data.seeds)" if sources["split"] is None else ""
    truncated = sources.get("truncated") or []
    one = len(truncated) == 1
    floor = (f"; the estimate{'' if one else 's'} for {fmt.listing([names[source] for source in truncated])} came out "
             f"below zero and {'is' if one else 'are'} shown as 0%: beyond seed noise, these data show no spread from "
             f"{'it' if one else 'them'}") if truncated else ""
    return (f"Of the variance of the tuned − Fixed AdaCos difference one user meets (one split, one search, one "
            f"seed), {shares}{missing}: {names[sources['dominant']]} dominates. These shares are point estimates "
            f"(moment estimates from {fmt.plural(sources['splits'], 'split')}, with no interval: none was "
            f"coverage-checked){floor}.")


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
        family = facts["other_metrics"] + 1
        tests = ("" if fmt.missing(row["low"]) else
                 f"inside the margin? TOST p = {fmt.p_value(_tost_p(row))}; different from zero? t-test p = "
                 f"{fmt.p_value(row['p_holm'])}; both Holm-corrected over {family} test metrics: {_judgement(row)}")
        rows.append({"number": f"tuned {searched} − Fixed AdaCos, test {metric}", "value": fmt.signed(row["difference"]),
                     f"{confidence} interval": fmt.interval(row["low"], row["high"]),
                     "what the interval covers": _how_paired(row), "the test": tests})
        rows.append({"number": "the margin that matters", "value": f"±{row['margin']:.3g}",
                     f"{confidence} interval": "—", "what the interval covers": margin_meaning_words(row) or "—",
                     "the test": "declared in params.yaml (analysis.equivalence_margin) "
                                                     "before the runs"})
    even = facts["break_even"]
    if even and even["max_trials"]:
        if even.get("control_n"):
            n, splits = even["control_n"], even.get("control_splits") or 0
            over = (f"t interval over {splits} class splits of the gap at each n ≤ {n}, inverted" if splits > 1
                    else "one class split: no interval")
            rows.append({"number": f"{searched} trials until the val-selected trial matches the best of as many Fixed "
                                   "AdaCos seeds by val (the same number of trainings)",
                         "value": _trials_value(even["control_trials"], even["control_trials_high"] is not None, n,
                                                "trainings compared"),
                         f"{confidence} interval": _control_interval(even),
                         "what the interval covers": over + (f"; about {fmt.seconds(even['control_seconds'])} of "
                                                             "device time" if even.get("control_seconds") else "")})
            rows.append({"number": f"test {metric}: the val-selected of {n} {searched} trials − the best of {n} Fixed "
                                   "AdaCos seeds by val",
                         "value": fmt.signed(even["control_gap"]),
                         f"{confidence} interval": fmt.interval(even["control_low"], even["control_high"]),
                         "what the interval covers": over.removesuffix(", inverted").replace(f"at each n ≤ {n}",
                                                                                            f"at n = {n}")})
        rows.append({"number": f"{searched} trials until the val-selected trial matches one Fixed AdaCos run on test",
                     "value": _trials_value(even["trials"], bool(even.get("shown")), even["max_trials"], "trials"),
                     f"{confidence} interval": _one_run_interval(even),
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
    luck = facts.get("seed_luck")
    if luck and not fmt.missing(luck["seed_luck"]):
        rows.append({"number": f"seed luck: the selected trial's test {metric} − its (s, m) retrained at fresh seeds",
                     "value": fmt.signed(luck["seed_luck"]),
                     f"{confidence} interval": fmt.interval(luck["seed_luck_low"], luck["seed_luck_high"]),
                     "what the interval covers": (f"t interval over {luck['seed_luck_splits']} class splits"
                                                  if luck["seed_luck_splits"] > 1 else "one class split: no interval")})
    if row and (row["detectable"] is not None or row.get("not_detectable")):
        unit = row.get("unit") or "seeds"
        replicates = row["splits"] if unit == "splits" else row["pairs"]
        rows.append({"number": f"smallest difference in test {metric} these {replicates} {unit} detect "
                               f"({facts['power']:.0%} power)", "value": detectable_words(row),
                     f"{confidence} interval": "—",
                     "what the interval covers": f"t-test at α = {fmt.p_value(row['decision_alpha'])} (Holm's "
                                                 "strictest step, the level the decision may need)"
                     + (f"; about {row['seeds_to_resolve']:,} {unit} would resolve the observed difference"
                        + _beyond_independent(row, facts)
                        if row["seeds_to_resolve"] and not (row["significant"] or row["equivalent"]) else "")})
    default = facts["default"]
    if default:
        rows.append({"number": f"{searched} at the usual defaults − Fixed AdaCos, test {metric}",
                     "value": fmt.signed(default["difference"]),
                     f"{confidence} interval": fmt.interval(default["low"], default["high"]),
                     "what the interval covers": f"{_how_paired(default)}; {_judgement(default)}"})
    table = pd.DataFrame(rows)
    if len(table):
        table["the test"] = table["the test"].fillna("—") if "the test" in table else "—"
        table = table.rename(columns={"number": "claim", "value": "number"})
    return table


def _trials_value(trials, shown: bool, limit: int, unit: str) -> str:
    """A break-even as a table cell: '3', '4 (point estimate; the interval does not show it)' or 'not within 12'."""
    if trials is None:
        return f"not within {limit} {unit}"
    return fmt.count(trials) if shown else f"{trials} (point estimate; the interval does not show it)"


def break_even_intervals(even: dict | None) -> list[tuple]:
    """The (low, high, shown-up-to) of every break-even interval the verdict prints, for interval_notes."""
    if not even or not even.get("max_trials"):
        return []
    intervals = [(even["trials_low"], even["trials_high"], even.get("valid_trials") or 0)]
    if even.get("control_n"):
        valid = even["control_n"] if (even.get("control_splits") or 0) > 1 else 0
        intervals.insert(0, (even["control_trials_low"], even["control_trials_high"], valid))
    return intervals


def interval_notes(intervals) -> str | None:
    """One line that explains each break-even interval notation in `intervals` ((low, high, V) triples, V the trials
    an interval is given for), in order of first use: '[2, not within 3]: at least 2 trials; …'. None where every
    interval is a plain [low, high]."""
    notes = []
    for low, high, valid in intervals:
        low, high, valid = count_or_none(low), count_or_none(high), count_or_none(valid) or 0
        if not valid:
            note = ("[no valid interval]: too few trials (or class splits) carry an interval here, so none is "
                    "printed")
        elif low is None:
            note = (f"[beyond {valid}]: not even the interval's lower end is within the first {valid} trials, the ones "
                    "an interval is given for")
        elif high is None:
            note = (f"[{low}, not within {valid}]: at least {fmt.plural(low, 'trial')}; where the interval ends is not "
                    f"shown within the first {valid}, the ones an interval is given for")
        else:
            continue
        if note not in notes:
            notes.append(note)
    return ("Interval notation: " + "; ".join(notes) + ".") if notes else None


NEAR_CEILING = 0.9  # scores from which a difference is also read as a ratio of remaining errors


def overtaking_sentence(pair: dict) -> str:
    """Whether and when an AdaCos overtakes an ArcFace on test along training, from one row of
    study.analysis.learning_curves.crossover_table (ArcFace − AdaCos, its interval, where it changes sign)."""
    first, last = method_name(pair["adacos"]), method_name(pair["arcface"])
    scores = (pair.get("arcface_at_end", math.nan), pair.get("adacos_at_end", math.nan))
    end = (f"at {pair['last_iteration']:,.0f} iterations {last} − {first} is {pair['difference_at_end']:+.4f} "
           f"[{pair['low_at_end']:+.4f}, {pair['high_at_end']:+.4f}]")
    if math.isfinite(scores[1]) and scores[1] > 0:
        end += f" ({100 * pair['difference_at_end'] / scores[1]:+.1f}% of {first}'s score"
        # Near a perfect score a small difference is a large share of what is left to get right: say that too.
        if all(math.isfinite(score) and NEAR_CEILING <= score < 1 for score in scores):
            end += (f"; near the ceiling, {last} leaves {(1 - scores[0]) / (1 - scores[1]):.2f}× the remaining error "
                    f"of {first}")
        end += ")"
    crossed = math.isfinite(pair["crossover"])
    if pair["ahead_at_end"] == "reference":
        if not crossed:
            return (f"{first} is ahead of {last} from the first evaluation on, and significantly from iteration "
                    f"{pair['high']:,.0f}: it needs no late overtaking; {end}.")
        return (f"{first} overtakes {last} at iteration {pair['crossover']:,.0f} (the crossover lies after "
                f"{pair['low']:,.0f}, where {last} was last significantly ahead, and {first} is significantly ahead "
                f"from {pair['high']:,.0f} on); {end}.")
    if pair["ahead_at_end"] == "method":
        return (f"{first} does not overtake {last}: {last} ends significantly ahead"
                + (f", from iteration {pair['crossover']:,.0f} on" if crossed else "") + f"; {end}.")
    return (f"Neither {first} nor {last} is significantly ahead at the end"
            + (f" (their mean curves last cross at iteration {pair['crossover']:,.0f})" if crossed else "")
            + f"; {end}.")
