"""Class splits: the split protocols, the prepare stage's split files, and batching a split.

A source's `ImageSet` (study.sources) is split into train/val/test by `split_dataset` under the `closed` or `open`
protocol; `save_splits`/`load_splits` are the prepare stage's file format; `batches` feeds a split to training and
evaluation.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from PIL import Image

from study.results import write_bytes
from study.sources.image_set import ImageSet

__all__ = ["split_dataset", "save_splits", "load_splits", "batches", "split_counts", "keep_classes", "class_split",
           "rgb_image"]

SPLIT_NAMES = ("train", "val", "test")
PROTOCOLS = ("closed", "open")


# ---------------------------------------------------------------------------------------
# Protocols


def split_counts(total: int, fractions: Sequence[float]) -> list[int]:
    """How many of `total` items go to train, val and test."""
    # Rounded cumulative boundaries: the counts always add up to `total`.
    bounds = [0] + [round(total * cut) for cut in np.cumsum(fractions)[:-1]] + [total]
    return [high - low for low, high in zip(bounds, bounds[1:])]


def keep_classes(image_set: ImageSet, count: int, seed: int = 0) -> ImageSet:
    """`count` of the set's classes, chosen by a seeded shuffle and relabelled 0..count-1.

    A smaller count keeps a subset of a larger one's classes (the same shuffle, a shorter prefix),
    so a sweep over class counts grows one identity set instead of drawing unrelated ones.
    """
    present = np.unique(image_set.labels)
    if not 2 <= count <= len(present):
        raise ValueError(f"data.classes={count}: the source has {len(present)} classes; keep between 2 and "
                         f"{len(present)} of them, or set data.classes: null to keep them all")
    chosen = np.random.default_rng(seed).permutation(present)[:count]
    return image_set.subset(np.flatnonzero(np.isin(image_set.labels, chosen)), relabel=True)


def _members_by_class(labels: np.ndarray) -> list[np.ndarray]:
    """The indices of each class's samples, ascending, classes in label order: one sort, not a pass per class."""
    order = np.argsort(labels, kind="stable")
    bounds = np.flatnonzero(np.diff(labels[order])) + 1
    return np.split(order, bounds)


def split_dataset(
    image_set: ImageSet,
    protocol: str,
    fractions: Sequence[float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> dict[str, ImageSet]:
    """Split into train/val/test by samples per class ('closed') or by classes ('open')."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol '{protocol}'; known: {', '.join(PROTOCOLS)}")
    fractions = [float(f) for f in fractions]
    if len(fractions) != 3 or min(fractions) <= 0 or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(f"fractions must be three positive numbers (train, val, test) summing to 1, "
                         f"got {fractions}")
    rng = np.random.default_rng(seed)
    classes = np.unique(image_set.labels)
    if protocol == "closed":
        parts = [[], [], []]
        for label, members in zip(classes, _members_by_class(image_set.labels)):
            members = rng.permutation(members)
            counts = split_counts(len(members), fractions)
            if min(counts) < 1:
                needed = next(n for n in itertools.count(len(members) + 1) if min(split_counts(n, fractions)) >= 1)
                raise ValueError(
                    f"class '{image_set.class_names[label]}' has {len(members)} samples, too few to "
                    f"give train/val/test at least one each with fractions {fractions}; give each class at least "
                    f"{needed} images, or change data.fractions"
                )
            for part, chunk in zip(parts, np.split(members, np.cumsum(counts)[:-1])):
                part.append(chunk)
        # The head is sized by train's classes, so val/test keep the original label ids.
        return {name: image_set.subset(np.sort(np.concatenate(part)), relabel=False)
                for name, part in zip(SPLIT_NAMES, parts)}
    counts = split_counts(len(classes), fractions)
    if min(counts) < 2:  # each split needs n·fraction ≥ 1 at least: the search starts there
        start = max(6, int(1 / min(fractions)))
        needed = next(n for n in itertools.count(start) if min(split_counts(n, fractions)) >= 2)
        raise ValueError(
            f"the open protocol needs at least 2 classes in each of train/val/test; with fractions "
            f"{fractions} that takes at least {needed} classes, this set has {len(classes)}"
        )
    shuffled = rng.permutation(classes)
    class_parts = np.split(shuffled, np.cumsum(counts)[:-1])
    return {name: image_set.subset(np.flatnonzero(np.isin(image_set.labels, part)), relabel=True)
            for name, part in zip(SPLIT_NAMES, class_parts)}


# ---------------------------------------------------------------------------------------
# Persistence


def class_split(image_set: ImageSet, data, split: int) -> dict[str, ImageSet]:
    """One class split of a loaded source as `data` (params.yaml's DataConfig) declares it: `data.classes` of its
    classes kept (seeded by the split, nested), then split by `data.protocol` and `data.fractions` at that seed."""
    kept = keep_classes(image_set, data.classes, seed=split) if data.classes is not None else image_set
    return split_dataset(kept, data.protocol, data.fractions, seed=split)


def save_splits(
    splits: dict[str, ImageSet],
    out_dir: str | os.PathLike,
    *,
    source: str,
    protocol: str,
    seed: int,
    fractions: Sequence[float],
    **details,
) -> dict:
    """Write `{train,val,test}.pt` and `manifest.json` (with checksums and any `details`) to `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"source": source, "protocol": protocol, "seed": seed,
                "fractions": [float(f) for f in fractions], **details, "splits": {}}
    for name in SPLIT_NAMES:
        image_set = splits[name]
        payload = {"labels": torch.from_numpy(image_set.labels), "class_names": image_set.class_names,
                   "images": image_set.images, "paths": image_set.paths}
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
        write_bytes(data, out_dir / f"{name}.pt")
        manifest["splits"][name] = {
            "file": f"{name}.pt",
            "num_samples": len(image_set),
            "num_classes": image_set.num_classes,
            "class_names": image_set.class_names,
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    # The manifest goes last: an interrupted save leaves checksums that no longer match.
    write_bytes(json.dumps(manifest, indent=2).encode(), out_dir / "manifest.json")
    return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_splits(out_dir: str | os.PathLike) -> dict[str, ImageSet]:
    """Read the splits written by `save_splits`, verifying each file's checksum."""
    out_dir = Path(out_dir)
    manifest_path = out_dir / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} is missing; rerun the prepare stage")
    manifest = json.loads(manifest_path.read_text())
    splits = {}
    for name in SPLIT_NAMES:
        entry = manifest["splits"][name]
        path = out_dir / entry["file"]
        if not path.is_file():
            raise FileNotFoundError(f"split file {path} is missing; rerun the prepare stage")
        if _sha256(path) != entry["sha256"]:
            raise ValueError(
                f"split file {path} does not match the checksum in {manifest_path} (changed or "
                f"corrupted since it was written); rerun the prepare stage"
            )
        payload = torch.load(path, weights_only=True)
        splits[name] = ImageSet(payload["labels"].numpy(), payload["class_names"],
                                images=payload["images"], paths=payload["paths"])
    return splits


# ---------------------------------------------------------------------------------------
# Batching


def rgb_image(image: Image.Image, path: str | os.PathLike) -> Image.Image:
    """`image` as 8-bit RGB; 16-bit greyscale is scaled to 8 bits, where PIL's own conversion clips it at 255."""
    if image.mode == "F" or image.mode.startswith("I"):
        pixels = np.asarray(image)
        if image.mode == "F" or pixels.min() < 0 or pixels.max() > 65535:
            raise ValueError(f"{path} holds {'floating-point' if image.mode == 'F' else '32-bit'} pixels, which have "
                             "no one way to 8 bits; save it as an 8- or 16-bit image")
        image = Image.fromarray(np.rint(pixels / 257).astype(np.uint8))  # 65535 → 255, as 8-bit tools scale it
    return image.convert("RGB")


class _ImageFiles(torch.utils.data.Dataset):
    """Decodes image files to uint8 RGB tensors of one square size."""

    def __init__(self, paths: list[str], labels: np.ndarray, image_size: int) -> None:
        self.paths, self.labels, self.image_size = paths, labels, image_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path = self.paths[index]
        try:
            with Image.open(path) as image:
                image = rgb_image(image, path).resize((self.image_size, self.image_size), Image.BILINEAR)
        except (OSError, ValueError) as exc:  # PIL's UnidentifiedImageError is an OSError
            raise OSError(f"cannot read image file {path}: {exc}") from exc
        return torch.from_numpy(np.array(image)).permute(2, 0, 1), int(self.labels[index])


def _resize(images: torch.Tensor, image_size: int | None) -> torch.Tensor:
    if image_size is None or images.shape[-2:] == (image_size, image_size):
        return images
    return torch.nn.functional.interpolate(images, size=(image_size, image_size), mode="bilinear",
                                           align_corners=False, antialias=True)


def _file_batches(image_set, batch_size, device, shuffle, generator, image_size, num_workers, drop_last):
    loader = torch.utils.data.DataLoader(
        _ImageFiles(image_set.paths, image_set.labels, image_size), batch_size=batch_size,
        shuffle=shuffle, generator=generator, num_workers=num_workers, drop_last=drop_last,
        pin_memory=device.type == "cuda",
    )
    for images, labels in loader:
        yield images.to(device, non_blocking=True).float().div_(255), labels.to(device, non_blocking=True)


def _tensor_batches(images, labels, batch_size, order, image_size, drop_last):
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    # One copy of the epoch's order to the device: a copy per batch from pageable memory would make the host wait for
    # the GPU at every step (train() measured 0.79x a bare loop on an H100 with it).
    order = order.to(images.device)
    for start in range(0, stop, batch_size):
        index = order[start:start + batch_size]
        yield _resize(images[index], image_size), labels[index]


def batches(
    image_set: ImageSet,
    batch_size: int,
    *,
    device: torch.device | str,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
    image_size: int | None = None,
    num_workers: int = 0,
    drop_last: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of (float32 images in [0, 1] as (B, C, H, W), int64 labels) on `device`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # 'cuda' and 'cuda:0' share one cache entry
        device = torch.device("cuda", torch.cuda.current_device())
    if image_set.images is None:
        if image_size is None:
            raise ValueError("image files come in many sizes: pass image_size to batch a folder source")
        return _file_batches(image_set, batch_size, device, shuffle, generator, image_size, num_workers,
                             drop_last)
    if device not in image_set._device_cache:
        image_set._device_cache[device] = (
            image_set.images.to(device).float().div_(255),
            torch.from_numpy(image_set.labels).to(device),
        )
    images, labels = image_set._device_cache[device]
    # The permutation is drawn now, so the generator advances once per call (one epoch).
    if shuffle:
        generator_device = generator.device if generator is not None else "cpu"
        order = torch.randperm(len(image_set), generator=generator, device=generator_device)
    else:
        order = torch.arange(len(image_set))
    return _tensor_batches(images, labels, batch_size, order, image_size, drop_last)
