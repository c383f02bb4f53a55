"""The argument of a dataset spec (the part after 'name:'), checked the same way by every source."""

from __future__ import annotations


def no_argument(name: str, argument: str) -> None:
    """A ValueError when a source that takes no argument is given one."""
    if argument:
        raise ValueError(f"dataset '{name}' takes no argument, got '{name}:{argument}'")


def needs_argument(name: str, argument: str, example: str) -> None:
    """A ValueError, with an example, when a source that needs an argument is given none."""
    if not argument:
        raise ValueError(f"dataset '{name}' needs an argument, e.g. '{name}:{example}'")
