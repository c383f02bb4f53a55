"""A small committed study reproduces, score for score, in the locked environment (constraints.txt).

tests/data/reproducible_study/params.yaml (digits, closed protocol, a tiny MLP, 3 ArcFace trials, 2 seeds) runs
through the real stages in a temporary folder: validate, prepare, search, runs, tuned runs and
evaluate. Every search trial's (seed, s, m, val score, test objective) and every final run's (val score, test
objective) must equal tests/data/reproducible_study/expected_scores.csv to 1e-6. Training is seeded and
deterministic on one thread. torch and MKL pick their float kernels by CPU (AVX2, AVX512, ...), which moves a few
scores by a test image or two, so the stages run on their portable kernels (PORTABLE_KERNELS): the same floats on
any x86-64 CPU. A difference then means that the study's code or the environment changed; the failure names the
scores that moved and how the installed packages differ from constraints.txt.

Regenerate expected_scores.csv only when the lock (constraints.txt) or the study's code deliberately changes its
results, in the locked environment (`pip install -c constraints.txt -e ".[dev]"`), from the repository root:

    python tests/test_reproducibility.py --regenerate
"""

import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from study.environment import installed_version, listing, lock_differences, locked_versions
from study.results import search_dir
from study.workers import NOT_RUN

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "tests" / "data" / "reproducible_study"
EXPECTED = STUDY / "expected_scores.csv"
LOCK = REPO / "constraints.txt"
REGENERATE = "python tests/test_reproducibility.py --regenerate"
TOLERANCE = 1e-6
COLUMNS = ["kind", "method", "trial", "seed", "s", "m", "value", "test_value"]
# The CPU-independent code paths of torch's own kernels, MKL's (conditional numerical reproducibility) and oneDNN's.
PORTABLE_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"}


def stage_commands(params: dict) -> list[list[str]]:
    """The stages of dvc.yaml that produce the scores, in order, as `python -m` arguments."""
    commands = [["stages.validate"], ["stages.prepare"]]
    commands += [["stages.search", "--loss", loss] for loss in params["search"]["losses"]]
    commands += [["stages.runs", "--method", method] for method in params["runs"]["methods"]]
    commands += [["stages.runs", "--tuned", loss] for loss in params["search"]["losses"]]
    commands.append(["stages.evaluate"])
    return commands


def run_study(root: Path) -> pd.DataFrame:
    """The committed study run in `root` with the repository's code; its scores, one row per trial or run."""
    shutil.copy(STUDY / "params.yaml", root / "params.yaml")
    params = yaml.safe_load((root / "params.yaml").read_text())
    # One thread and portable kernels: the same floating-point reductions on any number of cores and any CPU.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **PORTABLE_KERNELS}
    for command in stage_commands(params):
        done = subprocess.run([sys.executable, "-m", *command], cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    objective = params["train"]["objective"]
    rows = []
    for loss in params["search"]["losses"]:
        for trial in pd.read_csv(root / search_dir(loss, 0) / "trials.csv").to_dict("records"):
            if trial["status"] == NOT_RUN:  # the stage and its packed worker raced for the last place: no training
                continue
            rows.append({"kind": "trial", "method": loss, **{k: trial[k] for k in COLUMNS[2:]}})
    for run in pd.read_csv(root / "results" / "evaluation" / "runs.csv").to_dict("records"):
        rows.append({"kind": "run", "method": run["method"], "trial": math.nan, "seed": run["seed"], "s": run["s"],
                     "m": run["m"], "value": run["val_score"], "test_value": run[f"test_{objective}"]})
    return pd.DataFrame(rows, columns=COLUMNS).astype({"trial": "Int64"})


def label(row) -> str:
    if row["kind"] == "trial":
        return f"{row['method']} search, trial {int(row['trial'])}"
    return f"{row['method']} run, seed {int(row['seed'])}"


def moved_scores(expected: pd.DataFrame, actual: pd.DataFrame) -> list[str]:
    """One line for each score that differs by more than TOLERANCE, and for each trial or run missing or new."""
    expected = {label(row): row for row in expected.to_dict("records")}
    actual = {label(row): row for row in actual.to_dict("records")}
    moved = [f"{name}: expected, not produced" for name in expected if name not in actual]
    moved += [f"{name}: produced, not expected" for name in actual if name not in expected]
    for name in expected.keys() & actual.keys():
        for column in COLUMNS[3:]:
            old, new = float(expected[name][column]), float(actual[name][column])
            if math.isnan(old) != math.isnan(new) or abs(old - new) > TOLERANCE:  # NaN: a run without s or m
                moved.append(f"{name}: {column} {old!r} -> {new!r}")
    return sorted(moved)


def environment_note() -> str:
    if not LOCK.is_file():
        return "constraints.txt is missing, so the environment cannot be compared with the lock."
    torch_version = installed_version("torch")
    note = (f"Installed torch {torch_version}, constraints.txt pins torch {locked_versions(LOCK).get('torch', 'nothing')}"
            f" (Python {platform.python_version()}, {platform.machine()}).")
    differences = lock_differences(LOCK)
    if differences:
        shown = listing(differences, 12)
        return (f"{note} The environment may not match constraints.txt; it differs in: {shown}. Install the lock with "
                f"`pip install -c constraints.txt -e \".[dev]\"` and run the test again.")
    return (f"{note} The installed packages match constraints.txt and the stages ran on portable kernels (the same "
            f"floats on any x86-64 CPU; this one is {cpu()}), so the study's code changed its results: if that was "
            f"deliberate, regenerate the expected scores with `{REGENERATE}`.")


def cpu() -> str:
    """This machine's CPU model: the scores should not depend on it (PORTABLE_KERNELS), so it is only recorded."""
    info = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in (info.read_text().splitlines() if info.is_file() else [])
              if line.startswith("model name")]
    return models[0] if models else platform.processor() or "an unnamed CPU"


def recorded_with() -> str:
    header = EXPECTED.read_text().splitlines()[0]
    return header.lstrip("# ") if header.startswith("#") else "an unrecorded environment"


@pytest.mark.slow
def test_the_committed_study_reproduces_its_scores(tmp_path):
    expected = pd.read_csv(EXPECTED, comment="#")
    actual = run_study(tmp_path)
    moved = moved_scores(expected, actual)
    if moved:
        pytest.fail(f"{len(moved)} score(s) of the committed study in {STUDY.relative_to(REPO)} moved beyond "
                    f"{TOLERANCE:g}:\n  " + "\n  ".join(moved) + f"\nExpected scores: {recorded_with()}.\n"
                    + environment_note(), pytrace=False)


def test_torch_honours_the_portable_kernels():
    """A torch that ignored ATEN_CPU_CAPABILITY would run each CPU's own kernels and move the scores between CPUs."""
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **PORTABLE_KERNELS},
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "DEFAULT", f"torch ran its {done.stdout.strip()} kernels despite {PORTABLE_KERNELS}"


def test_the_lock_pins_torch_and_the_readme_installs_with_it():
    pins = locked_versions(LOCK)
    for package in ("torch", "torchvision", "optuna", "dvc", "pytest", "pytorch-metric-learning", "psycopg"):
        assert package in pins, f"constraints.txt pins no version of {package}"
    assert "+cpu" not in pins["torch"], "the lock must pin the package index's normal torch build"
    readme = (REPO / "README.md").read_text()
    assert 'pip install -c constraints.txt -e ".[dev]"' in readme
    settings = " ".join(f"{name}={value}" for name, value in PORTABLE_KERNELS.items())
    assert settings in " ".join(readme.split()), f"README.md should name the test's portable kernels: {settings}"


def regenerate() -> None:
    differences = lock_differences(LOCK)
    if differences:
        print("warning: the environment differs from constraints.txt in: " + ", ".join(differences), file=sys.stderr)
    with tempfile.TemporaryDirectory() as folder:
        scores = run_study(Path(folder))
    torch_version = installed_version("torch")
    header = (f"# recorded with torch {torch_version}, Python {platform.python_version()}, {platform.machine()} "
              f"(portable kernels, on {cpu()}), "
              f"{'every package as in constraints.txt' if not differences else f'{len(differences)} package(s) off constraints.txt'}; "
              f"regenerate with: {REGENERATE}\n")
    EXPECTED.write_text(header + scores.to_csv(index=False))
    print(f"{EXPECTED.relative_to(REPO)}: {len(scores)} trials and runs written")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    regenerate()
