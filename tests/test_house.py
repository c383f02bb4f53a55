"""The house (issue 28): no import circle among the study's modules, deferred imports included, no module over
600 lines, a report stage that starts without torch, stages that begin by freezing their imports' objects, and a
tracked tree small enough to copy to a GPU machine."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 600
MODULES = sorted([*(REPO / "study").rglob("*.py"), *(REPO / "stages").glob("*.py")])


def _name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """The study modules that `path` imports anywhere in it (a deferred import inside a function too)."""
    package = _name(path) if path.name == "__init__.py" else _name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from .y import z
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                found |= {f"{base}.{alias.name}"} & known or ({base} & known)
    return found - {_name(path)}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_module_imports_one_that_imports_it_back():
    known = {_name(path) for path in MODULES}
    graph = {_name(path): _imports(path, known) for path in MODULES}
    assert graph["study.storage"] >= {"study.config", "study.database_url"}  # the check sees what it should
    assert _circles(graph) == []


def test_the_circle_check_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", MODULES, ids=[str(path.relative_to(REPO)) for path in MODULES])
def test_no_module_is_over_600_lines(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines: split it by concept"


def test_the_report_stage_starts_without_torch(tmp_path):
    """It only reads results, and importing torch costs seconds at every start of a stage (study/adacos_scale.py):
    neither its import nor its main() imports torch to read params.yaml (validate, before it, built each fixed run's
    loss), where params.yaml read in full does: the shipped one holds arcface_default, a fixed run (and the check,
    seeing torch there, shows that it can fail). The analysis is left out."""
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    stage = "import sys, stages.report as stage; stage.report = lambda params: None; stage.main(); "
    read = "import sys; from study.config import load_params; load_params(); "
    for command, imports_torch in ((stage, False), (read, True)):
        done = subprocess.run([sys.executable, "-c", command + "sys.exit('torch' in sys.modules)"], cwd=tmp_path,
                              env=environment)
        assert done.returncode == imports_torch, command


STAGES = sorted(path for path in (REPO / "stages").glob("*.py") if path.name != "__init__.py")


@pytest.mark.parametrize("path", STAGES, ids=lambda path: path.stem)
def test_each_stage_begins_by_freezing_what_its_imports_made(path):
    main = next(node for node in ast.parse(path.read_text(encoding="utf-8")).body
                if isinstance(node, ast.FunctionDef) and node.name == "main")
    statements = [node for node in main.body
                  if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    first = ast.unparse(statements[0])  # its docstring aside
    assert first == "begin()", f"{path.name}: main() starts with {first!r}, not begin() (stages/__init__.py says why)"


def test_begin_freezes_the_imports_objects_once_and_the_stages_own_are_collected_as_before():
    """In a process of its own (a freeze in the test's process would outlive the test)."""
    probe = """
import gc, weakref
import pandas, stages  # a stage's imports
imported = len(gc.get_objects())
stages.begin()
frozen = gc.get_freeze_count()
class Node:
    pass
first = Node(); first.itself = first; alive = weakref.ref(first); del first
for _ in range(10_000):  # cycles enough for the collector's own passes, never called here
    node = Node(); node.itself = node
stages.begin()
print(frozen >= 0.9 * imported, gc.get_freeze_count() == frozen, alive() is None)
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"], "frozen at the first begin(), once; later cycles collected"


def test_the_hostile_cases_page_names_only_tests_that_exist():
    """tests/hostile_cases.md points a reader at the test holding each case: every test it names is defined."""
    text = (REPO / "tests" / "hostile_cases.md").read_text(encoding="utf-8")
    defined = {name for path in (REPO / "tests").glob("test_*.py")
               for name in re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), flags=re.MULTILINE)}
    named = set(re.findall(r"`(?:\w+\.py::)?(test_\w+?)(?:\[[^`]*\])?`", text))
    assert named and sorted(named - defined) == []


TRACKED_LIMIT = 48 * 10 ** 6  # bytes: a working tree copied whole to a GPU machine (64 MB allowed), with room to grow


def test_the_tracked_tree_is_small_enough_to_copy_to_a_gpu_machine():
    """Every file git tracks, summed: reports link their figures (palette PNGs) rather than inline them."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: nothing is tracked to measure")
    paths = [REPO / name for name in listed.stdout.decode().split("\0") if name]
    sizes = {path: path.stat().st_size for path in paths if path.is_file()}
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert sum(sizes.values()) < TRACKED_LIMIT, (
        f"the tracked files add up to {sum(sizes.values()) / 1e6:.1f} MB, over {TRACKED_LIMIT / 1e6:.0f} MB; the "
        "largest: " + ", ".join(f"{path.relative_to(REPO)} ({sizes[path] / 1e6:.1f} MB)" for path in largest))
