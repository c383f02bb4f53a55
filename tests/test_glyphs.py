"""Tests for study.sources.glyphs: the synthetic many-class glyph source (offline, small specs only)."""

import unicodedata

import numpy as np
import pytest
import torch
from PIL import Image

from study.sources import glyphs, load_dataset
from study.sources.glyphs import load_glyphs, max_glyph_classes, parse_glyph_spec
from study.splits import split_dataset


def code_points(image_set):
    return [int(name.split()[0][2:], 16) for name in image_set.class_names]


def test_same_spec_gives_byte_identical_images(tmp_path):
    first = load_glyphs("12:5")
    second = load_glyphs("12:5", tmp_path)  # generated afresh into an empty cache
    cached = load_glyphs("12:5", tmp_path)
    for other in (second, cached):
        assert torch.equal(first.images, other.images)
        np.testing.assert_array_equal(first.labels, other.labels)
        assert first.class_names == other.class_names


def test_counts_shapes_and_value_range():
    image_set = load_glyphs("25:7")
    assert image_set.num_classes == 25 and len(image_set) == 25 * 7
    assert image_set.images.shape == (175, 1, 28, 28) and image_set.images.dtype == torch.uint8
    assert np.bincount(image_set.labels).tolist() == [7] * 25
    assert image_set.images.min() == 0 and image_set.images.max() == 255
    assert load_glyphs("3:4:32").images.shape == (12, 1, 32, 32)
    assert parse_glyph_spec("9") == parse_glyph_spec("9:40:28")


def test_classes_are_distinct_characters_named_by_code_point():
    image_set = load_glyphs("200:3")
    points = code_points(image_set)
    assert len(set(points)) == 200 and points == sorted(points)
    assert image_set.class_names[points.index(ord("A"))] == "U+0041 A"
    assert all(name == glyphs.class_name(point) for name, point in zip(image_set.class_names, points))
    means = image_set.images.float().reshape(200, 3, -1).mean(dim=1)
    assert len(torch.unique(means, dim=0)) == 200


def test_character_table_rules():
    from matplotlib import ft2font

    table = glyphs._character_table()
    points = [point for point, _ in table]
    assert len(points) == len(set(points)) == max_glyph_classes() >= 3000
    for point in points:
        character = chr(point)
        assert character.isprintable() and not character.isspace()
        assert not unicodedata.category(character).startswith("M")
    # Look-alikes with an identical rendering are dropped; canonical duplicates too.
    assert ord("A") in points and 0x0391 not in points and 0x0410 not in points  # Greek Α, Cyrillic А
    assert 0x03A9 in points and 0x2126 not in points  # Ω kept, OHM SIGN (NFC → Ω) dropped
    # Every class is drawn by at least 4 faces, each of which maps the character.
    charmaps = [ft2font.FT2Font(str(face.path)).get_charmap() for face in glyphs._faces()]
    for point, face_indices in table[::50]:
        assert len(face_indices) >= 4
        assert all(charmaps[index].get(point) for index in face_indices)


def test_class_images_do_not_depend_on_num_classes_or_instance_count():
    small, large = load_glyphs("6:5"), load_glyphs("20:5")
    assert torch.equal(small.images, large.images[: 6 * 5])
    assert small.class_names == large.class_names[:6]
    fewer = load_glyphs("6:3")
    assert torch.equal(fewer.images, small.images.reshape(6, 5, 1, 28, 28)[:, :3].reshape(18, 1, 28, 28))


@pytest.mark.parametrize("argument, problem", [
    ("0", "num_classes must be at least 1"),
    ("abc", "num_classes must be an integer"),
    ("10:x", "instances per class must be an integer"),
    ("10:0", "instances per class must be at least 1"),
    ("10:40:30", "image side must be one of 28, 32"),
    ("10:40:28:1", "use 'glyphs:<num_classes>"),
    ("", "needs an argument"),
])
def test_bad_specs_name_the_problem(argument, problem):
    with pytest.raises(ValueError, match=problem):
        load_glyphs(argument)


def test_too_many_classes_names_the_maximum():
    maximum = max_glyph_classes()
    with pytest.raises(ValueError, match=f"at most {maximum} classes"):
        load_glyphs(str(maximum + 1))


def test_the_class_count_is_kept_per_install_and_counted_again_when_damaged(tmp_path, monkeypatch):
    maximum = max_glyph_classes()
    assert max_glyph_classes(tmp_path) == maximum
    kept = list((tmp_path / "glyphs").glob("classes-*.txt"))
    assert len(kept) == 1 and kept[0].read_text() == str(maximum)
    monkeypatch.setattr(glyphs, "_character_table", lambda: pytest.fail("counted again although kept"))
    assert max_glyph_classes(tmp_path) == maximum
    kept[0].write_text("garbage")
    monkeypatch.undo()
    assert max_glyph_classes(tmp_path) == maximum and kept[0].read_text() == str(maximum)


def test_registry_loads_and_caches(tmp_path, monkeypatch):
    image_set = load_dataset("glyphs:20", cache_dir=str(tmp_path))
    assert image_set.num_classes == 20 and len(image_set) == 20 * 40
    cache_file = glyphs.cache_path(parse_glyph_spec("20"), tmp_path)
    assert cache_file.is_file() and cache_file.parent == tmp_path / "glyphs"
    assert [p.name for p in cache_file.parent.iterdir()] == [cache_file.name]  # no temporary left

    def no_generation(spec):
        raise AssertionError("the second load should come from the cache")

    monkeypatch.setattr(glyphs, "generate_glyphs", no_generation)
    assert torch.equal(load_dataset("glyphs:20", cache_dir=str(tmp_path)).images, image_set.images)
    monkeypatch.undo()

    intact = cache_file.read_bytes()
    flipped = bytearray(intact)
    flipped[len(intact) // 2] ^= 0xFF
    for corrupt in (intact[:1000], bytes(flipped), b"not a cache file"):
        cache_file.write_bytes(corrupt)
        assert torch.equal(load_dataset("glyphs:20", cache_dir=str(tmp_path)).images, image_set.images)
        assert cache_file.read_bytes() == intact  # regenerated and rewritten whole


def test_open_protocol_gives_disjoint_class_sets(tmp_path):
    splits = split_dataset(load_dataset("glyphs:30", cache_dir=str(tmp_path)), "open", seed=0)
    class_sets = [set(split.class_names) for split in splits.values()]
    assert sum(len(names) for names in class_sets) == 30
    assert not (class_sets[0] & class_sets[1] or class_sets[0] & class_sets[2] or class_sets[1] & class_sets[2])
    assert all(np.bincount(split.labels).tolist() == [40] * split.num_classes for split in splits.values())


def test_save_preview_writes_a_grid(tmp_path):
    path = tmp_path / "preview.png"
    glyphs.save_preview(path, num_classes=3, per_class=2)
    with Image.open(path) as image:
        width, height = image.size
    assert height == 3 * (28 * 3 + 4) and width > 2 * 28 * 3
