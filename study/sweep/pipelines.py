"""The sweep's studies: which dataset gives C training classes, one study per C and the aggregate's pipeline in the
sweep's DVC project (study/many_studies.py writes and runs them)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

from study.config import StudyParams
from study.splits import split_counts
from study.many_studies import (DIFFERENCES_FILE, METRICS_FILE, Log, Project, StudiesError, open_project, reproduce,
                                to_stderr, write_aggregate, write_study)
from study.presets import build_preset
from study.results import prepared_dir, search_dir

DEFAULT_SWEEP_DIR = Path("sweeps")
DEFAULT_REPORT_DIR = Path("reports/sweep")
TOTAL_PLACEHOLDER = "{total}"
# The files of a finished study that the aggregate reads (relative to one C's folder): METRICS_FILE,
# DIFFERENCES_FILE, the manifest and best.json.
MANIFEST_NAME = "manifest.json"
REPORT_FILES = ("class_count.csv", "class_count.png", "report.md", "report.html")
# The modules the aggregate stage runs, declared as its code deps.
AGGREGATE_MODULES = ("stages.sweep_report", "study.sweep", "study.report", "study.analysis", "study.plateau",
                     "study.class_splits")
SweepError = StudiesError  # the sweep's failures are the driver's


# --- which dataset gives exactly C training classes ---------------------------------------


def total_classes_for(train_classes: int, protocol: str, fractions: Sequence[float]) -> int:
    """The class count the dataset must have so that the protocol's train split holds exactly `train_classes`.

    Closed: every split has every class, so it is C itself. Open: the smallest total whose class
    split, computed by the data module's own `split_counts` (the function `split_dataset` uses),
    gives C train classes and the ≥ 2 val and test classes the open protocol requires.
    """
    if train_classes < 3:
        raise ValueError(f"C = {train_classes} training classes is too few: Fixed AdaCos's s_f = √2·ln(C−1) "
                         "needs C ≥ 3")
    if protocol == "closed":
        return train_classes
    if protocol != "open":
        raise ValueError(f"unknown protocol {protocol!r}; known: closed, open")
    total = train_classes
    while True:
        counts = split_counts(total, fractions)
        if counts[0] > train_classes:  # the train count only grows with the total: C was skipped
            break
        if counts[0] == train_classes and min(counts[1:]) >= 2:
            return total
        total += 1
    raise ValueError(f"no class count gives exactly {train_classes} training classes and ≥ 2 val and test classes "
                     f"under the open protocol with fractions {list(fractions)}")


def default_dataset_template(dataset: str) -> str:
    """The template a sweep varies when none is given: a glyphs spec with its class count replaced, else the dataset."""
    name, _, argument = dataset.partition(":")
    if name == "glyphs":
        return ":".join(["glyphs", TOTAL_PLACEHOLDER, *argument.split(":")[1:]])
    return dataset  # a fixed source: each C keeps that many of its classes (data.classes)


def class_count_params(base: StudyParams, train_classes: int, template: str) -> StudyParams:
    """`base` made to give exactly `train_classes` training classes: data.dataset from `template` when it has
    {total} (a source generated at that size, such as glyphs), else data.classes keeps that many of the source's."""
    total = total_classes_for(train_classes, base.data.protocol, base.data.fractions)
    values = base.to_dict()
    if TOTAL_PLACEHOLDER in template:
        values["data"]["dataset"] = template.replace(TOTAL_PLACEHOLDER, str(total))
    else:
        values["data"].update(dataset=template, classes=total)
    return StudyParams.from_dict(values)


def class_count_dir(out_dir: str | Path, train_classes: int) -> Path:
    """The folder of one class count's study."""
    return Path(out_dir) / f"C{train_classes}"


# --- the studies DVC runs -----------------------------------------------------------------------------------------


def aggregate_inputs(params: StudyParams) -> list[PurePosixPath]:
    """The files of one C's study the aggregate reads, relative to its folder: what `class_count_row` and
    `check_train_classes` open, with best.json of every searched loss."""
    split = params.data.split_seeds()[0]  # a sweep's studies run one class split each
    return [PurePosixPath(path) for path in (prepared_dir(split) / MANIFEST_NAME, METRICS_FILE, DIFFERENCES_FILE,
                                             *(search_dir(loss, split) / "best.json" for loss in params.search.losses))]


@dataclass(frozen=True)
class Sweep:
    """A sweep written out: its DVC project, its pipelines (every C's, then the aggregate's) and the report's files."""

    project: Project
    pipelines: tuple[Path, ...]
    outputs: dict[str, Path]


def write_sweep(classes: Sequence[int], preset: str = "glyphs-sweep", assignments: Sequence[str] = (),
                dataset_template: str | None = None, out_dir: str | Path = DEFAULT_SWEEP_DIR,
                report_dir: str | Path = DEFAULT_REPORT_DIR, *, log: Log = to_stderr) -> Sweep:
    """Write every C's params.yaml and dvc.yaml and the aggregate's dvc.yaml in the sweep's DVC project (`out_dir`);
    unchanged files keep their bytes."""
    classes = sorted(set(int(c) for c in classes))
    if not classes:
        raise ValueError("give at least one class count, e.g. --classes 10 30 100")
    base = build_preset(preset, list(assignments))
    template = dataset_template or default_dataset_template(base.data.dataset)
    # Every C's params first, so a bad class count stops before anything is written.
    plan = {c: class_count_params(base, c, template) for c in classes}
    project = open_project(out_dir, report_dir, "sweep")
    pipelines = []
    for train_classes, params in plan.items():
        directory = class_count_dir(project.root, train_classes)
        # The header of its params.yaml: the `study preset` command that writes the same params.
        kept = [a for a in assignments if not a.startswith("data.dataset=")]
        origin = " ".join([preset, *(f"--set {shlex.quote(a)}" for a in kept),
                           f"--set {shlex.quote('data.dataset=' + params.data.dataset)}"])
        pipelines.append(write_study(project, directory.name, params, origin, "class count"))
        log(f"C={train_classes}: data.dataset={params.data.dataset} ({params.data.protocol} protocol) in "
            f"{project.relative(directory, project.repository)}/")
    command = ["python", "-m", "stages.sweep_report", "--classes", *map(str, plan), "--report-dir",
               project.relative(project.report_dir), "--label", project.relative(project.root, project.repository),
               "--dpi", str(base.report.dpi)]
    inputs = [f"C{c}/{path}" for c, params in plan.items() for path in aggregate_inputs(params)]
    pipelines.append(write_aggregate(project, command, inputs, AGGREGATE_MODULES, REPORT_FILES))
    return Sweep(project, tuple(pipelines), {name: project.report_dir / name for name in REPORT_FILES})


def run_sweep(classes: Sequence[int], preset: str = "glyphs-sweep", assignments: Sequence[str] = (),
              dataset_template: str | None = None, out_dir: str | Path = DEFAULT_SWEEP_DIR,
              report_dir: str | Path = DEFAULT_REPORT_DIR, *, log: Log = to_stderr) -> dict[str, Path]:
    """Write the sweep's pipelines and reproduce them (DVC skips what is up to date); return the aggregate's files."""
    sweep = write_sweep(classes, preset, assignments, dataset_template, out_dir, report_dir, log=log)
    reproduce(sweep.project, sweep.pipelines, log, unit="class count", runner="sweep")
    return sweep.outputs
