"""The benchmark's studies: one folder per cell with its params.yaml and a dvc.yaml generated from the repository's,
plan.json and the aggregate's pipeline, in the benchmark's own DVC project (study/many_studies.py writes and runs
them, as for the sweep); which cells are finished, whose stages are frozen; `dvc repro` over the rest."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

import yaml
from optuna.trial import TrialState

from study.benchmark.fingerprint import FINGERPRINT_FILE, REPORT_INPUTS, dvc_md5, source_changed, write_fingerprint
from study.benchmark.long_cell import LEARNING_CURVE_CELL, LEARNING_CURVE_CELL_ON_GPU, LEARNING_CURVE_INPUTS
from study.benchmark.plan import FULL_PLAN, NAME, QUICK_PLAN, BenchmarkPlan, load_plan, longer_of_problem
from study.benchmark.trained_on import FOLDER as TRAINED_ON
from study.many_studies import (Log, Project, StudiesError, open_project, reproduce, to_stderr, write_aggregate,
                                write_generated, write_study)
from study.plain_yaml import read_yaml, read_yaml_file
from study.results import JOURNAL
from study.storage import journal_storage

DEFAULT_OUT, QUICK_OUT = Path("benchmarks/cells"), Path("benchmarks/quick")
DEFAULT_REPORT_DIR, QUICK_REPORT_DIR = Path("reports/benchmark"), Path("reports/benchmark-quick")
PLAN_FILE = "plan.json"
# The files of a finished cell that the aggregate reads (relative to its folder), and its fingerprint, which stands
# for the optional ones too: all of them committed to git, so that a fresh clone can aggregate (and resume) without
# the cell's training outputs.
CELL_INPUTS = (*REPORT_INPUTS, FINGERPRINT_FILE)
REPORT_OUTS = ("report.md", "report.html", "details.md", "details.html", "benchmark.json", "tables", "figures")
AGGREGATE_MODULES = ("stages.benchmark_report", "study.benchmark", "study.report", "study.analysis", "study.advice",
                     "study.advice_difference", "study.advice_inputs", "study.advice_evidence", "study.adacos_scale",
                     "study.plateau", "study.class_splits")
UNIT = "cell"


@dataclass(frozen=True)
class Benchmark:
    """A benchmark written out: its DVC project, every cell's dvc.yaml, the aggregate's pipeline and the report's
    files."""

    project: Project
    cells: dict[str, Path]
    aggregate: Path
    outputs: dict[str, Path]


def write_benchmark(plan: BenchmarkPlan, out_dir: str | Path = DEFAULT_OUT,
                    report_dir: str | Path = DEFAULT_REPORT_DIR, rerun: Sequence[str] = (), *,
                    log: Log = to_stderr) -> Benchmark:
    """Write every cell's params.yaml and dvc.yaml, plan.json and the aggregate's dvc.yaml in the benchmark's DVC
    project (`out_dir`); files whose contents did not change keep their bytes (DVC sees nothing new).

    A finished cell's stages are frozen (unless `rerun` names it): DVC keeps the results its dvc.lock records
    whatever the code does since, as `cells_to_run` does, so `dvc status` and `dvc repro` in the project leave it be.
    """
    problems = plan.data_problems(out_dir)
    if problems:  # a cell's declared classes, which plan.json states, are no longer its data's
        raise ValueError("\n".join(f"cell {name}: {problem}" for name, problem in problems.items()))
    project = open_project(out_dir, report_dir, "benchmark")
    for cell in plan.cells:
        if source_changed(project.root / cell.name):
            log(f"cell {cell.name}: the images of {cell.params.data.dataset} changed since its results were computed "
                f"(its {FINGERPRINT_FILE.as_posix()} records others): stale, so it is not pooled; `study benchmark` "
                "runs it again")
    pending = cells_to_run(plan, project.root, rerun)
    cells = {cell.name: write_study(project, cell.name, cell.params, cell.origin, UNIT,
                                    frozen=cell.name not in pending) for cell in plan.cells}
    for name in [name for name in cells if name not in pending]:  # vouched for where its report is what DVC locked
        write_fingerprint(project.root / name)
    # JSON has no mark: plan.json is always ours.
    write_generated(project.root / PLAN_FILE, plan.to_json(project.root), mark="")
    aggregate = write_benchmark_aggregate(project, plan)
    log(f"{len(cells)} cells in {project.relative(project.root, project.repository)}/: {', '.join(cells)}")
    return Benchmark(project, cells, aggregate, {name: project.report_dir / name for name in REPORT_OUTS})


def write_benchmark_aggregate(project: Project, plan: BenchmarkPlan) -> Path:
    """The aggregate's stage, reading the committed files of the cells finished now (a cell still to run is named
    in the report as declared but not finished; rewritten once it lands)."""
    command = ["python", "-m", "stages.benchmark_report", "--plan", PLAN_FILE, "--report-dir",
               project.relative(project.report_dir), "--label", project.relative(project.root, project.repository),
               "--dpi", str(plan.cells[0].params.report.dpi)]
    finished = [cell for cell in plan.cells if cell_finished(project.root / cell.name, plain_params(cell.params))]
    inputs = [PLAN_FILE, *(f"{cell.name}/{PurePosixPath(path).as_posix()}" for cell in finished
                           for path in CELL_INPUTS)]
    if (project.root / LEARNING_CURVE_CELL / "reports").is_dir():  # the 20,000-iteration cell, once it reported
        inputs += [f"{LEARNING_CURVE_CELL}/{path}" for path in LEARNING_CURVE_INPUTS]
    if (project.root / LEARNING_CURVE_CELL_ON_GPU / "reports").is_dir():  # its runs on a GPU: what they took there
        inputs.append(f"{LEARNING_CURVE_CELL_ON_GPU}/reports/tables/runs.csv")
    inputs += [f"../results/budget_matched/{path.name}"  # the control at the searches' real budget, where measured
               for path in sorted((project.root.parent / "results" / "budget_matched").glob("*_gap.csv"))]
    if (project.root.parent / "results" / "learning_rate" / "runs.csv").is_file():  # the learning-rate check
        inputs.append("../results/learning_rate/runs.csv")
    if (project.root.parent / "results" / TRAINED_ON).is_dir():  # methods trained on to convergence (the rule's runs)
        inputs.append(f"../results/{TRAINED_ON}")
    return write_aggregate(project, command, inputs, AGGREGATE_MODULES, REPORT_OUTS, persist=True)


# --- which cells are finished ------------------------------------------------------------------------------


_ABSENT = object()  # a key the params do not have: never equal to what a lock recorded


def _lookup(values: dict, dotted: str):
    """The value of a dotted key (`search.n_trials`, or a whole section), as dvc.lock names params."""
    for part in dotted.split("."):
        if not isinstance(values, dict) or part not in values:
            return _ABSENT
        values = values[part]
    return values


def _means_the_same(current, recorded) -> bool:
    """Whether params a lock recorded are the current ones: every recorded key holds its recorded value. A key the
    record lacks is a knob the code gained since: like any code change, it does not reopen a finished cell (the
    plan states what such cells ran with, e.g. train.checkpoint: last)."""
    if not (isinstance(current, dict) and isinstance(recorded, dict)):
        return current == recorded
    return all(key in current and _means_the_same(current[key], value) for key, value in recorded.items())


def planned_cells(folder: Path) -> list[str]:
    """The names of the cells plan.json in `folder` (a benchmark's) declares, in its order; each a folder of its
    own inside `folder`."""
    plan = folder / PLAN_FILE
    if not plan.is_file():
        raise ValueError(f"{folder} holds no benchmark (no plan.json); give the folder `study benchmark` writes its "
                         "cells to, e.g. benchmarks/cells")
    return [cell["name"] for cell in read_plan_file(plan)["cells"]]


def read_plan_file(plan: str | Path) -> dict:
    """plan.json as `study benchmark` wrote it, checked whole before a cell is served or pooled: one or more cells,
    each named once by a cell's name (a folder inside the benchmark's), and longer_of naming a short configuration
    of the plan (`longer_of_problem`); a ValueError naming the file, the problem and the fix."""
    plan = Path(plan)
    fix = f"`git checkout -- {plan}` restores the committed one, or `study benchmark` writes it again from the plan"
    try:
        declared = json.loads(plan.read_text(encoding="utf-8"))
        cells = declared["cells"]
        names = [cell["name"] for cell in cells]
        longer_of = {cell["configuration"]: cell.get("longer_of") for cell in cells}
    except (ValueError, KeyError, TypeError) as error:  # a truncated file, or not the benchmark's
        raise ValueError(f"{plan} is not a whole benchmark plan ({type(error).__name__}: {error}); {fix}") from None
    if not names:  # never "every one of the 0 cells is finished"
        raise ValueError(f"{plan} lists no cells, so there is nothing to run or pool; {fix}")
    for name in names:
        if not isinstance(name, str) or not NAME.fullmatch(name):  # `..`, `/`: a folder outside the benchmark's
            raise ValueError(f"{plan} names a cell {name!r}, which is not a cell's name (lower-case letters, digits "
                             f"and -) and would lead outside {plan.parent}; {fix}")
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise ValueError(f"{plan} lists the cell {twice} {names.count(twice)} times, and each would be pooled as a "
                         f"cell of its own; {fix}")
    problem = longer_of_problem(longer_of)
    if problem:
        raise ValueError(f"{plan}: {problem}; {fix}")
    return declared


def cells_to_serve(folder: Path) -> list[Path]:
    """The folders of the cells in `folder` (a benchmark's, in its plan's order) that a `study worker --cells` can
    serve here: not finished, with their prepared data. Those without it are named, with how to make it."""
    names = planned_cells(folder)
    pending = [name for name in names if not cell_finished(folder / name)]
    if not pending:
        print(f"every one of the {len(names)} cells in {folder} is finished: nothing to serve", file=sys.stderr,
              flush=True)
    serve = []
    for name in pending:
        root = folder / name
        if not (root / "data" / "prepared").is_dir():
            print(f"cell {name}: no prepared data here, skipped; `dvc repro {name}/dvc.yaml:prepare` in {folder} "
                  "makes it", file=sys.stderr, flush=True)
            continue
        serve.append(root)
    return serve


def cell_finished(directory: str | Path, params: dict | None = None) -> bool:
    """Whether a cell's committed report is its current study's: its dvc.lock holds every stage of its dvc.yaml, each
    whole (a lock cut inside a stage is refused, naming it), and a report stage whose metrics.json is the one on disk
    (and every report output is there), and every stage's recorded params are the current ones (`params`, by default its params.yaml's), and the images a folder cell reads are those its results
    were computed from (`source_changed`). Such a cell is kept as it is (no training outputs needed); the code it ran
    is in its lock."""
    directory = Path(directory)
    lock_path, params_path = directory / "dvc.lock", directory / "params.yaml"
    if not lock_path.is_file() or (params is None and not params_path.is_file()):
        return False
    if params is None:
        params = read_yaml(params_path.read_text(encoding="utf-8")) or {}
    declared = _declared_stages(directory, params)
    stages = _locked_stages(lock_path, declared)
    report = stages.get("report")
    if not report or any(name not in stages for name in declared or ()):  # judged by its stages, not by parsing
        return False
    for stage in stages.values():
        for values in (stage.get("params") or {}).values():
            if not all(_means_the_same(_lookup(params, key), value) for key, value in values.items()):
                return False
    for out in report.get("outs", []):
        path = directory / out["path"]
        if not path.exists():
            return False
        if path.is_file() and out.get("md5") and dvc_md5(path) != out["md5"]:
            return False
    return not source_changed(directory)


@dataclass(frozen=True)
class KeptTrainings:
    """What an unfinished cell's trial storage holds so far (a cell trained over several machines in turn)."""
    # Search trials completed or pruned and final runs completed; trials kept aside for other settings are not counted.
    count: int
    seconds: float  # their device-seconds as each trial recorded them, summed (two at once take half the clock)

    def of(self, planned: int) -> str:
        """'24 of 126 trainings kept (4.4 h of training); 102 left, about 18.6 h of training at their mean'."""
        said = f"{self.count} of {planned} trainings kept ({self.seconds / 3600:.1f} h of training)"
        left = planned - self.count
        if self.count and left > 0:
            said += f"; {left} left, about {left * self.seconds / self.count / 3600:.1f} h of training at their mean"
        return said


def kept_trainings(directory: str | Path) -> KeptTrainings | None:
    """The trainings an unfinished cell's trial storage keeps; None where it has no storage here."""
    journal = Path(directory) / JOURNAL
    if not journal.is_file():
        return None
    storage = journal_storage(journal)
    done = (TrialState.COMPLETE, TrialState.PRUNED)
    # A name with "@" is `kept_aside`'s: trials of other settings, not this cell's.
    kept = [trial for study in storage.get_all_studies() if "@" not in study.study_name
            for trial in storage.get_all_trials(study._study_id, deepcopy=False, states=done)]
    # The seconds the search and the final runs record per trial, which the cell's reports sum as device-seconds.
    return KeptTrainings(len(kept), sum(trial.user_attrs.get("seconds", 0.0) for trial in kept))


# What DVC records in a lock of each part a stage declares in dvc.yaml (metrics and plots are outs there too).
_RECORDED = {"deps": "deps", "params": "params", "outs": "outs", "metrics": "outs", "plots": "outs"}
_ITEMS = re.compile(r"\$\{\s*([\w.]+)\s*\}")  # foreach: ${search.losses}


def _declared_stages(directory: Path, params: dict) -> dict[str, dict] | None:
    """The stages the cell's dvc.yaml declares, named as its dvc.lock names them (a foreach stage once per item of
    its params, e.g. search@arcface), each with the parts DVC records of it; None without a dvc.yaml read whole."""
    try:
        declared = read_yaml((directory / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
        stages = {}
        for name, stage in declared.items():
            if "foreach" not in stage:
                stages[name] = stage
                continue
            items = stage["foreach"]
            if isinstance(items, str) and _ITEMS.fullmatch(items):
                items = _lookup(params, _ITEMS.fullmatch(items).group(1))
            keys = (list(items) if isinstance(items, dict) else
                    [item if isinstance(item, str) else index for index, item in enumerate(items)])
            stages.update({f"{name}@{key}": stage["do"] for key in keys})
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):  # none, or not one this code writes
        return None
    return {name: {_RECORDED[part] for part, value in stage.items() if part in _RECORDED and value}
            for name, stage in stages.items()}


def missing_stages(directory: str | Path, params: dict | None = None) -> list[str]:
    """The stages of a cell's dvc.yaml that its dvc.lock does not hold (a cell running, or a lock cut short between
    two stages): until it holds every one, the cell is not finished."""
    directory = Path(directory)
    lock = directory / "dvc.lock"
    if params is None:
        params = read_yaml((directory / "params.yaml").read_text(encoding="utf-8")) or {}
    declared = _declared_stages(directory, params)
    if declared is None or not lock.is_file():
        return []
    held = _locked_stages(lock, declared)
    return [name for name in declared if name not in held]


def lock_short_of_its_report(directory: str | Path, params: dict | None = None) -> str:
    """Why a cell whose report is here is not finished, where its dvc.lock lacks stages of its dvc.yaml (a lock cut
    between two stages, or a cell running again), with the fix for the first; '' otherwise."""
    directory = Path(directory)
    if not (directory / "reports" / "metrics.json").is_file() or not (directory / "params.yaml").is_file():
        return ""
    missing = missing_stages(directory, params)
    if not missing:
        return ""
    lock = directory / "dvc.lock"
    return (f"its dvc.lock lacks {len(missing)} of the stages its dvc.yaml declares ({', '.join(missing[:3])}"
            f"{', …' if len(missing) > 3 else ''}) though its report is here: unless it is running again, the lock was "
            f"cut short and `git checkout -- {lock}` restores the committed one")


def _locked_stages(lock: Path, declared: dict[str, set[str]] | None = None) -> dict:
    """The stages a cell's dvc.lock records, each holding every part its dvc.yaml (`declared`, where known) declares
    for it; a ValueError naming it and the fix where it is not whole."""
    try:
        locked = read_yaml_file(lock)
        if locked is None:  # what a kill while DVC rewrites the file leaves; DVC itself only says a key is missing
            raise ValueError("it is empty")
        stages = locked.get("stages") or {}
        for stage in stages.values():  # what cell_finished reads: each file's params, the report's outs
            params, outs = stage.get("params") or {}, stage.get("outs") or []
            if not (all(isinstance(values, dict) for values in params.values())
                    and all(isinstance(out, dict) and "path" in out for out in outs)):
                raise ValueError("a stage lacks DVC's fields")
        for name, stage in stages.items():  # DVC writes a stage whole: a part missing is a lock cut inside it
            lacking = sorted((declared or {}).get(name, set()) - {part for part, value in stage.items() if value})
            if lacking:
                raise ValueError(f"its stage {name} holds no {' or '.join(lacking)}, which its dvc.yaml declares: "
                                 "it was cut short")
    except (yaml.YAMLError, ValueError, AttributeError) as error:  # a truncated file, a merge conflict left in it
        reason = getattr(error, "problem", None) or error
        mark = getattr(error, "problem_mark", None)
        raise ValueError(f"{lock} is not a whole dvc.lock ({reason}{f', line {mark.line + 1}' if mark else ''}): "
                         "delete it and its stages rerun, taking the trials its storage keeps (a running cell's lock "
                         f"is not committed yet), or `git checkout -- {lock}` restores a committed one") from None
    return stages


def cells_to_run(plan: BenchmarkPlan, out_dir: str | Path, rerun: Sequence[str] = ()) -> list[str]:
    """The cells DVC must reproduce: the unfinished ones, and those named in `rerun` ('all' for every cell)."""
    names = [cell.name for cell in plan.cells]
    unknown = sorted(set(rerun) - set(names) - {"all"})
    if unknown:
        raise ValueError(f"--rerun {', '.join(unknown)}: no such cell; the cells are {', '.join(names)}")
    return [cell.name for cell in plan.cells if "all" in rerun or cell.name in rerun
            or not cell_finished(Path(out_dir) / cell.name, plain_params(cell.params))]


def plain_params(params) -> dict:
    """Params as params.yaml holds them (and dvc.lock records them): tuples as lists."""
    return json.loads(json.dumps(params.to_dict()))


# --- running it ---------------------------------------------------------------------------------------------


def reproduce_benchmark(benchmark: Benchmark, plan: BenchmarkPlan, rerun: Sequence[str] = (), *,
                        log: Log = to_stderr) -> None:
    """`dvc repro` the cells that are not finished (DVC resumes each where it stopped), one at a time, freezing each
    once it is finished so that it can be committed as it lands; then the aggregate alone
    (--single-item: it reads only the cells' committed files, so finished cells need no training outputs). A cell that
    fails does not stop the others."""
    project = benchmark.project
    pending = cells_to_run(plan, project.root, rerun)
    kept = [name for name in benchmark.cells if name not in pending]
    if kept:
        log(f"finished, kept as committed: {', '.join(kept)} (--rerun NAME hands a cell back to DVC)")
    failures = []
    # The cells that carry the answer first, then the long regime, then the other tuners: a run cut short by the
    # session's end leaves the least needed cells unfinished.
    order = sorted((cell for cell in plan.cells if cell.name in pending),
                   key=lambda cell: 0 if cell.primary else 1 if cell.longer_of or cell.converged_only else 2)
    for cell in order:
        try:
            reproduce(project, [benchmark.cells[cell.name]], log, unit=UNIT, runner=f"benchmark: {cell.name}")
        except StudiesError as error:
            failures.append(str(error))
            continue
        if not cell_finished(benchmark.cells[cell.name].parent):
            failures.append(f"cell {cell.name} ran but its dvc.lock does not record a report of its current "
                            "params.yaml; run the same command again, and `dvc status` in its folder if it persists")
            continue
        write_study(project, cell.name, cell.params, cell.origin, UNIT, frozen=True)  # finished: frozen like the others
        write_fingerprint(benchmark.cells[cell.name].parent)
        folder = project.relative(benchmark.cells[cell.name].parent, project.repository)
        log(f"cell {cell.name} finished: `git add {folder}` and commit it to keep it on a fresh clone")
    if failures:
        raise StudiesError("\n".join(failures))
    reproduce_aggregate(benchmark, plan, log=log)


def reproduce_aggregate(benchmark: Benchmark, plan: BenchmarkPlan, *, log: Log = to_stderr) -> None:
    """The aggregate alone, over the cells finished now (--single-item: it reads only their committed files)."""
    write_benchmark_aggregate(benchmark.project, plan)
    reproduce(benchmark.project, [benchmark.aggregate], log, options=["--single-item"], unit=UNIT,
              runner="benchmark")


def default_locations(quick: bool) -> tuple[Path, Path, Path]:
    """The declaration, the cells' folder and the report's folder of the full benchmark, or of the quick one."""
    return (QUICK_PLAN, QUICK_OUT, QUICK_REPORT_DIR) if quick else (FULL_PLAN, DEFAULT_OUT, DEFAULT_REPORT_DIR)


def run_benchmark(plan_path: str | Path = FULL_PLAN, out_dir: str | Path = DEFAULT_OUT,
                  report_dir: str | Path = DEFAULT_REPORT_DIR, rerun: Sequence[str] = (), *, report_only: bool = False,
                  log: Log = to_stderr) -> dict[str, Path]:
    """Write the benchmark's pipelines and reproduce what is not finished (with `report_only`, only the aggregate
    over the cells finished so far); return the report's files."""
    plan = load_plan(plan_path)
    benchmark = write_benchmark(plan, out_dir, report_dir, rerun, log=log)
    if report_only:
        reproduce_aggregate(benchmark, plan, log=log)
    else:
        reproduce_benchmark(benchmark, plan, rerun, log=log)
    return benchmark.outputs
