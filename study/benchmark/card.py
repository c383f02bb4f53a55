"""The benchmark's answer card, a decision: what to use on new data, what tuning ArcFace adds and costs and where it
paid, ArcFace at its defaults, and the price at which tuning pays, with its "how sure" rows (the tests and what more
data can settle); rendered by study.report.answer_card."""

from __future__ import annotations

import math

import pandas as pd

import study.report.formats as fmt
from study.analysis.headline import headline_cells
from study.benchmark.meta import RELATIVE_MARGIN
from study.report.answer_card import CARD_WORDS, AnswerCard
from study.report.judgements import JUDGEMENT_WORDS
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
    converged = headline_cells(tuned)
    cell = (converged if len(converged) else tuned[tuned["primary"].astype(bool)]).iloc[-1:]
    if cell.empty:
        return None
    row = cell.iloc[0]
    return {"cell": row["cell"], "relative": row["relative"], "low": row["low"] / row["reference_test_mean"],
            "high": row["high"] / row["reference_test_mean"],
            "trained": "converged" if len(converged) else "trained short"}


def extra_trainings(rows: pd.DataFrame) -> dict:
    """What tuning costs per class split in the headline's cells: the search's trainings, Fixed AdaCos's (one per
    learning rate val chooses among), the difference, and the search's device-seconds per split (median, range)."""
    headline = headline_cells(rows)
    searches = headline[headline["method"] == "arcface_tuned"]
    if searches.empty:
        return {}
    trials = (searches["n_trials"] * searches["repeats"].fillna(1)).astype(int)
    rates = searches["rates"].fillna(1).astype(int) if "rates" in searches else pd.Series(1, index=searches.index)
    seconds = searches["search_seconds"].astype(float) / searches["splits"].astype(float)
    return {"trials": int(trials.median()), "reference": int(rates.median()),
            "extra": int((trials - rates).median()), "seconds_median": float(seconds.median()),
            "seconds_low": float(seconds.min()), "seconds_high": float(seconds.max())}


def where_tuning_led(facts: dict, rows: pd.DataFrame) -> dict[str, dict[str, list[int]]]:
    """The headline cells where tuned ArcFace's interval lies beyond +margin ("beyond"), and those where only its
    point estimate does ("point"), each as {source: its training class counts}."""
    cells = rows.drop_duplicates("cell").set_index("cell")
    found: dict[str, dict[str, list[int]]] = {"beyond": {}, "point": {}}
    for cell in facts["converged_cells"]:
        row = cells.loc[cell["cell"]]
        kind = "beyond" if cell["low"] >= RELATIVE_MARGIN else "point" if cell["relative"] >= RELATIVE_MARGIN else ""
        if kind:
            found[kind].setdefault(row["source"], []).append(int(row["train_classes"]))
    return found


def sources_words(by_source: dict[str, list[int]], classes: bool = True) -> str:
    """'glyphs (C = 100, 1,000) and mnist (C = 50)' ('' for none; 'glyphs and mnist' without `classes`)."""
    named = [f"{source} (C = {', '.join(f'{c:,}' for c in sorted(counts))})" if classes else source
             for source, counts in by_source.items()]
    return " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)


def break_even_price(gain: float, extra: int) -> float:
    """The price of one training (a share of the score) at which `gain` over `extra` more trainings breaks even; NaN
    where tuning gains nothing."""
    return gain / extra if extra > 0 and math.isfinite(gain) and gain > 0 else math.nan


def benchmark_card(arcface: dict, wins: list[dict], rows: pd.DataFrame, default: dict | None = None,
                   design: dict | None = None) -> AnswerCard:
    """The answer card as a decision: what to use, what tuning ArcFace adds on average and on a new source, what it
    costs and where it paid; then ArcFace at its defaults (`default`: its pooled row); then the price at which
    tuning pays and the conditions. The tests (equivalence, superiority) and the design's limits (`design`) are rows
    of the "how sure" table."""
    margin = f"±{100 * RELATIVE_MARGIN:.0f}%"
    predicts = math.isfinite(arcface.get("prediction_low", math.nan))
    expected = pct_interval(arcface["prediction_low"], arcface["prediction_high"])
    cost = extra_trainings(rows)
    converged = len(arcface["converged_cells"])
    if rows["source"].nunique() == 1 or not predicts or not cost:
        own = one_configuration(rows)
        first = ("Use Fixed AdaCos: it needs no tuning, and "
                 + (f"these cells come from one data source ({rows['source'].iloc[0]}), so nothing predicts new data"
                    if rows["source"].nunique() == 1 else
                    f"tuned ArcFace converged in {fmt.plural(converged, 'cell')}, too few to predict new data") + ".")
        second = (f"Here tuned ArcFace − Fixed AdaCos is {pct(own['relative'])} {pct_interval(own['low'], own['high'])}"
                  f" of its score ({own['cell']}, {own['trained']})." if own is not None else
                  f"Trained short, tuned ArcFace − Fixed AdaCos on new data: "
                  f"{pct_interval(arcface['short_prediction_low'], arcface['short_prediction_high'])}.")
        return AnswerCard([first, second], _how_sure(arcface, rows, margin, default, design))
    gain = f"{pct(arcface['mean'])} {pct_interval(arcface['low'], arcface['high'])}"
    better = arcface["low"] >= RELATIVE_MARGIN  # tuning significantly and relevantly better on average
    pick = (f"Tune ArcFace: it adds {gain} on average" if better else
            f"Use Fixed AdaCos; tuning ArcFace adds {gain} on average")

    led = where_tuning_led(arcface, rows)
    kind = "beyond" if led["beyond"] else "point" if led["point"] else ""
    bound = margin.lstrip("±")
    lead = {"beyond": f"its interval cleared the +{bound} margin on", "point": f"it led by over {bound} only on",
            "": f"it led by over {bound} nowhere"}[kind]
    start = f"{pick} (a new source: {expected}) for {cost['extra']} more trainings per split; {lead}"
    # The sources' class counts where the sentence has room for them; the "how sure" table always gives them.
    first = f"{start} {sources_words(led[kind])}." if kind else f"{start}."
    if len(first.split()) > CARD_WORDS:
        first = f"{start} {sources_words(led[kind], classes=False)}."
    sentences = [first]
    if default is not None and math.isfinite(default.get("mean", math.nan)):
        unconverged = len(default.get("unconverged_cells") or [])
        trained_on = default.get("trained_on_cells") or {}
        lengths = " or ".join(f"{factor}×" for factor in sorted(set(trained_on.values())))
        sentences.append(
            f"ArcFace at its defaults (s = 64, m = 0.5) scores {pct(default['mean'])} "
            f"{pct_interval(default['low'], default['high'])} (a new source: "
            f"{pct_interval(default['prediction_low'], default['prediction_high'])})"
            + (f", converged in {default['configurations'] - unconverged} of {default['configurations']} cells "
               f"({len(trained_on)} of them trained on to {lengths} their iterations to get there)"
               if trained_on else "")
            + (f", still improving in {unconverged} of {default['configurations']} cells" if unconverged else "")
            + ".")
    classes = headline_cells(rows).query("method == 'arcface_tuned'")["train_classes"]
    conditions = (f"models trained to convergence, {arcface['sources']} sources, {classes.min():,}–{classes.max():,} "
                  "classes")
    sentences.append(f"{exchange_rate(arcface, cost['extra'])}; it holds for {conditions}.")
    return AnswerCard(sentences, _how_sure(arcface, rows, margin, default, design))


def exchange_rate(arcface: dict, extra: int) -> str:
    """The price of tuning as a user weighs it, from the pooled gain and the `extra` trainings a search costs per
    split: 'Tuning pays if 1% of the score is worth more than 5.6 trainings to you (2.3 at the interval's top)'."""
    price, top = (break_even_price(arcface[key], extra) for key in ("mean", "high"))
    if not math.isfinite(price):
        return "Tuning pays at no price of a training, since it adds nothing on average"
    at_top = f" ({0.01 / top:.1f} at the interval's top)" if math.isfinite(top) else ""
    return f"Tuning pays if 1% of the score is worth more than {0.01 / price:.1f} trainings to you{at_top}"


def selection_words(arcface: dict) -> str:
    """The selection asymmetry beside the tuned gain: how far Fixed AdaCos's reported score is flattered by the rate
    val chose among its own runs (tuned ArcFace is retrained at fresh seeds), and the gain at fresh seeds."""
    share = lambda value: f"{100 * value:.2f}%"  # noqa: E731 (a bias's size, unsigned)
    return (f"it reports the runs val chose its learning rate among, tuned ArcFace fresh seeds: that flatters it by at "
            f"most {share(arcface['reference_selection_bias_mean'])} of its score on average "
            f"({share(arcface['reference_selection_bias_low'])}–{share(arcface['reference_selection_bias_high'])} "
            f"by cell; the most, reached where its rates tie on val), so at fresh seeds tuning ArcFace adds "
            f"between {pct(arcface['mean'])} and {pct(arcface['fresh_high_mean'])} on average")


def _how_sure(arcface: dict, rows: pd.DataFrame, margin: str, default: dict | None, design: dict | None) -> list:
    """The "how sure" rows: the tests against the margin, the sensitivity pools, what more data can settle, the
    margin and the evidence."""
    predicts = math.isfinite(arcface.get("prediction_low", math.nan))
    converged = len(arcface["converged_cells"])
    expected = pct_interval(arcface["prediction_low"], arcface["prediction_high"])
    rows_out = [("tuned ArcFace − Fixed AdaCos, mean over sources (test against the margin)",
                 f"{pct(arcface['mean'])} {pct_interval(arcface['low'], arcface['high'])}: "
                 f"{JUDGEMENT_WORDS[arcface['mean_judgement']]}"),
                ("the same on a new source, converged",
                 f"{expected} (95% prediction, {arcface['sources']} sources): {JUDGEMENT_WORDS[arcface['judgement']]}"
                 if predicts else f"not estimable yet ({fmt.plural(converged, 'converged cell')})")]
    if math.isfinite(arcface.get("reference_selection_bias_mean", math.nan)):
        rows_out.append(("Fixed AdaCos's rate chosen among its own runs (a bias, bounded)", selection_words(arcface)))
    if design:
        led = where_tuning_led(arcface, rows)
        rows_out.append(("cells where tuning led beyond the margin",
                         f"interval beyond it: {sources_words(led['beyond']) or 'none'}; point estimate only: "
                         f"{sources_words(led['point']) or 'none'}"))
        rows_out.append(("what more sources can settle",
                         f"a new source's interval never narrows below ±{100 * design['floor_half_width']:.1f}% (the "
                         f"spread between sources, {100 * design['spread']:.1f}% [{100 * design['spread_low']:.1f}%, "
                         f"{100 * design['spread_high']:.1f}%], stays), so it cannot fit inside {margin}; the mean's "
                         f"interval is expected to exclude 0 at about {design['sources_to_exclude_zero']:.0f} sources"))
    if cost := extra_trainings(rows):
        rows_out.append(("the price at which tuning pays", f"{exchange_rate(arcface, cost['extra'])}, for "
                                                          f"{cost['extra']} more trainings per split"))
    if default is not None and math.isfinite(default.get("mean", math.nan)):
        rows_out.append(("ArcFace at its defaults − Fixed AdaCos, mean over sources",
                         f"{pct(default['mean'])} {pct_interval(default['low'], default['high'])}: "
                         f"{JUDGEMENT_WORDS[default['mean_judgement']]}"))
    rows_out += [*([("the same, every method at one shared learning rate (sensitivity)",
                     new_source(arcface, "shared_rate_"))] if arcface.get("rate_chosen_cells") else []),
                 *([("the same, with the long cells still improving (sensitivity)",
                     new_source(arcface, "long_"))] if arcface.get("still_improving_cells") else []),
                 ("the same, trained short (sensitivity)", new_source(arcface, "short_")),
                 ("the margin that matters", f"{margin} of Fixed AdaCos's score, on every data set"),
                 ("evidence", f"{rows['cell'].nunique()} cells of {rows['source'].nunique()} independent data "
                              "sources; configurations of one source are not independent")]
    return rows_out
