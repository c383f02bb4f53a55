"""The tuning-cost benchmark: its declaration, the generated pipelines, which cells are finished, and a tiny benchmark
run end to end through DVC (the aggregate's numbers and report on synthetic cells: test_benchmark_report.py)."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from study.benchmark import CELL_INPUTS, cell_finished, cells_to_run, load_plan, write_benchmark
from study.benchmark.plan import planned_iterations, trained_iterations
from study.search import tpe_startup_trials
from study.benchmark.pipelines import plain_params
from study.many_studies import StudiesError
from conftest import REPO, changed_studies, dvc_study
from study.cli import main
from study.config import load_params
from study.sources import source_of
from study.splits import split_counts
from study.validation import DataProblem, planned_source

COPIED = ["dvc.yaml", "params.yaml", ".dvcignore", "stages", "study", "presets"]


# --- the declaration ---------------------------------------------------------------------------------------


def test_the_full_benchmark_covers_what_the_issue_asks():
    plan = load_plan("full")
    primary = [cell for cell in plan.cells if cell.primary]
    sources = {source_of(cell.params.data.dataset) for cell in primary}
    assert len(primary) >= 6 and len(sources) >= 6 and {"digits", "mnist", "fashion-mnist"} <= sources
    real_open = [cell for cell in primary if cell.params.data.protocol == "open" and cell.train_classes >= 50
                 and source_of(cell.params.data.dataset) in ("mnist", "fashion-mnist")]
    assert len(real_open) >= 2
    longer = [cell for cell in plan.cells if cell.longer_of]
    assert len(longer) >= 3 and not any(cell.primary for cell in longer)
    assert sum(source_of(cell.params.data.dataset) in ("digits", "mnist", "fashion-mnist") for cell in longer) >= 2
    short = {cell.configuration: cell for cell in primary}
    converged_only = {cell.configuration: cell for cell in plan.cells if cell.converged_only}
    for cell in longer:
        if cell.longer_of in converged_only:  # a configuration with no short cell, trained longer still
            assert cell.params.train.epochs > converged_only[cell.longer_of].params.train.epochs
            continue
        long_params, short_params = cell.params, short[cell.longer_of].params
        if None in (planned_iterations(long_params), planned_iterations(short_params)):
            # An optional source absent here (Debian's Fashion-MNIST, the emoji font) has no size to count from:
            # the same data, batch size and iteration cap at ten times the epochs is ten times the iterations.
            assert long_params.data == short_params.data
            assert long_params.train.batch_size == short_params.train.batch_size
            assert long_params.train.max_iterations is None is short_params.train.max_iterations
            assert long_params.train.epochs >= 10 * short_params.train.epochs
        else:
            assert planned_iterations(long_params) >= 10 * planned_iterations(short_params)
    assert all("p2sgrad" in cell.params.runs.methods for cell in plan.cells)
    assert {cell.params.data.protocol for cell in primary} == {"closed", "open"}
    assert min(cell.train_classes for cell in primary) <= 10 and max(cell.train_classes for cell in primary) >= 1000
    assert all(len(cell.params.data.split_seeds()) >= 2 for cell in plan.cells)
    assert all("arcface" in cell.params.search.losses for cell in plan.cells)
    for loss in ("cosface", "sphereface"):
        assert sum(loss in cell.params.search.losses for cell in primary) >= 3
    compared = {}
    for cell in plan.cells:
        search = cell.params.search
        compared.setdefault(cell.configuration, set()).add((search.sampler, search.repeats >= 3 or search.sampler ==
                                                            "random", search.pruner))
    with_tuners = [tuners for tuners in compared.values() if len(tuners) >= 3]
    assert len(with_tuners) >= 2
    for tuners in with_tuners:
        assert ("random", True, "none") in tuners and ("tpe", True, "none") in tuners
        assert any(sampler == "tpe" and pruner in ("median", "hyperband") for sampler, _, pruner in tuners)
    assert {cell.params.train.objective for cell in plan.cells} == {"map_at_r"}
    for cell in plan.cells:  # TPE's budget lies well past its random start-up trials
        if cell.params.search.sampler == "tpe":
            assert cell.params.search.n_trials >= 3 * tpe_startup_trials(cell.params.search.n_trials)


def test_each_cell_has_exactly_its_training_class_count():
    cells, checked = load_plan("full").cells, set()
    for cell in cells:
        data = cell.params.data
        try:
            source = planned_source(data)
        except DataProblem as problem:  # optional data a Debian or npm package ships, not installed here
            if not any(hint in str(problem) for hint in ("apt-get install", "apt install", "npm pack")):
                raise
            continue
        if source is None:  # known only once prepare downloads it
            continue
        checked.add(cell.name)
        total = data.classes or source[1].num_classes
        if data.protocol == "closed":
            assert cell.train_classes == total
        else:  # the data module's own class split of the classes
            assert split_counts(total, data.fractions)[0] == cell.train_classes
    # The generated and Python-shipped sources need nothing installed: their cells are checked on every machine.
    shipped = {cell.name for cell in cells if cell.params.data.dataset.startswith(("glyphs", "strokes", "digits"))}
    assert shipped and shipped <= checked


def test_the_quick_benchmark_has_every_kind_of_cell():
    plan = load_plan("quick")
    assert {cell.tuner for cell in plan.cells} == {"random", "tpe", "tpe-median"}
    assert len({cell.configuration for cell in plan.cells}) >= 3


def declaration(tmp_path, text: str) -> Path:
    """A benchmark declaration file holding `text`."""
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


# Two cells of one source (digits closed, with ArcFace and CosFace, and its TPE variant); TINY adds glyphs open.
TINY_DIGITS = """
title: A tiny benchmark
preset: default
set: {data.seeds: [0, 1], model.name: mlp, model.embedding_size: 16, train.epochs: 1, train.eval_every: 5,
      train.device: cpu, train.parallel: 1, search.n_trials: 2, runs.seeds: [0, 1], runs.methods: [fixed_adacos],
      runs.plateau_cap: 1, analysis.n_bootstrap: 100, report.dpi: 60}
tuners:
  random: {search.sampler: random}
  tpe: {search.sampler: tpe, search.repeats: 2, search.losses: [arcface]}
configurations:
  - name: digits-closed
    dataset: digits
    train_classes: 10
    set: {data.protocol: closed, data.fractions: [0.6, 0.2, 0.2], search.losses: [arcface, cosface]}
    tuners: [random, tpe]
"""
TINY = TINY_DIGITS + """  - name: glyphs-open
    dataset: "glyphs:{total}:8"
    train_classes: 6
    set: {train.batch_size: 16}
"""


def test_a_declaration_makes_one_cell_per_configuration_and_tuner(tmp_path):
    plan = load_plan(declaration(tmp_path, TINY))
    assert [cell.name for cell in plan.cells] == ["digits-closed", "digits-closed-tpe", "glyphs-open"]
    assert [cell.primary for cell in plan.cells] == [True, False, True]
    tpe = plan.cells[1].params
    assert (tpe.search.sampler, tpe.search.repeats, tpe.search.losses) == ("tpe", 2, ("arcface",))
    assert plan.cells[0].params.search.losses == ("arcface", "cosface")
    assert plan.cells[2].params.data.dataset == "glyphs:11:8" and plan.cells[2].params.data.protocol == "open"
    assert plan.cells[0].params.data.classes == 10  # a source of fixed size keeps that many classes
    assert json.loads(plan.to_json())["cells"][2]["train_classes"] == 6


def test_a_configuration_with_no_short_cell_is_declared_converged_only(tmp_path):
    """A configuration too large to train both short and long (e.g. Triple MNIST at 500 training classes) runs only
    at a converged length: never primary (the short regime's pool), a long-regime cell of the converged headline."""
    from study.analysis.headline import headline_cells

    text = TINY.replace("""    set: {train.batch_size: 16}
""", """    set: {train.batch_size: 16}
    converged_only: true
""")
    plan = load_plan(declaration(tmp_path, text))
    glyphs = plan.cells[2]
    assert (glyphs.name, glyphs.primary, glyphs.longer_of, glyphs.converged_only) == ("glyphs-open", False, None, True)
    facts = json.loads(plan.to_json())["cells"]
    assert facts[2]["converged_only"] is True and "converged_only" not in facts[0]  # other cells' plan.json unchanged
    # The aggregate's rows for it carry regime "long": the converged headline keeps it where it converged.
    rows = pd.DataFrame([
        {"cell": "glyphs-open", "configuration": "glyphs-open", "method": "arcface_tuned", "primary": False,
         "regime": "long", "longer_of": None, "iterations": 4000, "relative": 0.01, "relative_se": 0.01,
         "converged": True},
        {"cell": "digits-closed", "configuration": "digits-closed", "method": "arcface_tuned", "primary": True,
         "regime": "short", "longer_of": None, "iterations": 100, "relative": 0.0, "relative_se": 0.01,
         "converged": False}])
    assert headline_cells(rows)["cell"].tolist() == ["glyphs-open"]
    for bad, message in ((text.replace("converged_only: true", "converged_only: yes please"), "must be true or false"),
                         (text.replace("converged_only: true", "converged_only: true\n    longer_of: digits-closed"),
                          "not both")):
        with pytest.raises(ValueError, match=message):
            load_plan(declaration(tmp_path, bad))


def test_a_converged_only_configuration_trained_longer_is_one_configuration_with_it(tmp_path):
    """A converged-only configuration that ended still improving gets a longer cell (`longer_of` naming it): the
    headline reads the longer one where both methods converged there, the first where only it converged, and never
    both, as two configurations of one source would be counted twice."""
    from study.analysis.headline import headline_cells, long_cells

    text = TINY.replace("""    set: {train.batch_size: 16}
""", """    set: {train.batch_size: 16}
    converged_only: true
  - name: glyphs-open-conv2
    dataset: "glyphs:{total}:8"
    train_classes: 6
    longer_of: glyphs-open
    set: {train.batch_size: 16, train.epochs: 2}
""")
    plan = load_plan(declaration(tmp_path, text))
    longer = plan.cells[3]
    assert (longer.name, longer.primary, longer.longer_of) == ("glyphs-open-conv2", False, "glyphs-open")
    assert json.loads(plan.to_json())["cells"][3]["longer_of"] == "glyphs-open"

    def rows(longer_converged: bool) -> pd.DataFrame:
        return pd.DataFrame([
            {"cell": "glyphs-open", "configuration": "glyphs-open", "method": "arcface_tuned", "primary": False,
             "regime": "long", "longer_of": None, "iterations": 100, "relative": 0.05, "relative_se": 0.01,
             "converged": True},
            {"cell": "glyphs-open-conv2", "configuration": "glyphs-open-conv2", "method": "arcface_tuned",
             "primary": False, "regime": "long", "longer_of": "glyphs-open", "iterations": 200, "relative": -0.02,
             "relative_se": 0.01, "converged": longer_converged}])

    assert headline_cells(rows(True))["cell"].tolist() == ["glyphs-open-conv2"]
    assert headline_cells(rows(False))["cell"].tolist() == ["glyphs-open"]
    assert long_cells(rows(False))["cell"].tolist() == ["glyphs-open-conv2"]


def test_a_finished_cell_whose_source_is_absent_here_keeps_the_iterations_it_trained(tmp_path):
    """An optional source (Debian's Fashion-MNIST) absent on this machine cannot be counted: plan.json reads the
    iterations the finished cell trained from its committed curves, so it is the same bytes on every machine."""
    absent = tmp_path / "absent"
    text = TINY.replace('dataset: "glyphs:{total}:8"', f'dataset: "idx:{absent}"')
    plan = load_plan(declaration(tmp_path, text))
    assert json.loads(plan.to_json(tmp_path / "bench"))["cells"][2]["iterations"] is None  # not yet reported
    tables = tmp_path / "bench" / "glyphs-open" / "reports" / "tables"
    tables.mkdir(parents=True)
    (tables / "curves.csv").write_text("method,iteration,mean,low,high,n\nfixed_adacos,10,0.2,0.1,0.3,2\n"
                                       "fixed_adacos,120,0.4,0.3,0.5,2\nsoftmax,60,0.3,0.2,0.4,2\n")
    facts = json.loads(plan.to_json(tmp_path / "bench"))["cells"]
    assert facts[2]["iterations"] == 120
    assert facts[0]["iterations"] == json.loads(plan.to_json())["cells"][0]["iterations"] > 0  # counted, as before
    # Learning curves name each split: the plan's count is the first split's, though another trained longer.
    (tables / "learning_curves.csv").write_text("method,split,seed,iteration,val,test\nfixed_adacos,0,0,100,0.4,0.3\n"
                                                "fixed_adacos,1,0,140,0.4,0.3\nfixed_adacos,2,0,90,0.4,0.3\n")
    assert json.loads(plan.to_json(tmp_path / "bench"))["cells"][2]["iterations"] == 100


def test_a_committed_cells_curves_give_the_iterations_its_plan_counts_from_its_data():
    """Where a committed cell's source is here, the iterations its first class split trained (read from its learning
    curves, what plan.json keeps where the source is absent) are those its data counts: the other splits, with
    other training classes, train other lengths and are not the plan's."""
    plan = load_plan(REPO / "presets" / "benchmark" / "full.yaml")
    compared = 0
    for cell in plan.cells:
        folder = REPO / "benchmarks" / "cells" / cell.name
        counted = planned_iterations(cell.params)
        if counted is None or not (folder / "reports" / "tables" / "learning_curves.csv").exists():
            continue
        assert trained_iterations(folder, cell.params.data.split_seeds()[0]) == counted, cell.name
        compared += 1
    assert compared >= 10


@pytest.mark.parametrize("text, message", [
    ("configurations: []", "declares no configurations"),
    ("cells: []", "unknown key cells"),
    ("configurations: [{name: Bad_Name, dataset: digits, train_classes: 10}]", "is not a cell name"),
    ("configurations: [{name: a, dataset: digits}]", "give train_classes"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, tuners: [tpe]}]", "not declared under tuners"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, set: {epochs: 3}}]", "not a dotted key"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10}, {name: a, dataset: mnist5k, "
     "train_classes: 10}]", "two cells are named a"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, set: {train.objective: accuracy, "
     "data.protocol: closed}}, {name: b, dataset: mnist5k, train_classes: 10}]", "train.objective differ"),
    ("configurations: [{name: a, dataset: digits, train_classes: 10, set: {train.epochs: 0}}]", "train.epochs"),
])
def test_bad_declarations_name_the_fix(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_plan(declaration(tmp_path, text))


def test_an_unknown_declaration_lists_the_shipped_ones():
    with pytest.raises(ValueError, match="full, levers, quick"):
        load_plan("nonesuch")


# --- the pipelines -------------------------------------------------------------------------------------------


def test_the_benchmark_writes_each_cells_pipeline_and_an_aggregate_reading_committed_files(tmp_path, monkeypatch):
    root = dvc_study(tmp_path / "repo", COPIED, init=False)
    monkeypatch.chdir(root)
    plan = load_plan(declaration(tmp_path, TINY))
    benchmark = write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
    assert set(benchmark.cells) == {"digits-closed", "digits-closed-tpe", "glyphs-open"}
    cell = root / "bench" / "digits-closed"
    assert load_params(str(cell / "params.yaml")) == plan.cells[0].params
    pipeline = yaml.safe_load((cell / "dvc.yaml").read_text())
    assert set(pipeline["stages"]) == set(yaml.safe_load((root / "dvc.yaml").read_text())["stages"])
    assert "../../stages/search.py" in pipeline["stages"]["search"]["do"]["deps"]
    stage = yaml.safe_load((root / "bench" / "dvc.yaml").read_text())["stages"]["aggregate"]
    assert stage["cmd"] == ("python -m stages.benchmark_report --plan plan.json --report-dir ../reports/bench "
                            "--label bench --dpi 60")
    # Only files a finished cell commits, of the cells finished now: none yet.
    assert not [dep for dep in stage["deps"] if dep.split("/")[0] in benchmark.cells]
    assert "plan.json" in stage["deps"] and "../stages/benchmark_report.py" in stage["deps"]
    finished_cell(root / "bench" / "glyphs-open", plan.cells[2].params)
    write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
    stage = yaml.safe_load((root / "bench" / "dvc.yaml").read_text())["stages"]["aggregate"]
    cell_deps = [dep for dep in stage["deps"] if dep.split("/")[0] in benchmark.cells]
    assert cell_deps == [f"glyphs-open/{path.as_posix()}" for path in CELL_INPUTS]  # its report's metrics and tables
    assert all(dep.split("/")[1] == "reports" for dep in cell_deps)  # never data/ or results/
    assert json.loads((root / "bench" / "plan.json").read_text())["title"] == "A tiny benchmark"
    assert "/*/results/trials/" in (root / "bench" / ".gitignore").read_text()
    before = {path: path.read_bytes() for path in (root / "bench").rglob("*") if path.is_file()}
    write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
    assert {path: path.read_bytes() for path in (root / "bench").rglob("*") if path.is_file()} == before
    (root / "mine").mkdir()
    (root / "mine" / "dvc.yaml").write_text("stages: {}\n")
    with pytest.raises(StudiesError, match="was not written by `study benchmark`"):
        write_benchmark(plan, "mine", "reports/bench", log=lambda message: None)
    with pytest.raises(ValueError, match="--out must be a folder inside the repository"):
        write_benchmark(plan, ".", "reports/bench", log=lambda message: None)


# --- which cells are finished ------------------------------------------------------------------------------


def locked_stage_names(plain: dict) -> list[str]:
    """The stages a finished cell's dvc.lock holds: the repository pipeline's, a foreach stage once per item of its
    params (search@arcface), as DVC names them."""
    names = []
    for name, stage in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        if "foreach" in stage:
            section, key = stage["foreach"].removeprefix("${").removesuffix("}").split(".")
            names += [f"{name}@{item}" for item in plain[section][key]]
        else:
            names.append(name)
    return names


def finished_cell(directory: Path, params) -> None:
    """A cell as a fresh clone holds it: params.yaml, dvc.lock and the report, no data/ or results/. Its lock holds
    every stage of the pipeline, each with the deps, params and outs DVC records."""
    directory.mkdir(parents=True, exist_ok=True)
    plain = plain_params(params)
    (directory / "params.yaml").write_text(yaml.safe_dump(plain))
    (directory / "reports").mkdir(exist_ok=True)
    (directory / "reports" / "metrics.json").write_text('{"verdict": {}}\n')
    digest = hashlib.md5((directory / "reports" / "metrics.json").read_bytes()).hexdigest()
    file = [{"path": "elsewhere", "hash": "md5", "md5": "0" * 32, "size": 1}]
    stages = {name: {"cmd": "x", "deps": file, "params": {"params.yaml": {"runs.seeds": plain["runs"]["seeds"]}},
                     "outs": file} for name in locked_stage_names(plain)}
    for name in [name for name in stages if name.startswith("search@")]:
        stages[name]["params"] = {"params.yaml": {"search": plain["search"], "runs.seeds": plain["runs"]["seeds"]}}
    stages["validate"].update(cmd="python -m stages.validate", params={"params.yaml": plain})
    stages["report"].update(cmd="python -m stages.report", params={"params.yaml": {"analysis": plain["analysis"]}},
                            outs=[{"path": "reports/metrics.json", "hash": "md5", "md5": digest, "size": 1}])
    (directory / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}, sort_keys=False))


def test_a_cell_is_finished_only_with_its_current_params_and_its_recorded_report(tmp_path):
    plan = load_plan(declaration(tmp_path, TINY))
    cell = tmp_path / "bench" / "digits-closed"
    finished_cell(cell, plan.cells[0].params)
    assert cell_finished(cell) and cell_finished(cell, plain_params(plan.cells[0].params))
    assert cells_to_run(plan, tmp_path / "bench") == ["digits-closed-tpe", "glyphs-open"]
    assert cells_to_run(plan, tmp_path / "bench", ["digits-closed"]) == [cell.name for cell in plan.cells]
    with pytest.raises(ValueError, match="no such cell"):
        cells_to_run(plan, tmp_path / "bench", ["nonesuch"])
    # Another plan for the same cell (more trials): its report is not this study's.
    more = plan.cells[0].params.replace(search=plan.cells[0].params.search.replace(n_trials=3))
    assert not cell_finished(cell, plain_params(more))
    (cell / "reports" / "metrics.json").write_text('{"verdict": {"changed": true}}\n')  # not the locked report
    assert not cell_finished(cell)
    (cell / "dvc.lock").unlink()
    assert not cell_finished(cell)


def frozen_flags(pipeline: Path) -> set:
    """`frozen` of every stage of a generated pipeline (None where it is not set)."""
    stages = yaml.safe_load(pipeline.read_text())["stages"].values()
    return {stage.get("do", stage).get("frozen") for stage in stages}


def test_the_benchmark_is_its_own_dvc_project_and_freezes_its_finished_cells(tmp_path, monkeypatch):
    root = dvc_study(tmp_path / "repo", COPIED, init=False)
    monkeypatch.chdir(root)
    plan = load_plan(declaration(tmp_path, TINY))
    finished_cell(root / "bench" / "digits-closed", plan.cells[0].params)
    benchmark = write_benchmark(plan, "bench", "reports/bench", log=lambda message: None)
    # Its own DVC project, which the repository's DVC leaves out when it collects its pipelines.
    assert benchmark.project.root == root / "bench" and (root / "bench" / ".dvc" / "config").is_file()
    assert benchmark.project.repository == root
    # A finished cell is frozen: DVC keeps what its dvc.lock records, as `study benchmark --list` does.
    assert frozen_flags(benchmark.cells["digits-closed"]) == {True}
    assert frozen_flags(benchmark.cells["glyphs-open"]) == {None}
    # --rerun hands it back to DVC.
    write_benchmark(plan, "bench", "reports/bench", ["digits-closed"], log=lambda message: None)
    assert frozen_flags(benchmark.cells["digits-closed"]) == {None}


# --- a tiny benchmark end to end through DVC --------------------------------------------------------------------


def ran_stages(output: str) -> set[str]:
    """The stages DVC ran, by DVC's name."""
    return {line.split("'")[1] for line in output.splitlines() if "Running stage '" in line}


def restored_stages(output: str) -> set[str]:
    """The stages DVC restored from its run cache instead of running them."""
    return {line.split("'")[1] for line in output.splitlines() if "is cached - skipping run" in line}


def dvc_status_json(project: Path, *targets: str) -> dict:
    """`dvc status --json` in the DVC project `project`: every stage DVC would run, with why."""
    done = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", *targets], cwd=project,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_tiny_benchmark_runs_through_dvc_resumes_and_never_retrains_a_finished_cell(tmp_path, monkeypatch, capsys):
    """SLOW (a few minutes on 2 cores): `study benchmark` runs two tiny cells (digits closed with ArcFace and CosFace,
    its TPE variant) through `dvc repro`, then the aggregate; then a user's own folder joins as a second source.
    (Each stage is a process: another cell would add its seven stages' start-up, and no path of its own.)"""
    root = dvc_study(tmp_path / "repo", COPIED)
    plan = declaration(tmp_path, "# the team's cells\n" + TINY_DIGITS)
    arguments = ["benchmark", "--plan", str(plan), "--out", "bench", "--report-dir", "reports/bench"]
    monkeypatch.chdir(root)
    assert main(arguments) == 0, capsys.readouterr().err
    output = capsys.readouterr().err
    ran = ran_stages(output)
    names = ("digits-closed", "digits-closed-tpe")
    assert "aggregate" in ran and {f"{cell}/dvc.yaml:report" for cell in names} <= ran  # in bench/, its DVC project
    # The TPE cell's prepared data and Fixed AdaCos runs are the random cell's, restored from DVC's run cache
    # (whichever of the two ran first trained them).
    reused = {stage.split(":")[1] for stage in restored_stages(output)}
    assert {"prepare", "runs@fixed_adacos"} <= reused
    report = root / "reports" / "bench"
    assert "## The answer in a minute" in (report / "report.md").read_text()
    cells = pd.read_csv(report / "tables" / "cells.csv")
    assert set(cells["cell"]) == set(names)
    assert np.isfinite(cells["difference"]).all() and (cells["cell_seconds"] > 0).all()
    assert set(cells.loc[cells["cell"] == "digits-closed", "loss"]) == {"arcface", "cosface"}
    tuners = pd.read_csv(report / "tables" / "tuners.csv")
    assert tuners["tuner"].tolist() == ["random", "tpe"]
    # Compared at equal trials and equal training iterations, never at device-seconds.
    assert np.isfinite(tuners[["test_at_budget", "test_at_iterations", "iterations_budget"]]).all().all()
    written = report / "report.md"
    before = written.read_bytes()

    # (1) Again: nothing is out of date, nothing runs. Every cell is finished, by `study benchmark --list` and by DVC
    # (its stages frozen), and the repository's own `dvc status` knows nothing of the cells.
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == set()
    assert main([*arguments, "--list"]) == 0
    assert all(line.endswith("finished") for line in capsys.readouterr().out.splitlines()[1:])
    assert dvc_status_json(root / "bench") == {}
    assert not any("dvc.yaml:" in stage for stage in dvc_status_json(root))

    # (2) A fresh clone: only what git holds (no data/, results/ or DVC cache). Every cell is finished, so nothing is
    # retrained, and the aggregate (up to date) does not run either.
    for cell in names:
        for folder in ("data", "results/search", "results/runs", "results/evaluation", "results/trials"):
            shutil.rmtree(root / "bench" / cell / folder, ignore_errors=True)
    shutil.rmtree(root / "bench" / ".dvc" / "cache")
    assert main(arguments) == 0
    output = capsys.readouterr().err
    assert ran_stages(output) == set() and "finished, kept as committed" in output
    assert written.read_bytes() == before
    assert changed_studies(dvc_status_json(root / "bench")) == set()  # only their training outputs are missing

    # (3) A report change reaches the aggregate alone, from the committed files.
    (root / "bench" / "plan.json").write_text((root / "bench" / "plan.json").read_text())  # unchanged bytes
    code = root / "study" / "benchmark" / "report.py"
    code.write_text(code.read_text() + "# a comment: the aggregate's code changed\n")
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == {"aggregate"}

    # (4) A user's own data joins as a cell of its own source: `study benchmark --add NAME --set data.dataset=...`
    # gains the configuration (the declaration's comments kept), runs that cell alone through DVC, and pools it.
    folder = image_folder(tmp_path / "mine")
    assert main([*arguments, "--add", "my-parts", "--set", f"data.dataset=folder:{folder}",
                 "--set", "data.protocol=closed", "--set", "data.image_size=8",
                 "--set", "data.fractions=[0.5, 0.25, 0.25]"]) == 0, capsys.readouterr().err
    output = capsys.readouterr().err
    assert "added my-parts" in output and plan.read_text().startswith("# the team's cells")
    assert {stage.split("/")[0] for stage in ran_stages(output) if "/" in stage} == {"my-parts"}
    cells = pd.read_csv(report / "tables" / "cells.csv")
    assert set(cells["cell"]) == {*names, "my-parts"}
    assert cells.loc[cells["cell"] == "my-parts", "source"].unique().tolist() == ["mine"]  # its own source
    assert cells.loc[cells["cell"] == "my-parts", "train_classes"].unique().tolist() == [8]
    # Declared once: the same name again is refused, and the next run finds every cell finished.
    assert main([*arguments, "--add", "my-parts", "--set", f"data.dataset=folder:{folder}"]) == 2
    assert "already declares a configuration of that name" in capsys.readouterr().err
    assert main(arguments) == 0
    assert ran_stages(capsys.readouterr().err) == set()

    # (5) A cell whose params change is no longer finished: it is handed back to DVC.
    changed = plan.read_text().replace("search.repeats: 2,", "search.repeats: 3,")
    assert changed != plan.read_text()
    plan.write_text(changed)
    assert main([*arguments, "--list"]) == 0
    listing = capsys.readouterr().out
    assert "to run" in listing.split("digits-closed-tpe")[1].splitlines()[0], listing
    assert all("finished" in listing.split(f"{cell} ")[1].splitlines()[0] for cell in ("digits-closed", "my-parts"))
    # Written out (as `study benchmark` does before it runs DVC), DVC says the same: the cell is no longer frozen.
    write_benchmark(load_plan(plan), "bench", "reports/bench", log=lambda message: None)
    assert changed_studies(dvc_status_json(root / "bench")) == {"digits-closed-tpe", "."}  # and the aggregate


def image_folder(root: Path, classes: int = 8, per_class: int = 24) -> Path:
    """A user's own images, one sub-folder per class: scikit-learn's digits as 8×8 PNGs."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    for label in range(classes):
        folder = root / f"class{label}"
        folder.mkdir(parents=True)
        for k, image in enumerate(digits.images[digits.target == label][:per_class]):
            Image.fromarray((image * 16).astype(np.uint8)).save(folder / f"{k}.png")
    return root


