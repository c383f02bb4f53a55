"""YAML read as plain data, the way params.yaml must be: what both YAML versions (PyYAML's 1.1 and DVC's 1.2) read
alike, with no aliases, deep nesting or repeated keys; values quoted cut short in messages; and the files DVC writes
read fast."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml


class Quoted:
    """A value as an error quotes it ({value} or {value!r}): cut short, since a pasted file can make one huge."""

    LIMIT = 80

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return self._cut(str(self.value))

    def __repr__(self) -> str:
        return self._cut(repr(self.value))

    def _cut(self, text: str) -> str:
        return text if len(text) <= self.LIMIT else f"{text[:self.LIMIT]}… ({len(text):,} characters)"


# libyaml's loader where PyYAML was built with it: the 44 committed cells' dvc.lock files (1.2 MB of YAML, read at
# every benchmark aggregate) in 1.0 s, against 6.1 s with the Python one. Both read YAML 1.1 and raise the same errors.
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(text: str) -> Any:
    """YAML that DVC or the study wrote (dvc.lock, dvc.yaml, a cell's params.yaml), read as yaml.safe_load reads it."""
    return yaml.load(text, Loader=_FAST_LOADER)


def read_yaml_file(path: Path) -> Any:
    """read_yaml of the file at `path`, parsed once for each version of it (its size and modification time): the
    benchmark's aggregate reads each cell's dvc.lock twice (is it finished, is its fingerprint its own). The result is
    shared between callers: read it, never change it."""
    status = path.stat()
    return _read_version(str(path), status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=256)
def _read_version(path: str, modified_ns: int, size: int) -> Any:
    return read_yaml(Path(path).read_text(encoding="utf-8"))


# A study's params take a few KB and nest four deep (runs.fixed.<name>.m): far more is no params file.
MAX_PARAMS_BYTES = 1 << 20
MAX_PARAMS_DEPTH = 8
_PLAIN_INTEGER = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_PLAIN_BOOLEAN = ("true", "True", "TRUE", "false", "False", "FALSE")


class NotPlainData(ValueError):
    """YAML that is valid but not plain data: its line and the problem."""

    def __init__(self, mark: Any, problem: str) -> None:
        super().__init__(f"line {mark.line + 1}: {problem}")


class PlainDataLoader(yaml.SafeLoader):
    """YAML read as plain data: no aliases, no deep nesting, no key twice, and none of the YAML 1.1 readings that
    YAML 1.2 (DVC's reader) disagrees with, such as 010 (8), 0x10 (16), 1:30 (90) or on (true)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):  # an alias bomb expands a few lines into gigabytes
            raise NotPlainData(mark, "an alias (*name) repeats another part of the file; write the value out where "
                                     "it is used")
        if self.depth >= MAX_PARAMS_DEPTH:  # deeper composing recurses until Python's stack gives out
            raise NotPlainData(mark, f"nests deeper than {MAX_PARAMS_DEPTH} levels, and params nest at most four "
                                     "(runs.fixed.<name>.m); remove the extra brackets or indentation")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value in seen:  # YAML readers keep the last silently
                raise NotPlainData(key.start_mark, f"the key {Quoted(key.value)} appears twice in one mapping; "
                                                   "keep one of them")
            seen.add(getattr(key, "value", None))
        return super().construct_mapping(node, deep)

    def construct_plain_integer(self, node: Any) -> int:
        value = self.construct_yaml_int(node)
        if not _PLAIN_INTEGER.fullmatch(node.value):
            raise _not_decimal(node, value, "octal, hexadecimal, binary or base 60", "not always alike")
        return value

    def construct_plain_float(self, node: Any) -> float:
        value = self.construct_yaml_float(node)
        if ":" in node.value or "_" in node.value:
            raise _not_decimal(node, value, "base 60, or digits with _", "as text")
        return value

    def construct_plain_boolean(self, node: Any) -> bool:
        value = self.construct_yaml_bool(node)
        if node.value not in _PLAIN_BOOLEAN:
            raise NotPlainData(node.start_mark, f"{Quoted(node.value)} reads as {str(value).lower()} in YAML 1.1 "
                               "but as text in YAML 1.2, which DVC reads; write true or false, or quote it if it "
                               "is text")
        return value


def _not_decimal(node: Any, value: int | float, yaml11_forms: str, yaml12_reading: str) -> NotPlainData:
    """The error of a number written in a form other than plain decimal, which the two YAML versions read apart."""
    return NotPlainData(node.start_mark, f"{Quoted(node.value)} is no plain decimal number: YAML 1.1 reads it as "
                        f"{value} ({yaml11_forms}), YAML 1.2, which DVC reads, {yaml12_reading}; write {value} if "
                        "that is what you mean, or quote it if it is text")


PlainDataLoader.add_constructor("tag:yaml.org,2002:int", PlainDataLoader.construct_plain_integer)
PlainDataLoader.add_constructor("tag:yaml.org,2002:float", PlainDataLoader.construct_plain_float)
PlainDataLoader.add_constructor("tag:yaml.org,2002:bool", PlainDataLoader.construct_plain_boolean)
