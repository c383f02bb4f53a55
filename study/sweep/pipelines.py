"""The sweep's pipelines: which dataset gives C training classes, one DVC pipeline per C generated from the
repository's, the aggregate's pipeline, and `dvc repro` over them all."""

from __future__ import annotations

import io
import os
import posixpath
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

import yaml

from study.config import StudyParams
from study.data import split_counts
from study.presets import build_preset, write_params
from study.results import REPORT_DIR, prepared_dir, search_dir
from study.validation import SOURCE_LINK

DEFAULT_SWEEP_DIR = Path("sweeps")
DEFAULT_REPORT_DIR = Path("reports/sweep")
PIPELINE_FILE = "dvc.yaml"
TOTAL_PLACEHOLDER = "{total}"
# The files of a finished study that the aggregate reads (relative to one C's folder), best.json aside.
METRICS_FILE = REPORT_DIR / "metrics.json"
DIFFERENCES_FILE = REPORT_DIR / "tables" / "differences.csv"
MANIFEST_NAME = "manifest.json"
REPORT_FILES = ("class_count.csv", "class_count.png", "report.md", "report.html")
# The modules the aggregate stage runs, declared as its code deps.
AGGREGATE_MODULES = ("stages.sweep_report", "study.sweep", "study.report", "study.analysis")
AGGREGATE_STAGE = "aggregate"
GENERATED_MARK = "# Written by `study sweep`"
GENERATED = GENERATED_MARK + "{source}; every sweep rewrites this file.\n"

Log = Callable[[str], None]


class SweepError(RuntimeError):
    """A sweep that cannot be set up, or a stage that failed during it."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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


# --- the pipelines DVC runs ----------------------------------------------------------------


def _entry_path(entry) -> str:
    """The path of a deps/outs entry, written `path` or `path: {options}`."""
    return next(iter(entry)) if isinstance(entry, dict) else entry


def _stage_bodies(pipeline: dict):
    for name, stage in pipeline.get("stages", {}).items():
        yield name, stage.get("do", stage)


def _overlaps(path: str, other: str) -> bool:
    """Whether one path is the other or inside it (`${item}` compared as written)."""
    a, b = PurePosixPath(path).parts, PurePosixPath(other).parts
    return a[:len(b)] == b or b[:len(a)] == a


def class_count_pipeline(pipeline: dict, to_root: str) -> dict:
    """The repository's dvc.yaml as one class count's folder runs it; `to_root` leads from that folder to the root.

    The same stages, commands, foreach, params and outs: every path a stage writes, every dep
    inside one (data/prepared, results/…, reports/…) and the data source link stay the folder's own. A dep
    no stage writes is the repository's code (stages/…, study/…): it is taken from the root, e.g.
    ../../stages/search.py.
    The root's top-level plots are left out; each C's report draws its own figures. Metrics become plain outs:
    the repository's `dvc metrics show` and `dvc exp show` then stay the default study's own view.
    """
    written = [_entry_path(entry) for _, body in _stage_bodies(pipeline)
               for key in ("outs", "metrics", "plots") for entry in body.get(key, [])]
    written.append(SOURCE_LINK.as_posix())  # the validate stage keeps it in the folder it runs in, undeclared

    def rebased(entry):
        path = _entry_path(entry)
        if any(_overlaps(path, out) for out in written):
            return entry
        shared = posixpath.normpath(posixpath.join(to_root, path))
        return {shared: entry[path]} if isinstance(entry, dict) else shared

    stages = {}
    for name, body in _stage_bodies(pipeline):
        if "wdir" in body:
            raise ValueError(f"dvc.yaml: stage {name} sets wdir; the sweep runs every stage in its class count's folder")
        body = {**body, "deps": [rebased(entry) for entry in body["deps"]]} if "deps" in body else dict(body)
        if "metrics" in body:
            body["outs"] = [*body.get("outs", []), *body.pop("metrics")]
        stage = pipeline["stages"][name]
        stages[name] = {**stage, "do": body} if "do" in stage else body
    return {**{key: value for key, value in pipeline.items() if key != "plots"}, "stages": stages}


def aggregate_inputs(params: StudyParams) -> list[PurePosixPath]:
    """The files of one C's study the aggregate reads, relative to its folder: what `class_count_row` and
    `check_train_classes` open, with best.json of every searched loss."""
    split = params.data.split_seeds()[0]  # a sweep's studies run one class split each
    return [PurePosixPath(path) for path in (prepared_dir(split) / MANIFEST_NAME, METRICS_FILE, DIFFERENCES_FILE,
                                             *(search_dir(loss, split) / "best.json" for loss in params.search.losses))]


def module_source(repo_root: Path, module: str) -> str:
    """A module's source as a path from the repository root: its package folder, or its file."""
    path = PurePosixPath(*module.split("."))
    return path.as_posix() if (repo_root / path / "__init__.py").is_file() else f"{path}.py"


def aggregate_pipeline(plan: dict[int, StudyParams], report_dir: str, code: Sequence[str], label: str,
                       dpi: int) -> dict:
    """The sweep's own pipeline, one stage run in the sweep's folder: every C's `aggregate_inputs` and `code` as
    deps, the aggregate's files in `report_dir` (relative to that folder) as outs, kept in git like the report's."""
    command = ["python", "-m", "stages.sweep_report", "--classes", *map(str, plan), "--report-dir", report_dir,
               "--label", label, "--dpi", str(dpi)]
    deps = [f"C{c}/{path}" for c, params in plan.items() for path in aggregate_inputs(params)]
    outs = [{posixpath.join(report_dir, name): {"cache": False}} for name in REPORT_FILES]
    return {"stages": {AGGREGATE_STAGE: {"cmd": shlex.join(command), "deps": deps + list(code), "outs": outs}}}


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # every value written out in full, never as an &anchor
        return True


def pipeline_yaml(pipeline: dict) -> str:
    """A pipeline's YAML: the same pipeline always gives the same bytes, so DVC sees no change in a rewritten one."""
    return yaml.dump(pipeline, Dumper=_PlainDumper, sort_keys=False, width=10_000, allow_unicode=True)


def pipeline_text(pipeline: dict, source: str = "") -> str:
    """dvc.yaml's text, headed by the mark that lets the sweep rewrite it."""
    return GENERATED.format(source=source) + pipeline_yaml(pipeline)


def write_generated(path: Path, text: str, mark: str = GENERATED_MARK) -> Path:
    """Write `text` unless the file already holds it; refuse to replace a file not headed by `mark` (one the user
    wrote, which a rerun must not overwrite)."""
    if path.is_file():
        old = path.read_text(encoding="utf-8")
        if old == text:
            return path
        if not old.startswith(mark):
            raise SweepError(f"{path} exists and was not written by {mark.removeprefix('# Written by ')}; "
                             "give another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def repository_locations(out_dir: str | Path, report_dir: str | Path, runner: str = "sweep"
                         ) -> tuple[Path, Path, Path]:
    """(the DVC repository, `out_dir`, `report_dir`), resolved; both folders must lie inside the repository, and
    `out_dir` must not be its root (the `runner` writes its own dvc.yaml there)."""
    out_dir, report_dir = Path(out_dir).resolve(), Path(report_dir).resolve()
    repo_root = dvc_root(out_dir)
    if out_dir == repo_root or not report_dir.is_relative_to(repo_root):
        raise ValueError(f"--out must be a folder inside the repository {repo_root} (not its root: the {runner} "
                         "writes its own dvc.yaml there), and so must --report-dir")
    return repo_root, out_dir, report_dir


def root_pipeline(repo_root: Path, unit: str = "class count") -> tuple[Path, dict]:
    """The repository's dvc.yaml, which every `unit`'s folder runs: its path and its pipeline."""
    root_file = repo_root / PIPELINE_FILE
    if not root_file.is_file():
        raise SweepError(f"{root_file} is missing: every {unit} runs the pipeline it defines")
    return root_file, yaml.safe_load(root_file.read_text(encoding="utf-8"))


def dvc_root(path: Path) -> Path:
    """The DVC repository holding `path` (the nearest folder upwards with a .dvc folder)."""
    for folder in (path, *path.parents):
        if (folder / ".dvc").is_dir():
            return folder
    raise SweepError(f"{path} is not inside a DVC repository; the sweep runs each class count's study with "
                     "`dvc repro`, so run it inside the study's checkout")


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


@dataclass(frozen=True)
class Sweep:
    """A sweep written out: its repository, its pipelines (every C's, then the aggregate's) and the report's files."""

    repo_root: Path
    pipelines: tuple[Path, ...]
    outputs: dict[str, Path]


def write_sweep(classes: Sequence[int], preset: str = "glyphs-sweep", assignments: Sequence[str] = (),
                dataset_template: str | None = None, out_dir: str | Path = DEFAULT_SWEEP_DIR,
                report_dir: str | Path = DEFAULT_REPORT_DIR, *, log: Log = _stderr) -> Sweep:
    """Write every C's params.yaml and dvc.yaml and the aggregate's dvc.yaml; unchanged files keep their bytes."""
    classes = sorted(set(int(c) for c in classes))
    if not classes:
        raise ValueError("give at least one class count, e.g. --classes 10 30 100")
    base = build_preset(preset, list(assignments))
    template = dataset_template or default_dataset_template(base.data.dataset)
    # Every C's params first, so a bad class count stops before anything is written.
    plan = {c: class_count_params(base, c, template) for c in classes}
    repo_root, out_dir, report_dir = repository_locations(out_dir, report_dir)
    root_file, root = root_pipeline(repo_root)
    pipelines = []
    for train_classes, params in plan.items():
        directory = class_count_dir(out_dir, train_classes)
        directory.mkdir(parents=True, exist_ok=True)
        # The header of its params.yaml: the `study preset` command that writes the same params.
        write_params(params, directory / "params.yaml", " ".join(
            [preset, *(f"--set {shlex.quote(a)}" for a in assignments if not a.startswith("data.dataset=")),
             f"--set {shlex.quote('data.dataset=' + params.data.dataset)}"]))
        pipeline = class_count_pipeline(root, _relative(repo_root, directory))
        pipelines.append(write_generated(directory / PIPELINE_FILE,
                                         pipeline_text(pipeline, f" from {_relative(root_file, directory)}")))
        log(f"C={train_classes}: data.dataset={params.data.dataset} ({params.data.protocol} protocol) in "
            f"{_relative(directory, repo_root)}/")
    code = [_relative(repo_root / module_source(repo_root, module), out_dir) for module in AGGREGATE_MODULES]
    aggregate = aggregate_pipeline(plan, _relative(report_dir, out_dir), code, _relative(out_dir, repo_root),
                                   base.report.dpi)
    pipelines.append(write_generated(out_dir / PIPELINE_FILE, pipeline_text(aggregate)))
    return Sweep(repo_root, tuple(pipelines), {name: report_dir / name for name in REPORT_FILES})


# --- running them --------------------------------------------------------------------------


STAGE_NAME = re.compile(r"'([^':]*dvc\.yaml):([^']+)'")


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _stage_label(pipeline: str, stage: str) -> str:
    folder = PurePosixPath(pipeline).parent.name
    return f"C={folder[1:]}: stage {stage}" if re.fullmatch(r"C\d+", folder) else f"the {stage} stage of {pipeline}"


def reproduce(sweep: Sweep, log: Log = _stderr, *, options: Sequence[str] = (), unit: str = "class count",
              runner: str = "sweep") -> None:
    """`dvc repro` every pipeline of the sweep, DVC's output streamed to `log`; a failure raises SweepError naming it.

    --keep-going: a failed stage stops only what depends on it, so the other class counts run on. `options` go to
    `dvc repro` as well (e.g. --single-item); `unit` and `runner` say what each pipeline is and what runs them (the
    benchmark runs its cells with this too).
    """
    targets = [_relative(path, sweep.repo_root) for path in sweep.pipelines]
    command = [sys.executable, "-m", "dvc", "repro", "--keep-going", *options, *targets]
    # The stages' `python` is this interpreter, and they import the code DVC hashes: this repository's.
    paths = [str(sweep.repo_root), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    log(" ".join(["$ dvc repro --keep-going", *options, *targets]))
    started, ran, kept, errors, failing = time.monotonic(), 0, 0, [], False
    with subprocess.Popen(command, cwd=sweep.repo_root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT) as process:
        for line in io.TextIOWrapper(process.stdout, encoding="utf-8", errors="replace", newline="\n"):
            line = line.rstrip("\n")
            if line.startswith("Running stage"):
                ran += 1
                line = f"[{runner} {_duration(time.monotonic() - started)}] {line}"
            elif line.startswith("Stage '") and "skipping" in line:  # didn't change, or restored from DVC's cache
                kept += 1
            failing = failing or line.startswith("ERROR")  # DVC's last word, to the end
            if failing or line.startswith("WARNING"):
                errors.append(line.strip())
            log(line)
    if process.returncode != 0:
        failed = [_stage_label(*name) for error in errors if "failed to reproduce" in error
                  for name in STAGE_NAME.findall(error)]
        said = "".join(f"\n  {error}" for error in errors if error)
        raise SweepError(f"{'; '.join(failed) or 'dvc repro'} failed (exit {process.returncode}); DVC said:{said}\n"
                         f"Every stage that finished is kept (its {unit}'s dvc.lock records it) and the other "
                         f"{unit}s ran on; run the same command again once the cause is fixed, and only what "
                         "failed and what depends on it runs.")
    log(f"{runner} done in {_duration(time.monotonic() - started)}: {ran} stages ran, {kept} were up to date")


def run_sweep(classes: Sequence[int], preset: str = "glyphs-sweep", assignments: Sequence[str] = (),
              dataset_template: str | None = None, out_dir: str | Path = DEFAULT_SWEEP_DIR,
              report_dir: str | Path = DEFAULT_REPORT_DIR, *, log: Log = _stderr) -> dict[str, Path]:
    """Write the sweep's pipelines and reproduce them (DVC skips what is up to date); return the aggregate's files."""
    sweep = write_sweep(classes, preset, assignments, dataset_template, out_dir, report_dir, log=log)
    reproduce(sweep, log)
    return sweep.outputs


