"""K runs of one backbone trained as one model: their convolutions grouped, their linear layers batched.

Each run keeps its own modules (its seed's initialisation), optimiser, schedule, data order, loss head and values,
learning rate and early stopping; only the backbones' forward and backward passes are one. A grouped convolution
never mixes its groups and each run's loss reads its own outputs alone, so every run's gradients are those of
`study.training.train` on its own, and the K runs are K separate runs to float rounding (tests/test_fused.py). Small
convolutions leave most of a CPU's arithmetic idle; one convolution K times as wide fills more of it
(`study bench` prints the speed-up at K = 1 to 16).

Backbones of the layers in FUSABLE fuse (the `cnn` and `mlp` models); others (dropout, whose draws would depend on
K, or timm's) train one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from study.config import ModelConfig, TrainConfig
from study.sources import ImageSet
from study.training import Run, RunResult, resolve_device

FUSABLE = (nn.Conv2d, nn.BatchNorm1d, nn.BatchNorm2d, nn.ReLU, nn.AdaptiveAvgPool2d, nn.MaxPool2d, nn.Flatten,
           nn.Linear)
FUSABLE_NAMES = ", ".join(layer.__name__ for layer in FUSABLE)


def fusable(model: nn.Module) -> bool:
    """Whether `model` is a sequence of layers `fused_forward` runs for K copies at once."""
    return isinstance(model, nn.Sequential) and all(
        isinstance(layer, FUSABLE) and getattr(layer, "groups", 1) == 1
        and (not isinstance(layer, nn.Flatten) or (layer.start_dim, layer.end_dim) == (1, -1)) for layer in model)


def _batch_norm(x: torch.Tensor, layers) -> torch.Tensor:
    """Each run's batch norm on its own channels, its running statistics updated in its own module."""
    first = layers[0]
    running_mean = torch.cat([layer.running_mean for layer in layers])
    running_var = torch.cat([layer.running_var for layer in layers])
    out = F.batch_norm(x, running_mean, running_var, torch.cat([layer.weight for layer in layers]),
                       torch.cat([layer.bias for layer in layers]), training=True, momentum=first.momentum,
                       eps=first.eps)
    for layer, mean, var in zip(layers, running_mean.chunk(len(layers)), running_var.chunk(len(layers))):
        layer.running_mean.copy_(mean)
        layer.running_var.copy_(var)
        layer.num_batches_tracked.add_(1)
    return out


def fused_forward(models: list[nn.Sequential], images: list[torch.Tensor]) -> list[torch.Tensor]:
    """The embeddings of each model of `models` (alike, in training mode) of its own batch of `images` (alike in
    shape), computed as one model: K runs' channels side by side, then their features as (batch, K, features)."""
    count = len(models)
    x = torch.cat(images, dim=1)  # (B, K·C, H, W): run k's channels k·C to (k + 1)·C
    if x.dim() == 4:  # a grouped convolution is several times faster with channels last than first on a CPU
        x = x.contiguous(memory_format=torch.channels_last)
    features = False  # whether x is (B, K, F) yet
    for layers in zip(*models):
        first = layers[0]
        if isinstance(first, nn.Conv2d):
            bias = torch.cat([layer.bias for layer in layers]) if first.bias is not None else None
            weight = torch.cat([layer.weight for layer in layers]).contiguous(memory_format=torch.channels_last)
            x = F.conv2d(x, weight, bias, first.stride, first.padding, first.dilation, groups=count)
        elif isinstance(first, (nn.BatchNorm1d, nn.BatchNorm2d)):
            size = x.shape[0]
            x = _batch_norm(x.reshape(size, -1) if features else x, layers)
            x = x.reshape(size, count, -1) if features else x
        elif isinstance(first, nn.Flatten):
            x = x.reshape(x.shape[0], count, -1)
            features = True
        elif isinstance(first, nn.Linear):
            x = torch.einsum("bki,koi->bko", x, torch.stack([layer.weight for layer in layers]))
            if first.bias is not None:
                x = x + torch.stack([layer.bias for layer in layers])
        else:  # ReLU and pooling act on each channel alone
            x = first(x)
    return list(x.unbind(1)) if features else [x]


# What may differ between fused runs: each run's seed, and what only its own optimiser reads.
OWN_SETTINGS = ("seed", "lr", "weight_decay", "momentum")


def train_fused(sets: dict[str, ImageSet], *, loss_name: str, hyperparameters: Sequence[dict],
                model_config: ModelConfig, configs: Sequence[TrainConfig], image_size: int | None = None,
                curve_splits: tuple[str, ...] = ()) -> list[RunResult]:
    """The runs `study.training.train` would train with each of `configs` and `hyperparameters` (pairwise), trained
    as one model; a run that diverges leaves the others training without it. The configs may differ in OWN_SETTINGS
    only, and the backbone must be `fusable`."""
    if len(configs) != len(hyperparameters) or not configs:
        raise ValueError(f"give one set of hyperparameters per config: {len(hyperparameters)} for {len(configs)}")
    shared = {key: value for key, value in configs[0].to_dict().items() if key not in OWN_SETTINGS}
    for config in configs[1:]:
        differs = [key for key, value in config.to_dict().items() if key not in OWN_SETTINGS and shared[key] != value]
        if differs:
            raise ValueError(f"fused runs share every training setting but {', '.join(OWN_SETTINGS)}; these differ: "
                             f"{', '.join(differs)}")
    if configs[0].amp:
        raise ValueError("fused runs train in float32: set train.amp to false, or train the runs one at a time")
    if configs[0].threads is not None:
        torch.set_num_threads(configs[0].threads)
    device = resolve_device(configs[0].device)
    runs = [Run(sets, loss_name, values, model_config, config, image_size, device, curve_splits=curve_splits)
            for values, config in zip(hyperparameters, configs)]
    if not fusable(runs[0].model):
        raise ValueError(f"model {model_config.name!r} has layers that cannot be fused ({FUSABLE_NAMES} can); train "
                         "its runs one at a time")
    for run in runs:
        run.stopped = run.record()
    iteration, total = 0, runs[0].total  # the same for every run: one training set, batch size and length
    while iteration < total and not all(run.stopped for run in runs):
        # Every run draws its own epoch's order, stopped or not; only the running ones train on it.
        for steps in zip(*(run.epoch_batches() for run in runs)):
            running = [(run, batch) for run, batch in zip(runs, steps) if not run.stopped]
            embeddings = fused_forward([run.model for run, _ in running], [images for _, (images, _) in running])
            losses = [run.loss(embedding, labels) for (run, (_, labels)), embedding in zip(running, embeddings)]
            for run, _ in running:
                run.optimizer.zero_grad(set_to_none=True)
            torch.stack(losses).sum().backward()  # each run's loss reaches its own weights alone
            for (run, _), loss in zip(running, losses):
                run.stepped(loss)
                if run.iteration in run.schedule:
                    run.evaluated()
            iteration += 1
            if all(run.stopped for run in runs) or iteration >= total:
                break
    return [run.finished() for run in runs]
