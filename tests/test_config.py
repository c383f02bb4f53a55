"""params.yaml validation: the shipped file is valid, and every kind of mistake names its key and the fix."""

import math
from pathlib import Path

import pytest
import yaml

import numpy as np
import torch

from study.config import SEED_LIMIT, ConfigError, StudyParams, load_params

REPO = Path(__file__).resolve().parents[1]


def test_the_shipped_params_are_the_embedded_default_and_valid():
    params = load_params(str(REPO / "params.yaml"))
    # The users' question: open protocol, a deployment metric, at least 50 training classes from an offline source.
    assert params.data.dataset.startswith("glyphs:") and params.data.protocol == "open"
    total = int(params.data.dataset.split(":")[1])
    assert round(total * params.data.fractions[0]) >= 50
    assert params.model.name == "cnn" and params.train.objective == "map_at_r"
    assert params.search.sampler == "random" and params.analysis.estimator == "without_replacement"
    assert "fixed_adacos" in params.runs.methods and params.search.losses == ("arcface",)
    assert params.runs.hyperparameters("arcface_default") == ("arcface", {"s": 64.0, "m": 0.5})
    # Every shipped key round-trips: what to_dict writes, from_dict reads back unchanged.
    assert StudyParams.from_dict(params.to_dict()) == params


@pytest.mark.parametrize("values, message", [
    ({"train": {"epoch": 3}}, "unknown key train.epoch; the keys of train are: epochs"),
    ({"trian": {}}, "unknown section 'trian'; the sections are: data, model, train"),
    ({"train": {"optimizer": "adm"}}, "train.optimizer: 'adm' is not allowed; choose one of 'adam', 'adamw', 'sgd'"),
    ({"train": {"lr": 0}}, "train.lr: must be > 0"),
    ({"train": {"epochs": 2.5}}, "train.epochs: expected an integer"),
    ({"train": {"amp": "yes"}}, "train.amp: expected true or false"),
    ({"train": {"lr": math.nan}}, "train.lr: expected a finite number"),
    ({"train": {"device": "tpu"}}, "train.device: 'tpu' is not a device"),
    ({"train": {"objective": "f1"}}, "train.objective: 'f1' is not allowed"),
    ({"data": {"protocol": "half-open"}}, "data.protocol: 'half-open' is not allowed; choose one of 'closed', 'open'"),
    ({"data": {"fractions": [0.5, 0.5, 0.5]}}, "data.fractions: must sum to 1"),
    ({"data": {"fractions": [0.5, 0.5]}}, "data.fractions: give three positive fractions"),
    ({"data": {"classes": 1}}, "data.classes: must be ≥ 2 or null"),
    ({"search": {"losses": ["fixed_adacos"]}}, "search.losses: 'fixed_adacos' cannot be searched"),
    ({"search": {"losses": ["cosface"], "m_range": {"arcface": [0, 1]}}}, "has no range for 'cosface'"),
    ({"search": {"s_range": [0, 64]}}, "search.s_range: give [low, high] with 0 < low < high"),
    ({"search": {"m_range": {"arcface": [0, 4]}}}, "search.m_range.arcface: must stay below π"),
    ({"search": {"sampler": "cmaes"}}, "search.sampler: 'cmaes' is not allowed; choose one of 'tpe', 'random', 'grid', 'qmc'"),
    ({"search": {"n_trials": 0}}, "search.n_trials: must be ≥ 1"),
    ({"runs": {"methods": ["softmax"]}}, "runs.methods: must include fixed_adacos"),
    ({"runs": {"methods": ["fixed_adacos", "arcface_tuned"]}}, "is neither hyperparameter-free nor a run of runs.fixed"),
    ({"runs": {"seeds": [1, 1]}}, "runs.seeds: give at least one seed, each once"),
    ({"runs": {"fixed": {"wide": {"s": 3.0}}}}, "lacks the required key runs.fixed.wide.loss"),
    ({"runs": {"fixed": {"wide": {"loss": "arcface", "s": 30.0, "m": 28.6}}}}, "radians within"),
    ({"runs": {"fixed": {"wide": {"loss": "arcfce"}}}}, "runs.fixed.wide.loss: 'arcfce' is unknown"),
    ({"runs": {"fixed": {"softmax": {"loss": "softmax"}}}}, "runs.fixed.softmax: this name is taken"),
    ({"analysis": {"confidence": 1.5}}, "analysis.confidence: must be in [0.5, 1)"),
    ({"report": {"dpi": 5}}, "report.dpi: must be in [50, 600]"),
    ({"search": {"repeats": 0}}, "search.repeats: must be ≥ 1"),
    ({"data": {"protocol": "open"}, "train": {"objective": "knn_accuracy"}},
     "train.objective: knn_accuracy classifies into the training classes, which the open protocol's val and test "
     "classes never are"),
    ({"analysis": {"estimator": "bootstrap"}}, "analysis.estimator: 'bootstrap' is not allowed; choose one of "
                                              "'without_replacement', 'with_replacement'"),
    ({"analysis": {"equivalence_margin": {"accuracy": 0.01}}}, "analysis.equivalence_margin: give one margin for "
                                                               "each metric kind: accuracy, retrieval, verification"),
    ({"analysis": {"equivalence_margin": {"accuracy": 0.0, "retrieval": 0.01, "verification": 0.01}}},
     "analysis.equivalence_margin.accuracy: must be an absolute difference in (0, 1)"),
    ({"analysis": {"power": 0.3}}, "analysis.power: must be in [0.5, 1)"),
    ({"model": {"embedding_size": 1}}, "model.embedding_size: must be ≥ 2"),
])
def test_bad_values_name_the_key_and_what_is_allowed(values, message):
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict(values)
    assert message in str(error.value)


def test_margins_in_degrees_are_converted_explicitly():
    params = StudyParams.from_dict({"runs": {
        "methods": ["fixed_adacos", "published_arcface"],
        "fixed": {"published_arcface": {"loss": "arcface", "s": 64, "m_degrees": 28.6}}}})
    loss, hyperparameters = params.runs.hyperparameters("published_arcface")
    assert loss == "arcface" and hyperparameters == {"s": 64.0, "m": pytest.approx(0.49916, abs=1e-5)}
    with pytest.raises(ConfigError, match="give m .radians. or m_degrees, not both"):
        StudyParams.from_dict({"runs": {"fixed": {"x": {"loss": "arcface", "m": 0.5, "m_degrees": 28.6}}}})
    # SphereFace's m multiplies the angle: a value in degrees would be converted into nonsense.
    with pytest.raises(ConfigError, match="SphereFace's m multiplies the angle.*give m"):
        StudyParams.from_dict({"runs": {"fixed": {"x": {"loss": "sphereface", "m_degrees": 90.0}}}})


def test_load_params_reports_missing_and_broken_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_params(str(tmp_path / "params.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: {epochs: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(str(broken))
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="mapping of sections"):
        load_params(str(listed))


def test_unknown_sections_are_refused_by_name_with_the_known_ones():
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict({"train": {}, "trainig": {"epochs": 3}, "serch": {}})
    lines = str(error.value).splitlines()
    known = "the sections are: data, model, train, search, runs, analysis, report"
    assert lines == [f"unknown section 'trainig'; {known}", f"unknown section 'serch'; {known}"]


def test_numbers_that_pyyaml_reads_as_strings_are_numbers(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("train: {lr: 1e-4, weight_decay: 5e-4}\nsearch: {s_range: [1.0, 1.0e6]}\n")
    assert yaml.safe_load(path.read_text())["train"]["lr"] == "1e-4"  # the YAML 1.1 reading this guards against
    params = load_params(str(path))
    assert (params.train.lr, params.train.weight_decay, params.search.s_range) == (1e-4, 5e-4, (1.0, 1e6))
    assert isinstance(params.train.lr, float)


@pytest.mark.parametrize("values, message", [
    ({"train": {"lr": "fast"}}, "train.lr: expected a finite number, got 'fast'"),
    ({"train": {"lr": "nan"}}, "train.lr: expected a finite number, got 'nan'"),
    ({"train": {"lr": True}}, "train.lr: expected a finite number, got True"),
    ({"train": {"epochs": True}}, "train.epochs: expected an integer, got True"),
    ({"train": {"epochs": "10"}}, "train.epochs: expected an integer, got '10'"),
    ({"model": {"pretrained": 1}}, "model.pretrained: expected true or false, got 1"),
    ({"data": {"dataset": ""}}, "data.dataset: expected a non-empty string, got ''"),
    ({"search": {"losses": "arcface"}}, "search.losses: expected a list, got 'arcface'"),
    ({"data": {"fractions": [0.5, "x", 0.25]}}, "data.fractions[1]: expected a finite number, got 'x'"),
    ({"train": 3}, "train: expected a mapping of keys (epochs, batch_size,"),
])
def test_nothing_is_silently_converted(values, message):
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict(values)
    assert message in str(error.value)


def test_sphereface_is_searched_with_a_margin_of_at_least_one():
    params = StudyParams.from_dict({"search": {"losses": ["arcface", "sphereface"]}})
    assert params.search.m_range["sphereface"] == (1.0, 4.0)
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict({"search": {"losses": ["sphereface"], "m_range": {"sphereface": [0.5, 4.0]}}})
    assert str(error.value) == ("search.m_range.sphereface: SphereFace multiplies the angle by m: "
                                "give [low, high], 1 ≤ low")


def test_each_problem_is_one_line_naming_the_key_the_problem_and_the_fix():
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict({"train": {"lr": -0.1, "optimizer": "adm"}, "analysis": {"confidence": 1.5}})
    assert str(error.value).splitlines() == [
        "train.optimizer: 'adm' is not allowed; choose one of 'adam', 'adamw', 'sgd'",
        "train.lr: must be > 0",
        "analysis.confidence: must be in [0.5, 1)",
    ]
    # A section checked on its own, as `replace` does, is still named as in params.yaml.
    with pytest.raises(ConfigError, match=r"^unknown key train\.data_dir; the keys of train are: epochs, "):
        StudyParams().train.replace(data_dir="x")


def test_params_are_frozen():
    params = StudyParams()
    with pytest.raises(ValueError):
        params.train.lr = 1.0
    assert params.train.replace(lr=1.0).lr == 1.0 and params.train.lr == 3e-3


@pytest.mark.parametrize("values, message", [
    ({"train": {"seed": -1}}, "train.seed: -1 is no seed"),
    ({"search": {"seed": 2**32}}, "search.seed: 4294967296 is no seed"),
    ({"runs": {"seeds": [0, -5]}}, "runs.seeds[1]: -5 is no seed"),
])
def test_seeds_are_whole_numbers_that_numpy_and_torch_both_take(values, message):
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict(values)
    assert message in str(error.value) and "0 to 2**32 − 1" in str(error.value)


def test_the_seed_range_is_numpys():
    """The bound is numpy's own (torch takes more): the last seed accepted is one numpy takes, the next one not."""
    np.random.seed(SEED_LIMIT - 1)
    torch.manual_seed(SEED_LIMIT - 1)
    for refused in (-1, SEED_LIMIT):
        with pytest.raises(ValueError):
            np.random.seed(refused)
    params = StudyParams.from_dict({"search": {"seed": SEED_LIMIT - 1}, "runs": {"seeds": [0, SEED_LIMIT - 1]}})
    assert params.runs.seeds == (0, SEED_LIMIT - 1)


@pytest.mark.parametrize("text, message", [
    ("train:\n  epochs: 010\n", "line 2: 010 is no plain decimal number: YAML 1.1 reads it as 8"),
    ("train:\n  epochs: 0x10\n", "line 2: 0x10 is no plain decimal number: YAML 1.1 reads it as 16"),
    ("train:\n  epochs: 0b11\n", "line 2: 0b11 is no plain decimal number: YAML 1.1 reads it as 3"),
    ("train:\n  epochs: 1:30\n", "line 2: 1:30 is no plain decimal number: YAML 1.1 reads it as 90"),
    ("train:\n  eval_every: 1_000\n", "line 2: 1_000 is no plain decimal number: YAML 1.1 reads it as 1000"),
    ("train:\n  lr: 1:30.5\n", "line 2: 1:30.5 is no plain decimal number: YAML 1.1 reads it as 90.5"),
    ("train:\n  amp: on\n", "line 2: on reads as true in YAML 1.1 but as text in YAML 1.2"),
    ("model:\n  pretrained: No\n", "line 2: No reads as false in YAML 1.1"),
    ("train:\n  lr: 0.1\ntrain:\n  lr: 0.2\n", "line 3: the key train appears twice in one mapping"),
    ("data: &d {seed: 1}\nmodel: *d\n", "line 2: an alias (*name) repeats another part of the file"),
    ("runs:\n  fixed:\n    a:\n      b:\n        c:\n          d:\n            e:\n              f:\n"
     "                g: 1\n", "line 8: nests deeper than 8 levels"),
])
def test_yaml_that_is_not_plain_data_is_refused_at_its_line(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_params(str(path))
    assert str(error.value).startswith(f"{path} is not plain data, {message}")


def test_plain_yaml_reads_as_before(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("train: {epochs: 10, lr: 0.5, amp: false, seed: 0, eval_every: -0, weight_decay: 1e-4}\n"
                    "report: {title: '010', html: True}\nsearch: {s_range: [1.0, 64.0]}\n")
    values = yaml.safe_load(path.read_text())
    with pytest.raises(ConfigError, match="train.eval_every: must be ≥ 1"):  # read, then refused for its value
        load_params(str(path))
    values["train"]["eval_every"] = 10
    path.write_text(yaml.safe_dump(values))
    params = load_params(str(path))
    assert (params.train.epochs, params.train.lr, params.train.weight_decay) == (10, 0.5, 1e-4)
    assert params.report.title == "010" and params.report.html is True and params.train.amp is False


@pytest.mark.parametrize("content, message", [
    (b"", "is empty; write the study's params there (`study preset default`"),
    (b"# nothing yet\n", "is empty"),
    (b"report:\n  title: \xff\n", "is not UTF-8 text: byte 0xff on line 2 is not UTF-8; save the file as UTF-8"),
    (b"#" * (2**20 + 1), "holds 1,048,577 bytes, and a study's params take a few thousand"),
])
def test_files_that_are_no_params_are_refused(tmp_path, content, message):
    path = tmp_path / "params.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as error:
        load_params(str(path))
    assert message in str(error.value)


def test_a_huge_value_is_cut_short_in_its_error():
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict({"train": {"lr": "x" * 100_000, "parallel": "y" * 100_000}})
    assert len(str(error.value)) < 500 and "(100,002 characters)" in str(error.value)


@pytest.mark.parametrize("values, message", [
    ({"data": {"seed": -1}}, "data.seed: -1 is no seed"),
    ({"data": {"seeds": [0, 2**32]}}, "data.seeds[1]: 4294967296 is no seed"),
    ({"analysis": {"seed": -1}}, "analysis.seed: -1 is no seed"),
])
def test_split_seeds_are_blamed_on_their_own_key(values, message):
    with pytest.raises(ConfigError) as error:
        StudyParams.from_dict(values)
    assert message in str(error.value)


@pytest.mark.parametrize("text", ["", "# the study's params, to come\n"], ids=["empty", "comments only"])
def test_an_empty_params_yaml_is_named_in_one_line_by_validate_and_the_study_commands(tmp_path, monkeypatch, capsys,
                                                                                     text):
    """`dvc repro` itself stops first, on DVC's own parse error (it reads params.yaml to expand dvc.yaml; see
    docs/configuration.md): what the project can say, it says in one line with the fix."""
    import stages.validate
    from study import cli

    path = tmp_path / "params.yaml"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        stages.validate.main()
    assert "  params.yaml is empty; write the study's params there (`study preset default`" in stopped.value.code
    assert cli.main(["worker", "--params", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"study: error: {path} is empty; write the study's params there (`study preset default` writes the default "
        "study)"]
