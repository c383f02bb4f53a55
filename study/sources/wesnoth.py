"""Battle for Wesnoth's unit sprites (`wesnoth[:<image side>[:<data folder>]]`): images drawn by people, from Debian's
wesnoth-1.16-data (GPL-2), read offline.

A class is a unit's advancement line: an Elvish Archer with the Rangers, Marksmen, Avengers and Sharpshooters it
becomes, each with its female and variant forms, since a unit and its upgrades are drawn as one figure and an open
split must never put them on both sides. The lines come from the units' own definitions (data/core/units/**/*.cfg:
each [unit_type]'s `id`, `image` and `advances_to`). Its instances are every frame of those units' animations and
poses: the PNG files beside each unit's image whose names start with that image's name (`archer-bow-attack1.png`,
`archer+female.png`), a file going to the unit with the longest such name (`troll-rocklobber.png` is the Rocklobber's,
not the Troll's). Lines with fewer than MIN_IMAGES frames are left out: on the Debian package, 74 lines and 4,990
frames are kept.

A frame is drawn over mid-grey (its transparent background), centred on a square canvas and resized to the image
side (32 by default) with Lanczos filtering; the images are held in memory. The labels come from the file names
alone (nothing decoded), so validation reads them in a moment.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from study.sources.image_set import ImageSet
from study.sources.source import Source, blank_images, side_and_folder, square_resized

DEFAULT_ROOT = Path("/usr/share/games/wesnoth/1.16/data/core")
INSTALL_HINT = ("install Debian's wesnoth-1.16-data (apt-get install wesnoth-1.16-data), or name its data/core folder "
                "as 'wesnoth:<image side>:<folder>'")
DEFAULT_SIDE = 32
SIDES = range(16, 129)
MIN_IMAGES = 10  # a line with fewer frames cannot give a class split both training and test instances
BACKGROUND = (128, 128, 128)
_UNIT = re.compile(r"^\[unit_type\]\s*$(.*?)^\[/unit_type\]", re.M | re.S)
_KEY = r"^    {}=\"?([^\"\n]*?)\"?\s*$"  # a key of the unit itself (four spaces in), not of its attacks or variations


def parse_wesnoth_spec(argument: str) -> tuple[int, Path]:
    """(image side, data folder) of `wesnoth[:<image side>[:<data folder>]]`; a ValueError names the fault."""
    return side_and_folder("wesnoth", argument, DEFAULT_SIDE, SIDES, DEFAULT_ROOT, "its sprites are 72×72")


def _units(root: Path) -> dict[str, tuple[Path, list[str]]]:
    """Each unit type's id: its image (a path under root/images) and the ids it advances to."""
    units = {}
    for cfg in sorted((root / "units").rglob("*.cfg")):
        for block in _UNIT.findall(cfg.read_text(encoding="utf-8", errors="replace")):
            unit, image, advances = (re.search(_KEY.format(key), block, re.M) for key in ("id", "image", "advances_to"))
            if unit and image:
                targets = [] if advances is None else [name.strip() for name in advances.group(1).split(",")]
                units[unit.group(1).strip()] = (root / "images" / image.group(1).split("~")[0].strip(), targets)
    return units


def unit_lines(root: Path) -> dict[str, list[Path]]:
    """Each advancement line with at least MIN_IMAGES frames (named by its first unit in id order), its frames sorted;
    lines sorted by name. A FileNotFoundError names the install line when `root` holds no unit definitions."""
    units = _units(root) if (root / "units").is_dir() else {}
    if not units:
        raise FileNotFoundError(f"no Wesnoth unit definitions under {root / 'units'}; {INSTALL_HINT}")
    line = {unit: unit for unit in units}

    def head(unit: str) -> str:
        while line[unit] != unit:
            line[unit] = line[line[unit]]
            unit = line[unit]
        return unit

    for unit, (_, targets) in sorted(units.items()):
        for target in targets:
            if target in line:
                first, second = sorted((head(unit), head(target)))
                line[second] = first  # the line is named by its first unit in id order: the same on every machine
    stems = defaultdict(list)  # per folder, each unit image's name and its line
    for unit, (image, _) in units.items():
        stems[image.parent].append((image.stem, head(unit)))
    frames = defaultdict(list)
    for folder, named in stems.items():
        for path in sorted(folder.glob("*.png")) if folder.is_dir() else ():
            owners = [(len(stem), owner) for stem, owner in named
                      if path.stem == stem or path.stem.startswith((f"{stem}-", f"{stem}+"))]
            if owners:
                frames[max(owners)[1]].append(path)
    return {name: sorted(set(paths)) for name, paths in sorted(frames.items()) if len(set(paths)) >= MIN_IMAGES}


def _labels(lines: dict[str, list[Path]]) -> np.ndarray:
    return np.repeat(np.arange(len(lines)), [len(paths) for paths in lines.values()])


def wesnoth_labels(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """The lines' labels and names from the file names alone, with blank stand-ins for the frames."""
    lines = unit_lines(parse_wesnoth_spec(argument)[1])
    return blank_images(_labels(lines), list(lines), channels=3)


def frame(path: Path, side: int) -> np.ndarray:
    """One sprite over mid-grey, centred on a square and resized to side × side: a (3, side, side) uint8 array."""
    with Image.open(path) as image:
        return square_resized(image, side, BACKGROUND)


def load_wesnoth(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """Every frame of every line, decoded and held in memory."""
    side, root = parse_wesnoth_spec(argument)
    lines = unit_lines(root)
    images = np.stack([frame(path, side) for paths in lines.values() for path in paths])
    return ImageSet(_labels(lines), list(lines), images=torch.from_numpy(images))


WESNOTH = Source("wesnoth", "wesnoth:<image side>[:<data folder>]", load_wesnoth, labels=wesnoth_labels,
                 shape=lambda argument, cache_dir: (parse_wesnoth_spec(argument)[0],) * 2, channels=3)
