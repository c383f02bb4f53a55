"""The price before training against what the study really cost: for the default study and for benchmark cells, the
device time validate's price gives (study/price.py: a calibration of a few dozen steps on this machine, spread over
the whole design) beside the device time the finished study recorded (every search trial's and final run's own
seconds, summed as the benchmark counts a cell: study.benchmark.cells.cell_device_seconds). The goal: within 1.5×
either way.

The price calibrates one run at the study's threads per run, so run this on an idle machine: the committed studies
recorded their seconds with train.parallel runs at once, one thread each, which an idle calibration at one thread
matches best. The evaluate stage's test scoring, which the price adds, is not among the recorded seconds.

    python benchmarks/price_check.py                              # the default study (the repository's root)
    python benchmarks/price_check.py --cells wesnoth-open-c37     # and these cells (benchmarks/cells/<cell>)

It writes benchmarks/results/price_check.csv, one row per study, appending to the rows of other studies there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.benchmark.cells import cell_device_seconds  # noqa: E402
from study.config import StudyParams, load_params  # noqa: E402
from study.environment import cpu_model  # noqa: E402
from study.price import price_study  # noqa: E402
from study.results import REPORT_DIR, write_bytes  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "price_check.csv"
GOAL = 1.5


def recorded_seconds(study: Path, params: StudyParams) -> float:
    """The device-seconds a finished study (`params`) recorded in its trainings, from its report's tables."""
    tables = study / REPORT_DIR / "tables"
    rates = len(params.train.learning_rates or [None])
    cost = cell_device_seconds(pd.read_csv(tables / "search.csv"), pd.read_csv(tables / "final_test.csv"),
                               pd.read_csv(tables / "run_scores.csv"), rates,
                               params.train.choose_at if rates > 1 else None)
    return cost["total"]


def check(study: Path, name: str) -> dict:
    """The price of the study in `study` (priced from inside it, as validate prices it) beside its recorded cost."""
    here = Path.cwd()
    os.chdir(study)
    try:
        params = load_params("params.yaml")
        price = price_study(params)
    finally:
        os.chdir(here)
    if isinstance(price, str):
        raise SystemExit(f"{name}: {price}")
    recorded = recorded_seconds(study, params)
    calibration = price.calibration
    return {"study": name, "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
            "device": calibration.device, "threads": calibration.threads, "load": round(calibration.load, 2),
            "step_ms": round(calibration.step * 1e3, 3), "priced_seconds": round(price.device_seconds, 1),
            "recorded_seconds": round(recorded, 1), "recorded_over_priced": round(recorded / price.device_seconds, 3),
            "within_goal": 1 / GOAL <= recorded / price.device_seconds <= GOAL}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="*", default=[], help="benchmark cells to check besides the default study")
    parser.add_argument("--no-default", action="store_true", help="leave the default study out")
    arguments = parser.parse_args()
    studies = ([] if arguments.no_default else [(REPO, "default study")]) + [
        (REPO / "benchmarks" / "cells" / cell, cell) for cell in arguments.cells]
    rows = []
    for study, name in studies:
        row = check(study, name)
        print(f"{name}: priced {row['priced_seconds']:,.0f} s, recorded {row['recorded_seconds']:,.0f} s of device "
              f"time ({row['recorded_over_priced']:.2f}×; load {row['load']} when calibrated)")
        rows.append(row)
    table = pd.DataFrame(rows)
    if OUT.is_file():  # keep the rows of studies not checked this time
        kept = pd.read_csv(OUT)
        table = pd.concat([kept[~kept["study"].isin(table["study"])], table], ignore_index=True)
    write_bytes(table.to_csv(index=False).encode(), OUT)
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
