"""The benchmark's declaration: one YAML file (presets/benchmark/full.yaml) naming the configurations (a data source,
its protocol and training class count C) and the tuners each is searched with. Each configuration × tuner is a cell:
a whole study, with its own params.yaml."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from study.config import StudyParams
from study.presets import PRESET_DIR, build_preset
from study.results import PREPARED_DIR, REPORT_DIR, write_bytes
from study.sources import SOURCES, source_of
from study.sweep import class_count_params
from study.sweep.pipelines import MANIFEST_NAME
from study.training import planned_iterations as iterations
from study.validation import DataProblem, declared_problems, planned_source, planned_splits, study_cost

BENCHMARK_PRESETS = PRESET_DIR / "benchmark"
FULL_PLAN = BENCHMARK_PRESETS / "full.yaml"
QUICK_PLAN = BENCHMARK_PRESETS / "quick.yaml"
PLAN_KEYS = {"title", "preset", "set", "tuners", "configurations"}
CONFIGURATION_KEYS = {"name", "dataset", "train_classes", "set", "tuners", "longer_of", "converged_only"}
NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
MAX_NAME = 64  # a name is a folder's (with a tuner's after it): far within any file system's 255 bytes


@dataclass(frozen=True)
class Cell:
    """One study of the benchmark: a configuration searched with one tuner, its params and where they came from."""

    name: str
    configuration: str
    tuner: str
    primary: bool  # the configuration's first tuner: its cell enters the pooled per-loss verdict
    train_classes: int
    params: StudyParams
    origin: str  # the `study preset` command that writes the same params.yaml
    # The configuration this one trains longer (a short one, or a converged-only one that ended still improving):
    # compared with a short one, never pooled beside the one it trains longer.
    longer_of: str | None = None
    # Trained only at a length where it converges, with no short cell (a configuration too large to run short and long):
    # in the converged headline where it converges, never in the short regime.
    converged_only: bool = False

    def facts(self, directory: Path | None = None) -> dict:
        """What the aggregate needs to know about the cell besides its reports (plan.json); `directory`, the cell's
        folder, gives the iterations its runs trained where its source is absent here and cannot be counted."""
        params = self.params
        planned = planned_iterations(params)
        return {"name": self.name, "configuration": self.configuration, "tuner": self.tuner, "primary": self.primary,
                "source": source_of(params.data.dataset), "dataset": params.data.dataset,
                "longer_of": self.longer_of,
                "iterations": (trained_iterations(directory, params.data.split_seeds()[0])
                               if planned is None and directory else planned),
                "protocol": params.data.protocol, "train_classes": self.train_classes,
                "objective": params.train.objective, "losses": list(params.search.losses),
                "sampler": params.search.sampler, "repeats": params.search.repeats, "pruner": params.search.pruner,
                "n_trials": params.search.n_trials, "splits": list(params.data.split_seeds()),
                "seeds": list(params.runs.seeds), "methods": list(params.runs.methods),
                "epochs": params.train.epochs, "model": params.model.name,
                "planned_runs": planned_runs(params)} | ({"converged_only": True} if self.converged_only else {}) \
            | ({"learning_rates": list(params.train.learning_rates)} if params.train.learning_rates else {}) \
            | ({"choose_at": params.train.choose_at}
               if params.train.learning_rates and params.train.choose_at is not None else {})


@dataclass(frozen=True)
class BenchmarkPlan:
    """The cells of a benchmark, in declaration order, and the title of its report."""

    title: str
    cells: tuple[Cell, ...]
    source: Path

    def to_json(self, out_dir: str | Path | None = None) -> str:
        """plan.json's text: the same plan (and, in `out_dir`, the same finished cells) always gives the same bytes,
        on a machine with every optional source or without."""
        cells = [cell.facts(Path(out_dir) / cell.name if out_dir else None) for cell in self.cells]
        return json.dumps({"title": self.title, "cells": cells}, indent=2, ensure_ascii=False) + "\n"

    def data_problems(self, out_dir: str | Path) -> dict[str, str]:
        """Per cell (its folder in `out_dir`), why its data no longer holds the classes it was declared with (a
        class folder gone since it was added), with the fix; cells whose data holds them are left out."""
        problems = {}
        for cell in self.cells:
            data = cell.params.data
            try:
                planned = planned_source(data)
            except DataProblem:  # the source itself is missing: the cell's validate stage says so, when it runs
                continue
            if planned is None or data.classes is None or planned[1].num_classes >= data.classes:
                continue
            held = planned[1]
            lacking = ", ".join(sorted(_prepared_classes(Path(out_dir) / cell.name) - set(held.class_names)))
            problems[cell.name] = (
                f"{data.dataset} holds {held.num_classes} classes now, but {cell.configuration} was declared with "
                f"{data.classes} of them (train_classes: {cell.train_classes}, {data.protocol} protocol)"
                f"{f'; it lacks {lacking}' if lacking else ''}: put {lacking or 'the missing classes'} back, or "
                f"to study the data as it is now, remove {cell.configuration} from {self.source} and add it again "
                "under a new name (`study benchmark --add NAME --set data.dataset=...`)")
        return problems


def planned_runs(params: StudyParams) -> int:
    """The trainings one study makes: every search trial and every final run, on every class split."""
    return study_cost(params, None).trainings


def trained_iterations(directory: Path, split: int) -> int | None:
    """The iterations a finished cell's runs trained on class split `split`, as planned_iterations counts them (each
    split's training classes set its length), read from its committed learning curves; from its curves over every
    split in a cell that reported before those were written; None before it reported."""
    tables = directory / REPORT_DIR / "tables"
    try:
        with (tables / "learning_curves.csv").open(encoding="utf-8") as curves:
            return max(int(row["iteration"]) for row in csv.DictReader(curves) if int(row["split"]) == split)
    except (OSError, KeyError, ValueError):  # no learning curves, or none of that split
        pass
    try:
        with (tables / "curves.csv").open(encoding="utf-8") as curves:
            return max(int(row["iteration"]) for row in csv.DictReader(curves))
    except (OSError, KeyError, ValueError):  # no curves yet, or none with an iteration
        return None


def planned_iterations(params: StudyParams) -> int | None:
    """The training iterations of one run on the first class split; None where the source's size is only known
    once prepare loads it (a torchvision download)."""
    try:
        source = planned_source(params.data)
        if source is None:
            return None
        train = planned_splits(source[1], params.data, params.data.split_seeds()[0])["train"]
    except DataProblem:  # the cell's own validate stage (or BenchmarkPlan.data_problems) says what is wrong
        return None
    return iterations(len(train), params.train)


def _prepared_classes(directory: Path) -> set[str]:
    """The class names a cell's prepare stage found in its data, where its prepared splits are here."""
    names = set()
    for manifest in (directory / PREPARED_DIR).glob(f"split*/{MANIFEST_NAME}"):
        try:
            splits = json.loads(manifest.read_text(encoding="utf-8"))["splits"]
            names.update(name for split in splits.values() for name in split["class_names"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no record: the counts alone are said
            continue
    return names


def _with_absolute_folder(spec: str) -> str:
    """A dataset spec whose folder (folder:, idx:, a composed set's base) is given from the current folder, with
    that folder made absolute: each cell reads its data from its own folder."""
    name, _, argument = spec.partition(":")
    if name == "compose" and argument.count(":") >= 2:
        parts, instances, base = argument.split(":", 2)
        return f"{name}:{parts}:{instances}:{_with_absolute_folder(base)}"
    reads_folder = name in SOURCES and SOURCES[name].folder is not None
    if reads_folder and argument and not Path(argument).expanduser().is_absolute():
        return f"{name}:{os.path.abspath(argument)}"
    return spec


def _assignments(values: dict[str, Any] | None, where: str) -> list[str]:
    """A `set:` mapping of dotted keys as `section.key=value` assignments (the value as JSON, which YAML reads back)."""
    if values is None:
        return []
    if not isinstance(values, dict):
        raise ValueError(f"{where} must map dotted keys to values, e.g. {{train.epochs: 6}}")
    for key in values:
        if not isinstance(key, str) or "." not in key:
            raise ValueError(f"{where}: {key!r} is not a dotted key such as train.epochs")
    return [f"{key}={_yaml_value(value)}" for key, value in values.items()]


def _yaml_value(value) -> str:
    """A value as `--set` reads it: a plain word where YAML reads it back unchanged, else JSON (which YAML reads)."""
    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def _name(value, where: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ValueError(f"{where}: {value!r} is not a cell name; use lower-case letters, digits and -, "
                         "e.g. glyphs-open-c100")
    if len(value) > MAX_NAME:
        raise ValueError(f"{where}: {value[:20]}… is {len(value)} characters long, and a name names a cell's "
                         f"folder; give one of at most {MAX_NAME}, e.g. glyphs-open-c100")
    return value


def _unknown_keys(values: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key {', '.join(unknown)}; the keys are {', '.join(sorted(known))}")


def _configuration_cells(entry: dict, index: int, preset: str, common: list[str], tuners: dict[str, list[str]],
                         tuner_order: list[str]) -> list[Cell]:
    """The cells of one configuration: its params under each of its tuners."""
    where = f"configurations[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a mapping with name, dataset, train_classes and optionally set and tuners")
    _unknown_keys(entry, CONFIGURATION_KEYS, where)
    missing = sorted({"name", "dataset", "train_classes"} - set(entry))
    if missing:
        raise ValueError(f"{where}: give {', '.join(missing)} (e.g. dataset: 'glyphs:{{total}}:30', "
                         "train_classes: 100)")
    name = _name(entry["name"], f"{where}.name")
    if isinstance(entry["dataset"], str) and _with_absolute_folder(entry["dataset"]) != entry["dataset"]:
        raise ValueError(f"{where}.dataset: {entry['dataset']} names a folder relative to where a command runs, but "
                         f"each cell reads it from its own folder; write the folder's absolute path, e.g. "
                         f"{_with_absolute_folder(entry['dataset'])}")
    train_classes = entry["train_classes"]
    if type(train_classes) is not int:
        raise ValueError(f"{where}.train_classes must be a whole number of training classes, got {train_classes!r}")
    own = _assignments(entry.get("set"), f"{where}.set")
    longer_of = entry.get("longer_of")
    if longer_of is not None:
        _name(longer_of, f"{where}.longer_of")
    converged_only = entry.get("converged_only", False)
    if type(converged_only) is not bool:
        raise ValueError(f"{where}.converged_only must be true or false, got {converged_only!r}")
    if converged_only and longer_of is not None:
        raise ValueError(f"{where}: give longer_of (a longer cell of another configuration) or converged_only (a "
                         "configuration with no short cell), not both")
    chosen = entry.get("tuners", tuner_order[:1])
    if not isinstance(chosen, list) or not chosen or len(set(chosen)) < len(chosen):
        raise ValueError(f"{where}.tuners must list distinct tuners, e.g. [random, tpe]")
    cells = []
    for position, tuner in enumerate(chosen):
        if tuner not in tuners:
            raise ValueError(f"{where}.tuners: {tuner!r} is not declared under tuners; known: {', '.join(tuners)}")
        assignments = [*common, *own, *tuners[tuner]]
        base = build_preset(preset, assignments)
        params = class_count_params(base, train_classes, entry["dataset"])
        dataset = [f"data.dataset={params.data.dataset}"] + (
            [f"data.classes={params.data.classes}"] if params.data.classes is not None else [])
        origin = " ".join([preset, *(f"--set '{a}'" for a in [*assignments, *dataset])])
        cells.append(Cell(name if position == 0 else f"{name}-{tuner}", name, tuner,
                          position == 0 and longer_of is None and not converged_only, train_classes, params, origin,
                          longer_of, converged_only))
    return cells


def load_plan(path: str | Path = FULL_PLAN) -> BenchmarkPlan:
    """The benchmark declared in `path` (a name under presets/benchmark/, e.g. quick, or a file), every cell's params
    built and validated."""
    path = Path(path)
    if not path.suffix and not path.exists():
        path = BENCHMARK_PRESETS / f"{path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in BENCHMARK_PRESETS.glob("*.yaml")))
        raise ValueError(f"no benchmark declaration at {path}; give a file or one of: {known}")
    return _declared_plan(path.read_text(encoding="utf-8"), path)


def _declared_plan(text: str, path: Path) -> BenchmarkPlan:
    """The benchmark that `text`, the declaration at `path`, declares."""
    try:
        declared = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        raise ValueError(f"{path} is not valid YAML ({getattr(error, 'problem', None) or error}"
                         f"{f', line {where.line + 1}' if where else ''}); mend it, or `git checkout -- {path}` "
                         "restores the committed one") from None
    if not isinstance(declared, dict):
        raise ValueError(f"{path} must be a mapping with title, preset, set, tuners and configurations")
    _unknown_keys(declared, PLAN_KEYS, str(path))
    tuners = {_name(name, f"{path}: tuners"): _assignments(values, f"tuners.{name}")
              for name, values in (declared.get("tuners") or {"random": {"search.sampler": "random"}}).items()}
    configurations = declared.get("configurations") or []
    if not configurations:
        raise ValueError(f"{path} declares no configurations; list them under configurations:")
    common = _assignments(declared.get("set"), "set")
    cells = [cell for index, entry in enumerate(configurations)
             for cell in _configuration_cells(entry, index, declared.get("preset", "default"), common, tuners,
                                              list(tuners))]
    _check_cells(cells, path)
    problem = longer_of_problem({cell.configuration: cell.longer_of for cell in cells})
    if problem:
        raise ValueError(f"{path}: {problem}")
    return BenchmarkPlan(declared.get("title", "The tuning-cost benchmark"), tuple(cells), path)


def longer_of_problem(longer_of: dict[str, str | None]) -> str:
    """What is wrong with the configurations' longer_of (configuration → the one it trains longer, or None): each
    names another configuration of the plan that is not a longer one itself (a short or converged_only one), so
    that no cell is compared with itself and no chain or cycle has no short end; '' when nothing is."""
    for name, target in longer_of.items():
        if target is None:
            continue
        if target == name:
            return (f"{name}'s longer_of names itself; name the short (or converged_only) configuration it trains "
                    "longer, or leave longer_of out")
        if target not in longer_of:
            return f"{name}'s longer_of names {target!r}, which is not a configuration of this benchmark"
        if longer_of[target] is not None:
            chain = [name, target]
            while longer_of.get(chain[-1]) is not None and longer_of[chain[-1]] not in chain:
                chain.append(longer_of[chain[-1]])
            cycle = longer_of.get(chain[-1]) is not None
            shown = " → ".join(chain + ([longer_of[chain[-1]]] if cycle else []))
            fix = "" if cycle or chain[-1] not in longer_of else f", e.g. longer_of: {chain[-1]}"
            return (f"{name}'s longer_of names {target}, itself a longer configuration ({shown}"
                    f"{', a cycle' if cycle else ''}); name the short (or converged_only) configuration it trains "
                    f"longer{fix}")
    return ""


def _check_cells(cells: list[Cell], path: Path) -> None:
    """Refuse two cells of one name, and cells that would pool differences on different metrics."""
    names = [cell.name for cell in cells]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"{path}: two cells are named {', '.join(twice)}; give each configuration its own name")
    objectives = {cell.params.train.objective for cell in cells}
    if len(objectives) > 1:
        raise ValueError(f"{path}: the cells' train.objective differ ({', '.join(sorted(objectives))}), and the "
                         "benchmark pools one metric's differences; set train.objective once under set:")


def add_configuration(path: str | Path, name: str, assignments: list[str]) -> dict:
    """Append a user's configuration to the declaration at `path` (its comments kept): `assignments` are `--set`
    `section.key=value` strings, data.dataset among them (a folder given from the current folder made absolute); its
    training class count comes from the data (the first class split's training classes). Returns the entry written.
    The cell is its data's own source, so the pool over sources grows with every contributed data set.

    The new cells are checked as their validate stage will check them (their data, their cost) before the file is
    replaced, in one step: a refused configuration leaves the declaration as it was."""
    from ruamel.yaml import YAML

    plan = load_plan(path)
    path, text = plan.source, plan.source.read_text(encoding="utf-8")
    name = _name(name, "--add")
    if name in {cell.configuration for cell in plan.cells}:
        raise ValueError(f"--add {name}: {path} already declares a configuration of that name; choose another")
    data = "data.dataset="
    assignments = [data + _with_absolute_folder(assignment.removeprefix(data)) if assignment.startswith(data)
                   else assignment for assignment in assignments]
    values = dict(assignment.split("=", 1) for assignment in assignments if "=" in assignment)
    if "data.dataset" not in values:
        raise ValueError("--add needs the data: give --set data.dataset=<spec>, e.g. folder:/path/to/images")
    declared = yaml.safe_load(text) or {}
    params = build_preset(declared.get("preset", "default"),
                          [*_assignments(declared.get("set"), "set"), *assignments])
    source = planned_source(params.data)
    if source is None:
        raise ValueError(f"--add {name}: {params.data.dataset} is only known once prepare downloads it; add an "
                         "offline source (folder:, idx:, a generated one)")
    train = planned_splits(source[1], params.data, params.data.split_seeds()[0])["train"]
    entry = {"name": name, "dataset": params.data.dataset, "train_classes": int(train.num_classes),
             "set": {key: yaml.safe_load(value) for key, value in values.items() if key != "data.dataset"}}
    round_trip = YAML()
    round_trip.preserve_quotes = True
    round_trip.width = 4096
    document = round_trip.load(text)
    document.setdefault("configurations", []).append(entry)
    written = io.StringIO()
    round_trip.dump(document, written)
    refused = f"; {path} is unchanged"
    try:
        cells = [cell for cell in _declared_plan(written.getvalue(), path).cells if cell.configuration == name]
    except ValueError as error:
        raise ValueError(f"--add {name} ({params.data.dataset}): {error}{refused}") from None
    problems = [f"  {cell.name}: {problem}" for cell in cells for problem in declared_problems(cell.params)[0]]
    if problems:
        raise ValueError(f"--add {name} ({params.data.dataset}) makes cells their validate stage would refuse"
                         f"{refused}:\n" + "\n".join(problems))
    write_bytes(written.getvalue().encode("utf-8"), path)
    return entry
