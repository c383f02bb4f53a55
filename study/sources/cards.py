"""Playing cards drawn by people (`cards[:<image side>[:<decks folder>]]`): the 52 cards of the SVG decks in Debian's
kdegames-card-data-kf5 (GPL/LGPL; decks by different artists, from Dondorf's 19th-century pattern to Oxygen's), read
offline.

A class is a card (`queen_heart`), its instances the same card in each deck: an open split holds out whole cards,
so a model is tested on cards it never saw, drawn by every artist. A deck is a folder `svg-*/` holding one .svgz or
.svg with an element per card, named as KDE's decks name them (`1_club` … `king_spade`); a deck that lacks one of
the 52, or whose first card the renderer cannot draw (one of the package's 16 gives its cards no size), is left out.

Each card is drawn by librsvg's `rsvg-convert` (Debian's librsvg2-bin). Its reported extents are not the card's in
every deck (some come out a few pixels tall on a larger page), so a card is cropped to its ink (its non-transparent
pixels) and drawn again larger until the ink is at least twice the image side; then it is centred on a mid-grey
square and resized with Lanczos filtering (48 px by default, where the pips of a ten still read). The images are kept
under the cache folder, named for the decks and the renderer, so a change of either draws them again. The labels
come from the decks' element ids alone.
"""

from __future__ import annotations

import gzip
import hashlib
import math
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from study.sources.cache import cache_file, cached_image_set
from study.sources.image_set import ImageSet
from study.sources.source import Source, blank_images, side_and_folder, square_resized
from study.sources.svg import RENDERER, draw_svg, renderer_version, require_renderer

DEFAULT_ROOT = Path("/usr/share/carddecks")
INSTALL_HINT = ("install Debian's kdegames-card-data-kf5 and librsvg2-bin (apt-get install kdegames-card-data-kf5 "
                "librsvg2-bin), or name a folder of svg-*/ decks as 'cards:<image side>:<folder>'")
DEFAULT_SIDE = 48
SIDES = range(16, 257)
MAX_HEIGHT = 8000  # pixels of a render: beyond it a card too small on its page is refused, not drawn blurred
VERSION = 1
BACKGROUND = (128, 128, 128)
RANKS = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "jack", "queen", "king")
SUITS = ("club", "diamond", "heart", "spade")
CARDS = tuple(f"{rank}_{suit}" for suit in SUITS for rank in RANKS)


def parse_cards_spec(argument: str) -> tuple[int, Path]:
    """(image side, decks folder) of `cards[:<image side>[:<decks folder>]]`; a ValueError names the fault."""
    return side_and_folder("cards", argument, DEFAULT_SIDE, SIDES, DEFAULT_ROOT)


def _text(deck: Path) -> str:
    raw = deck.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8", errors="replace")


def _draw(deck: Path, card: str, height: int) -> Image.Image | None:
    """`card` of `deck` drawn `height` pixels tall by the renderer; None where it cannot."""
    return draw_svg([f"--export-id={card}", "--height", str(height), str(deck)])[0]


def decks(root: Path) -> list[Path]:
    """The deck files under `root` that hold all 52 cards and that the renderer draws, sorted; a FileNotFoundError
    names the install line when there is none, or when the renderer is missing."""
    require_renderer("cards", INSTALL_HINT)
    folders = sorted(folder for folder in root.glob("svg-*") if folder.is_dir()) if root.is_dir() else []
    files = [path for folder in folders for path in sorted(folder.iterdir()) if path.suffix in (".svg", ".svgz")]
    whole = [path for path in files
             if all(f'id="{card}"' in _text(path) for card in CARDS) and _draw(path, CARDS[0], 16) is not None]
    if not whole:
        raise FileNotFoundError(f"no deck of all 52 cards (svg-*/*.svgz) under {root}; {INSTALL_HINT}")
    return whole


def _labels(count: int) -> np.ndarray:
    return np.repeat(np.arange(len(CARDS)), count)  # card-major: a card's instances are its decks, in order


def cards_labels(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """The cards' labels and names from the decks' element ids, with blank stand-ins for the images."""
    return blank_images(_labels(len(decks(parse_cards_spec(argument)[1]))), list(CARDS), channels=3)


def _ink(image: Image.Image) -> tuple[int, int, int, int] | None:
    """The box of `image`'s non-transparent pixels (left, top, right, bottom); None where all are transparent."""
    return image.getchannel("A").getbbox()


def render(deck: Path, card: str, side: int) -> np.ndarray:
    """One card of one deck, cropped to its ink at least 2 × `side` tall, centred on grey and resized."""
    height = 4 * side
    while True:
        image = _draw(deck, card, height)
        box = None if image is None else _ink(image)
        if box is None:
            raise RuntimeError(f"{RENDERER} drew nothing of {card} in {deck}")
        inked = box[3] - box[1]
        if inked >= 2 * side or height >= MAX_HEIGHT:
            break
        height = min(MAX_HEIGHT, math.ceil(height * 2 * side / max(inked, 1)))
    if inked < 2 * side:
        raise RuntimeError(f"{card} of {deck} is {inked} pixels tall even drawn {height} pixels tall: too small on "
                           "its page to draw")
    return square_resized(image.crop(box), side, BACKGROUND)


def _install(found: list[Path]) -> str:
    """A digest of the decks (their names and sizes) and the renderer's version: what the images depend on."""
    described = renderer_version() + "".join(f"{path}:{path.stat().st_size}" for path in found)
    return hashlib.sha256(described.encode()).hexdigest()[:10]


def load_cards(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """Every card of every deck, drawn once and then read from the cache folder."""
    side, root = parse_cards_spec(argument)
    found = decks(root)

    def draw() -> ImageSet:
        images = [render(deck, card, side) for card in CARDS for deck in found]
        return ImageSet(_labels(len(found)), list(CARDS), images=torch.from_numpy(np.stack(images)))

    path = None if cache_dir is None else cache_file(cache_dir, "cards", f"cards-{side}", VERSION, _install(found))
    return cached_image_set(path, (len(CARDS) * len(found), 3, side, side), len(CARDS), draw)


CARDS_SOURCE = Source("cards", "cards:<image side>[:<decks folder>]", load_cards, labels=cards_labels,
                      shape=lambda argument, cache_dir: (parse_cards_spec(argument)[0],) * 2, channels=3)
