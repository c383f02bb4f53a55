"""dvc.lock matches the code: in a fresh clone of the working tree, `dvc status dvc.yaml` lists no changed dependency
(code, params or command) and `dvc repro --dry --allow-missing` runs nothing. A clone lacks every stage's outputs,
which DVC reports as deleted or not in its cache: that is missing data, not a stale lock."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, working_tree_clone

# Missing in a clone, as DVC reports a stage's outputs (and the deps that are other stages' outputs).
MISSING = {"deleted", "not in cache"}
REFRESH = ("the default study's dvc.lock lags the code: run `dvc repro` (the study takes minutes) and commit "
           "dvc.lock with what it changed")


def dvc(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def pipeline_outputs(pipeline: dict) -> set[str]:
    """Every path a stage of the pipeline writes (a foreach stage's `${item}` as written), and validate's link."""
    paths = {"data/source"}  # validate's link, a dep of prepare (an output of validate's too)
    for stage in pipeline["stages"].values():
        body = stage.get("do", stage)
        for key in ("outs", "metrics", "plots"):
            paths |= {next(iter(entry)) if isinstance(entry, dict) else entry for entry in body.get(key, [])}
    return paths


def is_an_output(path: str, outputs: set[str]) -> bool:
    """Whether `path` is one of `outputs` (any foreach item in place of `${item}`) or a folder holding some."""
    def overlaps(out: str) -> bool:
        stem = out.split("${item}")[0] if "${item}" in out else None
        return path == out or (stem is not None and path.startswith(stem)) or out.startswith(path.rstrip("/") + "/")

    return any(overlaps(out) for out in outputs)


def lagging_entries(status: dict, outputs: set[str]) -> list[str]:
    """What `dvc status --json` says that a clone's missing data does not explain: a changed code dep, params, a
    command, a committed output that is not the one recorded."""
    found = []
    for stage, changes in status.items():
        for change in changes:
            if isinstance(change, str):  # "changed command", "always changed"
                found.append(f"{stage}: {change}")
                continue
            for path, state in change.get("changed deps", {}).items():
                if isinstance(state, dict):  # params: {key: modified}
                    found += [f"{stage}: {path} {key} {how}" for key, how in state.items()]
                elif not (state in MISSING and is_an_output(path, outputs)):
                    found.append(f"{stage}: {path} {state}")
            found += [f"{stage}: output {path} {state}" for path, state in change.get("changed outs", {}).items()
                      if state not in MISSING]
    return found


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout")
    return working_tree_clone(tmp_path_factory.mktemp("clone"))


def test_a_fresh_clones_dvc_status_lists_no_changed_dependency(clone):
    done = dvc(["status", "--json", "dvc.yaml"], clone)
    assert done.returncode == 0, done.stderr
    lagging = lagging_entries(json.loads(done.stdout or "{}"), pipeline_outputs(yaml.safe_load(
        (clone / "dvc.yaml").read_text(encoding="utf-8"))))
    assert not lagging, REFRESH + ":\n  " + "\n  ".join(lagging)


def test_a_fresh_clones_dry_run_runs_nothing(clone):
    done = dvc(["repro", "--dry", "--allow-missing"], clone)
    running = [line for line in done.stdout.splitlines() if line.startswith("Running stage")]
    assert done.returncode == 0 and not running, f"{REFRESH}; DVC said:\n{done.stdout}{done.stderr}"


def test_the_lag_check_reads_dvcs_status_as_meant():
    """A clone's missing outputs pass; changed code, params, commands and committed reports do not."""
    outputs = {"results/validated.txt", "data/prepared", "results/search/${item}", "reports/report.md", "data/source"}
    clean = {"prepare": [{"changed deps": {"results/validated.txt": "deleted", "data/source": "deleted"}},
                         {"changed outs": {"data/prepared": "not in cache"}}],
             "tuned@arcface": [{"changed deps": {"results/search/arcface": "deleted"}}],
             "report": [{"changed deps": {"results/search": "deleted"}}]}
    assert lagging_entries(clean, outputs) == []
    stale = {"validate": [{"changed deps": {"study/config.py": "modified", "params.yaml": {"train": "modified"}}}],
             "report": [{"changed outs": {"reports/report.md": "modified"}}, "changed command"],
             "search@arcface": [{"changed deps": {"study/new.py": "new"}}]}
    assert lagging_entries(stale, outputs) == [
        "validate: study/config.py modified", "validate: params.yaml train modified",
        "report: output reports/report.md modified", "report: changed command", "search@arcface: study/new.py new"]


def test_every_committed_benchmark_cell_runs_the_pipeline_of_the_committed_dvc_yaml():
    """A cell's dvc.yaml is the root dvc.yaml rebased into the cell's folder (`study benchmark` writes it): a dep added
    to the root pipeline and not to the committed cells leaves them running other code than the study does."""
    from study.many_studies import study_pipeline

    root = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))
    cells = sorted(path for plan in ("cells", "levers") for path in (REPO / "benchmarks" / plan).glob("*/dvc.yaml"))
    assert cells
    for path in cells:
        committed = yaml.safe_load(path.read_text(encoding="utf-8"))["stages"]
        frozen = all(body.get("do", body).get("frozen", False) for body in committed.values())
        expected = study_pipeline(root, "../../..", frozen)["stages"]
        assert committed == expected, (f"{path.relative_to(REPO)} lags dvc.yaml: run `study benchmark` (finished cells "
                                       "are not retrained) and commit the cells' dvc.yaml with the change")
