"""The one interface every image source meets, as params.yaml names it: `<name>` or `<name>:<argument>`.

A source answers for its own spec: how it is written, how its images load, and its labels without decoding or making
a single image (what validation reads before any stage deletes an output: the spec parsed, the class count checked
against this install, a generated set's size against this machine's memory). Each module of this package declares
its sources as `Source` values; `study.sources.SOURCES` is the registry that looks them up by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from study.environment import machine_memory, readable_bytes
from study.sources.image_set import ImageSet
from study.sources.spec import GeneratedSpec


@dataclass(frozen=True)
class Source:
    """An image source. `load`, `labels` and `shape` take the spec's argument (the part after '<name>:') and the
    cache folder.

    `labels` gives the labels and class names `load` would, with blank 1×1 stand-in images; None where only loading
    can tell (a download). `shape` gives the (height, width) of its images from its spec or a file's header; None for
    image files of any size (resized to data.image_size) and where only loading can tell. `folder` gives the folder
    the images are read from (None where it is missing or unusable, so nothing is watched); it is None for a source
    that reads no folder of the user's. `data_source` names the independent source of the images, what pooling
    across data sets groups by; None: the source's name."""

    name: str
    usage: str  # the spec as written, e.g. 'glyphs:<num_classes>'
    load: Callable[[str, Path], ImageSet]
    labels: Callable[[str, Path], ImageSet | None]
    shape: Callable[[str, Path], tuple[int, int] | None] = lambda argument, cache_dir: None
    generated: bool = False
    channels: int = 1  # of its images as training reads them (a lower bound where it varies)
    folder: Callable[[str], Path | None] | None = None
    data_source: Callable[[str], str] | None = None

    def source_of(self, argument: str) -> str:
        return self.data_source(argument) if self.data_source is not None else self.name


def side_and_folder(name: str, argument: str, default_side: int, sides: range, default_root: Path,
                    native: str = "") -> tuple[int, Path]:
    """(image side, folder) of a package source's `<name>[:<image side>[:<folder>]]`: the side `default_side` where
    none is given, within `sides`; the folder `default_root`, the package's own, where none is. A ValueError names the
    fault (`native`: the package's own image size, said beside the allowed sides)."""
    side_text, _, folder = argument.partition(":")
    try:
        side = int(side_text) if side_text else default_side
    except ValueError:
        raise ValueError(f"bad {name} spec '{name}:{argument}': the image side must be a whole number, e.g. "
                         f"'{name}:{default_side}'") from None
    if side not in sides:
        raise ValueError(f"bad {name} spec '{name}:{argument}': the image side must be {sides.start} to "
                         f"{sides.stop - 1} pixels{f' ({native})' if native else ''}, got {side}")
    return side, Path(folder).expanduser() if folder else default_root


def blank_images(labels: np.ndarray, class_names: list[str], channels: int = 1) -> ImageSet:
    """An ImageSet of `labels` whose images are blank 1×1 stand-ins: what `Source.labels` returns."""
    labels = np.asarray(labels)
    return ImageSet(labels, class_names, images=torch.zeros((len(labels), channels, 1, 1), dtype=torch.uint8))


def square_resized(image: Image.Image, side: int, background: tuple[int, int, int]) -> np.ndarray:
    """An image (RGBA: drawn over `background`) centred on a square of `background` and resized to side × side with
    Lanczos filtering: a (3, side, side) uint8 array, what a source drawn by people holds in memory."""
    image = image.convert("RGBA")
    square = Image.new("RGBA", (max(image.size),) * 2, (*background, 255))
    square.alpha_composite(image, ((square.width - image.width) // 2, (square.height - image.height) // 2))
    rgb = square.convert("RGB")
    if rgb.size != (side, side):
        rgb = rgb.resize((side, side), Image.LANCZOS)
    return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)


def check_generated_size(spec: GeneratedSpec, channels: int) -> None:
    """A generated source is held in memory whole: a ValueError for one larger than the machine's memory."""
    count = spec.num_classes * spec.instances_per_class
    needed, memory = count * channels * spec.image_side ** 2, machine_memory()
    if memory is not None and needed > memory:
        raise ValueError(f"{spec} makes {count:,} images of {spec.image_side}×{spec.image_side} pixels, "
                         f"{readable_bytes(needed)} in memory, more than this machine's {readable_bytes(memory)}; "
                         "ask for fewer instances per class")


def generated_labels(spec: GeneratedSpec, channels: int = 1) -> ImageSet:
    """A generated spec's labels with blank stand-ins, its size checked against this machine's memory first; the
    class names are the classes' numbers (nothing is drawn)."""
    check_generated_size(spec, channels)
    return blank_images(np.repeat(np.arange(spec.num_classes), spec.instances_per_class),
                        [str(k) for k in range(spec.num_classes)], channels)
