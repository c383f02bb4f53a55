"""Composed many-class sources from real images, as the few-shot literature builds multi-digit MNIST.

A class is an ordered tuple of the base set's classes (two digits: Double MNIST's 100 classes; three: Triple
MNIST's 1,000; or two Fashion-MNIST items), laid side by side; each instance draws a real image of each part. Under
the open protocol the composed classes are split, so the model is tested on tuples it never saw, as a face model
is tested on identities it never saw. What it cannot stand in for: the parts of an unseen tuple are seen classes
(a test class "37" shares its digits' images with training classes such as "31"), so an open split of composed
classes is easier than one of truly new identities; and everything composed from one base set is one data source,
not an independent one.

Spec: `compose:<parts>:<instances per class>:<base spec>`, e.g. `compose:2:60:mnist5k` (100 classes of 28×56),
`compose:3:20:mnist5k` (1,000 classes of 28×84), `compose:2:60:idx:/usr/share/datasets/fashion-mnist`. With one
part it is a per-class subsample of the base set: `compose:1:600:idx:...` keeps 600 images of each class.

Draws: class k (the tuple of base classes in lexicographic order, so class 37 of two digits is (3, 7)) and part
position p draw base images without replacement from a seeded permutation of the base class's images, starting a
new permutation only once that one is used up; so one class repeats no part image before it has used all of them,
and a one-part composition of at most the base class's size is a plain subsample. Each (class, position) has its
own generator seeded from `COMPOSE_SEED`, k and p: class k's images are the same whatever else is asked for, and the
first n instances the same at any larger instance count.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from study.sources.image_set import ImageSet
from study.sources.source import Source, blank_images

COMPOSE_SEED = 19990817  # any fixed number; changing it changes every composed image
MAX_PARTS = 3
MAX_IMAGES = 200_000  # a composed set is held in memory whole


@dataclass(frozen=True)
class ComposedSpec:
    """How many base classes each composed class strings together, how many instances each has, and the base."""

    parts: int
    instances_per_class: int
    base: str

    def __str__(self) -> str:
        return f"compose:{self.parts}:{self.instances_per_class}:{self.base}"


def parse_composed_spec(argument: str) -> ComposedSpec:
    """`<parts>:<instances per class>:<base spec>` (the base may itself hold colons, e.g. idx:/path)."""
    example = "e.g. 'compose:2:60:mnist5k' (Double MNIST: 100 classes of 60 images)"
    fields = argument.split(":", 2)
    if len(fields) < 3 or not fields[2]:
        raise ValueError(f"dataset 'compose:{argument}' needs <parts>:<instances per class>:<base dataset>, {example}")
    try:
        parts, instances = int(fields[0]), int(fields[1])
    except ValueError:
        raise ValueError(f"dataset 'compose:{argument}': parts and instances per class must be whole numbers, "
                         f"{example}") from None
    if not 1 <= parts <= MAX_PARTS:
        raise ValueError(f"dataset 'compose:{argument}': parts must be 1 to {MAX_PARTS}, got {parts}")
    if instances < 1:
        raise ValueError(f"dataset 'compose:{argument}': give each class at least 1 instance, got {instances}")
    if fields[2].partition(":")[0] == "compose":
        raise ValueError(f"dataset 'compose:{argument}': the base must be a plain source such as mnist5k, not a "
                         "composed one; ask for more parts instead")
    return ComposedSpec(parts, instances, fields[2])


def composed_class_names(spec: ComposedSpec, base_names: list[str]) -> list[str]:
    """Each composed class's name: its parts' names joined by '+', in lexicographic order of the parts."""
    return ["+".join(base_names[index] for index in combination)
            for combination in itertools.product(range(len(base_names)), repeat=spec.parts)]


def check_size(spec: ComposedSpec, base_classes: int) -> int:
    """The composed class count, once the set is known to fit the documented bound."""
    classes = base_classes ** spec.parts
    if classes * spec.instances_per_class > MAX_IMAGES:
        raise ValueError(f"{spec} makes {classes:,} classes × {spec.instances_per_class} images, more than the "
                         f"{MAX_IMAGES:,} a composed set may hold; ask for fewer instances per class or parts")
    return classes


def composed_labels(spec: ComposedSpec, base: ImageSet) -> ImageSet:
    """The composed set's labels, with blank 1-pixel stand-ins for its images (validate never composes)."""
    classes = check_size(spec, base.num_classes)
    return blank_images(np.repeat(np.arange(classes), spec.instances_per_class),
                        composed_class_names(spec, list(base.class_names)))


def _draws(members: np.ndarray, count: int, class_index: int, position: int) -> np.ndarray:
    """`count` of `members`, without replacement until all are used, from (class, position)'s own generator."""
    rng = np.random.default_rng([COMPOSE_SEED, class_index, position])
    rounds = math.ceil(count / len(members))
    return np.concatenate([rng.permutation(members) for _ in range(rounds)])[:count]


def compose(spec: ComposedSpec, base: ImageSet) -> ImageSet:
    """The composed set: for every tuple of base classes, `instances_per_class` images of its parts side by side."""
    if base.images is None:
        raise ValueError(f"{spec}: the base {spec.base} is a folder of image files; compose needs a set held in "
                         "memory (mnist5k, digits, idx:<folder>, glyphs)")
    classes = check_size(spec, base.num_classes)
    members = {label: np.flatnonzero(base.labels == label) for label in range(base.num_classes)}
    empty = [base.class_names[label] for label, indices in members.items() if len(indices) == 0]
    if empty:
        raise ValueError(f"{spec}: the base has no image of class {', '.join(empty)}")
    count = spec.instances_per_class
    images = []
    for class_index, combination in enumerate(itertools.product(range(base.num_classes), repeat=spec.parts)):
        chosen = [_draws(members[part], count, class_index, position) for position, part in enumerate(combination)]
        images.append(torch.cat([base.images[indices] for indices in chosen], dim=-1))  # side by side: width
    labels = np.repeat(np.arange(classes), count)
    return ImageSet(labels, composed_class_names(spec, list(base.class_names)), images=torch.cat(images))


def composed_source(lookup: Callable[[str], tuple[Source, str]]) -> Source:
    """The compose source, reading its base through `lookup` (the registry's: a spec's source and argument)."""

    def load(argument: str, cache_dir: Path) -> ImageSet:
        spec = parse_composed_spec(argument)
        base, base_argument = lookup(spec.base)
        return compose(spec, base.load(base_argument, cache_dir))

    def labels(argument: str, cache_dir: Path) -> ImageSet:  # the base's labels give the composed ones
        spec = parse_composed_spec(argument)
        base, base_argument = lookup(spec.base)
        base_labels = base.labels(base_argument, cache_dir)
        if base_labels is None:
            raise ValueError(f"{spec}: the base {spec.base} is only downloaded by prepare; compose an offline base")
        return composed_labels(spec, base_labels)

    def shape(argument: str, cache_dir: Path) -> tuple[int, int] | None:  # the parts side by side
        spec = parse_composed_spec(argument)
        base, base_argument = lookup(spec.base)
        base_shape = base.shape(base_argument, cache_dir)
        return None if base_shape is None else (base_shape[0], base_shape[1] * spec.parts)

    def data_source(argument: str) -> str:  # everything composed from one base set is that one source
        base, base_argument = lookup(parse_composed_spec(argument).base)
        return base.source_of(base_argument)

    return Source("compose", "compose:<parts>:<per class>:<base>", load, labels, shape=shape, data_source=data_source)
