"""Tests for study.sources.iconify on an @iconify/json package the tests write (sets of tiny SVG icons), drawn by
rsvg-convert where it is installed: a name and its style variants as one class, one icon a set, the licence and
category filters, the names drawn by the most sets first, and the install line."""

import json
import shutil

import numpy as np
import pytest

import study.sources.iconify as iconify
from study.sources import image_shape, labels_only, load_dataset, source_of

needs_renderer = pytest.mark.skipif(shutil.which(iconify.RENDERER) is None, reason=iconify.INSTALL_HINT)
BODY = '<rect x="{x}" y="4" width="8" height="8" fill="currentColor"/>'


def package(root, sets: int = 12):
    """`sets` permissive sets drawing 'home' (set 0 only as 'home-outline', set 1 as both), 'star' in all but two,
    'bell' in 9 (too few); a GPL set, an emoji set and an emoji set filed under no category drawing 'bell' too, which
    are not read, and a permissive set under no category, which is (drawing nothing the tests ask for)."""
    (root / "json").mkdir(parents=True)
    collections = {}
    for number in range(sets + 4):
        prefix = f"set{number:02d}"
        gpl, emoji, uncategorised = number == sets, number >= sets + 1, number >= sets + 2
        collections[prefix] = {"name": "Fluent Emoji" if number == sets + 2 else "Feather Icons" if uncategorised
                               else prefix, "license": {"spdx": "GPL-3.0-or-later" if gpl else "MIT"}}
        if not uncategorised:
            collections[prefix]["category"] = "Emoji" if emoji else "UI 24px"
        names = {"home-outline": 1} if number == 0 else {"home": 2, "home-outline": 1} if number == 1 else {"home": 2}
        if number < sets - 2:
            names["star"] = 3
        if number < 9 or gpl or (emoji and number < sets + 3):
            names["bell"] = 4
        if number == sets + 3:
            names = {"feather": 5}
        icons = {name: {"body": BODY.format(x=x)} for name, x in names.items()}
        (root / "json" / f"{prefix}.json").write_text(json.dumps({"prefix": prefix, "icons": icons, "width": 16,
                                                                  "height": 16}))
    (root / "collections.json").write_text(json.dumps(collections))
    (root / "package.json").write_text(json.dumps({"version": "9.9.9"}))
    return root


def test_a_class_is_a_name_with_its_variants_one_icon_a_set(tmp_path):
    root = package(tmp_path)
    assert iconify.icon_sets(root) == [f"set{k:02d}" for k in (*range(12), 15)]  # GPL and emoji sets not read
    chosen = dict(iconify.icons(root, 2))
    assert list(chosen) == ["home", "star"]  # bell: 9 sets, under MIN_SETS
    assert len(chosen["home"]) == 12 and len(chosen["star"]) == 10
    assert dict(chosen["home"])["set00"] == "home-outline" and dict(chosen["home"])["set01"] == "home"  # plain first
    with pytest.raises(ValueError, match="2 icon names drawn by at least 10 sets here, 3 were asked for"):
        iconify.icons(root, 3)


def test_the_names_drawn_by_the_most_sets_come_first(tmp_path):
    assert [name for name, _ in iconify.icons(package(tmp_path), 1)] == ["home"]  # 12 sets, against star's 10


def test_a_style_variant_is_its_plain_name():
    assert [iconify.canonical(name) for name in ("home-outline", "home-2", "arrow-left-bold", "star")] == \
        ["home", "home", "arrow-left", "star"]


@needs_renderer
def test_the_labels_are_the_loads_and_an_icon_is_black_on_white(tmp_path):
    spec = f"iconify:2:16:{package(tmp_path / 'package')}"
    planned, loaded = labels_only(spec), load_dataset(spec, str(tmp_path / "cache"))
    assert np.array_equal(planned.labels, loaded.labels) and planned.class_names == loaded.class_names == ["home",
                                                                                                       "star"]
    assert loaded.images.shape == (22, 3, 16, 16) and image_shape(spec) == (16, 16)
    home = loaded.images[1].numpy()  # set01's plain 'home': a black square at x = 2..10 of 16
    assert home[:, 8, 5].max() < 40 and home[:, 8, 14].min() > 215
    assert source_of(spec) == "iconify"


@needs_renderer
def test_an_icon_the_renderer_cannot_draw_is_named_with_its_set_and_the_fix(tmp_path, monkeypatch):
    drawn = iconify.draw_svg
    monkeypatch.setattr(iconify, "draw_svg", lambda arguments, svg: (None, "rendering error: NoMemory")
                        if b'x="3"' in svg else drawn(arguments, svg))  # 'star' (x = 3) fails in every set
    with pytest.raises(RuntimeError, match=r"could not draw set00:star \(name 'star'\): rendering error: NoMemory; "
                                           r"its set can be left out"):
        load_dataset(f"iconify:2:16:{package(tmp_path / 'package')}", str(tmp_path / "cache"))


def test_without_the_package_the_error_says_how_to_unpack_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="npm pack @iconify/json"):
        labels_only(f"iconify:10:32:{tmp_path}")


@pytest.mark.parametrize("argument, message", [("many", "whole numbers"), ("1", "at least 2 classes"),
                                               ("10:8", "image side of 16 to 256")])
def test_a_bad_spec_names_its_fault(argument, message):
    with pytest.raises(ValueError, match=message):
        labels_only(f"iconify:{argument}")
