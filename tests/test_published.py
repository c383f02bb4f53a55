"""Published numbers: equal to the ones seed 003 published (SPEC), mapped onto runs the presets really make."""

import math
import typing

import pytest

from study.config import ConfigError, ReportConfig, StudyParams
from study.presets import build_preset
from study.published import (
    ADACOS_PAPER_CROSSOVER_ITERATIONS,
    EVALUATIONS,
    PUBLISHED_SETUPS,
    SEED003_FACES,
    SEED003_MNIST,
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
