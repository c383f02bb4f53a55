"""Where the stages meet: the result folders, their table schemas, and atomic writers.

Each class split (data.seeds; data.seed alone by default) has a folder split<seed> of its own in each of these:
prepare   → data/prepared/split<seed>/{train,val,test}.pt, manifest.json
search    → results/search/<loss>/split<seed>/trials.csv (one row per trial), history.csv (one row per evaluation of
            a trial), best.json
runs      → results/runs/<method>/split<seed>/runs.csv (one row per seed), history.csv (one row per evaluation),
            seed<k>.pt
The trials of both live in the Optuna storage (study/storage.py): by default results/trials/journal.log, with the
runs' checkpoints under results/trials/checkpoints/, kept across stage runs and outside DVC's outputs.
evaluate  → results/evaluation/runs.csv (every split's runs.csv with a split column and test_<metric> columns),
            history.csv (all runs' curves, with a split column)
report    → reports/report.md, report.html, metrics.json, figures/*.png, tables/*.csv
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

PREPARED_DIR = Path("data/prepared")
SEARCH_DIR = Path("results/search")
RUNS_DIR = Path("results/runs")
EVALUATION_DIR = Path("results/evaluation")
REPORT_DIR = Path("reports")
TRIALS_DIR = Path("results/trials")
JOURNAL = TRIALS_DIR / "journal.log"
CHECKPOINT_STORE = TRIALS_DIR / "checkpoints"

# cpu_seconds: the CPU time of the process the run trained in, over its `seconds` (study/training.py RunResult);
# selected_iteration: the evaluation whose weights the run kept (train.checkpoint: the best by val, or the last); lr:
# the learning rate it trained at (train.lr, or the one val chose from train.learning_rates).
RUN_COLUMNS = ["method", "loss", "s", "m", "lr", "seed", "status", "reason", "seconds", "cpu_seconds", "device",
               "iterations", "selected_iteration", "objective", "val_score", "checkpoint"]


def split_folder(split: int) -> str:
    """The folder of one class split's files inside each result folder."""
    return f"split{split}"


def prepared_dir(split: int) -> Path:
    """Where the prepare stage writes one class split."""
    return PREPARED_DIR / split_folder(split)


def prepared_train_sizes(splits: list[int]) -> list[int] | None:
    """Each class split's training images, as the prepare stage's manifests record them (None where one is missing
    or unreadable: the study's iterations are then unknown, never guessed)."""
    sizes = []
    for split in splits:
        try:
            sizes.append(int(read_json(prepared_dir(split) / "manifest.json", "prepare")["splits"]["train"]["num_samples"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return sizes


def search_dir(loss: str, split: int) -> Path:
    """Where a loss's search on one class split writes its tables."""
    return SEARCH_DIR / loss / split_folder(split)


def runs_dir(method: str, split: int) -> Path:
    """Where a method's final runs on one class split are written."""
    return RUNS_DIR / method / split_folder(split)


def tuned_method(loss: str) -> str:
    """The method name of a searched loss run at its best trial's values."""
    return f"{loss}_tuned"


def is_tuned(method: str) -> bool:
    """Whether a method is a searched loss at its best values (and so carries a search's cost)."""
    return method.endswith("_tuned")


def _replace_atomically(path: Path, write) -> None:
    """`write(tmp)` to a temporary file beside `path`, synced and renamed to `path`: a crash mid-write never leaves a
    half-written file under the final name, and a failure (a full disk) leaves no temporary file either, and raises
    an OSError naming `path`, so that the message names the disk that failed (study/storage.py's fault_message)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        tmp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.filename in (None, str(tmp)):
            raise OSError(error.errno, error.strerror or str(error), str(path)) from None
        raise


def write_bytes(data: bytes, path: str | Path) -> None:
    """Write bytes in one step, so an interrupted stage never leaves half a file."""
    _replace_atomically(Path(path), lambda tmp: tmp.write_bytes(data))


def write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a table in one step, so an interrupted stage never leaves half a file."""
    _replace_atomically(Path(path), lambda tmp: frame.to_csv(tmp, index=False))


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def write_json(data: dict, path: str | Path) -> None:
    """Write JSON in one step; NaN and infinities become null so every JSON reader accepts the file."""
    text = json.dumps(_finite_or_none(data), indent=2, sort_keys=False, default=str) + "\n"
    _replace_atomically(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_csv(path: str | Path, stage: str) -> pd.DataFrame:
    """A table written by `stage`, or an error saying which stage to run."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `dvc repro {stage}` first")
    return pd.read_csv(path, keep_default_na=True)


def read_json(path: str | Path, stage: str) -> dict:
    """A JSON file written by `stage`, or an error saying which stage to run."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `dvc repro {stage}` first")
    return json.loads(path.read_text(encoding="utf-8"))
