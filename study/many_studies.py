"""Many studies through DVC: the one driver the class-count sweep and the tuning-cost benchmark share.

Each study is the repository's pipeline run in a folder of its own: its params.yaml and a dvc.yaml generated from the
repository's (`study_pipeline`: the same stages, commands, params and outs, the code taken from the repository).
The folders lie in a DVC project of their own (`open_project`: the sweep's or the benchmark's folder, made one as
`dvc init --subdir` makes it), whose root holds one more pipeline, the aggregate's (`write_aggregate`). DVC leaves a
nested project out when it collects the repository's pipelines, so the repository's `dvc status`, `dvc params diff`
and `dvc exp show` show its own study alone; the code deps, which lie outside the nested project, DVC hashes as any
other file. `reproduce` runs `dvc repro` in that project, with what DVC says streamed.
"""

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
from study.interruptions import ends_with_this_process
from study.plain_yaml import read_yaml
from study.presets import write_params
from study.results import REPORT_DIR
from study.validation import SOURCE_LINK

PIPELINE_FILE = "dvc.yaml"
AGGREGATE_STAGE = "aggregate"
# The files of a finished study that both aggregates read (relative to its folder).
METRICS_FILE = REPORT_DIR / "metrics.json"
DIFFERENCES_FILE = REPORT_DIR / "tables" / "differences.csv"
# A study's working files that git must not hold: the trials' journal and checkpoints (outside DVC's outputs), the
# source link validate keeps, and a report being written. DVC ignores its own outputs in .gitignore files beside them.
IGNORED = ("/*/results/trials/", "/*/data/source", "/*/reports/.report-staging/")

Log = Callable[[str], None]


class StudiesError(RuntimeError):
    """Studies that cannot be set up, or a stage that failed while DVC ran them."""


def to_stderr(message: str) -> None:
    """The default log: one line to stderr, at once."""
    print(message, file=sys.stderr, flush=True)


# --- one study's pipeline ------------------------------------------------------------------------------------------


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


# Deps only the repository's own study reads: a study in a folder (a benchmark cell, one C of the sweep) is part of
# the benchmark, not a user's study set beside it, and would otherwise depend on what the cells make.
ROOT_STUDY_ONLY = ("reports/benchmark/",)


def study_pipeline(pipeline: dict, to_root: str, frozen: bool = False) -> dict:
    """The repository's dvc.yaml as a study's folder runs it; `to_root` leads from that folder to the repository.

    The same stages, commands, foreach, params and outs: every path a stage writes, every dep inside one
    (data/prepared, results/…, reports/…) and the data source link stay the folder's own. A dep no stage writes is the
    repository's code (stages/…, study/…): it is taken from the root, e.g. ../../stages/search.py.
    The root's top-level plots are left out; each study's report draws its own figures. Metrics become plain outs.
    Deps under ROOT_STUDY_ONLY are left out.
    `frozen` marks every stage frozen: DVC then keeps what its dvc.lock records whatever the code does since.
    """
    written = [_entry_path(entry) for _, body in _stage_bodies(pipeline)
               for key in ("outs", "metrics", "plots") for entry in body.get(key, [])]
    written.append(SOURCE_LINK.as_posix())  # validate's link, in the folder it runs in (an out of validate's)

    def rebased(entry):
        path = _entry_path(entry)
        if any(_overlaps(path, out) for out in written):
            return entry
        shared = posixpath.normpath(posixpath.join(to_root, path))
        return {shared: entry[path]} if isinstance(entry, dict) else shared

    stages = {}
    for name, body in _stage_bodies(pipeline):
        if "wdir" in body:
            raise ValueError(f"dvc.yaml: stage {name} sets wdir; every study runs each stage in its own folder")
        body = {**body, "deps": [rebased(entry) for entry in body["deps"]
                                 if not _entry_path(entry).startswith(ROOT_STUDY_ONLY)]} if "deps" in body else dict(body)
        if "metrics" in body:
            body["outs"] = [*body.get("outs", []), *body.pop("metrics")]
        if frozen:
            body["frozen"] = True
        stage = pipeline["stages"][name]
        stages[name] = {**stage, "do": body} if "do" in stage else body
    return {**{key: value for key, value in pipeline.items() if key != "plots"}, "stages": stages}


def module_sources(repo_root: Path, module: str) -> list[str]:
    """A module's source files as paths from the repository root: a package's .py files, or the module's file. Named
    one by one, not as the package's folder: DVC hashes a folder outside its project whole, __pycache__ included, so
    the first import of the code would make the stage look changed."""
    path = PurePosixPath(*module.split("."))
    if not (repo_root / path / "__init__.py").is_file():
        return [f"{path}.py"]
    return sorted(source.relative_to(repo_root).as_posix() for source in (repo_root / path).rglob("*.py"))


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:  # every value written out in full, never as an &anchor
        return True


def pipeline_yaml(pipeline: dict) -> str:
    """A pipeline's YAML: the same pipeline always gives the same bytes, so DVC sees no change in a rewritten one."""
    return yaml.dump(pipeline, Dumper=_PlainDumper, sort_keys=False, width=10_000, allow_unicode=True)


def write_generated(path: Path, text: str, mark: str) -> Path:
    """Write `text` unless the file already holds it; refuse to replace a file not headed by `mark` (one the user
    wrote, which a rerun must not overwrite)."""
    if path.is_file():
        old = path.read_text(encoding="utf-8")
        if old == text:
            return path
        if not old.startswith(mark):
            raise StudiesError(f"{path} exists and was not written by {mark.removeprefix('# Written by ')}; "
                               "give another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_params_kept(params: StudyParams, path: Path, origin: str) -> Path:
    """params.yaml written as `study preset` writes it, headed by `origin`; the same params keep the file's bytes."""
    staged = path.with_name(f".{path.name}.new")
    write_params(params, staged, origin)
    if path.is_file() and path.read_bytes() == staged.read_bytes():
        staged.unlink()
    else:
        staged.replace(path)
    return path


# --- the project that holds them -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    """The DVC project of many studies (`root`, the sweep's or the benchmark's folder), inside the repository whose
    pipeline and code they run (`repository`), with the aggregate's report in `report_dir`; `mark` heads every file
    the driver writes (`# Written by \\`study sweep\\``)."""

    root: Path
    repository: Path
    report_dir: Path
    mark: str

    def relative(self, path: Path, start: Path | None = None) -> str:
        """`path` relative to `start` (by default the project's root), as DVC and the commands write it."""
        return Path(os.path.relpath(path, start or self.root)).as_posix()

    def header(self, source: str = "") -> str:
        """The first line of a generated file."""
        return f"{self.mark}{source}; every run rewrites this file.\n"


def dvc_root(path: Path) -> Path:
    """The DVC project holding `path` (the nearest folder upwards with a .dvc folder)."""
    for folder in (path, *path.parents):
        if (folder / ".dvc").is_dir():
            return folder
    raise StudiesError(f"{path} is not inside a DVC repository; the studies run with `dvc repro` on the "
                       "repository's pipeline, so run this inside the study's checkout")


def _in_git(path: Path) -> bool:
    return any((folder / ".git").exists() for folder in (path, *path.parents))


def init_project(folder: Path) -> None:
    """The files `dvc init --subdir` writes (`--no-scm` outside git), left for the user to commit: DVC's own init
    stages them in git, which a run of many studies should not do behind the user's back."""
    (folder / ".dvc").mkdir(parents=True)
    core = "[core]\n    analytics = false\n" + ("" if _in_git(folder) else "    no_scm = true\n")
    (folder / ".dvc" / "config").write_text(core, encoding="utf-8")
    (folder / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n", encoding="utf-8")
    (folder / ".dvcignore").write_text("# Paths DVC leaves out of this project, as in the repository's .dvcignore.\n"
                                       "__pycache__/\n*.pyc\n", encoding="utf-8")


def open_project(out_dir: str | Path, report_dir: str | Path, runner: str) -> Project:
    """The DVC project in `out_dir`, made one (`init_project`) unless it is already; `out_dir` must lie inside a
    repository (not be its root: the `runner` writes its own dvc.yaml there), and so must `report_dir`."""
    out_dir, report_dir = Path(out_dir).resolve(), Path(report_dir).resolve()
    repository = dvc_root(out_dir)
    if repository == out_dir and any((folder / ".dvc").is_dir() for folder in out_dir.parents):
        repository = dvc_root(out_dir.parent)  # out_dir is a project of studies already
    if out_dir == repository or not report_dir.is_relative_to(repository):
        raise ValueError(f"--out must be a folder inside the repository {repository} (not its root: the {runner} "
                         "writes its own dvc.yaml there), and so must --report-dir")
    if not (out_dir / ".dvc").is_dir():
        init_project(out_dir)
    project = Project(out_dir, repository, report_dir, f"# Written by `study {runner}`")
    write_generated(out_dir / ".gitignore", project.header() + "\n".join(IGNORED) + "\n", project.mark)
    return project


def root_pipeline(project: Project, unit: str) -> tuple[Path, dict]:
    """The repository's dvc.yaml, which every `unit`'s folder runs: its path and its pipeline."""
    root_file = project.repository / PIPELINE_FILE
    if not root_file.is_file():
        raise StudiesError(f"{root_file} is missing: every {unit} runs the pipeline it defines")
    return root_file, read_yaml(root_file.read_text(encoding="utf-8"))


def write_study(project: Project, name: str, params: StudyParams, origin: str, unit: str,
                frozen: bool = False) -> Path:
    """One study's folder in the project: its params.yaml (headed by `origin`) and its dvc.yaml, the repository's
    pipeline as `study_pipeline` makes it; files whose contents did not change keep their bytes. Gives the dvc.yaml."""
    root_file, root = root_pipeline(project, unit)
    directory = project.root / name
    directory.mkdir(parents=True, exist_ok=True)
    write_params_kept(params, directory / "params.yaml", origin)
    pipeline = study_pipeline(root, project.relative(project.repository, directory), frozen)
    source = f" from {project.relative(root_file, directory)}"
    return write_generated(directory / PIPELINE_FILE, project.header(source) + pipeline_yaml(pipeline), project.mark)


def write_aggregate(project: Project, command: Sequence[str], inputs: Sequence[str], modules: Sequence[str],
                    outputs: Sequence[str], persist: bool = False) -> Path:
    """The project's own pipeline, one stage run in its root: `command`, with the studies' files it reads (`inputs`,
    relative to the root) and the code of `modules` as deps, and `outputs` (in the report folder) as outs git keeps;
    `persist` for a command that swaps its whole report in itself, so that DVC leaves the previous one in place while
    it runs (and where it fails or is stopped)."""
    code = [project.relative(project.repository / source) for module in modules
            for source in module_sources(project.repository, module)]
    options = {"cache": False, "persist": True} if persist else {"cache": False}
    outs = [{project.relative(project.report_dir / name): options} for name in outputs]
    pipeline = {"stages": {AGGREGATE_STAGE: {"cmd": shlex.join(command), "deps": [*inputs, *code], "outs": outs}}}
    return write_generated(project.root / PIPELINE_FILE, project.header() + pipeline_yaml(pipeline), project.mark)


# --- running them ----------------------------------------------------------------------------------------------------


FAILED_STAGE = re.compile(r"failed to reproduce '([^']+)'")


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _stage_label(stage: str) -> str:
    """A stage as DVC names it in the project (`C10/dvc.yaml:report`, `aggregate`) as the user knows it."""
    pipeline, _, name = stage.rpartition(":")
    return f"{PurePosixPath(pipeline).parent}: stage {name}" if pipeline else f"the {name} stage"


def reproduce(project: Project, pipelines: Sequence[Path], log: Log = to_stderr, *, options: Sequence[str] = (),
              unit: str = "study", runner: str = "studies") -> None:
    """`dvc repro` the `pipelines` in the project, DVC's output streamed to `log`; a failure raises StudiesError
    naming the stage.

    --keep-going: a failed stage stops only what depends on it, so the other studies run on. `options` go to
    `dvc repro` as well (e.g. --single-item); `unit` and `runner` say what each study is and what runs them.
    """
    targets = [project.relative(path) for path in pipelines]
    command = [sys.executable, "-m", "dvc", "repro", "--keep-going", *options, *targets]
    # The stages' `python` is this interpreter, and they import the code DVC hashes: the repository's.
    paths = [str(project.repository), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(paths),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    log(" ".join([f"$ cd {project.relative(project.root, project.repository)} && dvc repro --keep-going", *options,
                  *targets]))
    started, ran, kept, errors, failing = time.monotonic(), 0, 0, [], False
    with subprocess.Popen(command, cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          preexec_fn=ends_with_this_process()) as process:  # never trains on once this one is killed
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
        failed = [_stage_label(stage) for error in errors for stage in FAILED_STAGE.findall(error)]
        said = "".join(f"\n  {error}" for error in errors if error)
        raise StudiesError(f"{'; '.join(failed) or 'dvc repro'} failed (exit {process.returncode}); DVC said:{said}\n"
                           f"Every stage that finished is kept (its {unit}'s dvc.lock records it) and the other "
                           f"{unit}s ran on; run the same command again once the cause is fixed, and only what "
                           "failed and what depends on it runs.")
    log(f"{runner} done in {_duration(time.monotonic() - started)}: {ran} stages ran, {kept} were up to date")
