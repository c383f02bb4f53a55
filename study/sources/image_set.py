"""`ImageSet`: labelled images in memory or on disk, what every data source returns and every stage reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch


@dataclass(frozen=True, eq=False)
class ImageSet:
    """Labelled images, held in memory (`images`) or as files on disk (`paths`)."""

    labels: np.ndarray
    class_names: list[str]
    images: torch.Tensor | None = None
    paths: list[str] | None = None
    # Float copies of `images` per device, so each epoch does not convert again.
    _device_cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", np.asarray(self.labels, dtype=np.int64).reshape(-1))
        object.__setattr__(self, "class_names", [str(name) for name in self.class_names])
        if (self.images is None) == (self.paths is None):
            raise ValueError("an ImageSet needs exactly one of `images` or `paths`")
        if self.images is not None and (self.images.dtype != torch.uint8 or self.images.ndim != 4):
            raise ValueError(
                f"ImageSet.images must be a uint8 tensor of shape (N, C, H, W), "
                f"got {self.images.dtype} of shape {tuple(self.images.shape)}"
            )
        count = len(self.images) if self.images is not None else len(self.paths)
        if count != len(self.labels):
            raise ValueError(f"{count} images but {len(self.labels)} labels")
        if len(self.labels) and (self.labels.min() < 0 or self.labels.max() >= self.num_classes):
            raise ValueError(
                f"labels must lie in 0..{self.num_classes - 1} (one per class name), "
                f"found {self.labels.min()}..{self.labels.max()}"
            )

    @property
    def num_classes(self) -> int:
        """Number of label ids (length of `class_names`)."""
        return len(self.class_names)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def input_shape(self) -> tuple[int, int, int] | None:
        """(C, H, W) of in-memory images; None for files, whose size is set when batching."""
        return tuple(self.images.shape[1:]) if self.images is not None else None

    def subset(self, indices: Sequence[int] | np.ndarray, relabel: bool) -> ImageSet:
        """The samples at `indices`; with `relabel`, present classes become 0..k-1 in order."""
        indices = np.asarray(indices, dtype=np.int64)
        labels, class_names = self.labels[indices], self.class_names
        if relabel:
            present = np.unique(labels)
            labels = np.searchsorted(present, labels)
            class_names = [self.class_names[label] for label in present]
        if self.images is not None:
            return ImageSet(labels, class_names, images=self.images[torch.from_numpy(indices)])
        return ImageSet(labels, class_names, paths=[self.paths[i] for i in indices])
