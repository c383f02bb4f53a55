"""The on-disk cache of a generated image source (glyphs, strokes, emoji): one .npz per spec, written atomically;
a file that is missing, truncated, corrupt or of another shape is generated again."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from study.results import write_bytes
from study.sources.image_set import ImageSet


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
