"""Icons drawn by people in many styles (`iconify:<num_classes>[:<image side>[:<package folder>]]`): the same icon
name ("home", "camera") as each of the open icon sets of the npm package @iconify/json draws it, read offline.

A class is an icon name, its instances the sets that draw it: an open split holds out whole names, so a model is
tested on icons it never saw, in every set's style. A name's style variants are one name (`home-outline`,
`home-solid`, `home-2` are `home`: STYLE_SUFFIXES), and each set gives a name one icon, its plain form where it has
one, so that a held-out name never has a variant in training. Only sets under a permissive licence (LICENCES) are
read, and not those of emoji, flags, logos or unmaintained sets (LEFT_OUT; by its name, LEFT_OUT_NAMES, for a set
filed under no category); `icon_sets` says which were read. Names drawn by at least MIN_SETS sets qualify, and the
spec's num_classes takes those drawn by the most sets (ties by name).

An icon is drawn black on white by librsvg's `rsvg-convert` (Debian's librsvg2-bin) at twice the image side, centred
on a square and resized with Lanczos filtering (32 px by default); the images are kept under the cache folder, named
for the package's version and the renderer. The labels come from the sets' JSON alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from study.sources.cache import cache_file, cached_image_set
from study.sources.image_set import ImageSet
from study.sources.source import Source, blank_images, square_resized
from study.sources.svg import RENDERER, draw_svg, renderer_version, require_renderer

INSTALL_HINT = ("unpack the npm package @iconify/json where the source reads it (npm pack @iconify/json && mkdir -p "
                "~/.cache/study/iconify && tar xzf iconify-json-*.tgz -C ~/.cache/study/iconify), or name its folder "
                "as 'iconify:<num_classes>:<image side>:<folder>'; it draws with rsvg-convert (apt-get install "
                "librsvg2-bin)")
DEFAULT_SIDE = 32
SIDES = range(16, 257)
MIN_SETS = 10
VERSION = 1
BACKGROUND = (255, 255, 255)
LICENCES = {"MIT", "Apache-2.0", "CC-BY-4.0", "CC0-1.0", "OFL-1.1", "ISC", "BSD-3-Clause", "Unlicense"}
LEFT_OUT = {"Archive / Unmaintained", "Logos", "Emoji", "Flags"}  # categories of collections.json
# A set filed under no category is judged by its name: the package (2.2.553) files Fluent Emoji under none.
LEFT_OUT_NAMES = re.compile(r"\b(?:emojis?|flags?|logos?)\b", re.IGNORECASE)
STYLE_SUFFIXES = re.compile(r"(?:-(?:outline|outlined|solid|fill|filled|rounded|round|sharp|line|linear|bold|light|"
                            r"thin|duotone|twotone|regular|alt|\d+))+$")


def parse_iconify_spec(argument: str, cache_dir: Path | None) -> tuple[int, int, Path]:
    """(classes, image side, package folder) of `iconify:<num_classes>[:<image side>[:<package folder>]]`."""
    fields = argument.split(":", 2)
    usage = "use 'iconify:<num_classes>[:<image side>[:<package folder>]]', e.g. 'iconify:200'"
    try:
        classes = int(fields[0])
        side = int(fields[1]) if len(fields) > 1 and fields[1] else DEFAULT_SIDE
    except ValueError:
        raise ValueError(f"bad iconify spec 'iconify:{argument}': the class count and image side are whole numbers; "
                         f"{usage}") from None
    if classes < 2 or side not in SIDES:
        raise ValueError(f"bad iconify spec 'iconify:{argument}': give at least 2 classes and an image side of "
                         f"{SIDES.start} to {SIDES.stop - 1} pixels; {usage}")
    folder = Path(fields[2]).expanduser() if len(fields) > 2 and fields[2] else \
        Path(cache_dir or "~/.cache/study").expanduser() / "iconify" / "package"
    return classes, side, folder


def icon_sets(root: Path) -> list[str]:
    """The prefixes of the sets read: a permissive licence, and not emoji, flags, logos or unmaintained (by category,
    or for a set without one, by its name)."""
    listing = root / "collections.json"
    if not listing.is_file():
        raise FileNotFoundError(f"no @iconify/json package at {root} (its collections.json is missing); {INSTALL_HINT}")
    collections = json.loads(listing.read_text(encoding="utf-8"))
    return sorted(prefix for prefix, info in collections.items()
                  if info.get("license", {}).get("spdx") in LICENCES and info.get("category") not in LEFT_OUT
                  and not ("category" not in info and LEFT_OUT_NAMES.search(info.get("name", "")))
                  and (root / "json" / f"{prefix}.json").is_file())


def canonical(name: str) -> str:
    """An icon's name without its style variant: 'home-outline' and 'home-2' are 'home'."""
    return STYLE_SUFFIXES.sub("", name) or name


def icons(root: Path, classes: int) -> list[tuple[str, list[tuple[str, str]]]]:
    """The `classes` names drawn by the most sets (at least MIN_SETS each), each with its (set, icon) pairs: one icon
    a set, its plain form where the set has one. A ValueError says how many qualify when fewer than asked."""
    drawn = defaultdict(dict)
    for prefix in icon_sets(root):
        names = json.loads((root / "json" / f"{prefix}.json").read_text(encoding="utf-8"))["icons"]
        for name in sorted(names, key=lambda name: (canonical(name) != name, name)):  # the plain form first
            drawn[canonical(name)].setdefault(prefix, name)
    qualified = sorted((name for name, sets in drawn.items() if len(sets) >= MIN_SETS),
                       key=lambda name: (-len(drawn[name]), name))
    if len(qualified) < classes:
        raise ValueError(f"iconify has {len(qualified)} icon names drawn by at least {MIN_SETS} sets here, "
                         f"{classes} were asked for; ask for at most {len(qualified)}")
    chosen = sorted(qualified[:classes])
    return [(name, sorted(drawn[name].items())) for name in chosen]


def _labels(chosen) -> np.ndarray:
    return np.repeat(np.arange(len(chosen)), [len(pairs) for _, pairs in chosen])


def iconify_labels(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """The names' labels from the sets' JSON alone, with blank stand-ins for the icons."""
    classes, _, root = parse_iconify_spec(argument, cache_dir)
    chosen = icons(root, classes)
    return blank_images(_labels(chosen), [name for name, _ in chosen], channels=3)


def _svg(icon: dict, collection: dict) -> str:
    left, top = icon.get("left", collection.get("left", 0)), icon.get("top", collection.get("top", 0))
    width, height = icon.get("width", collection.get("width", 16)), icon.get("height", collection.get("height", 16))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="{left} {top} {width} {height}" width="{width}" '
            f'height="{height}" color="#000">{icon["body"]}</svg>')


def render(svg: str, side: int, icon: str = "an icon") -> np.ndarray:
    """One icon (named `icon` in an error) drawn black at twice `side` in height, on white, centred and resized."""
    image, complaint = draw_svg(["--height", str(2 * side)], svg.encode())
    if image is None:
        raise RuntimeError(f"{RENDERER} could not draw {icon}: {complaint}; its set can be left out of what this "
                           f"source reads (study/sources/iconify.py: LEFT_OUT), or a newer librsvg may draw it")
    return square_resized(image, side, BACKGROUND)


def load_iconify(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """Every set's icon of every chosen name, drawn once and then read from the cache folder."""
    classes, side, root = parse_iconify_spec(argument, cache_dir)
    require_renderer("iconify", INSTALL_HINT)
    chosen = icons(root, classes)

    def draw() -> ImageSet:
        sets = {prefix: json.loads((root / "json" / f"{prefix}.json").read_text(encoding="utf-8"))
                for prefix in {prefix for _, pairs in chosen for prefix, _ in pairs}}
        images = [render(_svg(sets[prefix]["icons"][icon], sets[prefix]), side, f"{prefix}:{icon} (name '{name}')")
                  for name, pairs in chosen for prefix, icon in pairs]
        return ImageSet(_labels(chosen), [name for name, _ in chosen], images=torch.from_numpy(np.stack(images)))

    version = json.loads((root / "package.json").read_text(encoding="utf-8")).get("version", "") \
        if (root / "package.json").is_file() else ""
    install = hashlib.sha256(f"{version}{renderer_version()}{sorted(icon_sets(root))}".encode()).hexdigest()[:10]
    path = None if cache_dir is None else cache_file(cache_dir, "iconify", f"iconify-{classes}-{side}", VERSION,
                                                      install)
    return cached_image_set(path, (int(_labels(chosen).size), 3, side, side), len(chosen), draw)


ICONIFY = Source("iconify", "iconify:<num_classes>[:<image side>[:<package folder>]]", load_iconify,
                 labels=iconify_labels, channels=3,
                 shape=lambda argument, cache_dir: (parse_iconify_spec(argument, cache_dir)[1],) * 2)
