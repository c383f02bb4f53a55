"""Tests for study.sources.strokes: the synthetic pen-stroke source (offline, small specs only)."""

import numpy as np
import pytest
import torch
from PIL import Image

from study.sources import strokes
from study.sources.spec import GeneratedSpec
from study.sources.strokes import (MAX_CLASSES, generate_strokes, load_strokes, parse_stroke_spec, render_class,
                                   stroke_labels)


def test_spec_defaults_and_canonical_form():
    assert parse_stroke_spec("200") == GeneratedSpec("strokes", 200, 40, 28) == parse_stroke_spec(" 200:40:28 ")
    assert parse_stroke_spec("200:25:32") == GeneratedSpec("strokes", 200, 25, 32)
    assert str(parse_stroke_spec("200:25")) == "strokes:200:25:28"
    assert parse_stroke_spec(str(MAX_CLASSES)).num_classes == MAX_CLASSES


@pytest.mark.parametrize("argument, problem", [
    ("0", "num_classes must be at least 1"),
    (str(MAX_CLASSES + 1), f"at most {MAX_CLASSES} classes"),
    ("abc", "num_classes must be an integer"),
    ("10:x", "instances per class must be an integer"),
    ("10:0", "instances per class must be at least 1"),
    ("10:40:x", "image side must be an integer"),
    ("10:40:30", "image side must be one of 28, 32"),
    ("10:40:28:1", "use 'strokes:<num_classes>"),
    ("", "needs an argument"),
])
def test_bad_specs_name_the_problem(argument, problem):
    with pytest.raises(ValueError, match=problem):
        load_strokes(argument)


def test_counts_shapes_labels_and_value_range():
    image_set = load_strokes("25:7")
    assert image_set.num_classes == 25 and len(image_set) == 25 * 7
    assert image_set.images.shape == (175, 1, 28, 28) and image_set.images.dtype == torch.uint8
    np.testing.assert_array_equal(image_set.labels, np.repeat(np.arange(25), 7))
    assert image_set.class_names[:2] == ["stroke-0000", "stroke-0001"] and image_set.class_names[7] == "stroke-0007"
    assert image_set.images.min() == 0 and image_set.images.max() == 255
    # Ink is a minority of the pixels: white strokes on black, as in MNIST.
    assert (image_set.images > 128).float().mean() < 0.3
    assert load_strokes("3:4:32").images.shape == (12, 1, 32, 32)


def test_same_spec_gives_identical_images():
    first, second = generate_strokes(parse_stroke_spec("8:5")), generate_strokes(parse_stroke_spec("8:5"))
    assert torch.equal(first.images, second.images)


def test_class_images_do_not_depend_on_num_classes_or_instance_count():
    small, large = generate_strokes(parse_stroke_spec("6:5")), generate_strokes(parse_stroke_spec("20:5"))
    assert torch.equal(small.images, large.images[: 6 * 5])
    assert small.class_names == large.class_names[:6]
    fewer = generate_strokes(parse_stroke_spec("6:3"))
    assert torch.equal(fewer.images, small.images.reshape(6, 5, 1, 28, 28)[:, :3].reshape(18, 1, 28, 28))
    # A class far out is drawn on its own, without the ones before it.
    assert np.array_equal(render_class(4999, 4)[:2], render_class(4999, 2))


def test_classes_are_distinguishable_and_instances_vary():
    classes, seen = 20, 10
    images = generate_strokes(parse_stroke_spec(f"{classes}:{seen + 1}")).images.float().reshape(classes, seen + 1, -1)
    means, held_out = images[:, :seen].mean(dim=1), images[:, seen]
    predicted = torch.cdist(held_out, means).argmin(dim=1)
    accuracy = (predicted == torch.arange(classes)).float().mean().item()
    assert accuracy >= 0.6, f"nearest class mean got {accuracy:.2f} on {classes} classes (chance 0.05)"
    # No two instances of a class are the same image, and no two classes share a prototype.
    for instances in images:
        assert len(torch.unique(instances, dim=0)) == seen + 1
    assert len(torch.unique(means, dim=0)) == classes


def test_stroke_labels_match_the_generated_ones_without_drawing(monkeypatch):
    spec = parse_stroke_spec("9:4")
    generated = generate_strokes(spec)
    monkeypatch.setattr(strokes, "render_class", lambda *args: pytest.fail("stroke_labels drew images"))
    labels = stroke_labels(spec)
    np.testing.assert_array_equal(labels.labels, generated.labels)
    assert labels.class_names == generated.class_names
    assert labels.images.shape == (36, 1, 1, 1) and labels.images.dtype == torch.uint8


def test_cache_round_trip_and_corrupt_files_regenerated(tmp_path, monkeypatch):
    image_set = load_strokes("10:6", tmp_path)
    cache_file = strokes.cache_path(parse_stroke_spec("10:6"), tmp_path)
    assert cache_file.is_file() and cache_file.parent == tmp_path / "strokes"
    assert [p.name for p in cache_file.parent.iterdir()] == [cache_file.name]  # no temporary left
    assert torch.equal(image_set.images, generate_strokes(parse_stroke_spec("10:6")).images)

    monkeypatch.setattr(strokes, "generate_strokes", lambda spec: pytest.fail("the second load should be cached"))
    cached = load_strokes("10:6", tmp_path)
    assert torch.equal(cached.images, image_set.images) and cached.class_names == image_set.class_names
    np.testing.assert_array_equal(cached.labels, image_set.labels)
    monkeypatch.undo()

    intact = cache_file.read_bytes()
    flipped = bytearray(intact)
    flipped[len(intact) // 2] ^= 0xFF
    for corrupt in (intact[:500], bytes(flipped), b"not a cache file"):
        cache_file.write_bytes(corrupt)
        assert torch.equal(load_strokes("10:6", tmp_path).images, image_set.images)
        assert cache_file.read_bytes() == intact  # regenerated and rewritten whole


def test_cache_key_names_the_generator_version_and_the_libraries(tmp_path, monkeypatch):
    import PIL

    spec = parse_stroke_spec("10:6")
    path = strokes.cache_path(spec, tmp_path)
    assert f"-v{strokes.GENERATOR_VERSION}-" in path.name
    for module, version in ((PIL, "0.0.1"), (np, "0.0.2")):
        with monkeypatch.context() as patch:
            patch.setattr(module, "__version__", version)
            strokes._fingerprint.cache_clear()
            assert strokes.cache_path(spec, tmp_path) != path
    strokes._fingerprint.cache_clear()
    assert strokes.cache_path(spec, tmp_path) == path


def test_save_preview_writes_a_grid(tmp_path):
    path = tmp_path / "preview.png"
    strokes.save_preview(path, num_classes=3, per_class=2)
    with Image.open(path) as image:
        width, height = image.size
    assert height == 3 * (28 * 3 + 4) and width > 2 * 28 * 3
