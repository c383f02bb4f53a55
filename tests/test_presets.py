"""Presets: each one validates, carries its published setup exactly, and is written out as valid params."""

import math
from pathlib import Path

import pytest

from study.config import ConfigError, StudyParams, load_params
from study.presets import build_preset, preset_names, write_params

REPO = Path(__file__).resolve().parents[1]


def test_the_presets_the_study_documents_exist_and_validate():
    assert {"seed003-mnist", "seed003-faces", "fashion", "long-run"} <= set(preset_names())
    for name in preset_names():
        assert isinstance(build_preset(name), StudyParams)


def test_default_preset_is_the_shipped_params():
    assert build_preset("default") == load_params(str(REPO / "params.yaml"))


def test_seed003_mnist_is_seed_003s_setup_with_its_margins_converted():
    params = build_preset("seed003-mnist")
    assert (params.model.name, params.model.embedding_size) == ("seed_cnn", 128)
    assert (params.train.optimizer, params.train.lr, params.train.batch_size, params.train.epochs) == ("adam", 0.01, 128, 10)
    assert params.train.objective == "knn_accuracy" and params.data.fallback == "mnist5k"
    loss, arcface = params.runs.hyperparameters("seed003_arcface")
    assert loss == "arcface" and arcface["s"] == 64.0 and arcface["m"] == pytest.approx(28.6 * math.pi / 180)
    # Its "Simple_ArcFace" subtracted 28.6 from the target cosine: CosFace with m = 28.6, no conversion.
    assert params.runs.hyperparameters("seed003_simple_arcface") == ("cosface", {"s": 64.0, "m": 28.6})
    assert {"fixed_adacos", "dynamic_adacos", "softmax"} <= set(params.runs.methods)


def test_seed003_faces_takes_the_users_folder():
    params = build_preset("seed003-faces", ["data.dataset=folder:/data/faces"])
    assert params.data.dataset == "folder:/data/faces" and params.data.image_size == 224
    assert params.model.name == "timm/efficientnetv2_rw_s" and params.train.batch_size == 16


def test_written_params_load_back_identical(tmp_path):
    params = build_preset("long-run", ["runs.seeds=[3, 4]"])
    assert params.runs.seeds == (3, 4) and params.train.max_iterations == 25000
    write_params(params, tmp_path / "params.yaml", "long-run")
    assert load_params(str(tmp_path / "params.yaml")) == params


def test_bad_preset_requests_name_the_problem():
    with pytest.raises(ConfigError, match="unknown preset 'mnist'; the presets are: default, "):
        build_preset("mnist")
    with pytest.raises(ConfigError, match="train.epochs: must be ≥ 1"):
        build_preset("fashion", ["train.epochs=0"])
    with pytest.raises(ConfigError, match="write section.key=value"):
        build_preset("fashion", ["epochs"])
