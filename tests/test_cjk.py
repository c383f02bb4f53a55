"""The cjk source (study/sources/cjk.py) on fonts the tests build with fontTools (so CI needs no font package), and
on Debian's fonts-noto-cjk where it is installed. The sources' shared checks (labels equal to the loaded ones, the
shape) run here on the test fonts: on Noto's own, building the character table takes seconds."""

import numpy as np
import pytest
from fontTools.fontBuilder import FontBuilder
from fontTools.pens.ttGlyphPen import TTGlyphPen

from study.sources import cjk, labels_only, load_dataset, source_of
from study.sources.glyphs import jittered_character

# Each test character's strokes: boxes (x0, y0, x1, y1) in font units on a 1,000-unit em.
BOXES = {
    0x4E00: [(100, 350, 900, 450)],                                         # 一: one bar
    0x4E01: [(100, 700, 900, 800), (450, -50, 550, 800)],                   # 丁: a bar and a stem
    0x4E02: [(100, 700, 900, 800), (100, 100, 900, 200)],                   # two bars
    0x4E03: [(100, 700, 900, 800), (100, 100, 900, 200)],                   # drawn as 0x4E02: a duplicate, dropped
    0x4E04: [(100, -50, 200, 800), (800, -50, 900, 800), (100, 350, 900, 450)],
    0x53E3: [(100, -50, 900, 50), (100, 700, 900, 800), (100, -50, 200, 800), (800, -50, 900, 800)],  # 口
}
ONLY_IN_FIRST = 0x4E05  # mapped in one face only: not a class
BLANK_IN_SECOND = 0x4E06  # mapped in both, no ink in the second: not a class


def build_font(path, family: str, boxes: dict[int, list[tuple[int, int, int, int]]], shift: int = 0) -> None:
    """A TrueType font of `family` whose characters are the given boxes (moved right by `shift` units)."""
    names = {code_point: f"uni{code_point:04X}" for code_point in boxes}
    glyphs = {".notdef": TTGlyphPen(None).glyph()}
    for code_point, name in names.items():
        pen = TTGlyphPen(None)
        for x0, y0, x1, y1 in boxes[code_point]:
            pen.moveTo((x0 + shift, y0))
            pen.lineTo((x0 + shift, y1))
            pen.lineTo((x1 + shift, y1))
            pen.lineTo((x1 + shift, y0))
            pen.closePath()
        glyphs[name] = pen.glyph()
    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder([".notdef", *names.values()])
    builder.setupCharacterMap({code_point: name for code_point, name in names.items()})
    builder.setupGlyf(glyphs)
    builder.setupHorizontalMetrics({name: (1000, 0) for name in glyphs})
    builder.setupHorizontalHeader(ascent=880, descent=-120)
    builder.setupNameTable({"familyName": family, "styleName": "Regular"})
    builder.setupOS2(sTypoAscender=880, sTypoDescender=-120, usWinAscent=880, usWinDescent=120)
    builder.setupPost()
    builder.save(str(path))


@pytest.fixture
def test_fonts(tmp_path, monkeypatch):
    """Three fonts the source reads instead of Noto's: two faces of the test characters, and a monospaced one that
    the source leaves out (it maps fewer characters: were it read, the classes would shrink)."""
    folder = tmp_path / "fonts"
    folder.mkdir()
    build_font(folder / "A.ttf", "Test Sans", {**BOXES, ONLY_IN_FIRST: BOXES[0x4E00],
                                               BLANK_IN_SECOND: BOXES[0x4E01]})
    build_font(folder / "B.ttf", "Test Serif", {**BOXES, BLANK_IN_SECOND: []}, shift=30)
    build_font(folder / "C.ttf", "Test Mono", {0x4E00: BOXES[0x4E00], 0x53E3: BOXES[0x53E3]})
    monkeypatch.setattr(cjk, "FONT_FOLDER", folder)
    monkeypatch.setattr(cjk, "FONT_FILES", ("A.ttf", "B.ttf", "C.ttf"))
    for cached in (cjk._faces, cjk._character_table, cjk._fingerprint):
        cached.cache_clear()
    yield folder
    for cached in (cjk._faces, cjk._character_table, cjk._fingerprint):
        cached.cache_clear()


def test_a_class_is_an_ideograph_every_face_draws_less_duplicates_in_code_point_order(test_fonts):
    assert len(cjk._faces()) == 2  # the monospaced face is left out
    assert cjk._character_table() == (0x4E00, 0x4E01, 0x4E02, 0x4E04, 0x53E3)
    assert cjk.max_cjk_classes() == 5
    with pytest.raises(ValueError, match="cjk has at most 5 classes on this install .* ask for at most 5"):
        load_dataset("cjk:6:2")


def test_images_are_drawn_in_the_faces_as_glyphs_draws_and_the_same_whatever_is_asked_for(test_fonts, tmp_path):
    images = load_dataset("cjk:4:6:28", str(tmp_path / "cache"))
    assert images.class_names[:2] == ["U+4E00 一", "U+4E01 丁"]
    assert tuple(images.images.shape) == (24, 1, 28, 28) and images.labels.tolist() == sorted(images.labels.tolist())
    # A prefix of a larger set: class k and its first instances do not depend on how many are asked for.
    larger = load_dataset("cjk:5:9:28", str(tmp_path / "cache"))
    assert np.array_equal(larger.images.numpy()[9:15], images.images.numpy()[6:12])
    # Cached: read back from the cache file byte for byte.
    assert list((tmp_path / "cache" / "cjk").glob("cjk-4-6-28-v1-*.npz"))
    assert np.array_equal(load_dataset("cjk:4:6:28", str(tmp_path / "cache")).images, images.images)
    # Both faces are drawn, and a class's instances differ (jitter and noise), while staying its own: the bar of 一
    # lies flat, the stem of 丁 stands.
    bar, stem = images.images.numpy()[:6, 0].astype(float), images.images.numpy()[6:12, 0].astype(float)
    assert len({image.tobytes() for image in bar}) == 6
    assert (bar.sum(axis=2).std(axis=1) > bar.sum(axis=1).std(axis=1)).all()  # ink in a few rows: horizontal
    below = [(images[:, 19:] > 100).sum(axis=(1, 2)) for images in (stem, bar)]  # bright pixels in the lowest third
    assert (below[0] > below[1]).all() and below[0].sum() > 5 * (below[1].sum() + 1)  # 丁's stem reaches down
    # Centred on 口's middle: a character's ink sits about the image's centre, within the jitter's shift.
    rows = np.arange(28)
    for image in images.images.numpy()[:, 0].astype(float):
        ink = np.clip(image - 40, 0, None)
        assert abs((ink.sum(axis=1) * rows).sum() / ink.sum() - 13.5) < 5


def test_labels_come_without_rendering_and_equal_the_loaded_ones(test_fonts, tmp_path):
    cache = str(tmp_path / "cache")
    planned = labels_only("cjk:3:4", cache)
    assert planned.images.shape[-2:] == (1, 1)
    assert np.array_equal(planned.labels, load_dataset("cjk:3:4", cache).labels)


def test_missing_fonts_name_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setattr(cjk, "FONT_FOLDER", tmp_path)
    cjk._faces.cache_clear()
    cjk._character_table.cache_clear()
    with pytest.raises(FileNotFoundError, match="apt-get install fonts-noto-cjk"):
        cjk.max_cjk_classes()
    cjk._faces.cache_clear()


def test_it_pools_with_glyphs_and_is_rendered_by_code():
    assert source_of("cjk:100") == "glyphs"
    from study.sources import SOURCES
    assert SOURCES["cjk"].generated and SOURCES["cjk"].shape("100:20", None) == (32, 32)
    with pytest.raises(ValueError, match="image side must be one of 28, 32"):
        load_dataset("cjk:10:20:64")


@pytest.mark.skipif(not all((cjk.FONT_FOLDER / name).is_file() for name in cjk.FONT_FILES),
                    reason=cjk.INSTALL_HINT)
def test_the_installed_fonts_give_over_ten_thousand_classes_in_twenty_faces():
    """Read from the fonts' character maps (the table itself, with its duplicate check, takes seconds to build)."""
    faces = cjk._faces()
    assert len(faces) == 20
    assert len(frozenset.intersection(*(mapped for _, mapped in faces))) >= 10_000
    drawn = jittered_character(cjk.CJK_SEED, 0x7510, [face for face, _ in faces], 4, 32)
    assert drawn.shape == (4, 32, 32) and (drawn.max(axis=(1, 2)) > 200).all()  # white ink, noise on it
