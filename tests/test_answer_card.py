"""The answer card (at most 3 sentences of at most 25 words, computed from the numbers) and the rule that splits a
long paragraph between its sentences."""

import pandas as pd
import pytest

from study.report.answer_card import CARD_WORDS, AnswerCard, study_card
from study.report.document import MAX_PARAGRAPH_WORDS, short_paragraphs

REASONS = ("tuning_better_beyond_margin", "alternative_better_than_fixed_adacos", "adacos_significantly_better",
           "equivalent", "gain_within_margin", "not_resolved", "no_tuned_comparison", "nothing_learned")
PLATEAU = pd.DataFrame({"method": ["fixed_adacos", "arcface_tuned"], "last_iteration": [12_000.0, 12_000.0],
                        "rise": [0.004, 0.031], "converged": [True, False]})


def facts(reason: str, difference: float = 0.012) -> dict:
    row = {"difference": difference, "low": difference - 0.01, "high": difference + 0.01, "margin": 0.008,
           "splits": 4, "pairs": 12, "unit": "splits", "seeds_to_resolve": 1234, "tost_p_holm": 0.2, "p_holm": 0.04}
    return {"reason": reason, "tuned": None if reason == "no_tuned_comparison" else row,
            "reference_test_mean": 0.4, "recommendation": "softmax", "tuned_method": "arcface_tuned",
            "search_trials": 1200, "search_seconds": 98_765.4}


@pytest.mark.parametrize("reason", REASONS)
def test_every_verdict_gets_a_card_of_three_short_sentences_with_its_numbers(reason):
    card = study_card(facts(reason), PLATEAU, {"source": "folder:/data/faces", "train_classes": [500, 512]},
                      "ArcFace", "MAP@R", 0.95)
    assert 1 <= len(card.sentences) <= 3 and all(len(s.split()) <= CARD_WORDS for s in card.sentences), card
    first = card.sentences[0]
    if reason in ("tuning_better_beyond_margin", "adacos_significantly_better", "equivalent", "gain_within_margin",
                  "not_resolved"):
        assert "+3.0%" in first and "2.0%" in first + card.how_sure[1][1]  # 0.012 and 0.008 of a score of 0.4
    if reason == "nothing_learned":
        assert first.startswith("Use nothing yet") and "train" in card.sentences[1]
    else:
        # The conditions: the class counts and the length, and who was still improving (+3.10%), by the plateau table.
        assert card.sentences[1] == ("It holds for 500–512 training classes of `folder:/data/faces` at 12,000 "
                                     "iterations, still improving (ArcFace tuned +3.10%): train longer to converge.")
        assert "1,200 trainings" in card.sentences[2]


def test_a_card_refuses_a_fourth_or_a_long_sentence():
    with pytest.raises(ValueError, match="at most 3 sentences"):
        AnswerCard(["One.", "Two.", "Three.", "Four."], [])
    with pytest.raises(ValueError, match="at most 25 words"):
        AnswerCard([" ".join(["word"] * 26) + "."], [])


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


@pytest.mark.parametrize("judgement", ["equivalent", "slightly better", "slightly worse", "better", "worse", "open",
                                       None])
def test_the_benchmarks_card_fits_for_every_judgement_and_names_its_conditions(judgement):
    from study.benchmark.card import benchmark_card

    predicts = judgement is not None
    arcface = {"judgement": judgement or "n/a", "prediction_low": -0.116 if predicts else float("nan"),
               "prediction_high": 0.237 if predicts else float("nan"), "sources": 5, "short_prediction_low": -0.042,
               "short_prediction_high": 0.045, "short_sources": 6, "converged_cells": [{"cell": "a"}, {"cell": "b"}]}
    rows = pd.DataFrame([{"cell": f"c{i}", "configuration": f"c{i}", "longer_of": None, "primary": True,
                          "regime": "short", "iterations": 100 * (i + 1), "converged": True, "relative": 0.01,
                          "relative_se": 0.01, "method": "arcface_tuned", "train_classes": classes, "n_trials": 12,
                          "repeats": 1, "source": f"s{i}"} for i, classes in enumerate((10, 100, 1000))])
    wins = [{"method": "softmax", "from_classes": 300, "regime": "short"}]
    card = benchmark_card(arcface, wins, rows)
    assert len(card.sentences) == 3 and all(len(s.split()) <= CARD_WORDS for s in card.sentences), card.sentences
    if predicts:  # the first sentence names the training length it answers for
        assert "trained to convergence" in card.sentences[0]
        assert "10–1,000 classes" in card.sentences[1] and "from 300 classes Softmax" in card.sentences[1]
    else:
        assert card.sentences[0].startswith("No general pick yet") and "[-4.2%, +4.5%]" in card.sentences[1]
    assert card.sentences[2] == "A random search took 12 trainings per split here; Fixed AdaCos needs one."
