"""search.stop_early's inputs, checked by the validate stage before anything trains: stages/search.py trains the
Fixed AdaCos runs first and only then reads the prior its advice judges with (study/advice.py)."""

from __future__ import annotations

import csv
from pathlib import Path

from study.config import StudyParams
from study.results import REPORT_DIR

# Where stages/search.py reads the prior of search.stop_early: benchmark, in the study's folder.
BENCHMARK_CELLS = REPORT_DIR / "benchmark" / "tables" / "cells.csv"


def stop_early_problems(params: StudyParams, root: Path) -> list[str]:
    """search.stop_early: benchmark reads its prior (stages/search.py) from the benchmark's cells table in the study's
    folder once the Fixed AdaCos runs are trained: that it is there and scores the study's objective, checked now."""
    table, wanted = root / BENCHMARK_CELLS, f"test_{params.train.objective}"
    if params.search.stop_early != "benchmark":
        return []
    fix = "set search.stop_early: flat, which needs no benchmark"
    try:
        with table.open(encoding="utf-8", newline="") as rows:
            scored = {row["metric"] for row in csv.DictReader(rows) if row["method"] == "arcface_tuned"}
    except FileNotFoundError:
        return [f"search.stop_early: benchmark reads its prior from {table}, which is not here; `study benchmark "
                f"--report-only` writes it, or {fix}"]
    except (OSError, KeyError, csv.Error) as error:
        return [f"search.stop_early: benchmark reads its prior from {table}, which is not the benchmark's table of "
                f"cells ({type(error).__name__}: {error}); `git checkout -- {table}` restores it, or {fix}"]
    if wanted not in scored:
        scores = ", ".join(sorted(scored)) or "nothing"
        return [f"search.stop_early: benchmark reads its prior from {table}, whose cells score {scores}, not {wanted} "
                f"(train.objective: {params.train.objective}); {fix}, or train.objective to one the benchmark scores "
                f"({', '.join(sorted(metric.removeprefix('test_') for metric in scored)) or 'none'})"]
    return []
