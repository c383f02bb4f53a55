"""Presets: named overlays on the default params (presets/<name>.yaml), written out as params.yaml.

An existing params.yaml is edited, not replaced: only the keys whose values differ from the preset's change, and
its comments, key order and formatting stay as the person wrote them."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import ScalarString

from study.config import ConfigError, StudyParams

PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"


def preset_names(preset_dir: Path = PRESET_DIR) -> list[str]:
    """The presets that exist."""
    return sorted(path.stem for path in preset_dir.glob("*.yaml"))


def _merge(base: dict, overlay: dict) -> dict:
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return merged


def _set(values: dict, assignment: str) -> None:
    """Apply one `section.key=value` (the value read as YAML, as `dvc exp run -S` does)."""
    path, separator, text = assignment.partition("=")
    if not separator or "." not in path:
        raise ConfigError(f"--set {assignment!r}: write section.key=value, e.g. data.dataset=folder:/data/faces")
    *sections, key = path.split(".")
    target = values
    for section in sections:
        target = target.setdefault(section, {})
    try:
        target[key] = yaml.safe_load(text)
    except yaml.YAMLError as error:  # a tag (!!python/object:…, !custom) or broken syntax: no traceback
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"--set {path}: {text!r} is not plain YAML ({problem}); values are plain YAML (numbers, "
                          f"strings, lists, maps) without tags, and a text value may be quoted: "
                          f"--set '{path}=\"...\"'") from None


def build_preset(name: str, assignments: list[str] = (), preset_dir: Path = PRESET_DIR) -> StudyParams:
    """The default params with preset `name` ('default' for none) and the `assignments` applied, validated."""
    values: dict[str, Any] = StudyParams().to_dict()
    if name != "default":
        path = preset_dir / f"{name}.yaml"
        if not path.is_file():
            raise ConfigError(f"unknown preset {name!r}; the presets are: default, {', '.join(preset_names(preset_dir))}")
        values = _merge(values, yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    for assignment in assignments:
        _set(values, assignment)
    return StudyParams.from_dict(values)


def write_params(params: StudyParams, path: str | Path, origin: str) -> None:
    """params.yaml as plain YAML, headed by where it came from."""
    plain = yaml.safe_dump(_plain(params.to_dict()), sort_keys=False, default_flow_style=False)
    Path(path).write_text(f"{_header(origin)}\n{plain}", encoding="utf-8")


HEADER = "# Written by `study preset "


def _header(origin: str) -> str:
    """The first line of a params file write_params made: where it came from."""
    return f"{HEADER}{origin}`; every key is documented in study/config.py."


def _plain(value):
    """Tuples as lists, so the YAML holds no Python-specific tags."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


ABSENT = object()  # a key the file does not have


class Section(dict):
    """The defaults of a config object's fields: a key absent from its mapping in the file means its default
    (unlike an entry absent from a dict-valued field such as runs.fixed, which is simply not there)."""


def _section_defaults(config: BaseModel) -> Section:
    """Each field's default value, a nested config object's as a Section of its own."""
    values = _plain(config.model_dump())
    return Section({name: _section_defaults(getattr(config, name)) if isinstance(getattr(config, name), BaseModel)
                    else values[name] for name in type(config).model_fields})


def apply_params(params: StudyParams, path: str | Path, origin: str) -> list[str]:
    """Make the params file at `path` hold `params`, editing only its differing keys; return those keys, dotted.

    A missing file is written whole (write_params). An existing one is round-tripped with ruamel.yaml: a key
    whose value already means the preset's (written, or absent at its default) keeps its bytes, so a file
    that already holds the preset is not rewritten at all.
    """
    path = Path(path)
    if not path.is_file():
        write_params(params, path, origin)
        return []
    text = path.read_text(encoding="utf-8")
    loader = _round_trip_yaml()
    document = loader.load(text)
    if not isinstance(document, dict):
        raise ConfigError(f"{path} must be a mapping of sections ({', '.join(StudyParams.model_fields)})")
    changed = _patch(document, _plain(params.to_dict()), _section_defaults(StudyParams()), prefix="")
    if changed:
        path.write_text(_with_origin(_dump(loader, document), origin), encoding="utf-8")
    return changed


def _round_trip_yaml() -> YAML:
    """ruamel.yaml in round-trip mode, set to give back a params file's bytes unchanged."""
    round_trip = YAML()
    round_trip.preserve_quotes = True
    round_trip.width = 4096  # never fold a long value onto a second line
    # ruamel writes None as an empty value; the params files spell it `null`.
    round_trip.representer.add_representer(
        type(None), lambda representer, _: representer.represent_scalar("tag:yaml.org,2002:null", "null"))
    return round_trip


def _dump(round_trip: YAML, document) -> str:
    buffer = io.StringIO()
    round_trip.dump(document, buffer)
    return buffer.getvalue()


def _with_origin(text: str, origin: str) -> str:
    """The text with its `Written by` header (a file write_params made) naming the new origin."""
    first, newline, rest = text.partition("\n")
    if not first.startswith(HEADER):
        return text
    return f"{_header(origin)}{newline}{rest}"


def _patch(document: dict, target: dict, defaults: Section | None, prefix: str) -> list[str]:
    """Set in `document` the keys of `target` whose values differ; drop the keys `target` has not."""
    changed = []
    for key, value in target.items():
        default = (defaults or {}).get(key)
        current = document.get(key, ABSENT)
        if isinstance(default, Section):
            changed += _patch_section(document, target, key, default, prefix)
        elif current is ABSENT:
            if value != default:  # an absent key means its default
                _insert_after_neighbours(document, target, key, _styled(value))
                changed.append(prefix + key)
        elif isinstance(value, dict) and isinstance(current, dict):
            changed += _patch(current, value, None, f"{prefix}{key}.")
        elif _plain(current) != value:
            document[key] = _replacement(current, value)
            changed.append(prefix + key)
    for key in [key for key in document if key not in target]:
        del document[key]
        changed.append(prefix + key)
    return changed


def _patch_section(document: dict, target: dict, key: str, default: Section, prefix: str) -> list[str]:
    """Patch the mapping `key` of a config object (a section) key by key, made if need be."""
    value, current = target[key], document.get(key, ABSENT)
    if not isinstance(current, dict):
        if (current is ABSENT or current is None) and value == default:  # absent or empty: its defaults
            return []
        section = CommentedMap()
        if current is ABSENT:
            _insert_after_neighbours(document, target, key, section)
        else:
            document[key] = section
        current = section
    return _patch(current, value, default, f"{prefix}{key}.")


def _insert_after_neighbours(document: CommentedMap, target: dict, key: str, value) -> None:
    """Insert `key` after the nearest key before it in `target`'s order that `document` has (first if none)."""
    order = list(target)
    earlier = [k for k in order[:order.index(key)] if k in document]
    position = list(document).index(earlier[-1]) + 1 if earlier else 0
    document.insert(position, key, value)


def _replacement(current, value):
    """`value` written as `current` was: a list edited in place keeps its flow style and comments, a string
    its quotes."""
    if isinstance(current, CommentedSeq) and isinstance(value, list):
        current[:] = value
        return current
    if isinstance(current, ScalarString) and isinstance(value, str):
        return type(current)(value)
    return _styled(value)


def _styled(value):
    """A new value in the params files' style: lists inline, a mapping of plain values (a fixed run) inline with
    only the fields it sets, a mapping of mappings as a block."""
    if isinstance(value, list):
        inline = CommentedSeq(_styled(v) for v in value)
        inline.fa.set_flow_style()
        return inline
    if isinstance(value, dict):
        mapping = CommentedMap((k, _styled(v)) for k, v in value.items() if v is not None)
        if not any(isinstance(v, dict) for v in value.values()):
            mapping.fa.set_flow_style()
        return mapping
    return value
