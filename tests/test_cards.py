"""Tests for study.sources.cards on decks the tests write (an SVG element per card), drawn by rsvg-convert where it
is installed, and on Debian's decks where they are: cards as classes and decks as instances, a card cropped to its
ink however small its page draws it, incomplete decks left out, the cache, and the install line."""

import shutil

import numpy as np
import pytest

import study.sources.cards as cards
import study.sources.svg as svg
from study.sources import image_shape, labels_only, load_dataset, source_of

needs_renderer = pytest.mark.skipif(shutil.which(cards.RENDERER) is None, reason=cards.INSTALL_HINT)


def deck(folder, colour: str, page: int = 100, missing: str | None = None):
    """A deck whose cards are 20×30 rectangles of `colour`, with a card-numbered stripe, on a `page`-wide page."""
    folder.mkdir(parents=True)
    elements = "".join(
        f'<g id="{card}"><rect x="{10 + k % 5}" y="10" width="20" height="30" fill="{colour}"/>'
        f'<rect x="{12 + k % 5}" y="{12 + k % 20}" width="4" height="2" fill="#000"/></g>'
        for k, card in enumerate(cards.CARDS) if card != missing)
    (folder / "deck.svg").write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="{page}" height="{page}">'
                                     f"{elements}</svg>")


@pytest.fixture
def decks(tmp_path):
    root = tmp_path / "carddecks"
    deck(root / "svg-red", "#c00000")
    deck(root / "svg-blue", "#0000c0", page=2000)  # its cards a speck on a large page
    deck(root / "svg-short", "#00c000", missing="queen_heart")  # not all 52: left out
    return root


@needs_renderer
def test_cards_are_classes_and_whole_decks_their_instances(decks, tmp_path):
    spec = f"cards:16:{decks}"
    planned, loaded = labels_only(spec), load_dataset(spec, str(tmp_path / "cache"))
    assert planned.class_names == list(cards.CARDS) and np.array_equal(planned.labels, loaded.labels)
    assert loaded.images.shape == (104, 3, 16, 16) and image_shape(spec) == (16, 16)
    blue, red = loaded.images[0].numpy(), loaded.images[1].numpy()  # 1_club of svg-blue, then of svg-red
    for image, colour in ((blue, 2), (red, 0)):  # each card fills the middle of its image, however small its page
        assert image[colour, 8, 8] > 150 and image[:, 8, 8].sum() - image[colour, 8, 8] < 60
        assert np.abs(image[:, 8, 0].astype(int) - cards.BACKGROUND).max() <= 4  # a 2:3 card centred on grey
    assert source_of(spec) == "cards"


@needs_renderer
def test_a_second_load_reads_the_cache(decks, tmp_path, monkeypatch):
    spec = f"cards:16:{decks}"
    first = load_dataset(spec, str(tmp_path / "cache"))
    monkeypatch.setattr(cards, "render", lambda *args: pytest.fail("drew a card the cache holds"))
    assert np.array_equal(load_dataset(spec, str(tmp_path / "cache")).images, first.images)


def test_without_the_renderer_the_error_names_the_install_line(decks, monkeypatch):
    monkeypatch.setattr(svg.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="apt-get install kdegames-card-data-kf5 librsvg2-bin"):
        labels_only(f"cards:16:{decks}")


@needs_renderer
def test_without_decks_the_error_names_the_install_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="no deck of all 52 cards"):
        labels_only(f"cards:48:{tmp_path}")


@pytest.mark.skipif(shutil.which(cards.RENDERER) is None or not cards.DEFAULT_ROOT.is_dir(), reason=cards.INSTALL_HINT)
def test_debians_decks_give_the_52_cards_in_many_decks():
    assert len(cards.decks(cards.DEFAULT_ROOT)) >= 10
