"""Presets: each one validates, carries its published setup exactly, and is written out as valid params."""

import math
from pathlib import Path

import pytest
import yaml

from study.cli import main
from study.config import ConfigError, StudyParams, load_params
from study.presets import apply_params, build_preset, preset_names, write_params

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


# --- `study preset` edits params.yaml in place ------------------------------------------------


def shipped_params_copy(tmp_path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_bytes((REPO / "params.yaml").read_bytes())
    return path


def test_preset_default_on_the_shipped_params_changes_no_byte(tmp_path):
    path = shipped_params_copy(tmp_path)
    written = path.stat().st_mtime_ns
    assert main(["preset", "default", "--output", str(path)]) == 0
    assert path.read_bytes() == (REPO / "params.yaml").read_bytes()
    assert path.stat().st_mtime_ns == written  # not even rewritten: DVC sees nothing to rerun


@pytest.mark.parametrize("name", preset_names())
def test_a_preset_changes_only_its_own_lines_and_keeps_every_comment(tmp_path, name):
    path = shipped_params_copy(tmp_path)
    before = path.read_text(encoding="utf-8").splitlines()
    assert main(["preset", name, "--output", str(path)]) == 0
    after = path.read_text(encoding="utf-8").splitlines()
    assert load_params(str(path)) == build_preset(name)
    # Every full-line comment survives, in order; the key lines stay in the shipped order.
    comments = [line for line in before if line.lstrip().startswith("#")]
    assert [line for line in after if line.lstrip().startswith("#")] == comments
    shipped_keys = [key_of(line) for line in before if key_of(line)]
    assert [key for key in map(key_of, after) if key in shipped_keys] == shipped_keys
    # A line changes only where the preset sets that key (or adds a run the preset defines).
    preset = yaml.safe_load((REPO / "presets" / f"{name}.yaml").read_text(encoding="utf-8"))
    changed = {key_of(line) for line in after if line not in before}
    assert changed <= {key for section in preset.values() for key in section} | set(preset["runs"].get("fixed", {}))
    # An end-of-line comment stays on its key's line.
    for line in before:
        if " # " in line and key_of(line):
            comment = line[line.index(" # "):].strip()
            assert any(key_of(new) == key_of(line) and new.endswith(comment) for new in after), line


def key_of(line: str) -> str | None:
    """The key a `key: value` line of a params file sets, None for comments and list items."""
    text = line.strip()
    return text.partition(":")[0] if ":" in text and not text.startswith(("#", "-")) else None


def test_a_preset_and_back_restores_the_shipped_bytes(tmp_path):
    path = shipped_params_copy(tmp_path)
    assert main(["preset", "mnist5k-closed", "--output", str(path)]) == 0
    assert path.read_bytes() != (REPO / "params.yaml").read_bytes()
    assert main(["preset", "default", "--output", str(path)]) == 0
    assert path.read_bytes() == (REPO / "params.yaml").read_bytes()


def test_preset_set_changes_that_key_alone(tmp_path):
    path = shipped_params_copy(tmp_path)
    before = path.read_text(encoding="utf-8").splitlines()
    assert main(["preset", "default", "--set", "train.epochs=3", "--output", str(path)]) == 0
    after = path.read_text(encoding="utf-8").splitlines()
    shipped = ("  epochs: 64                # long enough when every method meets the plateau rule "
               "(reports/tables/plateau.csv)")
    # The value changes; its comment stays in its column.
    assert [(old, new) for old, new in zip(before, after) if old != new] == [(shipped, shipped.replace("64 ", "3  "))]


def test_preset_fills_a_file_that_lacks_keys_and_drops_runs_it_no_longer_has(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("# mine\nruns:\n  seeds: [0, 1]  # two\n  fixed:\n    old: {loss: arcface, s: 30.0, m: 0.2}\n"
                    "train:\n", encoding="utf-8")
    assert apply_params(build_preset("seed003-mnist"), path, "seed003-mnist")
    assert load_params(str(path)) == build_preset("seed003-mnist")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# mine\ndata:\n") and "  seeds: [0, 1, 2] # two\n" in text and "old:" not in text
    assert "seed003_arcface: {loss: arcface, s: 64.0, m_degrees: 28.6}" in text  # only the fields it sets


def test_a_file_study_preset_wrote_names_the_new_preset_and_keeps_what_a_person_added(tmp_path):
    path = tmp_path / "new.yaml"
    assert main(["preset", "fashion", "--output", str(path)]) == 0
    assert path.read_text(encoding="utf-8").startswith("# Written by `study preset fashion`")
    path.write_text(path.read_text(encoding="utf-8").replace("  epochs: 3\n", "  epochs: 3  # quick\n"),
                    encoding="utf-8")
    assert main(["preset", "long-run", "--set", "train.epochs=3", "--output", str(path)]) == 0
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Written by `study preset long-run --set train.epochs=3`")
    assert "  epochs: 3  # quick\n" in text and load_params(str(path)) == build_preset("long-run", ["train.epochs=3"])
