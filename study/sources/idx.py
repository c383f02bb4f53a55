"""Folders of MNIST-layout IDX files (`idx:<folder>`): train and optionally t10k, plain or gzipped, read whole or,
for validation, only their headers and sizes."""

from __future__ import annotations

import gzip
import math
import os
import struct
from pathlib import Path

import numpy as np
import torch

from study.sources.folder import folder_name, named_folder, refuse_special_files
from study.sources.image_set import ImageSet
from study.sources.source import Source
from study.sources.spec import needs_argument


_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_LONGEST_HEADER = 4 + 4 * 255


def _idx_header(raw: bytes, path: Path) -> tuple[np.dtype, tuple[int, ...], int, int]:
    """An IDX file's element type, shape, header size and whole size in bytes, from its first bytes."""
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (magic number {raw[:4].hex() or 'missing'})")
    ndim = raw[3]
    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise ValueError(f"IDX file {path} is truncated inside its header")
    shape = struct.unpack(f">{ndim}I", raw[4:header_size])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    return dtype, shape, header_size, header_size + math.prod(shape) * dtype.itemsize


def _check_idx_size(path: Path, shape: tuple[int, ...], expected: int, size: int) -> None:
    if size != expected:
        raise ValueError(
            f"IDX file {path} is truncated or corrupt: shape {shape} needs {expected} bytes, "
            f"the file has {size}"
        )


def _read_idx(path: Path) -> np.ndarray:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:  # a truncated .gz ends in EOFError
        raise ValueError(f"cannot read IDX file {path}: {exc}; the file is corrupt or truncated") from exc
    dtype, shape, header_size, expected = _idx_header(raw, path)
    _check_idx_size(path, shape, expected, len(raw))
    return np.frombuffer(raw, dtype, offset=header_size).reshape(shape)


def _idx_layout(path: Path) -> tuple[np.dtype, tuple[int, ...]]:
    """An IDX file's element type and shape, its size checked, without reading its data (a .gz's size is in its last
    4 bytes)."""
    try:
        with open(path, "rb") as handle:
            compressed = handle.read(2) == b"\x1f\x8b"
            handle.seek(-4 if compressed else 0, os.SEEK_END)
            size = struct.unpack("<I", handle.read(4))[0] if compressed else handle.tell()
        with (gzip.open if compressed else open)(path, "rb") as handle:
            head = handle.read(_IDX_LONGEST_HEADER)
    except (OSError, EOFError, struct.error) as exc:
        raise ValueError(f"cannot read IDX file {path}: {exc}; the file is corrupt or truncated") from exc
    dtype, shape, _, expected = _idx_header(head, path)
    _check_idx_size(path, shape, expected % 2**32 if compressed else expected, size)  # gzip keeps the size mod 2³²
    return dtype, shape


def _find_idx(folder: Path, prefix: str, kind: str) -> Path | None:
    for separator in ("-", "."):  # MNIST's own names use '-', some mirrors use '.'
        for suffix in ("", ".gz"):
            candidate = folder / f"{prefix}-{kind}{separator}ubyte{suffix}"
            if candidate.is_file():
                return candidate
    return None


def _idx_pairs(argument: str) -> list[tuple[Path, Path]]:
    """The (images, labels) files of an IDX folder, train then t10k; errors say what is missing."""
    needs_argument("idx", argument, "/usr/share/datasets/fashion-mnist")
    folder = Path(argument).expanduser()
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{folder} is a file, not a folder; point 'idx:<folder>' at the folder holding the "
                                 "MNIST-layout files")
    if not folder.is_dir():
        raise FileNotFoundError(
            f"IDX folder {folder} does not exist; point 'idx:<folder>' at a folder holding "
            f"MNIST-layout files (on Debian: apt install dataset-fashion-mnist)"
        )
    pairs = []
    for prefix in ("train", "t10k"):
        image_file = _find_idx(folder, prefix, "images-idx3")
        label_file = _find_idx(folder, prefix, "labels-idx1")
        if image_file is None and label_file is None:
            continue
        if image_file is None or label_file is None:
            missing = f"{prefix}-images-idx3-ubyte" if image_file is None else f"{prefix}-labels-idx1-ubyte"
            raise FileNotFoundError(f"{folder} has {prefix} files but no {missing}[.gz]")
        pairs.append((image_file, label_file))
    if not pairs:
        raise FileNotFoundError(
            f"{folder} holds no IDX files; expected train-images-idx3-ubyte[.gz] and "
            f"train-labels-idx1-ubyte[.gz] (and optionally the t10k-* pair)"
        )
    refuse_special_files(folder)
    return pairs


def _idx_labels(image_file: Path, label_file: Path, image_shape: tuple[int, ...], image_dtype: np.dtype) -> np.ndarray:
    """The labels of one pair of IDX files, checked against the images' shape and type."""
    labels = _read_idx(label_file)
    if len(image_shape) != 3 or image_dtype != np.uint8:
        raise ValueError(f"{image_file} must hold uint8 images of shape (N, H, W)")
    if labels.ndim != 1 or len(labels) != image_shape[0]:
        raise ValueError(f"{label_file} must hold one label per image of {image_file}")
    return labels.astype(np.int64)


def _idx_set(labels: list[np.ndarray], images: torch.Tensor) -> ImageSet:
    labels = np.concatenate(labels)
    class_names = [str(label) for label in range(int(labels.max()) + 1)]
    return ImageSet(labels, class_names, images=images)


def load_idx(argument: str, cache_dir: Path) -> ImageSet:
    """The images and labels of an IDX folder, train and t10k together."""
    images, labels = [], []
    for image_file, label_file in _idx_pairs(argument):
        part_images = _read_idx(image_file)
        labels.append(_idx_labels(image_file, label_file, part_images.shape, part_images.dtype))
        images.append(part_images[:, None])
    return _idx_set(labels, torch.from_numpy(np.concatenate(images)))


def idx_labels(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """An IDX folder's labels, each file's size checked, with blank 1-pixel stand-ins for its images (none is read)."""
    labels = []
    for image_file, label_file in _idx_pairs(argument):
        dtype, shape = _idx_layout(image_file)
        labels.append(_idx_labels(image_file, label_file, shape, dtype))
    return _idx_set(labels, torch.zeros((sum(map(len, labels)), 1, 1, 1), dtype=torch.uint8))


def idx_folder(argument: str) -> Path | None:
    """The folder an IDX source reads, where it holds IDX files; None otherwise (nothing to watch)."""
    try:
        idx_labels(argument)
    except FileNotFoundError:
        return None
    return named_folder(argument)


def idx_shape(argument: str, cache_dir: Path | None = None) -> tuple[int, int]:
    """(height, width) of an IDX folder's images, from its first image file's header."""
    image_file, _ = _idx_pairs(argument)[0]
    return tuple(_idx_layout(image_file)[1][-2:])


IDX = Source("idx", "idx:<folder>", load_idx, labels=idx_labels, shape=idx_shape, folder=idx_folder,
             data_source=folder_name)
