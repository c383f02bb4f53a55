"""Presets: named overlays on the default params (presets/<name>.yaml), written out as params.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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
    target[key] = yaml.safe_load(text)


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
    Path(path).write_text(f"# Written by `study preset {origin}`; every key is documented in study/config.py.\n"
                          + plain, encoding="utf-8")


def _plain(value):
    """Tuples as lists, so the YAML holds no Python-specific tags."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
