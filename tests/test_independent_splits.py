"""Tests for how many class splits a source's classes make that are new evidence (study.analysis.design
.independent_splits), and for the report's words where more splits would be needed than that."""

from study.analysis.design import independent_splits
from study.report.verdict import _beyond_independent


def manifest(protocol: str, train: int, val: int, test: int) -> dict:
    return {"protocol": protocol, "splits": {"train": {"num_classes": train}, "val": {"num_classes": val},
                                             "test": {"num_classes": test}}}


def test_the_splits_with_disjoint_test_classes_are_all_classes_over_the_test_splits():
    assert independent_splits(manifest("open", 80, 40, 40)) == 4  # the default study's 160 glyphs
    assert independent_splits(manifest("open", 20, 10, 10)) == 4  # a folder of 40 classes: never 31 splits
    assert independent_splits(manifest("open", 21, 10, 11)) == 3  # 42 // 11: a fourth would reuse test classes
    assert independent_splits(manifest("closed", 10, 10, 10)) is None  # every split holds every class


def test_a_report_names_the_limit_only_where_more_splits_are_asked_for_than_it():
    facts = {"independent_splits": 4}
    beyond = _beyond_independent({"unit": "splits", "seeds_to_resolve": 9}, facts)
    assert "only 4 splits with disjoint test classes" in beyond and "more classes, or another source" in beyond
    assert _beyond_independent({"unit": "splits", "seeds_to_resolve": 4}, facts) == ""
    assert _beyond_independent({"unit": "seeds", "seeds_to_resolve": 30}, facts) == ""  # one split: seeds resolve it
    assert _beyond_independent({"unit": "splits", "seeds_to_resolve": 9}, {"independent_splits": None}) == ""
