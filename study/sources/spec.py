"""The argument of a dataset spec (the part after 'name:'), checked the same way by every source, and the one spec
of the generated sources (glyphs, strokes, emoji): `<source>:<num_classes>[:<instances per class>[:<image side>]]`."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_INSTANCES_PER_CLASS = 40
IMAGE_SIDES = (28, 32)
_GENERATED_FIELDS = ("num_classes", "instances per class", "image side")


def no_argument(name: str, argument: str) -> None:
    """A ValueError when a source that takes no argument is given one."""
    if argument:
        raise ValueError(f"dataset '{name}' takes no argument, got '{name}:{argument}'")


def needs_argument(name: str, argument: str, example: str) -> None:
    """A ValueError, with an example, when a source that needs an argument is given none."""
    if not argument:
        raise ValueError(f"dataset '{name}' needs an argument, e.g. '{name}:{example}'")


@dataclass(frozen=True)
class GeneratedSpec:
    """A generated source's parsed spec; its text is the canonical spec with every field written out."""

    source: str
    num_classes: int
    instances_per_class: int
    image_side: int

    def __str__(self) -> str:
        return f"{self.source}:{self.num_classes}:{self.instances_per_class}:{self.image_side}"

    @property
    def shape(self) -> tuple[int, int]:
        return self.image_side, self.image_side


def parse_generated_spec(source: str, argument: str, *, default_side: int, example: str,
                         max_classes: int | None = None) -> GeneratedSpec:
    """The spec whose part after '<source>:' is `argument` (e.g. '100:40:32'); a ValueError names the field at fault
    and shows the form with `example` (a whole spec, e.g. 'glyphs:1000')."""
    sides = " or ".join(map(str, IMAGE_SIDES))
    usage = f"use '{source}:<num_classes>[:<instances per class>[:<image side {sides}>]]', e.g. '{example}'"
    if not argument.strip():
        raise ValueError(f"dataset '{source}' needs an argument, the number of classes: {usage}")
    bad = f"bad {source} spec '{source}:{argument}'"
    fields = argument.strip().split(":")
    if len(fields) > len(_GENERATED_FIELDS):
        raise ValueError(f"{bad}: {usage}")
    values = []
    for name, text in zip(_GENERATED_FIELDS, fields):
        try:
            values.append(int(text))
        except ValueError:
            raise ValueError(f"{bad}: {name} must be an integer, got '{text}'; {usage}") from None
    num_classes, instances, side = values + [DEFAULT_INSTANCES_PER_CLASS, default_side][len(values) - 1:]
    if num_classes < 1:
        raise ValueError(f"{bad}: num_classes must be at least 1, got {num_classes}")
    if max_classes is not None and num_classes > max_classes:
        raise ValueError(f"{bad}: {source} has at most {max_classes} classes, {num_classes} were asked for; ask for "
                         f"at most {max_classes}")
    if instances < 1:
        raise ValueError(f"{bad}: instances per class must be at least 1, got {instances}")
    if side not in IMAGE_SIDES:
        raise ValueError(f"{bad}: image side must be one of {', '.join(map(str, IMAGE_SIDES))}, got {side}")
    return GeneratedSpec(source, num_classes, instances, side)
