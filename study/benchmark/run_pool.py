"""Training a check's missing runs in a pool of processes: the benchmark's scripts (benchmarks/long_training.py,
learning_rate.py, rate_edges.py) each write one file per finished run, so a killed pool loses only the runs under way
and the next call trains only what is missing."""

from __future__ import annotations

import math
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


def train_as_the_cell(cells_dir, cell: str, method: str, split: int, rate: float, seed: int,
                      epochs_factor: int = 1, choose_at: float | None = None) -> tuple:
    """One run trained as a benchmark cell's runs stage trains it (its params, data, class split, schedule and
    checkpoint rule) at learning rate `rate`, seed `seed` and `epochs_factor` × its epochs, on one thread, with the
    test objective scored at every evaluation: (the cell's params, the run's result). With `choose_at`, only until
    val would choose the learning rate at that share of the length (train.choose_at)."""
    import torch

    from study.config import load_params
    from study.sources import load_dataset
    from study.splits import class_split
    from study.training import train

    torch.set_num_threads(1)
    params = load_params(str(cells_dir / cell / "params.yaml"))
    loss, values = params.runs.hyperparameters(method)
    sets = class_split(load_dataset(params.data.dataset, cache_dir=params.data.cache_dir), params.data, split)
    config = params.at_learning_rate(rate).train.replace(seed=seed, threads=1,
                                                         epochs=params.train.epochs * epochs_factor)
    if choose_at is not None:
        config = config.replace(choose_at=choose_at)
    result = train(sets, loss_name=loss, hyperparameters=values, model_config=params.model, config=config,
                   image_size=params.data.image_size, curve_splits=("test",), progress=False,
                   until_choice=choose_at is not None)
    return params, result


def run_summary(result, objective: str) -> dict:
    """A trained run as a check records it: status, length, the iteration val selected, seconds, and its val and test
    scores there (NaN for a run that did not complete: the cells keep no checkpoint of a diverged run)."""
    completed = result.status == "completed"
    return {"status": result.status, "iterations": result.iterations, "selected_iteration": result.selected_iteration,
            "seconds": result.seconds, "val_score": result.final.get(objective, math.nan) if completed else math.nan,
            **{key: (value if completed else math.nan) for key, value in result.final.items()
               if key.startswith("test_")}}
