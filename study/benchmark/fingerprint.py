"""What a finished cell's committed report was computed from, in reports/fingerprint.json: the sha256 of its
metrics.json and of every table of its report, and the hashes its dvc.lock records for its prepared data (the prepare
stage's output) and for the images they were prepared from (that stage's data/source). `study benchmark` writes it
once the cell's report is the one its dvc.lock records; the aggregate checks every cell against it before it reads a
number, so that a table cut, emptied or edited since is refused by name instead of pooled, and a folder cell whose
images changed since is no longer finished."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path, PurePosixPath

import pandas as pd

from study.analysis import TEST_PREFIX
from study.benchmark.cells import TABLES
from study.many_studies import DIFFERENCES_FILE, METRICS_FILE
from study.plain_yaml import read_yaml_file
from study.results import REPORT_DIR, write_json
from study.validation import SOURCE_LINK

FINGERPRINT_FILE = REPORT_DIR / "fingerprint.json"
# The files of a finished cell's report that the aggregate cannot do without (relative to its folder); the fingerprint
# covers these and every other table of the report (learning_curves.csv, where the cell's runs kept theirs).
REPORT_INPUTS = (METRICS_FILE, DIFFERENCES_FILE, TABLES / "search.csv", TABLES / "final_test.csv",
                 TABLES / "run_scores.csv", TABLES / "break_even.csv", TABLES / "tuning_curves.csv",
                 TABLES / "landscape.csv", TABLES / "curves.csv", TABLES / "convergence.csv")
PREPARED = "data/prepared"


class CellReportError(ValueError):
    """What keeps the aggregate from pooling the cells: a cell's committed report not whole, or not what its
    fingerprint records, or no finished cell at all."""


def dvc_md5(path: Path) -> str:
    """A file's or a folder's hash as dvc.lock records it: a file's md5, or for a folder the md5 of its files' list
    (relative path and md5, sorted by the path as text, as DVC sorts it) marked `.dir`."""
    if not path.is_dir():
        return hashlib.md5(path.read_bytes()).hexdigest()
    listing = sorted(({"md5": hashlib.md5(file.read_bytes()).hexdigest(), "relpath": file.relative_to(path).as_posix()}
                      for file in path.rglob("*") if file.is_file()), key=lambda entry: entry["relpath"])
    return hashlib.md5(json.dumps(listing, sort_keys=True).encode()).hexdigest() + ".dir"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _lock(directory: Path) -> dict:
    """The stages the cell's dvc.lock records (none where it has no lock)."""
    path = directory / "dvc.lock"
    if not path.is_file():
        return {}
    return (read_yaml_file(path) or {}).get("stages", {})


def reported(directory: str | Path) -> bool:
    """Whether the cell's dvc.lock records a report: it finished once, and its committed report is to be pooled or
    refused, never silently left out."""
    return bool(_lock(Path(directory)).get("report"))


def report_as_locked(directory: Path) -> bool:
    """Whether every output of the cell's report stage is on disk as its dvc.lock records it: what that stage
    wrote, nothing cut or edited since."""
    for out in _lock(directory).get("report", {}).get("outs", []):
        path = directory / out["path"]
        if not path.exists() or out.get("md5") and dvc_md5(path) != out["md5"]:
            return False
    return True


def _data_hashes(directory: Path) -> dict:
    """What the cell's dvc.lock records of its data: the prepare stage's output and the source it read."""
    prepare = _lock(directory).get("prepare", {})
    hashes = {entry["path"]: entry.get("md5") for entry in [*prepare.get("outs", []), *prepare.get("deps", [])]}
    return {"prepared": hashes.get(PREPARED), "source": hashes.get(SOURCE_LINK.as_posix())}


def fingerprinted_files(directory: Path) -> list[PurePosixPath]:
    """The files a fingerprint covers: metrics.json and every table of the report, in a fixed order."""
    tables = sorted(path.relative_to(directory) for path in (directory / TABLES).glob("*") if path.is_file())
    return [PurePosixPath(METRICS_FILE.as_posix()), *(PurePosixPath(path.as_posix()) for path in tables)]


def fingerprint(directory: Path) -> dict:
    """The cell's fingerprint as it is on disk now (see the module's docstring)."""
    return {"tables": {str(path): _sha256(directory / path) for path in fingerprinted_files(directory)},
            "data": _data_hashes(directory)}


def write_fingerprint(directory: str | Path) -> bool:
    """Write reports/fingerprint.json for a cell whose report is whole and as its dvc.lock records it (what its report
    stage wrote); the same fingerprint keeps the file's bytes. False, writing nothing, for any other cell: its report
    is not to be vouched for."""
    directory = Path(directory)
    if not reported(directory) or _first_problem(directory):
        return False
    path, new = directory / FINGERPRINT_FILE, fingerprint(directory)
    if _read_fingerprint(path) == new:
        return True
    if not report_as_locked(directory):
        return False
    write_json(new, path)
    return True


def _read_fingerprint(path: Path) -> dict | None:
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) and isinstance(recorded.get("tables"), dict) else None


def _refuse_nan(constant: str):
    raise ValueError(f"{constant} where a number must be (the report writes null for a missing one)")


def _metrics_problem(path: Path) -> tuple[str | None, str]:
    """What keeps metrics.json from being read (None when it reads), and the metric its verdict names."""
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_nan).get("verdict")
    except (ValueError, AttributeError) as error:
        return f"is not a readable report ({error})", ""
    if not isinstance(verdict, dict) or not (verdict.get("metric") or verdict.get("objective")):
        return "holds no verdict naming its metric", ""
    confidence = verdict.get("confidence", 0.95)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        return f"holds confidence {confidence!r}, not a number between 0 and 1", ""
    return None, verdict.get("metric") or f"{TEST_PREFIX}{verdict['objective']}"


def _table_problem(path: Path, needs_rows: bool, numbers: tuple[str, ...] = ()) -> str | None:
    """What keeps a table from being read: empty, unreadable, no rows where rows are needed, or a missing number in
    one of the `numbers` columns; None when it reads."""
    try:
        table = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return "is empty"
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        return f"is not a readable table ({str(error).splitlines()[0]})"
    if needs_rows and table.empty:
        return "has no rows"
    for column in numbers:
        values = pd.to_numeric(table[column], errors="coerce") if column in table else pd.Series([math.nan])
        if not values.map(math.isfinite).all():
            return f"lacks a number in its {column} column"
    return None


def _first_problem(directory: Path) -> tuple[Path, str] | None:
    """The first file the aggregate reads that is missing, empty, unreadable or NaN where a number is required, and
    what is wrong with it; None when every one reads."""
    metric = ""
    for path in REPORT_INPUTS:
        if not (directory / path).is_file():
            return path, "is missing"
        if path == METRICS_FILE:
            problem, metric = _metrics_problem(directory / path)
        else:
            scores = path == TABLES / "run_scores.csv"
            problem = _table_problem(directory / path, scores or path == DIFFERENCES_FILE,
                                     (metric, "val_score") if scores else ())
        if problem:
            return path, problem
    return None


def check_cell(directory: str | Path, shown: str | Path | None = None) -> None:
    """Refuse, in one line naming the cell, the file and the fix, a reported cell whose files the aggregate reads are
    not whole (missing, empty, unreadable, NaN where a number is required) or not those its fingerprint records.
    `shown` names the cell's folder as the user reaches it (by default `directory`)."""
    directory = Path(directory)
    name, shown = directory.name, PurePosixPath(Path(shown or directory).as_posix())
    restore = (f"`git checkout -- {shown / REPORT_DIR.as_posix()}` restores its committed report, or `study benchmark "
               f"--rerun {name}` remakes it from the cell's results")
    found = _first_problem(directory)
    if found:
        raise CellReportError(f"cell {name}: {shown / found[0].as_posix()} {found[1]}; {restore}")
    recorded = _read_fingerprint(directory / FINGERPRINT_FILE)
    current = fingerprint(directory)["tables"]
    if recorded is not None and recorded["tables"] == current:
        return
    if recorded is None:
        what = (f"{shown / FINGERPRINT_FILE.as_posix()} is missing or unreadable (it records what the tables were "
                "computed from)")
    else:
        changed = sorted(path for path in {*recorded["tables"], *current}
                         if recorded["tables"].get(path) != current.get(path))
        what = (f"{shown / changed[0]}" + (f" and {len(changed) - 1} more files are" if len(changed) > 1 else " is")
                + f" not what {shown / FINGERPRINT_FILE.as_posix()} records")
    fix = ("`study benchmark --report-only` (re)writes the fingerprint: its dvc.lock records these tables"
           if report_as_locked(directory) else restore)
    raise CellReportError(f"cell {name}: {what}; {fix}")


def source_changed(directory: str | Path) -> bool:
    """Whether the images a folder cell was prepared from (its data/source link) hash otherwise now than its
    fingerprint records: its results are stale. False where there is no link to a folder or no fingerprint to tell."""
    directory = Path(directory)
    link = directory / SOURCE_LINK
    recorded = _read_fingerprint(directory / FINGERPRINT_FILE)
    source = ((recorded or {}).get("data") or {}).get("source")
    if not (link.is_symlink() and link.is_dir()) or not source:
        return False
    return dvc_md5(link.resolve()) != source
