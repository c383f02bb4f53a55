"""A run's cost on an idle and on a loaded machine: the same training (the default study's data, model and schedule,
one thread, one seed), timed alone and then beside busy processes that hold every core, in wall seconds and in the
CPU time of its own process (study/training.py RunResult.cpu_seconds). The report's cost lines give both: a loaded
machine is meant to stretch the first and leave the second where it was.

    python benchmarks/loaded_cost.py                   # 3 runs alone, 3 beside one busy process per core
    python benchmarks/loaded_cost.py --busy 4 --runs 5

It prints one line per run and the ratio loaded / alone of each measure's median, and writes them to
benchmarks/results/loaded_cost.csv. Run it on an otherwise idle machine: "alone" must be alone.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.config import load_params  # noqa: E402
from study.environment import cpu_model  # noqa: E402
from study.sources import load_dataset  # noqa: E402
from study.splits import class_split  # noqa: E402
from study.training import train  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "loaded_cost.csv"


def busy(stop) -> None:
    """A process that holds one core until `stop` is set: the machine's other load."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def one_run(sets, params) -> tuple[float, float]:
    result = train(sets, loss_name="fixed_adacos", model_config=params.model,
                   config=params.train.replace(threads=1, seed=0, device="cpu"),
                   image_size=params.data.image_size, progress=False)
    return result.seconds, result.cpu_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=os.cpu_count(), help="busy processes beside the loaded runs")
    parser.add_argument("--runs", type=int, default=3, help="runs alone and loaded each")
    args = parser.parse_args()
    params = load_params(str(REPO / "params.yaml"))
    data = params.data
    sets = class_split(load_dataset(data.dataset, cache_dir=data.cache_dir), data, data.split_seeds()[0])
    rows = []
    for load in ("alone", "loaded"):
        stop = multiprocessing.Event()
        count = args.busy if load == "loaded" else 0
        burners = [multiprocessing.Process(target=busy, args=(stop,)) for _ in range(count)]
        for burner in burners:
            burner.start()
        time.sleep(1.0 if burners else 0.0)  # the busy processes running before the run starts
        try:
            for run in range(args.runs):
                wall, cpu = one_run(sets, params)
                rows.append({"load": load, "busy": len(burners), "run": run, "wall_seconds": wall, "cpu_seconds": cpu})
                print(f"{load:6} run {run}: {wall:6.1f} s of wall-clock, {cpu:6.1f} s of CPU time", flush=True)
        finally:
            stop.set()
            for burner in burners:
                burner.join()
    frame = pd.DataFrame(rows).assign(cpu=cpu_model(), cores=os.cpu_count(), dataset=data.dataset,
                                      model=params.model.name, date=datetime.date.today().isoformat())
    medians = frame.groupby("load")[["wall_seconds", "cpu_seconds"]].median()
    for measure in ("wall_seconds", "cpu_seconds"):
        print(f"{measure}: median {medians.loc['alone', measure]:.1f} alone, {medians.loc['loaded', measure]:.1f} "
              f"loaded ({medians.loc['loaded', measure] / medians.loc['alone', measure]:.2f}x)")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(OUT, index=False)
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
