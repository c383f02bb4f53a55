"""Tests for study.sources.emoji: the synthetic many-class colour emoji source (offline, small specs only)."""

import numpy as np
import pytest
import torch
from PIL import Image

from study.sources import emoji
from study.sources.emoji import emoji_labels, load_emoji, max_emoji_classes, parse_emoji_spec, render_class
from study.sources.spec import GeneratedSpec

if not emoji.FONT_PATH.is_file():
    pytest.skip(f"the emoji font {emoji.FONT_PATH} is missing: {emoji.INSTALL_HINT}", allow_module_level=True)


def test_spec_defaults_and_text():
    assert parse_emoji_spec("9") == parse_emoji_spec("9:40:32") == GeneratedSpec("emoji", 9, 40, 32)
    assert str(parse_emoji_spec(" 12:5:28 ")) == "emoji:12:5:28"


@pytest.mark.parametrize("argument, problem", [
    ("0", "num_classes must be at least 1"),
    ("abc", "num_classes must be an integer"),
    ("10:x", "instances per class must be an integer"),
    ("10:0", "instances per class must be at least 1"),
    ("10:40:30", "image side must be one of 28, 32"),
    ("10:40:32:1", "use 'emoji:<num_classes>"),
    ("", "needs an argument"),
])
def test_bad_specs_name_the_problem(argument, problem):
    with pytest.raises(ValueError, match=problem):
        load_emoji(argument)


def test_counts_shapes_and_names():
    image_set = load_emoji("6:4")
    assert image_set.images.shape == (24, 3, 32, 32) and image_set.images.dtype == torch.uint8
    assert np.bincount(image_set.labels).tolist() == [4] * 6
    assert image_set.class_names[0] == "U+00A9 ©"  # the first emoji the font draws, by code point
    assert load_emoji("2:3:28").images.shape == (6, 3, 28, 28)
    assert image_set.class_names == [emoji.class_name(point) for point in emoji._emoji_table()[:6]]
    assert emoji.class_name(0x1F600) == "U+1F600 😀"


def test_emoji_table_rules():
    table = emoji._emoji_table()
    assert list(table) == sorted(set(table)) and len(table) == max_emoji_classes() >= 1000
    # Components and parts of sequences are no classes: digits, '#', '*', skin tones, regional indicators,
    # hair, the joiner, the keycap mark, tags and Noto's private-use flags.
    for point in (*map(ord, "0123456789#*"), 0x1F3FB, 0x1F3FF, 0x1F1E6, 0x1F1FF, 0x1F9B0, 0x200D, 0x20E3,
                  0xE0067, 0xFE4E5):
        assert point not in table
    assert {0x1F600, 0x1F34B, 0x1F680, 0x2764} <= set(table)  # 😀 🍋 🚀 ❤
    bitmaps = {emoji._render_cell(point).tobytes() for point in table[::25]}
    assert len(bitmaps) == len(table[::25])


def test_same_spec_gives_byte_identical_images_and_prefixes_agree():
    small = load_emoji("6:5")
    assert torch.equal(small.images, load_emoji("6:5").images)
    large = load_emoji("10:5")
    assert torch.equal(small.images, large.images[: 6 * 5]) and small.class_names == large.class_names[:6]
    fewer = load_emoji("6:3")
    assert torch.equal(fewer.images, small.images.reshape(6, 5, 3, 32, 32)[:, :3].reshape(18, 3, 32, 32))


def test_images_are_in_colour_and_instances_differ():
    images = load_emoji("10:8").images.float()
    assert (images[:, 0] - images[:, 1]).abs().mean() > 20 and (images[:, 1] - images[:, 2]).abs().mean() > 20
    per_class = images.reshape(10, 8, -1)
    assert per_class.std(dim=1).mean() > 20  # jitter and backgrounds vary, not just noise
    for instances in per_class:
        assert len(torch.unique(instances, dim=0)) == 8


def test_classes_are_told_apart_by_nearest_class_mean_on_raw_pixels():
    classes = np.linspace(0, max_emoji_classes() - 1, 20).round().astype(int)
    pixels = np.stack([render_class(int(k), 20) for k in classes]).astype(np.float32).reshape(20, 20, -1)
    means, held_out = pixels[:, :10].mean(axis=1), pixels[:, 10:].reshape(200, -1)
    distances = ((held_out[:, None, :] - means[None]) ** 2).sum(axis=-1)
    accuracy = (distances.argmin(axis=1) == np.repeat(np.arange(20), 10)).mean()
    assert accuracy >= 0.25  # chance is 0.05; random backgrounds and jitter keep raw pixels far from perfect


def test_too_many_classes_names_the_maximum():
    maximum = max_emoji_classes()
    with pytest.raises(ValueError, match=f"at most {maximum} classes"):
        load_emoji(str(maximum + 1))
    with pytest.raises(ValueError, match=f"at most {maximum} classes"):
        emoji_labels(GeneratedSpec("emoji", maximum + 1, 40, 32))


def test_labels_match_the_generated_set_without_drawing_it(monkeypatch):
    image_set = load_emoji("7:3")
    monkeypatch.setattr(emoji, "render_class", lambda *args: pytest.fail("emoji_labels drew images"))
    labels = emoji_labels(parse_emoji_spec("7:3"))
    np.testing.assert_array_equal(labels.labels, image_set.labels)
    assert labels.class_names == image_set.class_names and len(labels) == len(image_set)


def test_cache_round_trip_and_a_corrupt_cache_is_regenerated(tmp_path, monkeypatch):
    image_set = load_emoji("5:4", tmp_path)
    assert torch.equal(image_set.images, load_emoji("5:4").images)
    cache_file = emoji.cache_path(parse_emoji_spec("5:4"), tmp_path)
    assert cache_file.is_file() and cache_file.parent == tmp_path / "emoji"
    assert [p.name for p in cache_file.parent.iterdir()] == [cache_file.name]  # no temporary left

    monkeypatch.setattr(emoji, "generate_emoji", lambda spec: pytest.fail("the second load should be cached"))
    cached = load_emoji("5:4", tmp_path)
    assert torch.equal(cached.images, image_set.images) and cached.class_names == image_set.class_names
    monkeypatch.undo()

    intact = cache_file.read_bytes()
    flipped = bytearray(intact)
    flipped[len(intact) // 2] ^= 0xFF
    for corrupt in (intact[:1000], bytes(flipped), b"not a cache file"):
        cache_file.write_bytes(corrupt)
        assert torch.equal(load_emoji("5:4", tmp_path).images, image_set.images)
        assert cache_file.read_bytes() == intact  # regenerated and rewritten whole


def test_hue_rotation_keeps_greys_and_luminance():
    identity, turned = emoji._hue_rotation(np.array([0.0, 10.0]))
    np.testing.assert_allclose(identity, np.eye(3), atol=1e-6)
    np.testing.assert_allclose(turned.sum(axis=1), 1, atol=1e-6)  # a grey stays the same grey
    luminance = np.array([0.213, 0.715, 0.072])
    np.testing.assert_allclose(luminance @ turned, luminance, atol=1e-3)  # the published coefficients are rounded
    assert not np.allclose(turned, np.eye(3), atol=0.05)


def test_a_missing_font_names_the_package_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(emoji, "FONT_PATH", tmp_path / "NotoColorEmoji.ttf")
    emoji._font.cache_clear()
    emoji._emoji_table.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match=r"apt-get install fonts-noto-color-emoji"):
            load_emoji("3")
    finally:
        monkeypatch.undo()
        emoji._font.cache_clear()
        emoji._emoji_table.cache_clear()


def test_save_preview_writes_an_rgb_grid(tmp_path):
    path = tmp_path / "preview.png"
    emoji.save_preview(path, num_classes=3, per_class=2)
    with Image.open(path) as image:
        assert image.mode == "RGB"
        width, height = image.size
    assert height == 3 * (32 * 3 + 4) and width > 2 * 32 * 3
