"""The image sources: every one a module of this package that declares a `Source` (study/sources/source.py: its
spec, its images as an `ImageSet`, its labels without images), registered in `SOURCES` under the name that opens a
dataset spec in params.yaml (`data.dataset`).

Real images: `digits` and `mnist5k` (shipped with Python packages), `idx:<folder>` (MNIST-layout IDX files),
`folder:<path>` (one sub-folder of images per class), `torchvision:<Name>`; drawn or modelled by people, from Debian
packages: `wesnoth` (a game's unit sprites), `freedroid` (a game's 3D models, 32 views each) and `cards` (KDE's
decks), and from an npm package: `iconify` (one icon name in many sets' styles). Generated offline, with as many
classes as asked: `glyphs`, `cjk` (ideographs in Noto's CJK faces, from a Debian package, drawn as glyphs are),
`strokes`, `emoji` (they share `spec` and `cache`). Composed from a real set's images:
`compose:<parts>:<per class>:<base>`.
"""

from __future__ import annotations

from pathlib import Path

from study.sources.cards import CARDS_SOURCE
from study.sources.cjk import CJK
from study.sources.composed import composed_source
from study.sources.digits import DIGITS, MNIST5K
from study.sources.emoji import EMOJI
from study.sources.folder import FOLDER
from study.sources.freedroid import FREEDROID
from study.sources.glyphs import GLYPHS
from study.sources.iconify import ICONIFY
from study.sources.idx import IDX
from study.sources.image_set import ImageSet
from study.sources.source import Source
from study.sources.strokes import STROKES
from study.sources.torchvision import TORCHVISION
from study.sources.wesnoth import WESNOTH

__all__ = ["ImageSet", "Source", "SOURCES", "DEFAULT_CACHE_DIR", "source_named", "load_dataset", "labels_only",
           "image_shape", "source_of", "is_synthetic_source"]

DEFAULT_CACHE_DIR = "~/.cache/study"  # torchvision downloads go in torchvision/, a generated source in its own folder


def source_named(spec: str) -> tuple[Source, str]:
    """The source a dataset spec names and its argument (the part after '<name>:'); a ValueError lists the known."""
    name, _, argument = spec.strip().partition(":")
    if name not in SOURCES:
        takes = [source.usage for source in SOURCES.values() if ":" in source.usage]
        raise ValueError(f"unknown dataset '{spec}'; known: {', '.join(SOURCES)} (some take an argument: "
                         + ", ".join(f"'{usage}'" for usage in takes) + ")")
    return SOURCES[name], argument


# The registry: the spec's part before ':' names the source.
SOURCES: dict[str, Source] = {source.name: source for source in (
    DIGITS, MNIST5K, IDX, TORCHVISION, FOLDER, WESNOTH, FREEDROID, CARDS_SOURCE, ICONIFY, GLYPHS, CJK, STROKES,
    EMOJI, composed_source(source_named))}


def load_dataset(spec: str, cache_dir: str | None = None) -> ImageSet:
    """Load the image source named by `spec`, e.g. 'digits' or 'idx:/path/to/folder'."""
    source, argument = source_named(spec)
    return source.load(argument, Path(cache_dir or DEFAULT_CACHE_DIR))


def labels_only(spec: str, cache_dir: str | None = None) -> ImageSet | None:
    """The labels `load_dataset(spec)` gives, with blank stand-in images, where they come without decoding or making
    an image (the spec, class count and size checked on the way); None where only loading can tell."""
    source, argument = source_named(spec)
    return source.labels(argument, Path(cache_dir or DEFAULT_CACHE_DIR))


def image_shape(spec: str, cache_dir: str | None = None) -> tuple[int, int] | None:
    """(height, width) of the images `spec` makes, without making or decoding one; None for image files of any size
    (resized to data.image_size) and where only loading can tell."""
    source, argument = source_named(spec)
    return source.shape(argument, Path(cache_dir or DEFAULT_CACHE_DIR))


def is_synthetic_source(source: str) -> bool:
    """Whether a source (as `source_of` names it) is generated rather than real images."""
    return source in SOURCES and SOURCES[source].generated


def source_of(spec: str) -> str:
    """The independent data source a dataset spec's images come from: what pooling across data sets groups by.

    A composed set is its base's source ('compose:2:60:mnist5k' is 'mnist', like 'mnist5k'); an IDX or image folder
    is named by its folder ('idx:/usr/share/datasets/fashion-mnist' is 'fashion-mnist'); a generator by its name."""
    source, argument = source_named(spec)
    return source.source_of(argument)
