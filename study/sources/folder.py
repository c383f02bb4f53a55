"""Image folders (`folder:<path>`): one sub-folder of image files per class, read when batched."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterator

from study.sources.image_set import ImageSet
from study.sources.source import Source
from study.sources.spec import needs_argument

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


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


def load_folder(argument: str, cache_dir: Path) -> ImageSet:
    """An image folder's files, listed (not read), labelled by their class sub-folder."""
    needs_argument("folder", argument, "/data/faces")
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


def named_folder(argument: str) -> Path | None:
    """The folder `argument` names, made absolute; None where there is no such folder."""
    folder = Path(argument).expanduser().resolve()
    return folder if folder.is_dir() else None


def folder_name(argument: str) -> str:
    """A folder's source by its name: 'idx:/usr/share/datasets/fashion-mnist' is 'fashion-mnist'."""
    return Path(argument.rstrip("/")).name or argument


# Listing a folder reads no image: its labels are its load.
FOLDER = Source("folder", "folder:<path>", load_folder, labels=load_folder, channels=3,  # read as RGB
                folder=named_folder, data_source=folder_name)
