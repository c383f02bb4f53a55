"""Backbones that map image batches in [0, 1] to embeddings, looked up by name in one registry.

Every model takes float images of shape (B, C, H, W) with values in [0, 1] and returns raw
(unnormalised) embeddings of shape (B, embedding_size); the cosine losses normalise them.
Names: the entries of `model_names()`, or `timm/<model_name>` for any timm architecture.
"""

from __future__ import annotations

import difflib
import math
from typing import Callable

import torch
from torch import nn

TIMM_PREFIX = "timm/"
InputShape = tuple[int, int, int]


def _mlp(embedding_size: int, input_shape: InputShape, hidden: int = 256) -> nn.Module:
    """Two hidden layers on the flattened pixels: the no-convolution baseline."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
        nn.Linear(hidden, embedding_size),
    )


def _cnn(embedding_size: int, input_shape: InputShape) -> nn.Module:
    """Small, CPU-fast two-block CNN; the default for 28x28 grey images, any size works."""
    channels, height, width = input_shape
    # Stride-2 convolutions instead of conv + max-pool: on a CPU the full-resolution
    # pooling and elementwise passes cost more than the convolutions themselves; this
    # trains about 10x faster than seed_cnn on 28x28 (`study bench`: its backbones figure).
    # Each halves the side rounding up, so tiny inputs (8x8 digits, even 1x1) still work;
    # the final grid is capped by the ceil(n/4) pixels left, so nothing gets upsampled.
    grid = (min(4, math.ceil(height / 4)), min(4, math.ceil(width / 4)))
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(grid),
        nn.Flatten(),
        nn.Linear(32 * grid[0] * grid[1], embedding_size),
    )


def _seed_cnn(embedding_size: int, input_shape: InputShape) -> nn.Module:
    """Seed 003's MNIST network (the classic Keras/PyTorch MNIST example), layer for layer."""
    channels, height, width = input_shape
    if min(height, width) < 6:
        raise ValueError(f"seed_cnn needs images of at least 6x6 pixels, got {height}x{width}")
    # Two unpadded 3x3 convolutions take 4 pixels off each side length, the pool halves it.
    flat = 64 * ((height - 4) // 2) * ((width - 4) // 2)
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3), nn.ReLU(),
        nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(flat, 128), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(128, embedding_size),
    )


_BUILDERS: dict[str, Callable[[int, InputShape], nn.Module]] = {
    "cnn": _cnn,
    "mlp": _mlp,
    "seed_cnn": _seed_cnn,
}
KNOWN_MODELS: tuple[str, ...] = tuple(sorted(_BUILDERS))


def model_names() -> list[str]:
    """Registered backbone names (any `timm/<model_name>` is accepted as well)."""
    return list(KNOWN_MODELS)


def check_model(name: str, pretrained: bool = False) -> None:
    """Raise a ValueError naming the fix when backbone `name` (with `pretrained` weights) does not exist."""
    if name.startswith(TIMM_PREFIX):
        import timm  # deferred: importing timm is slow and only these models need it

        model_name = name[len(TIMM_PREFIX):]
        if not timm.is_model(model_name):
            close = difflib.get_close_matches(model_name, timm.list_models(), n=5)
            hint = f"; close names: {', '.join(TIMM_PREFIX + c for c in close)}" if close else ""
            raise ValueError(f"unknown timm model {model_name!r}{hint} (see timm.list_models())")
        if pretrained and not timm.models.is_model_pretrained(model_name):
            raise ValueError(f"timm has no pretrained weights for {model_name!r} "
                             "(see timm.list_pretrained()); use `pretrained: false`")
    elif name not in _BUILDERS:
        raise ValueError(
            f"unknown model {name!r}; known models: {', '.join(KNOWN_MODELS)}, "
            f"or '{TIMM_PREFIX}<model_name>' for any timm model"
        )
    elif pretrained:
        raise ValueError(f"model {name!r} has no pretrained weights; "
                         "use `pretrained: false` or a timm/<model_name> backbone")


class TimmBackbone(nn.Module):
    """A timm model without its classifier, fed [0, 1] images, projected to the embedding size."""

    def __init__(self, model_name: str, embedding_size: int, input_shape: InputShape,
                 pretrained: bool = False):
        super().__init__()
        import timm  # deferred: importing timm is slow and only these models need it

        channels = input_shape[0]
        if channels not in (1, 3):
            raise ValueError(f"timm backbones take 1- or 3-channel images, got {channels} channels")
        # Checked first so that the offline message below is never given for a name or weights timm lacks.
        check_model(TIMM_PREFIX + model_name, pretrained)
        try:
            self.body = timm.create_model(model_name, pretrained=pretrained, num_classes=0)
        except Exception as err:
            if not pretrained:
                raise
            raise RuntimeError(
                f"the pretrained weights for timm model {model_name!r} could not be downloaded "
                f"({type(err).__name__}: {err}); this machine looks offline. To proceed, put the "
                "weights in the Hugging Face / torch hub cache (e.g. download them on a machine "
                "with internet and copy ~/.cache/huggingface), set HF_HUB_OFFLINE=1 with that "
                "populated cache, or set `pretrained: false` in params.yaml."
            ) from err
        data_config = timm.data.resolve_model_data_config(self.body)
        # Normalising here keeps the data layer identical for every backbone: it always
        # feeds [0, 1] images, and each model applies the statistics it was trained with.
        for statistic in ("mean", "std"):
            value = torch.tensor(data_config[statistic]).view(1, 3, 1, 1)
            self.register_buffer(statistic, value, persistent=False)
        self.grey_input = channels == 1
        self.projection = nn.Linear(self._feature_size(model_name, input_shape), embedding_size)

    def _feature_size(self, model_name: str, input_shape: InputShape) -> int:
        """Width of the pooled features, found by one dummy pass (fails early on a bad size)."""
        was_training = self.body.training
        self.body.eval()
        try:
            with torch.no_grad():
                features = self.body(torch.zeros(1, 3, *input_shape[1:]))
        except Exception as err:
            message = f"timm model {model_name!r} cannot take {input_shape} images: {err}"
            raise ValueError(message) from err
        finally:
            self.body.train(was_training)
        return features.shape[1]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Embed a batch of [0, 1] images."""
        if self.grey_input:
            images = images.expand(-1, 3, -1, -1)
        return self.projection(self.body((images - self.mean) / self.std))


def build_model(name: str, embedding_size: int, input_shape: tuple[int, int, int],
                pretrained: bool = False) -> nn.Module:
    """Build backbone `name`: (B, *input_shape) images in [0, 1] to (B, embedding_size)."""
    if not isinstance(embedding_size, int) or embedding_size <= 0:
        raise ValueError(f"embedding_size must be a positive integer, got {embedding_size!r}")
    if (not isinstance(input_shape, (tuple, list)) or len(input_shape) != 3
            or any(not isinstance(n, int) or n <= 0 for n in input_shape)):
        raise ValueError("input_shape must be (channels, height, width) of positive integers, "
                         f"got {input_shape!r}")
    input_shape = tuple(input_shape)
    if name.startswith(TIMM_PREFIX):
        return TimmBackbone(name[len(TIMM_PREFIX):], embedding_size, input_shape, pretrained)
    check_model(name, pretrained)
    return _BUILDERS[name](embedding_size, input_shape)
