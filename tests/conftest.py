"""What several test modules share: a copy of the study's code in a fresh git checkout, for DVC to run."""

import compileall
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STUDY_FILES = ["dvc.yaml", "params.yaml", "stages", "study", ".dvc/config", ".dvc/plots", ".dvcignore",
               "reports/plots_template.html", "reports/benchmark/benchmark.json"]

# The suite runs one test process per core (-n auto): the training in each, and in every stage it starts, gets one
# thread, where torch's default of one per core would oversubscribe the cores, its threads spinning as they wait.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Every `python -m study.cli` a test starts finds this checkout's code, installed (`pip install -e .`) or not; a
# process started in a copied study (its cwd first on sys.path) still runs the copy.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

# Every stage a test starts is a new Python process that imports the study's code; compiled once here (into the
# ignored __pycache__ folders, which DVC ignores too) and copied with the code, it is not compiled again in each.
for package in ("study", "stages"):
    compileall.compile_dir(REPO / package, quiet=1)

# Pytest keeps each test module's rewritten bytecode in the same folders unless Python may not write bytecode (the
# environment's PYTHONDONTWRITEBYTECODE): then every worker of every run rewrites all the test modules again, nearly
# half of its collection's time.
sys.dont_write_bytecode = False


def copy_study(root: Path, names=STUDY_FILES) -> Path:
    """The study's code (and the shipped params.yaml) copied into `root`, made a git repository."""
    for name in names:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


# Stages' `main()`s run in order in one Python process, each with its own argv: where a test is of what the stages
# compute, not of DVC or of a stage's process, this spares each stage after the first the 3-4 s a stage's process
# pays to start (imports, torch's first optimiser step); a failing stage ends the process, its name said before it
# and the output's end in the test's failure.
STAGES_IN_ONE_PROCESS = """
import importlib, json, sys
for command in json.loads(sys.argv[1]):
    print("stage:", *command, file=sys.stderr, flush=True)
    stage = importlib.import_module(command[0])
    sys.argv = [stage.__file__, *command[1:]]  # as `python -m` sets it: a stage knows itself by its path
    stage.main()
"""


def run_stages(root: Path, commands: list[list[str]], env: dict[str, str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """`commands` (each `[module, *arguments]`, as `python -m` takes them) run in `root` in one process, which must
    succeed."""
    done = subprocess.run([sys.executable, "-c", STAGES_IN_ONE_PROCESS, json.dumps(commands)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"a stage failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def pipeline_commands(root: Path, leave_out: tuple[str, ...] = ()) -> list[list[str]]:
    """The commands of the DVC pipeline in `root`, in the order `dvc repro` runs them (DVC's own reading of dvc.yaml
    and params.yaml: its foreach stages expanded), each as `run_stages` takes it; stages named in `leave_out` (their
    names before any @item) are left out."""
    import shlex
    import warnings

    from dvc.repo import Repo
    from dvc.repo.reproduce import plan_repro

    commands = []
    with Repo(str(root)) as repo, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # DVC's own use of its path trie's library
        for stage in plan_repro(repo.index.graph):
            if stage.name.split("@")[0] in leave_out:
                continue
            words = shlex.split(stage.cmd)
            assert words[:2] == ["python", "-m"], f"stage {stage.name} runs {stage.cmd!r}, not a module of the study"
            commands.append(words[2:])
    return commands


def trained_trials(paths) -> "pd.DataFrame":
    """The rows of the trials.csv files at `paths` whose trials trained, their slots and seeds integers (nullable: a
    trial interrupted before it drew its seed has none).

    A packed worker that finds the budget met records a 'not run' trial with neither (whether one does is a race
    between the stage and its workers), and read_csv reads a column with such a gap as floats: without the cast, two
    searches that trained the same trials would differ in their columns' types.
    """
    import pandas as pd

    from study.workers import NOT_RUN  # here, not at the top: it imports torch, which must see OMP_NUM_THREADS first

    trials = pd.concat([pd.read_csv(path) for path in paths], ignore_index=True)
    trained = trials[trials["status"] != NOT_RUN].reset_index(drop=True)
    return trained.astype({"trial": "Int64", "seed": "Int64"})


def dvc_study(root: Path, names, *, init: bool = True) -> Path:
    """`names` of the study copied into `root`, made a git + DVC repository, or (`init=False`, no git needed) a folder
    with only the .dvc folder that `study sweep` and `study benchmark` look for."""
    root.mkdir(parents=True, exist_ok=True)
    if init:
        copy_study(root, names)
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True,
                       env={**os.environ, "DVC_NO_ANALYTICS": "1"})
        return root
    for name in names:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, root / name)
        else:
            shutil.copy(REPO / name, root / name)
    (root / ".dvc").mkdir()
    return root


def working_tree_clone(root: Path) -> Path:
    """What a fresh clone of this checkout would hold if its working tree were committed: every file git tracks or
    would add (uncommitted changes included, ignored files such as data/, results/ and DVC's cache left out), copied
    into `root` and committed there, in a git repository of its own."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True)
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if source.is_file() or source.is_symlink():  # a deletion not yet committed is no file of the clone
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name, follow_symlinks=False)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", "the working tree"]):
        subprocess.run([*git, *command], cwd=root, check=True)
    return root


def changed_studies(status: dict) -> set[str]:
    """The studies (folders of a DVC project of many) that `dvc status --json` gives a changed dependency, params,
    command or committed output: those DVC would run again. An output merely missing (deleted, or not in a cache that
    a clone lacks) is missing data, and does not count."""
    changed = set()
    for stage, changes in status.items():
        for change in changes:
            outs = {} if isinstance(change, str) else change.get("changed outs", {})
            if isinstance(change, str) or "changed deps" in change or set(outs.values()) - {"deleted", "not in cache"}:
                changed.add(stage.split("/dvc.yaml:")[0] if "/dvc.yaml:" in stage else ".")
    return changed


@pytest.fixture(scope="session")
def prepared_study(tmp_path_factory) -> Path:
    """The tiny study prepared through `dvc repro prepare` once for every test of a test process that reads it (each
    puts back what it changes): test_bad_inputs.prepared_checkout."""
    from test_bad_inputs import prepared_checkout  # a test module: imported once the tests are collected

    return prepared_checkout(tmp_path_factory.mktemp("study"))
