"""Training a check's missing runs in a pool of processes: the benchmark's scripts (benchmarks/long_training.py,
learning_rate.py, rate_edges.py) each write one file per finished run, so a killed pool loses only the runs under way
and the next call trains only what is missing."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed


def train_missing_runs(train_one: Callable[..., str], runs: Sequence[tuple], is_done: Callable[[tuple], bool],
                       workers: int) -> None:
    """Call train_one(*run) for every run that is not done, `workers` at once, printing each returned line as its run
    lands; a run that raises is named in its line and the others go on, and the call then raises naming how many
    failed. Fresh processes, never forked ones: a forked process cannot use a CUDA context its parent initialised."""
    missing = [run for run in runs if not is_done(run)]
    print(f"{len(runs) - len(missing)} of {len(runs)} runs done; training {len(missing)} with {workers} process(es)",
          flush=True)
    started = time.perf_counter()
    failed = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(train_one, *run): run for run in missing}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                line = future.result()
            except Exception as error:  # one run's failure (a missing font, a full disk) stops no other run
                failed.append(futures[future])
                line = f"FAILED {futures[future]}: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
            print(f"[{done}/{len(missing)}, {time.perf_counter() - started:.0f} s] {line}", flush=True)
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(missing)} runs failed (each named above, first {failed[0]}); the "
                           "others are written: fix the cause and run the same command again, it trains only what is "
                           "missing")
