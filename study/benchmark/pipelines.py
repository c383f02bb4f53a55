"""The benchmark's pipelines: one folder per cell with its params.yaml and a dvc.yaml generated from the repository's
(as the sweep makes them), plan.json and the aggregate's pipeline; which cells are finished; `dvc repro` over the
rest."""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

import yaml

from study.benchmark.cells import TABLES
from study.benchmark.plan import FULL_PLAN, QUICK_PLAN, BenchmarkPlan, load_plan
from study.presets import write_params
from study.sweep import class_count_pipeline, module_source, reproduce
from study.sweep.pipelines import (DIFFERENCES_FILE, METRICS_FILE, PIPELINE_FILE, Log, Sweep, SweepError, _relative,
                                   _stderr, pipeline_yaml, repository_locations, root_pipeline, write_generated)

DEFAULT_OUT, QUICK_OUT = Path("benchmarks/cells"), Path("benchmarks/quick")
DEFAULT_REPORT_DIR, QUICK_REPORT_DIR = Path("reports/benchmark"), Path("reports/benchmark-quick")
PLAN_FILE = "plan.json"
# The files of a finished cell that the aggregate reads (relative to its folder): all of them committed to git, so
# that a fresh clone can aggregate (and resume) without the cell's training outputs.
CELL_INPUTS = (METRICS_FILE, DIFFERENCES_FILE, TABLES / "search.csv", TABLES / "final_test.csv",
               TABLES / "run_scores.csv", TABLES / "break_even.csv", TABLES / "tuning_curves.csv",
               TABLES / "landscape.csv")
REPORT_OUTS = ("report.md", "report.html", "benchmark.json", "tables", "figures")
AGGREGATE_MODULES = ("stages.benchmark_report", "study.benchmark", "study.report", "study.analysis")
AGGREGATE_STAGE = "aggregate"
GENERATED_MARK = "# Written by `study benchmark`"
# A cell's working files that git must not hold: the trials' journal and checkpoints (outside DVC's outputs), the
# source link validate keeps, and a report being written. DVC ignores its own outputs in the cells' .gitignore files.
IGNORED = ("/*/results/trials/", "/*/data/source", "/*/reports/.report-staging/")


def generated_text(body: str, source: str = "") -> str:
    """A file `study benchmark` writes, headed by the mark that lets it be rewritten."""
    return f"{GENERATED_MARK}{source}; every run rewrites this file.\n{body}"


def aggregate_pipeline(plan: BenchmarkPlan, report_dir: str, code: Sequence[str], label: str, dpi: int) -> dict:
    """The benchmark's own pipeline, one stage run in its folder: plan.json, every cell's committed `CELL_INPUTS`
    and `code` as deps; the report's files in `report_dir` (relative to that folder) as outs kept in git."""
    command = ["python", "-m", "stages.benchmark_report", "--plan", PLAN_FILE, "--report-dir", report_dir,
               "--label", label, "--dpi", str(dpi)]
    deps = [PLAN_FILE, *(f"{cell.name}/{PurePosixPath(path).as_posix()}" for cell in plan.cells
                         for path in CELL_INPUTS)]
    outs = [{posixpath.join(report_dir, name): {"cache": False}} for name in REPORT_OUTS]
    return {"stages": {AGGREGATE_STAGE: {"cmd": shlex.join(command), "deps": deps + list(code), "outs": outs}}}


@dataclass(frozen=True)
class Benchmark:
    """A benchmark written out: its repository, every cell's folder, the aggregate's pipeline and the report's files."""

    repo_root: Path
    out_dir: Path
    cells: dict[str, Path]
    aggregate: Path
    outputs: dict[str, Path]


def write_benchmark(plan: BenchmarkPlan, out_dir: str | Path = DEFAULT_OUT,
                    report_dir: str | Path = DEFAULT_REPORT_DIR, *, log: Log = _stderr) -> Benchmark:
    """Write every cell's params.yaml and dvc.yaml, plan.json, .gitignore and the aggregate's dvc.yaml; files whose
    contents did not change keep their bytes (DVC sees nothing new)."""
    repo_root, out_dir, report_dir = repository_locations(out_dir, report_dir, "benchmark")
    root_file, root = root_pipeline(repo_root, "cell")
    cells = {}
    for cell in plan.cells:
        directory = out_dir / cell.name
        directory.mkdir(parents=True, exist_ok=True)
        params_path = directory / "params.yaml"
        staged = directory / ".params.yaml.new"
        write_params(cell.params, staged, cell.origin)
        write_generated_params(params_path, staged)
        pipeline = class_count_pipeline(root, _relative(repo_root, directory))
        write_generated(directory / PIPELINE_FILE, generated_text(pipeline_yaml(pipeline),
                                                                  f" from {_relative(root_file, directory)}"),
                        GENERATED_MARK)
        cells[cell.name] = directory
    write_generated(out_dir / PLAN_FILE, plan.to_json(), mark="")  # JSON has no mark: plan.json is always ours
    write_generated(out_dir / ".gitignore", generated_text("\n".join(IGNORED) + "\n"), GENERATED_MARK)
    code = [_relative(repo_root / module_source(repo_root, module), out_dir) for module in AGGREGATE_MODULES]
    dpi = plan.cells[0].params.report.dpi
    aggregate = aggregate_pipeline(plan, _relative(report_dir, out_dir), code, _relative(out_dir, repo_root), dpi)
    aggregate_file = write_generated(out_dir / PIPELINE_FILE, generated_text(pipeline_yaml(aggregate)), GENERATED_MARK)
    log(f"{len(cells)} cells in {_relative(out_dir, repo_root)}/: {', '.join(cells)}")
    return Benchmark(repo_root, out_dir, cells, aggregate_file,
                     {name: report_dir / name for name in REPORT_OUTS})


def write_generated_params(path: Path, staged: Path) -> None:
    """Move a freshly written params.yaml into place unless the one there already holds the same bytes."""
    if path.is_file() and path.read_bytes() == staged.read_bytes():
        staged.unlink()
        return
    staged.replace(path)


# --- which cells are finished ------------------------------------------------------------------------------


_ABSENT = object()  # a key the params do not have: never equal to what a lock recorded


def _lookup(values: dict, dotted: str):
    """The value of a dotted key (`search.n_trials`, or a whole section), as dvc.lock names params."""
    for part in dotted.split("."):
        if not isinstance(values, dict) or part not in values:
            return _ABSENT
        values = values[part]
    return values


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def cell_finished(directory: str | Path, params: dict | None = None) -> bool:
    """Whether a cell's committed report is its current study's: its dvc.lock records a report stage whose
    metrics.json is the one on disk (and every report output is there), and every stage's recorded params are the
    current ones (`params`, by default its params.yaml's). Such a cell is kept as it is (no training outputs needed);
    the code it ran is in its lock."""
    directory = Path(directory)
    lock_path, params_path = directory / "dvc.lock", directory / "params.yaml"
    if not lock_path.is_file() or (params is None and not params_path.is_file()):
        return False
    stages = (yaml.safe_load(lock_path.read_text(encoding="utf-8")) or {}).get("stages", {})
    report = stages.get("report")
    if not report:
        return False
    if params is None:
        params = yaml.safe_load(params_path.read_text(encoding="utf-8")) or {}
    for stage in stages.values():
        for values in (stage.get("params") or {}).values():
            if any(_lookup(params, key) != value for key, value in values.items()):
                return False
    for out in report.get("outs", []):
        path = directory / out["path"]
        if not path.exists():
            return False
        if path.is_file() and out.get("md5") and _md5(path) != out["md5"]:
            return False
    return True


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
                        log: Log = _stderr) -> None:
    """`dvc repro` the cells that are not finished (DVC resumes each where it stopped), then the aggregate alone
    (--single-item: it reads only the cells' committed files, so finished cells need no training outputs)."""
    pending = cells_to_run(plan, benchmark.out_dir, rerun)
    kept = [name for name in benchmark.cells if name not in pending]
    if kept:
        log(f"finished, kept as committed: {', '.join(kept)} (--rerun NAME hands a cell back to DVC)")
    if pending:
        cells = Sweep(benchmark.repo_root, tuple(benchmark.cells[name] / PIPELINE_FILE for name in pending), {})
        reproduce(cells, log, unit="cell", runner="benchmark")
    unfinished = [name for name in pending if not cell_finished(benchmark.cells[name])]
    if unfinished:
        raise SweepError(f"cells {', '.join(unfinished)} ran but their dvc.lock does not record a report of their "
                         "current params.yaml; run the same command again, and `dvc status` in those folders if it "
                         "persists")
    aggregate = Sweep(benchmark.repo_root, (benchmark.aggregate,), {})
    reproduce(aggregate, log, options=["--single-item"], unit="cell", runner="benchmark")


def default_locations(quick: bool) -> tuple[Path, Path, Path]:
    """The declaration, the cells' folder and the report's folder of the full benchmark, or of the quick one."""
    return (QUICK_PLAN, QUICK_OUT, QUICK_REPORT_DIR) if quick else (FULL_PLAN, DEFAULT_OUT, DEFAULT_REPORT_DIR)


def run_benchmark(plan_path: str | Path = FULL_PLAN, out_dir: str | Path = DEFAULT_OUT,
                  report_dir: str | Path = DEFAULT_REPORT_DIR, rerun: Sequence[str] = (), *,
                  log: Log = _stderr) -> dict[str, Path]:
    """Write the benchmark's pipelines and reproduce what is not finished; return the report's files."""
    plan = load_plan(plan_path)
    benchmark = write_benchmark(plan, out_dir, report_dir, log=log)
    reproduce_benchmark(benchmark, plan, rerun, log=log)
    return benchmark.outputs
