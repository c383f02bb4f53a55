"""FreedroidRPG's turntables (`freedroid[:<image side>[:<graphics folder>]]`): 3D models of items and droids made by
people and rendered from 32 angles each, as COIL-100 photographs objects on a turntable; from Debian's
freedroidrpg-data (GPL-2+), read offline.

A model is a folder of `portrait_0001.jpg` … `portrait_0032.jpg` (132×180 on black) under the package's graphics
folder (items/…, droids/…). A class is a model with its recoloured variants, which an open split must keep together:
folders whose names differ only by a trailing number (`armours/basic`, `basic2`, `basic3`; `drinking_mug`,
`drinking_mug_2`) are one class, while a droid named by its number alone (`droids/123`) is its own. Its instances
are the views; a class with fewer than MIN_IMAGES views is left out, and so is the package's placeholder model. On
the Debian package: 147 models in 141 classes, 4,517 images (16 to 128 a class).

A view is centred on a black square and resized to the image side (32 by default) with Lanczos filtering; the
images are held in memory. The labels come from the file names alone.
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

DEFAULT_ROOT = Path("/usr/share/freedroidrpg/data/graphics")
INSTALL_HINT = ("install Debian's freedroidrpg-data (apt-get install freedroidrpg-data), or name its graphics folder "
                "as 'freedroid:<image side>:<folder>'")
DEFAULT_SIDE = 32
SIDES = range(16, 181)
MIN_IMAGES = 10
VIEW = "portrait_*.jpg"
BACKGROUND = (0, 0, 0)
PLACEHOLDER = "NONE_AVAILABLE_YET"  # the package's stand-in for items without a model of their own: not a class
_VARIANT = re.compile(r"^(?P<name>.*?[^\d_])_?\d+$")  # 'basic2', 'drinking_mug_2'; never a name of digits alone


def parse_freedroid_spec(argument: str) -> tuple[int, Path]:
    """(image side, graphics folder) of `freedroid[:<image side>[:<graphics folder>]]`; a ValueError names the fault."""
    return side_and_folder("freedroid", argument, DEFAULT_SIDE, SIDES, DEFAULT_ROOT, "its views are 132×180")


def model_class(folder: Path, root: Path) -> str:
    """A model folder's class: its path under `root` with a trailing variant number dropped ('items/armours/basic')."""
    relative = folder.relative_to(root)
    variant = _VARIANT.match(relative.name)
    return (relative.parent / (variant["name"] if variant else relative.name)).as_posix()


def model_classes(root: Path) -> dict[str, list[Path]]:
    """Each class with at least MIN_IMAGES views, its views sorted; classes sorted by name. A FileNotFoundError names
    the install line when `root` holds no model."""
    views = defaultdict(list)
    for view in sorted(root.rglob(VIEW)) if root.is_dir() else ():
        if view.parent.name != PLACEHOLDER:
            views[model_class(view.parent, root)].append(view)
    if not views:
        raise FileNotFoundError(f"no FreedroidRPG model views ({VIEW}) under {root}; {INSTALL_HINT}")
    return {name: paths for name, paths in sorted(views.items()) if len(paths) >= MIN_IMAGES}


def _labels(classes: dict[str, list[Path]]) -> np.ndarray:
    return np.repeat(np.arange(len(classes)), [len(paths) for paths in classes.values()])


def freedroid_labels(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """The classes' labels and names from the file names alone, with blank stand-ins for the views."""
    classes = model_classes(parse_freedroid_spec(argument)[1])
    return blank_images(_labels(classes), list(classes), channels=3)


def load_freedroid(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """Every view of every class, decoded and held in memory."""
    side, root = parse_freedroid_spec(argument)
    classes = model_classes(root)
    images = []
    for paths in classes.values():
        for path in paths:
            with Image.open(path) as image:
                images.append(square_resized(image, side, BACKGROUND))
    return ImageSet(_labels(classes), list(classes), images=torch.from_numpy(np.stack(images)))


FREEDROID = Source("freedroid", "freedroid:<image side>[:<graphics folder>]", load_freedroid, labels=freedroid_labels,
                   shape=lambda argument, cache_dir: (parse_freedroid_spec(argument)[0],) * 2, channels=3)
