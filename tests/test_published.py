"""Published numbers: equal to the ones seed 003 published (SPEC), mapped onto runs the presets really make; others'
published ArcFace against AdaCos, equal to their sources, beside the benchmark's prediction and in the committed CSV."""

import dataclasses
import math
import typing
from pathlib import Path

import pandas as pd
import pytest

from study.analysis import published_beside_prediction, published_table
from study.config import ConfigError, ReportConfig, StudyParams
from study.presets import build_preset
from study.published import (
    ADACOS_PAPER_CROSSOVER_ITERATIONS,
    EVALUATIONS,
    PUBLISHED_ARCFACE_ADACOS,
    PUBLISHED_SETUPS,
    SEED003_FACES,
    SEED003_MNIST,
    PublishedArcFaceAdaCos,
    published_setup,
)

# Seed 003's test accuracies as it published them (SPEC, "Seed 003's published setups").
SEED003_MNIST_PUBLISHED = {"ArcFace": 97.36, "Simple_ArcFace": 95.78, "Fixed AdaCos": 98.09, "cross-entropy": 98.17}
SEED003_FACES_PUBLISHED = {"ArcFace": 85.22, "Fixed AdaCos": 90.02, "cross-entropy": 89.44}


def test_published_numbers_are_seed_003s():
    assert {r.label: r.accuracy_percent for r in SEED003_MNIST.results} == SEED003_MNIST_PUBLISHED
    assert {r.label: r.accuracy_percent for r in SEED003_FACES.results} == SEED003_FACES_PUBLISHED
    assert (SEED003_MNIST.train_images, SEED003_MNIST.test_images, SEED003_MNIST.classes) == (60_000, 10_000, 10)
    assert (SEED003_FACES.classes, SEED003_FACES.images) == (16, 2_602)
    assert ADACOS_PAPER_CROSSOVER_ITERATIONS == 20_000


def test_each_result_maps_to_our_method_and_the_metric_scoring_it_as_published():
    expected = {"ArcFace": "seed003_arcface", "Simple_ArcFace": "seed003_simple_arcface",
                "Fixed AdaCos": "fixed_adacos", "cross-entropy": "softmax"}
    for setup in PUBLISHED_SETUPS.values():
        for result in setup.results:
            assert result.method == expected[result.label]
            # Seed 003 scored metric losses by 1-NN on embeddings and cross-entropy by argmax.
            assert result.metric == ("test_accuracy" if result.method == "softmax" else "test_knn_accuracy")
            assert result.evaluation in EVALUATIONS


def test_what_the_published_code_computed_is_recorded():
    computed = {r.label: r.computed for r in SEED003_MNIST.results}
    assert "CenterInvariant" in computed["ArcFace"] and "28.6°" in computed["ArcFace"]
    assert "CosFace with m = 28.6 and s = 64" in computed["Simple_ArcFace"]
    assert "adds m to every logit" in computed["Fixed AdaCos"]
    assert "MNIST" in SEED003_MNIST.data and "torchvision:MNIST" in SEED003_MNIST.same_data_sources
    assert SEED003_FACES.same_data_sources == ()


@pytest.mark.parametrize("name", sorted(PUBLISHED_SETUPS))
def test_each_setups_preset_runs_its_methods_and_asks_for_the_reproduction(name):
    params = build_preset(name)
    assert params.report.reproduce == name
    setup = published_setup(name)
    for result in setup.results:
        assert result.method in params.runs.methods
    loss, arcface = params.runs.hyperparameters("seed003_arcface")
    assert loss == "arcface" and arcface == {"s": 64.0, "m": pytest.approx(math.radians(28.6))}
    if name == "seed003-mnist":
        assert params.runs.hyperparameters("seed003_simple_arcface") == ("cosface", {"s": 64.0, "m": 28.6})


def test_report_reproduce_accepts_exactly_the_published_setups():
    literal = typing.get_args(typing.get_type_hints(ReportConfig)["reproduce"])
    (names,) = [typing.get_args(arg) for arg in literal if arg is not type(None)]
    assert set(names) == set(PUBLISHED_SETUPS)
    assert StudyParams().report.reproduce is None
    assert StudyParams.from_dict({"report": {"reproduce": "seed003-faces"}}).report.reproduce == "seed003-faces"
    with pytest.raises(ConfigError, match="report.reproduce: 'seed003' is not allowed"):
        StudyParams.from_dict({"report": {"reproduce": "seed003"}})
    with pytest.raises(KeyError, match="the known ones are: seed003-mnist, seed003-faces"):
        published_setup("seed003")


# (ArcFace, AdaCos) % accuracy as the sources print them: FaceX-Zoo's training_mode/README.md ("Experiments of SOTA
# heads"), pytorch-adacos's README.md (Omniglot acc@1) and yKesamaru/adacos's README.md (test accuracy).
SOURCES_PUBLISHED = {
    ("JDAI-CV/FaceX-Zoo", "LFW"): (99.57, 99.65), ("JDAI-CV/FaceX-Zoo", "CPLFW"): (83.68, 83.27),
    ("JDAI-CV/FaceX-Zoo", "CALFW"): (93.98, 92.63), ("JDAI-CV/FaceX-Zoo", "AgeDB-30"): (96.23, 95.38),
    ("JDAI-CV/FaceX-Zoo", "MegaFace rank-1"): (88.39, 82.95),
    ("4uiiurz1/pytorch-adacos", "Omniglot acc@1"): (89.54, 90.06),
    ("yKesamaru/adacos", "16 face identities"): (85.22, 90.02), ("yKesamaru/adacos", "MNIST"): (97.36, 98.09),
}
COMMITTED_CSV = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "published_arcface_adacos.csv"


def _by_benchmark(table: pd.DataFrame) -> dict:
    return {row["benchmark"]: row for row in table.to_dict("records")}


def test_published_arcface_adacos_numbers_are_their_sources():
    assert {(row.source, row.benchmark): (row.arcface, row.adacos) for row in PUBLISHED_ARCFACE_ADACOS} \
        == SOURCES_PUBLISHED
    assert len(PUBLISHED_ARCFACE_ADACOS) == len(SOURCES_PUBLISHED)  # no row twice
    # yKesamaru/adacos's runs are seed 003's: both places hold the same numbers.
    faces, mnist = [row for row in PUBLISHED_ARCFACE_ADACOS if row.source == "yKesamaru/adacos"]
    for row, setup in ((faces, SEED003_FACES), (mnist, SEED003_MNIST)):
        published = {result.label: result.accuracy_percent for result in setup.results}
        assert (row.arcface, row.adacos, row.classes) == (published["ArcFace"], published["Fixed AdaCos"],
                                                          setup.classes)


def test_published_arcface_adacos_setups_are_their_codes_defaults():
    facex_zoo = ("JDAI-CV/FaceX-Zoo", 72_778, 18, 32.0, 0.35, "dynamic")
    # pytorch-metric-learning's ArcFaceLoss takes its margin in degrees: 28.6° = 0.4991642 rad.
    degrees_28_6 = pytest.approx(0.4991642)
    assert [(row.source, row.classes, row.epochs, row.arcface_s, row.arcface_m, row.adacos_variant)
            for row in PUBLISHED_ARCFACE_ADACOS] == [
        *[facex_zoo] * 5, ("4uiiurz1/pytorch-adacos", 1_623, 50, 30.0, 0.5, "dynamic"),
        ("yKesamaru/adacos", 16, 10, 64.0, degrees_28_6, "fixed"),
        ("yKesamaru/adacos", 10, 10, 64.0, degrees_28_6, "fixed")]
    for row in PUBLISHED_ARCFACE_ADACOS:
        assert len(row.commit) == 40 and row.note and "\n" not in row.note
        with pytest.raises(dataclasses.FrozenInstanceError):
            row.arcface = 0.0


def test_beside_prediction_against_hand_computed_differences_and_error_ratios():
    table = published_beside_prediction(-1.0, 1.0)
    assert list(table["benchmark"]) == [row.benchmark for row in PUBLISHED_ARCFACE_ADACOS]
    rows = _by_benchmark(table)
    # LFW: (99.57 − 99.65) / 99.65 = −0.0803%, but 0.43% of pairs wrong against 0.35%: 23% more errors.
    assert rows["LFW"]["difference_percent"] == pytest.approx(-0.0803, abs=5e-5)
    assert (rows["LFW"]["arcface_error"], rows["LFW"]["adacos_error"]) == (pytest.approx(0.43), pytest.approx(0.35))
    assert rows["LFW"]["error_ratio"] == pytest.approx(1.229, abs=5e-4)
    # MegaFace: 5.44 / 82.95 = +6.558%; 11.61 / 17.05 = 0.681 of AdaCos's errors.
    assert rows["MegaFace rank-1"]["difference_percent"] == pytest.approx(6.558, abs=5e-4)
    assert rows["MegaFace rank-1"]["error_ratio"] == pytest.approx(0.681, abs=5e-4)
    # The 16 faces: −4.80 / 90.02 = −5.332%; 14.78 / 9.98 = 1.481.
    assert rows["16 face identities"]["difference_percent"] == pytest.approx(-5.332, abs=5e-4)
    assert rows["16 face identities"]["error_ratio"] == pytest.approx(1.481, abs=5e-4)
    # Omniglot: −0.52 / 90.06 = −0.577%.
    assert rows["Omniglot acc@1"]["difference_percent"] == pytest.approx(-0.577, abs=5e-4)
    # Inside ±1%: LFW, CPLFW (+0.49), AgeDB-30 (+0.89), Omniglot, MNIST (−0.74); not CALFW (+1.46), MegaFace, faces.
    assert {name for name, row in rows.items() if row["inside"]} == {"LFW", "CPLFW", "AgeDB-30", "Omniglot acc@1",
                                                                      "MNIST"}
    assert rows["LFW"]["note"].startswith("best checkpoint") and rows["MNIST"]["adacos_variant"] == "fixed"


def test_beside_prediction_reads_the_interval_in_percent_with_its_bounds_inside():
    row = PublishedArcFaceAdaCos(source="a/b", file="README.md", commit="0" * 40, model="m", training_data="d",
                                 classes=3, epochs=1, arcface_s=30.0, arcface_m=0.5, adacos_variant="fixed",
                                 benchmark="toy", arcface=50.0, adacos=40.0, note="")
    def inside(low, high):
        return bool(published_beside_prediction(low, high, comparisons=[row])["inside"].iloc[0])
    # (50 − 40) / 40 · 100 = 25% exactly, with 50 / 60 of AdaCos's errors.
    assert published_beside_prediction(25.0, 30.0, comparisons=[row])["error_ratio"].iloc[0] == pytest.approx(5 / 6)
    assert inside(25.0, 30.0) and inside(20.0, 25.0) and inside(25.0, 25.0)
    assert not inside(25.001, 30.0) and not inside(0.2, 0.3)  # a share (0.25 = 25%) is not what it takes
    perfect = dataclasses.replace(row, adacos=100.0)
    assert published_beside_prediction(-1.0, 1.0, comparisons=[perfect])["error_ratio"].iloc[0] == math.inf


def test_beside_prediction_without_an_interval_leaves_inside_unknown():
    table = published_beside_prediction(math.nan, math.nan)
    assert table["inside"].isna().all() and len(table) == len(PUBLISHED_ARCFACE_ADACOS)
    # An unbounded side is an interval still: everything lies in (−∞, ∞), the gains above 0 in [0, ∞).
    assert published_beside_prediction(-math.inf, math.inf)["inside"].tolist() == [True] * len(table)
    above_zero = _by_benchmark(published_beside_prediction(0.0, math.inf))
    assert {name for name, row in above_zero.items() if row["inside"]} == {"CPLFW", "CALFW", "AgeDB-30",
                                                                           "MegaFace rank-1"}
    with pytest.raises(ValueError, match="low ≤ high"):
        published_beside_prediction(1.0, -1.0)


def test_committed_csv_holds_the_published_data():
    committed = pd.read_csv(COMMITTED_CSV)
    assert committed.to_dict("records") == [dataclasses.asdict(row) for row in PUBLISHED_ARCFACE_ADACOS]
    # and is what benchmarks/published_arcface_adacos.py writes, byte for byte
    assert COMMITTED_CSV.read_text() == published_table().to_csv(index=False)
