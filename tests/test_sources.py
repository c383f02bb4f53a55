"""Tests for the sources' one interface (study.sources.source) and their registry: every source's labels without
images are the labels its load gives, each checks its own spec, and validation holds no source's rule."""

import gzip
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import study.sources.source as source_module
from study.sources import SOURCES, image_shape, labels_only, load_dataset, source_named, source_of
from study.sources.emoji import FONT_PATH, INSTALL_HINT
from study.config import StudyParams
from study.validation import data_problems

REPO = Path(__file__).resolve().parents[1]


def _idx_folder(folder: Path) -> Path:
    """A 2-class IDX folder of 5 images of 3×3 pixels, written from the format (unsigned bytes: type code 0x08)."""
    for kind, array in (("labels-idx1", np.array([0, 1, 0, 1, 1], np.uint8)),
                        ("images-idx3", np.arange(5 * 9, dtype=np.uint8).reshape(5, 3, 3))):
        header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
        (folder / f"train-{kind}-ubyte.gz").write_bytes(gzip.compress(header + array.tobytes()))
    return folder


def _image_folder(folder: Path) -> Path:
    for name, count in (("cat", 2), ("dog", 3)):
        (folder / name).mkdir(parents=True)
        for index in range(count):
            Image.new("RGB", (4, 4), (index * 40, 0, 0)).save(folder / name / f"{index}.png")
    return folder


def _specs(tmp_path: Path) -> list[str]:
    """One small spec of every registered source that works offline on any machine."""
    specs = ["digits", "mnist5k", f"idx:{_idx_folder(tmp_path)}", f"folder:{_image_folder(tmp_path / 'images')}",
             "glyphs:3:2", "strokes:4:3", "compose:2:3:digits"]
    if FONT_PATH.is_file():
        specs.append("emoji:3:2")
    return specs


def test_every_source_is_registered_under_the_name_its_usage_opens_with():
    for name, source in SOURCES.items():
        assert source.name == name and source.usage.partition(":")[0] == name
        assert source_named(re.sub("[<>]", "", source.usage))[0] is source


def test_every_sources_labels_are_the_labels_its_load_gives(tmp_path):
    cache = str(tmp_path / "cache")
    for spec in _specs(tmp_path):
        planned, loaded = labels_only(spec, cache), load_dataset(spec, cache)
        assert np.array_equal(planned.labels, loaded.labels), spec
        assert planned.num_classes == loaded.num_classes, spec


def test_every_sources_shape_is_the_shape_of_its_images(tmp_path):
    cache = str(tmp_path / "cache")
    for spec in _specs(tmp_path):
        loaded = load_dataset(spec, cache)
        expected = None if loaded.images is None else tuple(loaded.images.shape[-2:])  # files: any size
        assert image_shape(spec, cache) == expected, spec
    assert image_shape("torchvision:MNIST") is None  # known once downloaded


def test_labels_come_without_images(tmp_path):
    for spec in _specs(tmp_path):
        planned = labels_only(spec, str(tmp_path / "cache"))
        assert planned.images is None or planned.images.shape[-2:] in ((1, 1), (8, 8)), spec  # digits: loaded whole


def test_a_download_only_source_gives_no_labels_before_prepare():
    assert labels_only("torchvision:FashionMNIST") is None
    with pytest.raises(ValueError, match="torchvision has no dataset 'Imagenette2'"):
        labels_only("torchvision:Imagenette2")


@pytest.mark.parametrize("spec", ["glyphs:10", "strokes:10", "emoji:10"])
def test_a_generated_set_larger_than_memory_is_refused_naming_the_fix(spec, monkeypatch):
    if spec.startswith("emoji") and not FONT_PATH.is_file():
        pytest.skip(INSTALL_HINT)
    monkeypatch.setattr(source_module, "machine_memory", lambda: 10 * 40 * 28 * 28 - 1)  # one byte short at 1 channel
    with pytest.raises(ValueError, match="more than this machine's .*; ask for fewer instances per class"):
        labels_only(spec)
    monkeypatch.setattr(source_module, "machine_memory", lambda: 3 * 10 * 40 * 32 * 32)  # room for every one
    assert labels_only(spec).num_classes == 10


def test_validation_reports_a_sources_own_check_under_its_key(monkeypatch):
    monkeypatch.setattr(source_module, "machine_memory", lambda: 1000)
    params = StudyParams.from_dict({"data": {"dataset": "strokes:10", "protocol": "closed", "seeds": None},
                                    "model": {"name": "mlp", "embedding_size": 16}, "train": {"device": "cpu"}})
    problems = data_problems(params)
    assert any(problem.startswith("data.dataset: strokes:10:40:28 makes 400 images") for problem in problems), problems


def test_the_data_source_is_each_sources_own_answer():
    assert [source_of(spec) for spec in ("mnist5k", "torchvision:MNIST", "compose:3:20:mnist5k",
                                         "torchvision:FashionMNIST", "idx:/usr/share/datasets/fashion-mnist/",
                                         "compose:2:60:idx:/data/fashion-mnist", "torchvision:CIFAR10",
                                         "folder:~/faces", "glyphs:100", "digits")] == [
        "mnist", "mnist", "mnist", "fashion-mnist", "fashion-mnist", "fashion-mnist", "cifar10", "faces", "glyphs",
        "digits"]


def test_only_a_folder_reading_source_names_a_folder_to_watch(tmp_path):
    folder = _idx_folder(tmp_path)
    assert SOURCES["idx"].folder(str(folder)) == folder.resolve()
    assert SOURCES["idx"].folder(str(tmp_path / "missing")) is None
    assert SOURCES["folder"].folder(str(folder)) == folder.resolve()
    assert [name for name, source in SOURCES.items() if source.folder is not None] == ["idx", "folder"]


def test_validation_holds_no_sources_rule():
    """Each source answers for its own spec: validation.py names no source, so a new source needs no change there."""
    text = (REPO / "study" / "validation.py").read_text(encoding="utf-8")
    named = [name for name in SOURCES if re.search(rf"""["']{name}:?["']""", text)]
    assert named == [], f"validation.py branches on the source(s) {named}"


@pytest.mark.parametrize("spec, message", [
    ("wesnoth:x", "bad wesnoth spec 'wesnoth:x': the image side must be a whole number, e.g. 'wesnoth:32'"),
    ("wesnoth:8", "the image side must be 16 to 128 pixels \\(its sprites are 72×72\\), got 8"),
    ("freedroid:big", "bad freedroid spec 'freedroid:big': the image side must be a whole number"),
    ("freedroid:200", "the image side must be 16 to 180 pixels \\(its views are 132×180\\), got 200"),
    ("cards:big", "bad cards spec 'cards:big': the image side must be a whole number, e.g. 'cards:48'"),
    ("cards:8", "the image side must be 16 to 256 pixels, got 8")])
def test_a_package_sources_bad_spec_names_its_fault(spec, message):
    with pytest.raises(ValueError, match=message):
        labels_only(spec)
