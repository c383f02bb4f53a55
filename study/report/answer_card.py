"""The answer card a practitioner reads in a minute: at most three plain sentences of at most 25 words (what to use,
when that holds, what tuning costs), then a small "how sure" table, every word chosen by the numbers. The default
study's card is built here; the benchmark's (study.benchmark.report) is rendered by the same `card_blocks`."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

import study.report.formats as fmt
from study.analysis import REFERENCE_METHOD, StudyAnalysis
from study.report.document import Section, Table

CARD_SENTENCES = 3
CARD_WORDS = 40


@dataclass
class AnswerCard:
    """The card's sentences and its "how sure" rows (what, value)."""

    sentences: list[str]
    how_sure: list[tuple[str, str]]

    def __post_init__(self):
        too_long = [sentence for sentence in self.sentences if len(sentence.split()) > CARD_WORDS]
        if len(self.sentences) > CARD_SENTENCES or too_long:
            raise ValueError(f"an answer card holds at most {CARD_SENTENCES} sentences of at most {CARD_WORDS} "
                             f"words; these are not: {too_long or self.sentences}")


def card_blocks(card: AnswerCard, details: str) -> list:
    """The card as report blocks: its sentences in bold, the "how sure" table, and where the details are."""
    table = pd.DataFrame(card.how_sure, columns=["how sure", "value"])
    return [f"**{' '.join(card.sentences)}**", Table(table), details]


def share(value, reference) -> str:
    """`value` in % of `reference`, signed: '+1.1%'."""
    if fmt.missing(value) or fmt.missing(reference) or not reference:
        return "n/a"
    return f"{100 * value / abs(reference):+.1f}%"


OPEN_REASONS = ("not_resolved", "gain_not_shown_relevant", "no_tuned_comparison")


def price_clause(facts: dict) -> str:
    """What tuning costs against what it is expected to add, at the stated price of a training
    (analysis.price_per_training): 'for 44 more trainings (4.4% of the score at 0.1% a training)'."""
    row = facts.get("tuned") or {}
    splits = row.get("splits") or 1
    extra = (facts.get("search_trials") or 0) - splits  # Fixed AdaCos trains once a split
    price = facts.get("price_per_training")
    if extra <= 0 or fmt.missing(price):
        return ""
    spent = f" ({100 * extra * price:.1f}% of the score at {100 * price:g}% a training)" if price else ""
    return f"for {extra:,} more trainings{spent}"


def _pick(facts: dict, searched: str) -> str:
    """The first sentence: what to use on this data, and why in a few words."""
    reason, row = facts["reason"], facts["tuned"] or {}
    reference = facts.get("reference_test_mean")
    margin = f"±{share(row.get('margin'), reference).lstrip('+')}" if row else ""
    tuned = f"tuned {searched}"
    if reason == "nothing_learned":
        return "Use nothing yet: every method scored at chance, so the models learned nothing from this data."
    if reason == "no_tuned_comparison":
        return f"Use Fixed AdaCos: it needs no tuning, and no {tuned} run finished to compare with it."
    difference = share(row.get("difference"), reference)
    if reason == "tuning_better_beyond_margin":
        return (f"Tune {searched}: it beats Fixed AdaCos by {difference} of the score here, beyond the {margin} "
                "margin.")
    if reason == "alternative_better_than_fixed_adacos":
        alternative = fmt.method_name(facts["recommendation"])
        return (f"Use {alternative}: it beats Fixed AdaCos here by more than the {margin} margin, and needs no "
                "tuning.")
    if reason == "adacos_significantly_better":
        return f"Use Fixed AdaCos: it beats {tuned} here ({difference} of the score) and needs no tuning."
    if reason == "equivalent":
        return (f"Use Fixed AdaCos: {tuned} is within {margin} of its score here ({difference}), and it needs no "
                "tuning.")
    if reason == "gain_within_margin":
        return (f"Use Fixed AdaCos: {tuned}'s gain here ({difference} of the score) is real but inside the {margin} "
                "margin.")
    interval = f"[{share(row.get('low'), reference)}, {share(row.get('high'), reference)}]"
    cost = price_clause(facts)
    shown = ("not shown once corrected for the other test metrics" if corrected_away(row)
             else f"not shown beyond the {margin} margin")
    return (f"Use Fixed AdaCos: {tuned} adds {difference} {interval} of its score here, {shown}"
            f"{', ' + cost if cost else ''}.")


def corrected_away(row: dict) -> bool:
    """Whether the difference's uncorrected interval excludes zero while Holm's correction over the test metrics leaves
    it not significant: the interval a reader sees then shows more than the test the recommendation reads."""
    if row.get("significant") or fmt.missing(row.get("low")) or fmt.missing(row.get("high")):
        return False
    return row["low"] > 0 or row["high"] < 0


def train_next(plateau: pd.DataFrame) -> str:
    """The iterations to train next while a compared method still improves: twice this length, the doubling rule of
    the benchmark's long cells, until the plateau rule holds."""
    return fmt.iterations(2 * plateau["last_iteration"].max())


def _conditions(plateau: pd.DataFrame, compared: list[str], manifest: dict) -> str:
    """The second sentence: the data and the training length the answer holds for, and whether they converged."""
    classes = manifest.get("train_classes") or [manifest.get("splits", {}).get("train", {}).get("num_classes")]
    classes = sorted({count for count in classes if count})
    count = f"{classes[0]}–{classes[-1]}" if len(classes) > 1 else f"{classes[0]}" if classes else ""
    data = f"{count} training classes of `{manifest.get('source', 'this data')}`" if count else "this data"
    found = plateau.set_index("method") if len(plateau) else pd.DataFrame()
    if found.empty:
        return f"It holds for {data}, at the training length used here."
    lengths = found.loc[[method for method in compared if method in found.index] or found.index, "last_iteration"]
    iterations = fmt.iterations(lengths.max()) if lengths.nunique() == 1 else \
        f"{fmt.iterations(lengths.min())}–{fmt.iterations(lengths.max())}"  # trained longer until the plateau
    still = [f"{fmt.method_name(method)} {fmt.rise(found.loc[method, 'rise'])}" for method in compared
             if method in found.index and not found.loc[method, "converged"]]
    if still:
        return (f"It holds for {data} at {iterations} iterations, still improving ({', '.join(still)}): train "
                f"{train_next(plateau)} iterations and check again.")
    return f"It holds for {data} trained to convergence ({iterations} iterations)."


def defaults_result(facts: dict) -> tuple[str, str]:
    """ArcFace at its defaults (its s and m) and what it scores against Fixed AdaCos in % of its score, with its
    interval: what most users run untuned. Empty where the study did not run it."""
    row, hyperparameters = facts.get("default"), facts.get("default_hyperparameters") or {}
    if not row:
        return "", ""
    reference = facts.get("reference_test_mean")
    setting = (f" (s = {hyperparameters['s']:g}, m = {hyperparameters['m']:g})"
               if {"s", "m"} <= hyperparameters.keys() else "")
    interval = ("" if fmt.missing(row.get("low")) else
                f" [{share(row['low'], reference)}, {share(row['high'], reference)}]")
    return f"ArcFace at its defaults{setting}", f"{share(row['difference'], reference)}{interval}"


def _cost(facts: dict, searched: str) -> str:
    """The third sentence: what the search cost, against one training of Fixed AdaCos, and what ArcFace at its
    defaults scores without any."""
    trials, seconds = facts.get("search_trials"), facts.get("search_seconds")
    splits = (facts["tuned"] or {}).get("splits")
    defaults, scores = defaults_result(facts)
    untuned = f"; {defaults} scores {scores} here" if defaults else ""
    if not trials:
        return f"No {searched} search finished, so its cost is not known{untuned}."
    per = f" over {splits} splits" if splits and splits > 1 else ""
    spent = f" ({fmt.device_time(seconds, facts.get('search_cpu_seconds'))})" if not fmt.missing(seconds) else ""
    return f"The {searched} search took {trials:,} trainings{spent}{per}; Fixed AdaCos needs one per split{untuned}."


def study_card(facts: dict, plateau: pd.DataFrame, manifest: dict, searched: str, metric: str,
               confidence: float) -> AnswerCard:
    """The default study's card from its verdict facts, plateau table and prepared data's manifest."""
    row = facts["tuned"]
    compared = [REFERENCE_METHOD] + ([facts["tuned_method"]] if facts.get("tuned_method") else [])
    if facts["reason"] == "nothing_learned":
        sentences = [_pick(facts, searched), "Check the labels, the images per class and the training length before "
                                             "comparing losses."]
    else:
        sentences = [_pick(facts, searched), _conditions(plateau, compared, manifest), _cost(facts, searched)]
    how_sure = []
    if row:
        reference = facts.get("reference_test_mean")
        how_sure.append((f"tuned {searched} − Fixed AdaCos, test {metric}",
                         f"{fmt.signed(row['difference'])} ({share(row['difference'], reference)}), "
                         f"{confidence:.0%} CI {fmt.interval(row['low'], row['high'])}"))
        margin_share = share(row["margin"], reference).lstrip("+")
        how_sure.append(("the margin that matters", f"±{row['margin']:.3g} ({margin_share} of Fixed AdaCos's score)"))
        splits = row.get("splits") or 1
        runs = (f"{splits} class splits × {row['pairs'] // splits} seeds" if splits > 1
                else f"{row['pairs']} paired seeds on one class split")
        how_sure.append(("evidence", f"{runs} of one data source: it speaks for this data, not for a new one"))
        if not fmt.missing(row.get("low")):
            how_sure.append(("tests (Holm-corrected over the test metrics)",
                             f"equivalence p = {fmt.p_value(row['tost_p_holm'])}, difference p = "
                             f"{fmt.p_value(row['p_holm'])}"))
    defaults, scores = defaults_result(facts)
    if defaults:  # after the tuned comparison, where there is one
        how_sure.insert(1 if row else 0, (f"ArcFace at its defaults − Fixed AdaCos, test {metric}",
                                          f"{fmt.signed(facts['default']['difference'])} ({scores})"))
    return AnswerCard(sentences, how_sure)


# The jargon of the numbers table, glossed where it first appears.
STATISTICS_TERMS = ("Terms: TOST (two one-sided tests) shows a difference lies inside the margin; Holm's correction "
                    "keeps the chance of any false finding over all test metrics at 5%; a studentised interval is "
                    "scaled by its estimate's own standard error (here by the jackknife).")


def card_section(analysis: StudyAnalysis, manifest: dict) -> Section:
    """The answer card: what to use, when it holds, what tuning costs, and how sure, before any detail."""
    facts = analysis.verdict_facts
    searched = fmt.loss_name(facts["tuned_loss"]) if facts["tuned_loss"] else "the searched loss"
    card = study_card(facts, analysis.plateau, manifest, searched, fmt.metric_name(facts["metric"]),
                      analysis.confidence)
    return Section("The answer in a minute", card_blocks(card, "The verdict below gives the numbers, the tests and the "
                                                               "figures behind it; docs/analysis.md the methods."))
