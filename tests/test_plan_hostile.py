"""The benchmark's plan and its workers against hostile input: a refused `study benchmark --add` leaves the plan's
bytes as they were, a folder given from the current folder is made absolute, STUDY_ALLOW_LARGE takes only 1, a
`study worker --cells` serves no cell unchecked and no folder outside the benchmark, says when every cell is
finished, and a finished cell whose folder lost a class, a truncated plan.json or dvc.lock each get one line naming
the file and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import stages.prepare
import stages.validate
from study.benchmark.pipelines import cell_finished
from study.benchmark.plan import add_configuration, load_plan
from study.cli import main
from study.presets import write_params

from conftest import REPO
from test_bad_inputs import params_text
from test_benchmark import TINY, declaration, finished_cell, image_folder

BENCHMARK = ["benchmark", "--out", "bench", "--report-dir", "reports/bench"]


@pytest.fixture
def plan(tmp_path, monkeypatch) -> Path:
    """A tiny benchmark's declaration, with a comment and hand-made line breaks an edit would lose, in the current
    folder (a DVC project's root, as `study benchmark` needs)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".dvc").mkdir()
    return declaration(tmp_path, "# the team's cells\n" + TINY)


def benchmark(plan: Path, *arguments: str) -> int:
    return main([*BENCHMARK, "--plan", str(plan), *arguments])


# --- `study benchmark --add` checks first, then writes ----------------------------------------------------------


@pytest.mark.parametrize("name, assignments, said", [
    ("one", ["data.protocol=closed"], "C = 1 training classes is too few"),
    ("a" * 300, [], "300 characters long"),
    ("huge", ["search.n_trials=1000000000"], "search.n_trials: the study would make 2,000,000,00"),
])
def test_a_refused_add_leaves_the_plan_byte_for_byte_and_every_later_command_works(plan, tmp_path, capsys, name,
                                                                                  assignments, said):
    folder = image_folder(tmp_path / "images", classes=1 if name == "one" else 8)
    before = plan.read_bytes()
    assert benchmark(plan, "--add", name, "--set", f"data.dataset=folder:{folder}", "--set", "data.image_size=8",
                     *(argument for assignment in assignments for argument in ("--set", assignment))) == 2
    error = capsys.readouterr().err
    assert said in error and error.count("\n") <= 2 + (name == "huge"), error
    assert plan.read_bytes() == before
    assert benchmark(plan, "--list") == 0, capsys.readouterr().err
    entry = add_configuration(plan, "mine", [f"data.dataset=folder:{image_folder(tmp_path / 'good')}",
                                             "data.image_size=8"])
    assert entry["name"] == "mine" and [cell.name for cell in load_plan(plan).cells][-1] == "mine"


def test_a_folder_given_from_the_current_folder_is_declared_by_its_absolute_path(plan, tmp_path, monkeypatch):
    image_folder(tmp_path / "images")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a cell reads its data from bench/<cell>/, not from here
    entry = add_configuration(plan, "mine", ["data.dataset=folder:../images", "data.image_size=8"])
    assert entry["dataset"] == f"folder:{tmp_path / 'images'}"
    assert load_plan(plan).cells[-1].params.data.dataset == f"folder:{tmp_path / 'images'}"
    # Written by hand, a relative folder is refused with its absolute path as the fix.
    relative = TINY + "  - {name: theirs, dataset: 'compose:2:4:folder:data/x', train_classes: 6}\n"
    with pytest.raises(ValueError, match=r"configurations\[2\].dataset: compose:2:4:folder:data/x names a folder "
                                         r"relative .* absolute path, e\.g\. compose:2:4:folder:/"):
        load_plan(declaration(tmp_path, relative))


# --- STUDY_ALLOW_LARGE takes 1 and nothing else ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["false", "no", "off", "0.0", "00", " 0", "0", "yes", "true"])
def test_only_study_allow_large_1_allows_a_study_beyond_the_bound(tmp_path, monkeypatch, value):
    (tmp_path / "params.yaml").write_text(params_text({"search.n_trials": 10**9}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STUDY_ALLOW_LARGE", value)
    with pytest.raises(SystemExit) as refused:
        stages.validate.main()
    assert f"STUDY_ALLOW_LARGE: {value!r} in the environment is not a value it takes" in str(refused.value)
    assert "STUDY_ALLOW_LARGE=1 allows a study beyond" in str(refused.value)
    assert not (tmp_path / "results" / "validated.txt").exists()


def test_a_study_beyond_the_bound_that_study_allow_large_1_lets_through_says_so(tmp_path, monkeypatch, capsys):
    (tmp_path / "params.yaml").write_text(params_text({"search.n_trials": 10**9}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STUDY_ALLOW_LARGE", "1")
    stages.validate.main()
    said = capsys.readouterr().out
    assert said.startswith("params.yaml passed; the study makes 3,000,000,012 trainings") and said.rstrip().endswith(
        "beyond validate's bound of 100,000 trainings or 1,000,000,000 iterations (docs/configuration.md), "
        "allowed by STUDY_ALLOW_LARGE=1"), said


# --- `study worker --cells` --------------------------------------------------------------------------------------


def written_benchmark(plan: Path) -> tuple[Path, list]:
    """bench/ as `study benchmark` leaves it for workers: plan.json, and each cell's params.yaml."""
    declared = load_plan(plan)
    cells, bench = declared.cells, plan.parent / "bench"
    bench.mkdir()
    (bench / "plan.json").write_text(declared.to_json())
    for cell in cells:
        (bench / cell.name).mkdir()
        write_params(cell.params, bench / cell.name / "params.yaml", cell.origin)
    return bench, cells


def worker(*arguments: str) -> int:
    return main(["worker", "--cells", "bench", "--threads", "1", *arguments])


def test_a_worker_serves_no_cell_whose_params_validate_would_refuse(plan, capsys):
    bench, cells = written_benchmark(plan)
    for cell in cells[1:]:  # finished: not to be served
        finished_cell(bench / cell.name, cell.params)
    first = cells[0]
    edited = first.params.replace(search=first.params.search.replace(n_trials=10**9))
    write_params(edited, bench / first.name / "params.yaml", first.origin)
    (bench / first.name / "data" / "prepared").mkdir(parents=True)
    assert worker() == 2
    said = capsys.readouterr().err
    assert f"cell {first.name}: skipped, its params.yaml has problems" in said
    assert "search.n_trials: the study would make" in said and "serving" not in said
    assert not (bench / first.name / "results" / "trials" / "journal.log").exists()


def test_a_worker_refuses_a_plan_whose_cell_lies_outside_the_benchmark(plan, capsys):
    bench, _ = written_benchmark(plan)
    plan = json.loads((bench / "plan.json").read_text())
    plan["cells"][0]["name"] = "../../../x"
    (bench / "plan.json").write_text(json.dumps(plan))
    assert worker() == 2
    said = capsys.readouterr().err
    assert "bench/plan.json names a cell '../../../x'" in said and "would lead outside bench" in said, said


def test_a_worker_says_at_once_that_every_cell_is_finished(plan, capsys):
    bench, cells = written_benchmark(plan)
    for cell in cells:
        finished_cell(bench / cell.name, cell.params)
    assert worker() == 0
    assert capsys.readouterr().err == "every one of the 3 cells in bench is finished: nothing to serve\n"


def test_a_truncated_plan_json_is_named_with_the_fix(plan, capsys):
    bench, _ = written_benchmark(plan)
    text = (bench / "plan.json").read_text()
    (bench / "plan.json").write_text(text[:len(text) // 2])
    assert worker() == 2
    said = capsys.readouterr().err
    assert said.startswith("study: error: bench/plan.json is not a whole benchmark plan") and said.count("\n") == 1
    assert "`git checkout -- bench/plan.json` restores the committed one" in said


def truncated_lock(directory: Path) -> Path:
    """A finished cell's dvc.lock cut in the middle of a key, as a copy or a checkout stopped short leaves it."""
    lock = directory / "dvc.lock"
    text = lock.read_text()
    lock.write_text(text[:text.index("outs:") + 2])
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(lock.read_text())
    return lock


def emptied_lock(directory: Path) -> Path:
    """A cell's dvc.lock at 0 bytes, as a kill while DVC rewrites it leaves it (DVC then says only that a key is
    missing)."""
    lock = directory / "dvc.lock"
    lock.write_text("")
    return lock


@pytest.mark.parametrize("command", ["list", "worker"])
@pytest.mark.parametrize("damage, reason", [(truncated_lock, "could not find expected ':'"),
                                            (emptied_lock, "it is empty")])
def test_a_damaged_dvc_lock_is_named_with_the_fix(plan, capsys, command, damage, reason):
    bench, cells = written_benchmark(plan)
    finished_cell(bench / cells[0].name, cells[0].params)
    lock = damage(bench / cells[0].name)
    damaged = lock.read_text()
    assert (benchmark(plan, "--list") if command == "list" else worker()) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"study: error: bench/{cells[0].name}/dvc.lock is not a whole dvc.lock ({reason}"), said
    assert said.count("\n") == 1, said
    # The fix that works for a running cell's lock, never committed yet, comes first.
    assert "delete it and its stages rerun, taking the trials its storage keeps" in said
    assert f"`git checkout -- bench/{cells[0].name}/dvc.lock` restores a committed one" in said
    assert said.index("delete it") < said.index("git checkout")
    assert lock.read_text() == damaged  # nothing rewritten


# --- a lock judged by the stages it holds (issue 55's W10) ---------------------------------------------------------


def cut_inside_its_first_stage(directory: Path) -> Path:
    """A finished cell's dvc.lock cut inside its validate stage, after its deps, where it still parses: what the
    first 700 bytes of a committed cell's lock are (its validate stage's cmd and deps, no params or outs)."""
    lock = directory / "dvc.lock"
    text = lock.read_text()
    lock.write_text(text[:text.index("    params:")])
    assert list(yaml.safe_load(lock.read_text())["stages"]) == ["validate"]
    return lock


def cut_after_its_first_stage(directory: Path) -> Path:
    """The same lock cut between two stages: its validate stage whole, nothing after it."""
    lock = directory / "dvc.lock"
    text = lock.read_text()
    lock.write_text(text[:text.index("  prepare:")])
    assert list(yaml.safe_load(lock.read_text())["stages"]) == ["validate"]
    return lock


def finished_with_its_pipeline(bench: Path, cell) -> Path:
    """A finished cell with the repository's pipeline as its dvc.yaml (the stages `study benchmark` writes)."""
    finished_cell(bench / cell.name, cell.params)
    shutil.copy(REPO / "dvc.yaml", bench / cell.name / "dvc.yaml")
    assert cell_finished(bench / cell.name)  # every stage of its dvc.yaml held, each whole
    return bench / cell.name


@pytest.mark.parametrize("command", ["list", "worker"])
def test_a_lock_cut_inside_a_stage_is_named_with_the_fix_not_listed_to_run(plan, capsys, command):
    bench, cells = written_benchmark(plan)
    lock = cut_inside_its_first_stage(finished_with_its_pipeline(bench, cells[0]))
    damaged = lock.read_text()
    assert (benchmark(plan, "--list") if command == "list" else worker()) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"study: error: bench/{cells[0].name}/dvc.lock is not a whole dvc.lock (its stage validate "
                           "holds no outs or params, which its dvc.yaml declares: it was cut short)"), said
    assert said.count("\n") == 1 and f"`git checkout -- bench/{cells[0].name}/dvc.lock`" in said, said
    assert lock.read_text() == damaged  # nothing rewritten


def test_a_lock_cut_between_stages_is_no_finished_cells_and_the_list_says_why(plan, capsys):
    bench, cells = written_benchmark(plan)
    cut_after_its_first_stage(finished_with_its_pipeline(bench, cells[0]))
    assert not cell_finished(bench / cells[0].name)  # it holds 1 of the stages of its dvc.yaml
    assert benchmark(plan, "--list") == 0, capsys.readouterr().err
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"{cells[0].name} "))
    assert "to run; its dvc.lock lacks" in line and "(prepare, search@" in line, line
    assert f"though its report is here: unless it is running again, the lock was cut short and `git checkout -- " \
           f"bench/{cells[0].name}/dvc.lock` restores the committed one" in line, line


# --- plan.json and the declaration: each cell once, longer_of to a short configuration (AG8, AG10, AG13, W16) ------


def aggregate(bench: Path) -> str:
    """What the aggregate stage, as DVC runs it in the benchmark's folder, ends with."""
    import sys

    import stages.benchmark_report

    argv = sys.argv
    sys.argv = ["benchmark_report", "--plan", f"{bench.name}/plan.json", "--report-dir", f"{bench.name}/report"]
    try:
        with pytest.raises(SystemExit) as ended:
            stages.benchmark_report.main()
    finally:
        sys.argv = argv
    assert not (bench / "report").exists()
    return str(ended.value.code)


def edited_plan(bench: Path, edit) -> None:
    declared = json.loads((bench / "plan.json").read_text())
    edit(declared)
    (bench / "plan.json").write_text(json.dumps(declared))


def test_a_cell_listed_twice_in_plan_json_is_refused_before_it_is_pooled_twice(plan, capsys):
    bench, cells = written_benchmark(plan)
    for cell in cells:
        finished_cell(bench / cell.name, cell.params)
    edited_plan(bench, lambda declared: declared["cells"].append(declared["cells"][0]))
    said = f"bench/plan.json lists the cell {cells[0].name} 2 times, and each would be pooled as a cell of its own; " \
           "`git checkout -- bench/plan.json` restores the committed one"
    assert aggregate(bench).startswith(f"benchmark report not written: {said}")
    assert worker() == 2
    error = capsys.readouterr().err
    assert error.startswith(f"study: error: {said}") and error.count("\n") == 1, error


def test_a_plan_json_with_no_cells_is_refused_not_every_one_of_0_cells_finished(plan, capsys):
    bench, _ = written_benchmark(plan)
    edited_plan(bench, lambda declared: declared.update(cells=[]))
    said = "bench/plan.json lists no cells, so there is nothing to run or pool; `git checkout -- bench/plan.json`"
    assert worker() == 2
    error = capsys.readouterr().err
    assert error.startswith(f"study: error: {said}") and "every one of the 0" not in error, error
    assert aggregate(bench).startswith(f"benchmark report not written: {said}")


LONGER_OF = {
    "itself": ([("glyphs-open", "glyphs-open")], "glyphs-open's longer_of names itself; name the short (or "
                                                 "converged_only) configuration it trains longer"),
    "a cycle": ([("digits-closed", "glyphs-open"), ("glyphs-open", "digits-closed")],
                "digits-closed's longer_of names glyphs-open, itself a longer configuration (digits-closed → "
                "glyphs-open → digits-closed, a cycle)"),
    "a chain": ([("glyphs-open", "digits-closed"), ("third", "glyphs-open")],
                "third's longer_of names glyphs-open, itself a longer configuration (third → glyphs-open → "
                "digits-closed); name the short (or converged_only) configuration it trains longer, e.g. longer_of: "
                "digits-closed"),
}


@pytest.mark.parametrize("links, said", LONGER_OF.values(), ids=LONGER_OF.keys())
def test_longer_of_naming_itself_or_a_longer_configuration_is_refused_in_the_declaration(tmp_path, links, said):
    text = TINY + "  - {name: third, dataset: 'glyphs:{total}:8', train_classes: 6}\n"
    for name, target in links:
        text = text.replace(f"  - name: {name}\n", f"  - name: {name}\n    longer_of: {target}\n").replace(
            f"  - {{name: {name},", f"  - {{name: {name}, longer_of: {target},")
    with pytest.raises(ValueError) as error:
        load_plan(declaration(tmp_path, text))
    assert str(error.value).startswith(f"{tmp_path / 'plan.yaml'}: {said}"), error.value


@pytest.mark.parametrize("links, said", [LONGER_OF["itself"], LONGER_OF["a cycle"]], ids=["itself", "a cycle"])
def test_longer_of_naming_itself_or_in_a_cycle_in_plan_json_is_refused_by_workers_and_the_aggregate(plan, capsys,
                                                                                                   links, said):
    bench, _ = written_benchmark(plan)

    def edit(declared):
        for cell in declared["cells"]:
            cell["longer_of"] = dict(links).get(cell["configuration"], cell["longer_of"])

    edited_plan(bench, edit)
    assert aggregate(bench).startswith(f"benchmark report not written: bench/plan.json: {said}")
    assert worker() == 2
    error = capsys.readouterr().err
    assert error.startswith(f"study: error: bench/plan.json: {said}") and error.count("\n") == 1, error


# --- a finished cell whose folder lost a class ---------------------------------------------------------------------


def test_a_finished_cell_whose_folder_lost_a_class_is_listed_with_what_it_lacks(plan, tmp_path, monkeypatch, capsys):
    folder = image_folder(tmp_path / "mine")
    add_configuration(plan, "mine", [f"data.dataset=folder:{folder}", "data.protocol=closed", "data.image_size=8"])
    cell = load_plan(plan).cells[-1]
    directory = tmp_path / "bench" / "mine"
    finished_cell(directory, cell.params)
    monkeypatch.chdir(directory)
    stages.prepare.main()  # its prepared splits, which name the classes it was trained on
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(folder / "class7")
    capsys.readouterr()

    assert benchmark(plan, "--list") == 0, capsys.readouterr().err
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("mine "))
    assert f"finished; folder:{folder} holds 7 classes now, but mine was declared with 8 of them" in line
    assert "it lacks class7: put class7 back" in line and f"remove mine from {plan}" in line
    assert "data.classes" not in line
    assert benchmark(plan) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"study: error: cell mine: folder:{folder} holds 7 classes now") and "lacks class7" in said
    assert "data.classes" not in said
