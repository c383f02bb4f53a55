"""The benchmark's aggregate against what a user or a machine can do to it: a committed table cut, emptied or given a
NaN is refused in one line naming the cell, the file and the fix, never pooled or left out in silence; a folder
cell whose images changed is named stale and runs again; an aggregate stopped midway leaves the committed report as
it was; one configuration gives a report saying it cannot be pooled across sources; the same cells give the same
report, byte for byte, whatever the plan's order and the interpreter's hash seed."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import test_benchmark_report as synthetic
from study.benchmark import aggregate_benchmark, cell_finished, load_plan, write_benchmark
from study.benchmark.fingerprint import (FINGERPRINT_FILE, CellReportError, check_cell, dvc_md5, report_as_locked,
                                        write_fingerprint)
from study.benchmark.plan import add_configuration
from study.benchmark.report import read_cells
from study.interruptions import Interrupted
from study.report.writer import STAGING
from study.benchmark.pipelines import plain_params
from test_benchmark import COPIED, TINY, declaration, dvc_study, frozen_flags, image_folder, locked_stage_names

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "benchmarks" / "cells"
# Three committed cells of three sources: enough for the pool to predict a new source.
THREE = ("digits-closed", "glyphs-open-c50", "strokes-open-c100")


def committed_cells(root: Path, names=THREE) -> Path:
    """Committed cells as a fresh clone holds them (reports/, dvc.lock, params.yaml), in a benchmark of their own
    under `root`; its plan.json."""
    plan = json.loads((COMMITTED / "plan.json").read_text())
    plan["cells"] = [cell for cell in plan["cells"] if cell["name"] in names]
    for name in names:
        shutil.copytree(COMMITTED / name / "reports", root / name / "reports")
        for file in ("dvc.lock", "params.yaml"):
            shutil.copy(COMMITTED / name / file, root / name / file)
    (root / "plan.json").write_text(json.dumps(plan))
    return root / "plan.json"


def read_plan(plan: Path) -> dict:
    return json.loads(plan.read_text())


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path relative to it, with its bytes."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


# --- stale or corrupt committed cells -----------------------------------------------------------------------------


def cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def nan_confidence(path: Path) -> None:
    text = path.read_text()
    assert '"confidence": 0.95' in text
    path.write_text(text.replace('"confidence": 0.95', '"confidence": NaN', 1))


def emptied(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize("file, damage, said", [
    ("reports/tables/differences.csv", cut_in_half, "is not what"),
    ("reports/metrics.json", nan_confidence, "NaN where a number must be"),
    ("reports/tables/run_scores.csv", emptied, "is empty"),
], ids=["differences.csv cut in half", "NaN in metrics.json", "empty run_scores.csv"])
def test_a_damaged_committed_table_is_refused_naming_the_cell_the_file_and_the_fix(tmp_path, file, damage, said):
    plan = committed_cells(tmp_path)
    damage(tmp_path / "glyphs-open-c50" / file)
    with pytest.raises(CellReportError) as refused:
        read_cells(read_plan(plan), tmp_path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("cell glyphs-open-c50: ") and said in message
    assert str(tmp_path / "glyphs-open-c50" / file) in message
    assert f"`git checkout -- {tmp_path / 'glyphs-open-c50' / 'reports'}`" in message
    assert "`study benchmark --rerun glyphs-open-c50`" in message


def test_the_aggregate_stage_refuses_a_damaged_cell_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from stages.benchmark_report import main

    committed_cells(tmp_path / "cells")
    cut_in_half(tmp_path / "cells" / "digits-closed" / "reports" / "tables" / "differences.csv")
    monkeypatch.chdir(tmp_path / "cells")
    monkeypatch.setattr(sys, "argv", ["benchmark_report", "--plan", "plan.json", "--report-dir", "../report",
                                      "--label", "benchmarks/cells"])
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == (
        "benchmark report not written: cell digits-closed: benchmarks/cells/digits-closed/reports/tables/"
        "differences.csv is not what benchmarks/cells/digits-closed/reports/fingerprint.json records; `git checkout "
        "-- benchmarks/cells/digits-closed/reports` restores its committed report, or `study benchmark --rerun "
        "digits-closed` remakes it from the cell's results")
    assert not (tmp_path / "report").exists()


def test_a_missing_fingerprint_names_report_only_which_writes_it_only_for_the_tables_dvc_locked(tmp_path):
    plan = committed_cells(tmp_path)
    cell = tmp_path / "strokes-open-c100"
    (cell / FINGERPRINT_FILE).unlink()
    with pytest.raises(CellReportError, match=r"fingerprint.json is missing or unreadable .*`study benchmark "
                                              r"--report-only` \(re\)writes the fingerprint"):
        read_cells(read_plan(plan), tmp_path)
    assert write_fingerprint(cell)  # what `study benchmark --report-only` does for a finished cell
    assert (cell / FINGERPRINT_FILE).read_bytes() == (COMMITTED / cell.name / FINGERPRINT_FILE).read_bytes()
    assert set(read_cells(read_plan(plan), tmp_path)["cell"]) == set(THREE)
    # A table cut since its report stage wrote it is never vouched for: the old fingerprint stays, the cell refused.
    cut_in_half(cell / "reports" / "tables" / "landscape.csv")
    assert not write_fingerprint(cell)
    assert (cell / FINGERPRINT_FILE).read_bytes() == (COMMITTED / cell.name / FINGERPRINT_FILE).read_bytes()
    with pytest.raises(CellReportError, match="landscape.csv is not what"):
        check_cell(cell)


@pytest.mark.slow  # every committed cell's report hashed: about 10 s
def test_every_committed_cell_is_whole_and_its_fingerprint_is_its_tables_and_its_locked_data():
    plan = read_plan(COMMITTED / "plan.json")
    finished = [COMMITTED / cell["name"] for cell in plan["cells"] if cell_finished(COMMITTED / cell["name"])]
    assert len(finished) >= 20
    for cell in finished:
        check_cell(cell)
        assert report_as_locked(cell)  # the folders' hashes computed here are those DVC recorded
        recorded = json.loads((cell / FINGERPRINT_FILE).read_text())
        tables = sorted((cell / "reports" / "tables").glob("*.csv"))
        assert recorded["tables"] == {path.relative_to(cell).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
                                      for path in [cell / "reports" / "metrics.json", *tables]}
        prepare = yaml.safe_load((cell / "dvc.lock").read_text())["stages"]["prepare"]
        source = next(dep["md5"] for dep in prepare["deps"] if dep["path"] == "data/source")
        assert recorded["data"] == {"prepared": prepare["outs"][0]["md5"], "source": source}


def test_a_folders_hash_is_the_one_dvc_records(tmp_path):
    """A folder cell is stale when its images hash otherwise than its dvc.lock recorded: the hash is computed as DVC's
    own code computes it (dvc_data's build), names that sort otherwise as text and by folder included."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    folder = tmp_path / "images"
    for name in ("class1/0.png", "class1-b/0.png", "class10/.hidden", "a/b/c.png"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(name.encode())
    fs = LocalFileSystem()
    for path in (folder, folder / "class1" / "0.png"):
        _, _, built = build(HashFileDB(fs, str(tmp_path / "odb")), str(path), fs, "md5", dry_run=True)
        assert dvc_md5(path) == built.hash_info.value


def make_folder_cell(cell: Path, folder: Path, params) -> None:
    """A cell of `folder`'s images as its own stages leave it finished: its report (synthetic numbers), data/source
    linked to the folder by its validate stage, and a dvc.lock holding every stage of its pipeline, recording the
    images it was prepared from and the report its report stage wrote."""
    scores = synthetic.method_scores(0.6, {"arcface_tuned": 0.01}, 5)
    rng = np.random.default_rng(5)
    landscape = pd.DataFrame([row for split in range(synthetic.SPLITS)
                              for row in synthetic.search_trials("arcface", split, 8, 200, rng)])
    synthetic.write_cell(cell, scores, landscape, curve=synthetic.linear_curve(0.8, 0.01, 8))
    (cell / FINGERPRINT_FILE).unlink()  # `study benchmark` writes it once it finds the cell finished
    (cell / "data").mkdir()
    (cell / "data" / "source").symlink_to(folder, target_is_directory=True)
    file = [{"path": "elsewhere", "hash": "md5", "md5": "0" * 32}]
    stages = {name: {"cmd": "x", "deps": file, "params": {"params.yaml": {"model": plain_params(params)["model"]}},
                     "outs": file} for name in locked_stage_names(plain_params(params))}
    stages["prepare"].update(cmd="python -m stages.prepare",
                             deps=[{"path": "data/source", "hash": "md5", "md5": dvc_md5(folder)}],
                             outs=[{"path": "data/prepared", "hash": "md5", "md5": "0" * 32 + ".dir"}])
    stages["report"].update(cmd="python -m stages.report",
                            outs=[{"path": path, "hash": "md5", "md5": dvc_md5(cell / path)}
                                  for path in ("reports/metrics.json", "reports/tables")])
    (cell / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))


def test_a_folder_cell_whose_images_changed_is_named_stale_and_runs_again_instead_of_being_pooled(tmp_path,
                                                                                                  monkeypatch):
    root = dvc_study(tmp_path / "repo", COPIED, init=False)
    monkeypatch.chdir(root)
    folder = image_folder(tmp_path / "mine", classes=8, per_class=12)
    declared = declaration(tmp_path, TINY)
    add_configuration(declared, "my-parts", [f"data.dataset=folder:{folder}", "data.image_size=16",
                                             "train.batch_size=16"])
    plan = load_plan(declared)
    cell = root / "bench" / "my-parts"
    make_folder_cell(cell, folder, plan.cells[-1].params)
    said = []
    write_benchmark(plan, "bench", "reports/bench", log=said.append)
    assert cell_finished(cell) and json.loads((cell / FINGERPRINT_FILE).read_text())["data"]["source"] == \
        dvc_md5(folder)
    assert not [line for line in said if "stale" in line]
    # One image redrawn in place: the cell's results were computed from other images.
    images = sorted(folder.rglob("*.png"))
    images[0].write_bytes(images[-1].read_bytes())
    said.clear()
    benchmark = write_benchmark(plan, "bench", "reports/bench", log=said.append)
    assert not cell_finished(cell)
    stale = [line for line in said if line.startswith("cell my-parts:")]
    assert len(stale) == 1 and f"the images of folder:{folder} changed" in stale[0] and "stale" in stale[0] \
        and "`study benchmark` runs it again" in stale[0]
    assert frozen_flags(benchmark.cells["my-parts"]) == {None}  # handed back to DVC, which prepares it again
    deps = yaml.safe_load(benchmark.aggregate.read_text())["stages"]["aggregate"]["deps"]
    assert not [dep for dep in deps if dep.startswith("my-parts/")]  # the aggregate does not pool it


# --- an aggregate stopped midway ----------------------------------------------------------------------------------


def synthetic_cells(root: Path, names) -> tuple[Path, dict]:
    """The named cells of test_benchmark_report's synthetic benchmark, finished under `root`; its plan.json and each
    cell's scores."""
    return synthetic.synthetic_benchmark(root, [cell for cell in synthetic.CELLS if cell[0] in names])


SMALL = ("digits-closed", "mnist-closed")  # two cells: no coverage simulated, a quick aggregate


def without_a_cell(plan: Path) -> None:
    """The plan less its last cell: every table of the next report differs from the last one's."""
    declared = read_plan(plan)
    declared["cells"] = declared["cells"][:-1]
    plan.write_text(json.dumps(declared))


def test_an_aggregate_stopped_late_leaves_the_committed_report_as_it_was(tmp_path, monkeypatch):
    import study.benchmark.report as report_module

    plan, _ = synthetic_cells(tmp_path / "cells", SMALL)
    report = tmp_path / "report"
    aggregate_benchmark(plan, report, label="cells")
    committed = files_of(report)
    without_a_cell(plan)

    def stopped(*args, **kwargs):  # SIGTERM as the last file is rendered, every other one written
        raise Interrupted("stopped by SIGTERM", signal.SIGTERM)

    monkeypatch.setattr(report_module, "render_html", stopped)
    with pytest.raises(Interrupted) as interruption:
        aggregate_benchmark(plan, report, label="cells")
    assert files_of(report) == committed and not (report / STAGING).exists()
    assert interruption.value.kept == f"nothing in {report} was changed"


@pytest.mark.slow  # two aggregates, one in a process of its own: about 10 s
def test_sigterm_ends_the_aggregate_in_one_line_saying_nothing_was_changed(tmp_path):
    plan, _ = synthetic_cells(tmp_path / "cells", SMALL)
    report = tmp_path / "report"
    aggregate_benchmark(plan, report, label="cells")
    committed = files_of(report)
    cells_csv = (report / "tables" / "cells.csv").stat().st_ino
    without_a_cell(plan)
    command = ["-m", "stages.benchmark_report", "--plan", str(plan), "--report-dir", str(report), "--label", "cells"]
    process = subprocess.Popen([sys.executable, *command], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    # Once it writes its report (into its staging folder; before, into the committed one's tables).
    while (not (report / STAGING).exists() and (report / "tables" / "cells.csv").stat().st_ino == cells_csv
           and process.poll() is None and time.monotonic() < deadline):
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (f"stopped by SIGTERM: nothing in {report} was changed; run `python "
                                               f"{' '.join(command)}` again to resume")
    assert files_of(report) == committed and not (report / STAGING).exists()


def test_dvc_leaves_the_committed_report_in_place_while_the_aggregate_runs(tmp_path, monkeypatch):
    """DVC deletes an out that does not persist before it runs the stage's command: the aggregate's outs persist, and
    its own swap replaces them whole."""
    root = dvc_study(tmp_path / "repo", COPIED, init=False)
    monkeypatch.chdir(root)
    benchmark = write_benchmark(load_plan(declaration(tmp_path, TINY)), "bench", "reports/bench",
                                log=lambda message: None)
    for pipeline in (benchmark.aggregate, COMMITTED / "dvc.yaml"):
        stage = yaml.safe_load(pipeline.read_text())["stages"]["aggregate"]
        assert [options for out in stage["outs"] for options in out.values()] == \
            [{"cache": False, "persist": True}] * 7
    committed = yaml.safe_load((COMMITTED / "dvc.yaml").read_text())["stages"]["aggregate"]
    finished = [cell["name"] for cell in read_plan(COMMITTED / "plan.json")["cells"]
                if cell_finished(COMMITTED / cell["name"])]
    assert all(f"{name}/reports/fingerprint.json" in committed["deps"] for name in finished)


# --- one configuration ----------------------------------------------------------------------------------------------


def test_one_configuration_gives_a_report_saying_it_cannot_be_pooled_across_sources(tmp_path):
    from study.benchmark.card import pct, pct_interval

    plan, made = synthetic_cells(tmp_path / "cells", ("digits-closed",))
    written = aggregate_benchmark(plan, tmp_path / "report", label="cells")
    markdown = written["report.md"].read_text()
    card = synthetic.section(markdown, "The answer in a minute")
    assert "these cells come from one data source (digits), so nothing predicts new data." in card
    hand = synthetic.hand_difference(made["digits-closed"]["scores"], "arcface_tuned")
    assert (f"Here tuned ArcFace − Fixed AdaCos is {pct(hand['relative'])} "
            f"{pct_interval(hand['low'] / hand['reference'], hand['high'] / hand['reference'])} of its score "
            "(digits-closed, converged).") in card
    assert "These cells come from one data source only, so nothing is pooled across sources" in \
        synthetic.section(written["details.md"].read_text(), "The evidence behind the answer")


def test_one_configuration_whose_only_finished_cell_is_its_longer_one_is_reported(tmp_path):
    plan, _ = synthetic_cells(tmp_path / "cells", ("mnist-pairs-open-c50-long",))
    written = aggregate_benchmark(plan, tmp_path / "report", label="cells")
    markdown = written["report.md"].read_text()
    assert "one data source (mnist)" in synthetic.section(markdown, "The answer in a minute")
    assert "The short regime: 0 configurations from 0 independent sources" in \
        synthetic.section(written["details.md"].read_text(), "The evidence behind the answer")


def test_a_plan_with_no_finished_cell_is_refused_in_one_line(tmp_path):
    plan, _ = synthetic_cells(tmp_path / "cells", ("digits-closed",))
    shutil.rmtree(tmp_path / "cells" / "digits-closed")
    with pytest.raises(CellReportError, match=r"^no cell of .*plan.json is finished yet, so there is nothing to pool; "
                                              r"`study benchmark` runs them"):
        aggregate_benchmark(plan, tmp_path / "report")
    assert not (tmp_path / "report").exists()


# --- the same cells, the same report ----------------------------------------------------------------------------


MIXED = ("digits-closed", "digits-closed-tpe-median", "mnist-pairs-open-c50", "mnist-pairs-open-c50-long",
         "strokes-open-c100")


def reversed_plan(plan: Path) -> Path:
    """The same cells declared in the opposite order, beside `plan`."""
    declared = read_plan(plan)
    declared["cells"] = declared["cells"][::-1]
    path = plan.with_name("reversed.json")
    path.write_text(json.dumps(declared))
    return path


def test_the_cells_are_read_in_one_order_whatever_the_plans(tmp_path):
    plan, _ = synthetic_cells(tmp_path, MIXED)
    rows = read_cells(read_plan(plan), tmp_path)
    assert list(dict.fromkeys(rows["cell"])) == ["digits-closed", "digits-closed-tpe-median", "mnist-pairs-open-c50",
                                                 "mnist-pairs-open-c50-long", "strokes-open-c100"]
    pd.testing.assert_frame_equal(read_cells(read_plan(reversed_plan(plan)), tmp_path), rows)


@pytest.mark.slow  # two aggregates, one in a process of its own: about 15 s
def test_the_same_cells_give_the_same_report_byte_for_byte_whatever_the_plans_order_and_hash_seed(tmp_path):
    plan, _ = synthetic_cells(tmp_path / "cells", MIXED)
    first = aggregate_benchmark(plan, tmp_path / "first", label="cells")
    subprocess.run([sys.executable, "-m", "stages.benchmark_report", "--plan", str(reversed_plan(plan)), "--report-dir",
                    str(tmp_path / "second"), "--label", "cells"], cwd=REPO, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "12345"})
    again = files_of(tmp_path / "second")
    assert {"tables/cells.csv", "tables/longer.csv", "tables/tuners.csv", "report.md"} <= set(again)
    assert files_of(tmp_path / "first") == again
    assert {path.relative_to(tmp_path / "first").as_posix() for path in first.values()} <= set(again)
