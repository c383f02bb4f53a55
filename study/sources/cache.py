"""What the generated image sources (glyphs, strokes, emoji) share: their images built class by class, and their
on-disk cache, one .npz per spec, written atomically; a file that is missing, truncated, corrupt or of another shape
is generated again."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from study.results import write_bytes
from study.sources.image_set import ImageSet
from study.sources.spec import GeneratedSpec


def cache_file(cache_dir: str | os.PathLike, source: str, stem: str, version: int, install: str,
               suffix: str = "npz") -> Path:
    """A generated source's file under `cache_dir`, named for its generator `version` and the `install` that drew it
    (a digest of the fonts and libraries drawing depends on), so that a change of either misses it."""
    return Path(cache_dir).expanduser() / source / f"{stem}-v{version}-{install}.{suffix}"


def generated_image_set(spec: GeneratedSpec, channels: int, render_class: Callable[[int, int, int], np.ndarray],
                        class_names: list[str]) -> ImageSet:
    """The images of `spec`, drawn class by class: `render_class(class_index, instances, side)` gives one class's
    (instances, side, side) grey images, or (instances, side, side, 3) colour ones."""
    per_class, side = spec.instances_per_class, spec.image_side
    images = np.empty((spec.num_classes * per_class, channels, side, side), dtype=np.uint8)
    for class_index in range(spec.num_classes):
        drawn = render_class(class_index, per_class, side)
        images[class_index * per_class:(class_index + 1) * per_class] = (
            drawn[:, None] if drawn.ndim == 3 else drawn.transpose(0, 3, 1, 2))
    labels = np.repeat(np.arange(spec.num_classes), per_class)
    return ImageSet(labels, class_names, images=torch.from_numpy(images))


def load_generated(spec: GeneratedSpec, channels: int, path: Path | None,
                   generate: Callable[[GeneratedSpec], ImageSet]) -> ImageSet:
    """A generated source's images for `spec` (`channels` colour channels), kept at `path` (see cached_image_set)."""
    shape = (spec.num_classes * spec.instances_per_class, channels, spec.image_side, spec.image_side)
    return cached_image_set(path, shape, spec.num_classes, lambda: generate(spec))


def spec_stem(spec: GeneratedSpec) -> str:
    """The start of a spec's cache file name: 'glyphs-100-40-32'."""
    return f"{spec.source}-{spec.num_classes}-{spec.instances_per_class}-{spec.image_side}"


def cached_image_set(path: Path | None, shape: tuple[int, int, int, int], classes: int,
                     generate: Callable[[], ImageSet]) -> ImageSet:
    """The image set kept at `path` if it holds `shape` (N, C, H, W) and `classes` names, else `generate()` written
    there; with no `path`, `generate()` alone."""
    if path is None:
        return generate()
    cached = _read(path, shape, classes)
    if cached is not None:
        return cached
    image_set = generate()
    buffer = io.BytesIO()
    np.savez(buffer, images=image_set.images.numpy(), labels=image_set.labels,
             class_names=np.array(image_set.class_names))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(buffer.getvalue(), path)
    return image_set


def _read(path: Path, shape: tuple[int, int, int, int], classes: int) -> ImageSet | None:
    try:
        with np.load(path, allow_pickle=False) as stored:
            images, labels, names = stored["images"], stored["labels"], stored["class_names"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # missing, truncated or corrupt (the zip's CRC checks the bytes): regenerate
    if images.shape != shape or images.dtype != np.uint8 or len(names) != classes:
        return None
    return ImageSet(labels, names.tolist(), images=torch.from_numpy(images))


def counted_once(path: Path | None, count: Callable[[], int]) -> int:
    """`count()`, kept in the file at `path` (a generated source's class count on this install, which takes seconds to
    build while validation asks at every params change); with no `path`, counted each time."""
    if path is None:
        return count()
    try:
        return int(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not counted yet, or a damaged file: count again
        counted = count()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(str(counted).encode(), path)
    except OSError:  # a read-only cache only makes the next count slow
        pass
    return counted
