"""The image sources: every one a module of this package, all meeting at `ImageSet`, looked up by the name that
opens a dataset spec in params.yaml (`data.dataset`).

Real images: `digits` and `mnist5k` (shipped with Python packages), `idx:<folder>` (MNIST-layout IDX files),
`folder:<path>` (one sub-folder of images per class), `torchvision:<Name>`. Generated offline, with as many classes
as asked: `glyphs`, `strokes`, `emoji` (they share `spec` and `cache`). Composed from a real set's images:
`compose:<parts>:<per class>:<base>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from study.sources.composed import compose, parse_composed_spec
from study.sources.digits import load_digits, load_mnist5k
from study.sources.emoji import load_emoji
from study.sources.folder import load_folder
from study.sources.glyphs import load_glyphs
from study.sources.idx import load_idx
from study.sources.image_set import ImageSet
from study.sources.strokes import load_strokes
from study.sources.torchvision import load_torchvision

__all__ = ["ImageSet", "DATASETS", "DEFAULT_CACHE_DIR", "load_dataset", "source_of", "is_synthetic_source"]

DEFAULT_CACHE_DIR = "~/.cache/study"  # torchvision downloads go in torchvision/, a generated source in its own folder


def _load_composed(argument: str, cache_dir: Path) -> ImageSet:
    spec = parse_composed_spec(argument)
    return compose(spec, load_dataset(spec.base, str(cache_dir)))


# The spec's part before ':' selects the loader; the part after it is the loader's argument.
DATASETS: dict[str, Callable[[str, Path], ImageSet]] = {
    "digits": load_digits,
    "mnist5k": load_mnist5k,
    "idx": load_idx,
    "torchvision": load_torchvision,
    "folder": load_folder,
    "glyphs": load_glyphs,
    "strokes": load_strokes,
    "emoji": load_emoji,
    "compose": _load_composed,
}


def load_dataset(spec: str, cache_dir: str | None = None) -> ImageSet:
    """Load the image source named by `spec`, e.g. 'digits' or 'idx:/path/to/folder'."""
    name, _, argument = spec.strip().partition(":")
    if name not in DATASETS:
        raise ValueError(
            f"unknown dataset '{spec}'; known: {', '.join(DATASETS)} "
            f"(idx, torchvision, folder, glyphs, strokes and emoji take an argument: 'idx:<folder>', "
            f"'torchvision:<Name>', 'folder:<path>', 'glyphs:<num_classes>', 'strokes:<num_classes>', "
            f"'emoji:<num_classes>', "
            f"'compose:<parts>:<per class>:<base>')"
        )
    return DATASETS[name](argument, Path(cache_dir or DEFAULT_CACHE_DIR))


# Generated sources: everything else (a package's images, an IDX or image folder) is real images.
SYNTHETIC_SOURCES = ("glyphs", "strokes", "emoji")


def is_synthetic_source(source: str) -> bool:
    """Whether a source (as `source_of` names it) is generated rather than real images."""
    return source in SYNTHETIC_SOURCES


# Sources whose images are one base set under another name: configurations of one base set are not independent.
_SOURCE_ALIASES = {"mnist5k": "mnist", "torchvision:MNIST": "mnist", "torchvision:FashionMNIST": "fashion-mnist"}


def source_of(spec: str) -> str:
    """The independent data source a dataset spec's images come from: what pooling across data sets groups by.

    A composed set is its base's source ('compose:2:60:mnist5k' is 'mnist', like 'mnist5k'); an IDX or image folder
    is named by its folder ('idx:/usr/share/datasets/fashion-mnist' is 'fashion-mnist'); a generator by its name."""
    spec = spec.strip()
    name, _, argument = spec.partition(":")
    if name == "compose":
        return source_of(parse_composed_spec(argument).base)
    if spec in _SOURCE_ALIASES or name in _SOURCE_ALIASES:
        return _SOURCE_ALIASES.get(spec, _SOURCE_ALIASES.get(name))
    if name in ("idx", "folder"):
        return Path(argument.rstrip("/")).name or argument
    if name == "torchvision":
        return argument.lower()
    return name

