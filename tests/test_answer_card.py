"""The answer card (at most 3 sentences of at most 40 words, computed from the numbers) and the rule that splits a
long paragraph between its sentences."""

from types import SimpleNamespace

import pandas as pd
import pytest

from study.report.answer_card import CARD_WORDS, AnswerCard, corrected_away, study_card
from study.report.document import MAX_PARAGRAPH_WORDS, short_paragraphs
from study.report.sections import convergence_sentence

REASONS = ("tuning_better_beyond_margin", "alternative_better_than_fixed_adacos", "adacos_significantly_better",
           "equivalent", "gain_within_margin", "not_resolved", "no_tuned_comparison", "nothing_learned")
PLATEAU = pd.DataFrame({"method": ["fixed_adacos", "arcface_tuned"], "last_iteration": [12_000.0, 12_000.0],
                        "rise": [0.004, 0.031], "converged": [True, False]})


def facts(reason: str, difference: float = 0.012) -> dict:
    row = {"difference": difference, "low": difference - 0.01, "high": difference + 0.01, "margin": 0.008,
           "splits": 4, "pairs": 12, "unit": "splits", "seeds_to_resolve": 1234, "tost_p_holm": 0.2, "p_holm": 0.04}
    return {"reason": reason, "tuned": None if reason == "no_tuned_comparison" else row,
            "reference_test_mean": 0.4, "recommendation": "softmax", "tuned_method": "arcface_tuned",
            "search_trials": 1200, "search_seconds": 98_765.4, "price_per_training": 0.001,
            "default": {"difference": -0.02, "low": -0.03, "high": -0.01}, "default_hyperparameters": {"s": 64.0,
                                                                                                       "m": 0.5}}


@pytest.mark.parametrize("reason", REASONS)
def test_every_verdict_gets_a_card_of_three_short_sentences_with_its_numbers(reason):
    card = study_card(facts(reason), PLATEAU, {"source": "folder:/data/faces", "train_classes": [500, 512]},
                      "ArcFace", "MAP@R", 0.95)
    assert 1 <= len(card.sentences) <= 3 and all(len(s.split()) <= CARD_WORDS for s in card.sentences), card
    first = card.sentences[0]
    if reason in ("tuning_better_beyond_margin", "adacos_significantly_better", "equivalent", "gain_within_margin",
                  "not_resolved"):
        margin = dict(card.how_sure)["the margin that matters"]
        assert "+3.0%" in first and "2.0%" in first + margin  # 0.012 and 0.008 of a score of 0.4
    if reason != "nothing_learned":  # a decision whatever the evidence (SPEC: never "no pick")
        assert first.startswith(("Use ", "Tune ")) and "pick" not in first
    if reason == "not_resolved":  # open evidence: the cheap option, with the costly one's gain and its price
        assert first.startswith("Use Fixed AdaCos") and "[+0.5%, +5.5%]" in first
        assert "1,196 more trainings (119.6% of the score at 0.1% a training)" in first  # 1,200 trials − 4 splits
    if reason == "nothing_learned":
        assert first.startswith("Use nothing yet") and "train" in card.sentences[1]
    else:
        # The conditions: the class counts and the length, and who was still improving (+3.10%), by the plateau table.
        assert card.sentences[1] == ("It holds for 500–512 training classes of `folder:/data/faces` at 12,000 "
                                     "iterations, still improving (ArcFace tuned +3.10%): train 24,000 iterations "
                                     "and check again.")
        assert "1,200 trainings" in card.sentences[2]
        # ArcFace at its defaults, what most users run: -0.02 [-0.03, -0.01] of a score of 0.4.
        assert card.sentences[2].endswith("ArcFace at its defaults (s = 64, m = 0.5) scores -5.0% [-7.5%, -2.5%] here.")
        assert ("ArcFace at its defaults − Fixed AdaCos, test MAP@R", "-0.0200 (-5.0% [-7.5%, -2.5%])") in card.how_sure


def test_a_card_without_arcface_at_its_defaults_leaves_it_out():
    without = {key: value for key, value in facts("not_resolved").items() if key != "default"}
    card = study_card(without, PLATEAU, {"source": "digits", "train_classes": [10]}, "ArcFace", "MAP@R", 0.95)
    assert "defaults" not in " ".join(card.sentences) and not any("defaults" in what for what, _ in card.how_sure)


def test_a_card_refuses_a_fourth_or_a_long_sentence():
    with pytest.raises(ValueError, match="at most 3 sentences"):
        AnswerCard(["One.", "Two.", "Three.", "Four."], [])
    with pytest.raises(ValueError, match=f"at most {CARD_WORDS} words"):
        AnswerCard([" ".join(["word"] * (CARD_WORDS + 1)) + "."], [])


def test_a_long_paragraph_is_split_between_sentences_and_loses_nothing():
    sentence = "The interval covers 0.5 of the margin, e.g. a difference of +0.0042 over 4 splits and 2 seeds. "
    text = (sentence * 20).strip()
    parts = short_paragraphs(text)
    assert len(parts) > 1 and all(len(part.split()) <= MAX_PARAGRAPH_WORDS for part in parts)
    assert " ".join(parts) == text
    assert all(part.startswith("The interval") and part.endswith("seeds.") for part in parts)
    assert short_paragraphs("A short one. Another.") == ["A short one. Another."]


def test_a_bold_paragraph_split_stays_bold_in_every_part():
    """A bold lead longer than a paragraph: each part is bold on its own, and the words are all kept."""
    sentence = "Tuned ArcFace minus Fixed AdaCos is expected in an interval that reaches beyond the margin of two. "
    text = f"**{(sentence * 12).strip()}** After it, plain words."
    parts = short_paragraphs(text)
    assert len(parts) > 1 and all(part.count("**") % 2 == 0 for part in parts)
    assert all(part.startswith("**") for part in parts)
    assert parts[-1].endswith("** After it, plain words.")
    assert " ".join(part.replace("**", "") for part in parts) == text.replace("**", "")


@pytest.mark.parametrize("gain", [-0.01, 0.012, 0.05, None])
def test_the_benchmarks_card_is_a_decision_with_its_price_and_conditions(gain):
    from study.benchmark.card import benchmark_card

    predicts = gain is not None
    mean = gain if predicts else float("nan")
    arcface = {"judgement": "open" if predicts else "n/a", "mean_judgement": "open", "mean": mean,
               "low": mean - 0.02, "high": mean + 0.02, "prediction_low": mean - 0.05,
               "prediction_high": mean + 0.05, "sources": 3, "short_prediction_low": -0.042,
               "short_prediction_high": 0.045, "short_sources": 3,
               "converged_cells": [{"cell": f"c{i}", "relative": 0.03 * i, "low": 0.03 * i - 0.005}
                                   for i in range(3)]}
    # Searches of 12 and 24 trials against 3 learning rates: 9, 15 and 21 more trainings, the median 15.
    rows = pd.DataFrame([{"cell": f"c{i}", "configuration": f"c{i}", "longer_of": None, "primary": True,
                          "regime": "long", "iterations": 100 * (i + 1), "converged": True, "reference_converged": True,
                          "relative": 0.03 * i, "relative_se": 0.01, "method": "arcface_tuned",
                          "train_classes": classes, "n_trials": trials, "repeats": 1, "rates": 3, "splits": 3,
                          "search_seconds": 300.0, "source": f"s{i}", "plateau_basis": "mean curve"}
                         for i, (classes, trials) in enumerate(((10, 12), (100, 18), (1000, 24)))])
    card = benchmark_card(arcface, [], rows)
    assert len(card.sentences) <= 3 and all(len(s.split()) <= CARD_WORDS for s in card.sentences), card.sentences
    first = card.sentences[0]
    if not predicts:
        assert first.startswith("Use Fixed AdaCos: it needs no tuning")
        return
    # Tune only where the mean's interval clears the +2% margin; else the option that needs no tuning, priced.
    assert first.startswith("Tune ArcFace" if gain - 0.02 >= 0.02 else "Use Fixed AdaCos; tuning ArcFace adds")
    assert "for 15 more trainings per split" in first
    # The cells whose interval cleared the margin (+3% and +6%, lows +2.5% and +5.5%), by source.
    assert "its interval cleared the +2% margin on s1 (C = 100) and s2 (C = 1,000)" in first
    last = card.sentences[-1]
    price = dict(card.how_sure)["the price at which tuning pays"]  # the same rate as a "how sure" row
    if gain > 0:  # break-even: 1% of the score against 15 trainings per gain
        assert f"worth more than {0.01 / (gain / 15):.1f} trainings" in last
        assert f"worth more than {0.01 / (gain / 15):.1f} trainings" in price
        assert price.endswith("15 more trainings per split")
    else:
        assert "adds nothing on average" in last and "adds nothing on average" in price
    assert last.endswith("models trained to convergence, 3 sources, 10–1,000 classes.")


def test_a_short_study_says_how_many_iterations_to_train_next():
    """Still improving at 12,000 iterations: the report names twice that, the long cells' doubling rule."""
    analysis = SimpleNamespace(plateau=PLATEAU, methods=["arcface_tuned"])
    sentence = convergence_sentence(analysis)
    assert "Still improving: ArcFace tuned (+3.10%)" in sentence and "train 24,000 iterations" in sentence
    converged = SimpleNamespace(plateau=PLATEAU.assign(converged=True), methods=["arcface_tuned"])
    assert convergence_sentence(converged).endswith("So the answer compares converged models.")


def test_the_benchmarks_card_names_the_sources_alone_where_their_class_counts_overflow_the_sentence():
    from study.benchmark.card import benchmark_card

    # Four sources where tuned ArcFace led by over 2% on its point estimate only (+3%, its interval from -1%).
    names = ("fashion-mnist", "glyphs", "cards", "wesnoth")
    arcface = {"judgement": "open", "mean_judgement": "open", "mean": 0.019, "low": -0.003, "high": 0.041,
               "prediction_low": -0.053, "prediction_high": 0.091, "sources": 4, "short_prediction_low": -0.042,
               "short_prediction_high": 0.045, "short_sources": 4,
               "converged_cells": [{"cell": f"c{i}", "relative": 0.03, "low": -0.01} for i in range(4)]}
    rows = pd.DataFrame([{"cell": f"c{i}", "configuration": f"c{i}", "longer_of": None, "primary": True,
                          "regime": "long", "iterations": 1000, "converged": True, "reference_converged": True,
                          "relative": 0.03, "relative_se": 0.01, "method": "arcface_tuned", "train_classes": classes,
                          "n_trials": 10, "repeats": 1, "rates": 3, "splits": 3, "search_seconds": 300.0,
                          "source": source, "plateau_basis": "mean curve"}
                         for i, (source, classes) in enumerate(zip(names, (50, 1000, 26, 37)))])
    card = benchmark_card(arcface, [], rows, design={"floor_half_width": 0.034, "spread": 0.0, "spread_low": 0.0,
                                                     "spread_high": 0.024, "sources_to_exclude_zero": 11})
    first = card.sentences[0]
    assert len(first.split()) <= CARD_WORDS
    assert first.endswith("it led by over 2% only on fashion-mnist, glyphs, cards and wesnoth.") and "C =" not in first
    assert dict(card.how_sure)["cells where tuning led beyond the margin"] == (
        "interval beyond it: none; point estimate only: fashion-mnist (C = 50), glyphs (C = 1,000), cards (C = 26) "
        "and wesnoth (C = 37)")


def test_an_interval_clear_of_zero_that_holms_correction_leaves_open_is_called_so_not_short_of_the_margin():
    """The interval the card prints is each metric's own; the recommendation reads the test Holm-corrected over the
    test metrics. Where the first excludes zero and the second does not reach significance, the card says why the
    gain is not taken; where the interval itself crosses zero, the margin is what is not shown."""
    clear = {**facts("not_resolved", difference=0.036), "reference_test_mean": 0.4}
    clear["tuned"]["significant"] = False  # [+0.026, +0.046] excludes zero, yet not significant after Holm
    first = study_card(clear, PLATEAU, {"source": "digits", "train_classes": [50]}, "ArcFace", "MAP@R",
                       0.95).sentences[0]
    assert "[+6.5%, +11.5%] of its score here, not shown once corrected for the other test metrics," in first
    crossing = facts("not_resolved", difference=0.004)  # [-0.006, +0.014]
    crossing["tuned"]["significant"] = False
    first = study_card(crossing, PLATEAU, {"source": "digits", "train_classes": [50]}, "ArcFace", "MAP@R",
                       0.95).sentences[0]
    assert "[-1.5%, +3.5%] of its score here, not shown beyond the ±2.0% margin," in first
    clear["tuned"]["significant"] = True  # significant after Holm: never "corrected away"
    assert not corrected_away(clear["tuned"]) and corrected_away({"low": -0.03, "high": -0.01, "significant": False})
