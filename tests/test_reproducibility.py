"""A small committed study reproduces, score for score, in the locked environment (constraints.txt).

tests/data/reproducible_study/params.yaml (digits, closed protocol, a tiny MLP, 3 ArcFace trials, 2 seeds) runs
through the real stages in a temporary folder: validate, prepare, search, runs, tuned runs and evaluate, on one
thread and on kernels chosen not to depend on the machine (PORTABLE_KERNELS):
- torch's AVX2 kernels take exp and log from the vector maths bundled with torch; its DEFAULT kernels take them from
  the C library, whose implementations move a few scores by a test image or two.
- MKL's conditional numerical reproducibility (MKL_CBWR=COMPATIBLE) for its SGEMM, the only MKL call training makes;
  oneDNN is never called for this MLP, and is held to SSE4.1 in case a kernel would pick it.

The expected scores are recorded per CPU vendor, in tests/data/reproducible_study/expected/<vendor>.csv, each headed
by what it was recorded on (CPU, torch's kernels, C library, packages). Where this machine's vendor has a table,
every trial's and run's (val, test) score must equal it to 1e-6, and a failure names what differs from the
recording before it blames the code. Where none has one (another vendor, an ARM laptop), the scores must lie within
two val or test images of a recorded table, and the test's output says that it compared that loosely.

Record this machine's table when none is recorded for its vendor, or when the lock or the study's code deliberately
changes the results (that rewrites only this vendor's table; rerun it on the other vendors' machines), in the locked
environment (`pip install -c constraints.txt -e ".[dev]"`), from the repository root:

    python tests/test_reproducibility.py --regenerate
"""

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml

from study.environment import (c_library, cpu_info, cpu_model, cpu_vendor, installed_version, listing,
                               lock_differences, locked_versions)
from study.results import search_dir
from study.workers import NOT_RUN

from conftest import run_stages

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "tests" / "data" / "reproducible_study"
EXPECTED_DIR = STUDY / "expected"
LOCK = REPO / "constraints.txt"
REGENERATE = "python tests/test_reproducibility.py --regenerate"
TOLERANCE = 1e-6
# Where no table is recorded for this machine: how far a score may move, in val or test images.
LOOSE_IMAGES = 2
COLUMNS = ["kind", "method", "trial", "seed", "s", "m", "value", "test_value"]
# Kernels that depend on neither the C library nor the CPU vendor, as far as measured (the module's docstring).
PORTABLE_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"}
# What a recording names, in the order a failure lists the differences.
RECORDED = {"vendor": "CPU vendor", "cpu": "CPU model", "kernels": "torch's kernels", "c_library": "C library",
            "machine": "architecture", "python": "Python", "torch": "torch", "lock": "packages"}


def study_environment() -> dict[str, str]:
    """The environment variables the stages run under: one thread and the portable kernels."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **PORTABLE_KERNELS}


def torch_kernels(env: dict[str, str]) -> str:
    """The CPU kernels torch runs under `env`, as torch itself reports them."""
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def this_environment() -> dict[str, str]:
    """What a table recorded here would be headed by."""
    differences = lock_differences(LOCK) if LOCK.is_file() else ["constraints.txt is missing"]
    return {"vendor": cpu_vendor(), "cpu": cpu_model(), "kernels": torch_kernels(study_environment()),
            "c_library": c_library(), "machine": platform.machine(), "python": platform.python_version(),
            "torch": installed_version("torch"),
            "lock": "as constraints.txt" if not differences else f"off constraints.txt: {listing(differences, 12)}"}


def table_path(vendor: str) -> Path:
    return EXPECTED_DIR / f"{''.join(c if c.isalnum() else '-' for c in vendor)}.csv"


def read_table(path: Path) -> tuple[dict[str, str], pd.DataFrame]:
    """A recorded table: the environment it was recorded in (its first line) and its scores."""
    header = path.read_text().splitlines()[0]
    if not header.startswith("# recorded: "):
        raise ValueError(f"{path.relative_to(REPO)} does not start with '# recorded: {{...}}'; rerecord it with "
                         f"`{REGENERATE}`")
    return json.loads(header.removeprefix("# recorded: ")), pd.read_csv(path, comment="#")


def run_study(root: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The committed study run in `root` with the repository's code: its scores, one row per trial or run, and how
    many images its val and test sets hold."""
    shutil.copy(STUDY / "params.yaml", root / "params.yaml")
    params = yaml.safe_load((root / "params.yaml").read_text())
    run_stages(root, stage_commands(params), env=study_environment())
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
    splits = json.loads((root / "data" / "prepared" / "split0" / "manifest.json").read_text())["splits"]
    return (pd.DataFrame(rows, columns=COLUMNS).astype({"trial": "Int64"}),
            {"value": splits["val"]["num_samples"], "test_value": splits["test"]["num_samples"]})


def stage_commands(params: dict) -> list[list[str]]:
    """The stages of dvc.yaml that produce the scores, in order, as `python -m` arguments."""
    commands = [["stages.validate"], ["stages.prepare"]]
    commands += [["stages.search", "--loss", loss] for loss in params["search"]["losses"]]
    commands += [["stages.runs", "--method", method] for method in params["runs"]["methods"]]
    commands += [["stages.runs", "--tuned", loss] for loss in params["search"]["losses"]]
    commands.append(["stages.evaluate"])
    return commands


def label(row) -> str:
    if row["kind"] == "trial":
        return f"{row['method']} search, trial {int(row['trial'])}"
    return f"{row['method']} run, seed {int(row['seed'])}"


def moved_scores(expected: pd.DataFrame, actual: pd.DataFrame, tolerance: dict[str, float] | None = None) -> list[str]:
    """One line for each score that differs by more than its tolerance (TOLERANCE where none is given), and for each
    trial or run missing or new."""
    expected = {label(row): row for row in expected.to_dict("records")}
    actual = {label(row): row for row in actual.to_dict("records")}
    moved = [f"{name}: expected, not produced" for name in expected if name not in actual]
    moved += [f"{name}: produced, not expected" for name in actual if name not in expected]
    for name in expected.keys() & actual.keys():
        for column in COLUMNS[3:]:
            old, new = float(expected[name][column]), float(actual[name][column])
            allowed = (tolerance or {}).get(column, TOLERANCE)
            if math.isnan(old) != math.isnan(new) or abs(old - new) > allowed:  # NaN: a run without s or m
                moved.append(f"{name}: {column} {old!r} -> {new!r}")
    return sorted(moved)


def loose_tolerance(images: dict[str, int]) -> dict[str, float]:
    """LOOSE_IMAGES images of each scored set, as a difference in accuracy (a hair over, for the floats' rounding)."""
    return {column: (LOOSE_IMAGES + 0.01) / count for column, count in images.items()}


def environment_differences(recorded: dict[str, str], here: dict[str, str]) -> list[str]:
    """'what: recorded -> here' for each part of the environment that differs from a table's recording."""
    return [f"{what}: {recorded.get(key, 'not recorded')} -> {here[key]}" for key, what in RECORDED.items()
            if recorded.get(key) != here[key]]


def cause(recorded: dict[str, str], here: dict[str, str], table: Path) -> str:
    """Why the scores may have moved: what differs from the table's recording, else the study's code."""
    differences = environment_differences(recorded, here)
    if differences:
        fix = ("install the lock with `pip install -c constraints.txt -e \".[dev]\"` and run the test again"
               if here["lock"] != "as constraints.txt" else
               "if the study's code did not change, the difference above moved them; rerecording would replace a "
               "table that its own machines reproduce, so key the tables by that difference (table_path) and record "
               f"this machine's beside it with `{REGENERATE}`")
        return (f"This environment differs from the one {table.relative_to(REPO)} was recorded in: "
                + "; ".join(differences) + f". Any of these can move a score by an image or two: {fix}.")
    return (f"The environment is the one {table.relative_to(REPO)} was recorded in (CPU, torch's kernels, C library, "
            f"packages), so the study's code changed its results: if that was deliberate, rerecord with `{REGENERATE}` "
            f"on this machine and on a machine of each other recorded vendor.")


def recorded_tables() -> dict[Path, tuple[dict[str, str], pd.DataFrame]]:
    return {path: read_table(path) for path in sorted(EXPECTED_DIR.glob("*.csv"))}


@pytest.mark.slow
def test_the_committed_study_reproduces_its_scores(tmp_path):
    actual, images = run_study(tmp_path)
    here = this_environment()
    tables = recorded_tables()
    assert tables, f"no expected scores in {EXPECTED_DIR.relative_to(REPO)}: record them with `{REGENERATE}`"
    own = table_path(here["vendor"])
    if own in tables:
        recorded, expected = tables[own]
        moved = moved_scores(expected, actual)
        if moved:
            pytest.fail(f"{len(moved)} score(s) of the committed study in {STUDY.relative_to(REPO)} moved beyond "
                        f"{TOLERANCE:g} from {own.relative_to(REPO)}:\n  " + "\n  ".join(moved) + "\n"
                        + cause(recorded, here, own), pytrace=False)
        return
    # No table for this vendor: the closest recorded one, within two images per score.
    tolerance = loose_tolerance(images)
    nearest = min(tables, key=lambda path: len(moved_scores(tables[path][1], actual)))
    recorded, expected = tables[nearest]
    moved = moved_scores(expected, actual, tolerance)
    exact = len(moved_scores(expected, actual))
    summary = (f"no expected scores are recorded for this CPU vendor ({here['vendor']}); compared with "
               f"{nearest.relative_to(REPO)} within {LOOSE_IMAGES} val or test images per score: "
               f"{len(expected) * 2 - exact} of {len(expected) * 2} scores equal to the last digit. Record this "
               f"machine's table with `{REGENERATE}` to check it exactly.")
    if moved:
        pytest.fail(f"{len(moved)} score(s) moved by more than {LOOSE_IMAGES} images:\n  " + "\n  ".join(moved)
                    + f"\n{summary}\n" + cause(recorded, here, nearest), pytrace=False)
    warnings.warn(summary, stacklevel=1)


def fixed_adacos_val_scores(prepared: Path, code: Path) -> pd.Series:
    """Val scores of the committed study's Fixed AdaCos runs, by seed, trained by the study's code in `code`, in a
    copy of `prepared` (where validate and prepare have run; a copy, as the stage resumes finished runs)."""
    root = prepared.with_name(f"{prepared.name}-{code.name}")
    shutil.copytree(prepared, root, symlinks=True)
    env = {**study_environment(), "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, "-m", "stages.runs", "--method", "fixed_adacos"], cwd=root, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return pd.read_csv(root / "results" / "runs" / "fixed_adacos" / "split0" / "runs.csv").set_index("seed")["val_score"]


@pytest.mark.slow
def test_a_changed_loss_constant_moves_the_scores_beyond_the_exact_check(tmp_path):
    """The exact check can fail: a copy of the code with 2 for √2 in Fixed AdaCos's scale √2·ln(C−1) moves scores."""
    study_folder, changed_code = tmp_path / "study", tmp_path / "changed"
    study_folder.mkdir()
    shutil.copy(STUDY / "params.yaml", study_folder / "params.yaml")
    run_stages(study_folder, [["stages.validate"], ["stages.prepare"]], env=study_environment())
    for package in ("study", "stages"):
        shutil.copytree(REPO / package, changed_code / package, ignore=shutil.ignore_patterns("__pycache__"))
    scale = changed_code / "study" / "adacos_scale.py"
    written = "return math.sqrt(2.0) * math.log(num_classes - 1)"
    assert written in scale.read_text(), f"study/adacos_scale.py no longer holds `{written}`: update this test"
    scale.write_text(scale.read_text().replace(written, "return 2.0 * math.log(num_classes - 1)"))
    as_written, changed = (fixed_adacos_val_scores(study_folder, code) for code in (REPO, changed_code))
    runs = pd.DataFrame({"kind": "run", "method": "fixed_adacos", "trial": math.nan, "seed": as_written.index,
                         "s": math.nan, "m": math.nan, "value": as_written.values, "test_value": math.nan})
    assert moved_scores(runs, runs.assign(value=changed.values)), "a changed loss constant left every score as it was"


def test_the_loose_check_allows_two_images_and_no_more():
    """Two test images of 450 pass where recorded for no environment; three fail; the exact check takes neither."""
    expected = pd.DataFrame([{"kind": "run", "method": "softmax", "trial": math.nan, "seed": 0, "s": math.nan,
                              "m": math.nan, "value": 400 / 449, "test_value": 430 / 450}])
    tolerance = loose_tolerance({"value": 449, "test_value": 450})
    two, three = expected.assign(test_value=432 / 450), expected.assign(test_value=427 / 450)
    assert moved_scores(expected, two, tolerance) == []
    assert len(moved_scores(expected, three, tolerance)) == 1
    assert len(moved_scores(expected, two)) == 1


def test_a_failure_names_what_differs_from_the_recording_before_the_code():
    recorded = {"vendor": "GenuineIntel", "cpu": "Intel Xeon", "kernels": "AVX2", "c_library": "glibc 2.36",
                "machine": "x86_64", "python": "3.11.7", "torch": "2.15.0", "lock": "as constraints.txt"}
    table = table_path("GenuineIntel")
    other_libc = cause(recorded, {**recorded, "c_library": "glibc 2.41"}, table)
    assert "C library: glibc 2.36 -> glibc 2.41" in other_libc and "code changed" not in other_libc
    assert "code changed its results" in cause(recorded, dict(recorded), table)


def test_every_recorded_table_names_its_environment_and_runs_on_the_portable_kernels():
    tables = recorded_tables()
    assert tables, f"no expected scores in {EXPECTED_DIR.relative_to(REPO)}"
    for path, (recorded, scores) in tables.items():
        assert set(RECORDED) <= set(recorded), f"{path.name} does not record {set(RECORDED) - set(recorded)}"
        assert path == table_path(recorded["vendor"]), f"{path.name} holds {recorded['vendor']}'s scores"
        assert recorded["kernels"] == PORTABLE_KERNELS["ATEN_CPU_CAPABILITY"].upper(), path.name
        assert list(scores.columns) == COLUMNS and len(scores) > 0, path.name


@pytest.mark.slow
def test_the_report_names_torchs_kernels_as_torch_does():
    """study.environment.kernel_capability reads the CPU's flags, not torch: torch must agree with it (SLOW: five
    processes that import torch, one for each setting)."""
    for asked in (None, "avx2", "default", "AVX2", "avx512"):
        env = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
        env |= {} if asked is None else {"ATEN_CPU_CAPABILITY": asked}
        probe = ("import torch; from study.environment import kernel_capability; "
                 "print(torch.backends.cpu.get_cpu_capability(), kernel_capability())")
        done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=REPO, capture_output=True, text=True,
                              check=True)
        by_torch, by_flags = done.stdout.split()
        if platform.machine().lower() in ("x86_64", "amd64"):
            assert by_flags == by_torch, f"ATEN_CPU_CAPABILITY={asked}: torch runs {by_torch}, the report says {by_flags}"


def test_torch_honours_the_portable_kernels():
    """A torch that ignored ATEN_CPU_CAPABILITY would run each CPU's own kernels and move the scores between CPUs."""
    if "avx2" not in (cpu_info("flags") or "").split():
        pytest.skip("this CPU has no AVX2 kernels: the study's scores are compared within two images here")
    kernels = torch_kernels({**os.environ, **PORTABLE_KERNELS})
    assert kernels == "AVX2", f"torch ran its {kernels} kernels despite {PORTABLE_KERNELS}"


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
    """Record this machine's table, leaving other vendors' tables as they are."""
    here = this_environment()
    if here["lock"] != "as constraints.txt":
        print(f"warning: the environment is {here['lock']}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as folder:
        scores, _ = run_study(Path(folder))
    path = table_path(here["vendor"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# recorded: {json.dumps(here)}\n# regenerate with: {REGENERATE}\n" + scores.to_csv(index=False))
    print(f"{path.relative_to(REPO)}: {len(scores)} trials and runs written")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    regenerate()
