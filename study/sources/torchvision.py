"""torchvision's datasets as an image source (`torchvision:<Name>`): downloaded when online, found in the cache
when not; the name is resolved offline so that validate can check it before anything is fetched."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import numpy as np
import torch

from study.sources.image_set import ImageSet
from study.sources.source import Source
from study.sources.spec import needs_argument


_TORCHVISION_EXAMPLES = "MNIST, FashionMNIST, KMNIST, CIFAR10, CIFAR100, SVHN, STL10, USPS"


def _as_nchw(data) -> torch.Tensor:
    data = torch.as_tensor(np.asarray(data))
    if data.ndim == 3:
        return data[:, None]
    if data.shape[-1] in (1, 3, 4) and data.shape[1] not in (1, 3, 4):  # channels-last
        return data.permute(0, 3, 1, 2)
    return data


def _torchvision_arrays(dataset) -> tuple[torch.Tensor, np.ndarray]:
    labels = getattr(dataset, "targets", None)
    if labels is None:
        labels = getattr(dataset, "labels", None)
    data = getattr(dataset, "data", None)
    if isinstance(data, (torch.Tensor, np.ndarray)) and data.ndim in (3, 4) and labels is not None:
        return _as_nchw(data).to(torch.uint8).contiguous(), np.asarray(labels, dtype=np.int64)
    # Datasets without an array attribute: decode sample by sample (slow, but only once).
    pairs = [(np.asarray(image.convert("RGB")), label) for image, label in dataset]
    images = np.stack([image for image, _ in pairs])
    return _as_nchw(images).contiguous(), np.array([label for _, label in pairs], dtype=np.int64)


def _no_torchvision_dataset(argument: str) -> ValueError:
    return ValueError(f"torchvision has no dataset '{argument}'; known ones include {_TORCHVISION_EXAMPLES} "
                      f"(names are case-sensitive, see torchvision.datasets)")


def torchvision_dataset(argument: str) -> type:
    """The class torchvision.datasets.<argument>; a ValueError names known ones (no download is tried)."""
    import torchvision.datasets

    needs_argument("torchvision", argument, "FashionMNIST")
    dataset_class = getattr(torchvision.datasets, argument, None)
    if not (isinstance(dataset_class, type) and issubclass(dataset_class, torchvision.datasets.VisionDataset)):
        raise _no_torchvision_dataset(argument)
    return dataset_class


def _torchvision_exports() -> tuple[str, ...] | None:
    """The names torchvision.datasets exports, read from its __all__ in its source; None where that cannot be read."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        tree = ast.parse((Path(spec.submodule_search_locations[0]) / "datasets" / "__init__.py").read_text("utf-8"))
        return next(tuple(ast.literal_eval(node.value)) for node in tree.body if isinstance(node, ast.Assign)
                    and any(getattr(target, "id", None) == "__all__" for target in node.targets))
    except (OSError, SyntaxError, ValueError, StopIteration):
        return None


def check_torchvision_name(argument: str) -> None:
    """A ValueError when torchvision has no dataset `argument`, told without importing torchvision (seconds) where
    its source says what it exports; prepare's load checks the class itself."""
    needs_argument("torchvision", argument, "FashionMNIST")
    names = _torchvision_exports()
    if names is None:
        torchvision_dataset(argument)
    elif argument not in names or not argument[:1].isupper():  # its exports include one helper function
        raise _no_torchvision_dataset(argument)


def load_torchvision(argument: str, cache_dir: Path) -> ImageSet:
    """A torchvision dataset by class name, its train and test parts together; downloaded only where online."""
    dataset_class = torchvision_dataset(argument)
    parameters = inspect.signature(dataset_class).parameters
    if "train" in parameters:
        part_kwargs = [{"train": True}, {"train": False}]
    elif "split" in parameters:
        part_kwargs = [{"split": "train"}, {"split": "test"}]
    else:
        part_kwargs = [{}]
    root = cache_dir.expanduser() / "torchvision"
    try:
        parts = [dataset_class(root=str(root), download=True, **kwargs) for kwargs in part_kwargs]
    except (OSError, RuntimeError) as exc:  # URLError is an OSError; torchvision wraps some in RuntimeError
        raise RuntimeError(
            f"could not download torchvision dataset {argument} into {root} ({exc}). The machine "
            f"seems to be offline. Either put the dataset's files under {root} where "
            f"torchvision.datasets.{argument} expects them, or use an offline source: "
            f"'idx:<folder>' with MNIST-layout IDX files or 'mnist5k'."
        ) from exc
    arrays = [_torchvision_arrays(part) for part in parts]
    labels = np.concatenate([part_labels for _, part_labels in arrays])
    class_names = list(getattr(parts[0], "classes", []) or [])
    if len(class_names) <= labels.max():
        class_names = [str(label) for label in range(int(labels.max()) + 1)]
    return ImageSet(labels, class_names, images=torch.cat([images for images, _ in arrays]))


def _name_only(argument: str, cache_dir: Path | None = None) -> None:
    """The name checked offline; the labels come only with the files, which prepare downloads or finds."""
    check_torchvision_name(argument)


# Sets of one base under another name are one source: configurations of one base set are not independent.
_SOURCE_NAMES = {"MNIST": "mnist", "FashionMNIST": "fashion-mnist"}

TORCHVISION = Source("torchvision", "torchvision:<Name>", load_torchvision, labels=_name_only,
                     data_source=lambda argument: _SOURCE_NAMES.get(argument, argument.lower()))
