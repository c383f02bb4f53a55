"""A study's price before it trains: a short calibration on the chosen device at the study's real sizes, spread over
the whole design, and a cheaper design that asks the same question when the price is beyond the bound.

The calibration is one run of the study's first class split as it will train: its model, its loss head at the
split's training classes, its batch, image size, device and threads per run, for a few dozen steps (at least a
second of them; a study of fewer than ten times that many, its first ten steps alone), then one evaluation of test
(as a final run's learning curve scores it) and one with every metric (as a search trial and the evaluate stage
score it). Pixels are random stand-ins of the source's image size where the source is generated
or held in memory (a kernel's time does not depend on the pixels), the files themselves for a folder: nothing is
rendered or downloaded. The price is that calibration times each run's planned iterations and evaluations
(study/training.py's `planned_iterations` and `evaluation_schedule`), over every class split × (search trials +
final runs), and the evaluate stage's test scoring; wall-clock adds the runs packed at once (train.parallel) and
each stage's and packed worker's start, which the stage measures as its own.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from study.cautions import cautions, scale_range_note
from study.plateau import longer_factors
from study.progress import duration
from study.config import StudyParams
from study.sources import ImageSet, image_shape
from study.training import (choice_iteration, evaluate, evaluation_schedule, planned_iterations, resolve_device,
                            train)
from study.validation import DataProblem, planned_source, planned_splits, study_cost
from study.packing import WORKERS_JOIN_AFTER_SECONDS, available_cores, runs_at_once, threads_per_run

# Steps of the calibration run: at least CALIBRATION_ITERATIONS, more where they take under CALIBRATION_SECONDS (a
# small model's step of a millisecond, timed over 40 steps, would read the machine's other load more than itself),
# up to MAX_CALIBRATION_ITERATIONS. Evaluated at 0, WARM_UP, half-way and the end (train.eval_points: 2): the steps
# after WARM_UP give the steady step time, those before it a run's start (first allocations, kernel choice).
CALIBRATION_ITERATIONS, MAX_CALIBRATION_ITERATIONS = 40, 400
CALIBRATION_SECONDS = 1.0
WARM_UP = 10
# ... and at most this share of the study's own iterations: a study too short for CALIBRATION_ITERATIONS within it
# (a smoke test, a tiny own folder) is priced from the first run of WARM_UP steps alone, its step read with the
# first steps' overhead in it (the price errs long), rather than calibrated for longer than it trains.
CALIBRATION_SHARE = 0.1
# A calibration whose first run took longer than this says how long the rest will take: a large backbone on a CPU,
# with val and test sets of thousands of images, calibrates for many minutes (ResNet-50 on 2 cores: 8 min at 1,200
# images, over 25 at 12,000), and a price that keeps silent that long looks hung.
SAY_PROGRESS_AFTER = 30.0
# What a run costs beside its training and evaluations, which the calibration does not see: Optuna's bookkeeping in
# the trial storage (a search trial reports each evaluation, 4 ms each to the journal file), its history and
# checkpoint written, its data read; measured at 0.2-0.3 s a run in tests/test_price.py's stages on the 2-core CPU
# (load average 4), a few % of the default study's 5-15 s runs.
RUN_BOOKKEEPING = 0.25
# The calibration's training split: this many batches of it, which its epochs go round (memory stays a few batches').
TRAIN_BATCHES = 8
# Beyond this wall-clock the price names a cheaper design: an hour on a CPU, a day on a GPU (issue 56).
BOUNDS = {"cpu": 3600.0, "cuda": 86400.0, "mps": 86400.0}
# The one loss every study trains (study/config.py refuses runs.methods without it); the heads differ little in
# cost beside the backbone (`study bench`: 1.09-1.34x plain normalised softmax at C = 100,000).
CALIBRATION_LOSS = "fixed_adacos"
# A cheaper design keeps at least this many class splits (the verdict's interval needs split-to-split spread) and
# splits only where each split's test classes are this many: a split's score then averages over many test classes,
# so splits differ little (the report's variance decomposition says whether they did).
MIN_SPLITS, MANY_TEST_CLASSES = 2, 200
# ... and at least this many trials per search: the benchmark's searches needed 6-30 trainings per split to match
# Fixed AdaCos (README), so fewer could not show where tuning pays.
MIN_TRIALS = 6


@dataclass(frozen=True)
class Calibration:
    """Seconds measured on the device at the study's sizes: a training step, a run's start, one val evaluation, one
    test evaluation as a learning curve scores it, one with every metric; and how it ran."""

    device: str
    threads: int
    step: float
    start: float
    val: float
    test: float
    full_test: float
    process_start: float
    free_cores: int  # the cores the machine's other load left free as it ran (see `free_cores`)
    load: float  # the 1-minute load average as it ran
    iterations: int  # the calibration run's steps
    seconds: float  # the calibration's own wall-clock

    def run_seconds(self, iterations: int, evaluations: int, final: bool) -> float:
        """One run's device-seconds: its bookkeeping and start, steps and val evaluations, and (final) test at each
        evaluation or (search trial) test with every metric once trained."""
        scored = evaluations * (self.val + self.test) if final else evaluations * self.val + self.full_test
        return RUN_BOOKKEEPING + self.start + iterations * self.step + scored


@dataclass(frozen=True)
class Price:
    """A study's expected device-seconds (its runs one at a time) and wall-clock (runs packed at once, stage and
    worker starts), from a Calibration; `cheaper` names a design that asks the same question within the bound."""

    calibration: Calibration
    device_seconds: float
    search_seconds: float
    wall_seconds: tuple[float, float]  # (runs at once as fast as one alone, runs at once no faster than one)
    runs_at_once: int
    starts: int
    bound: float
    exact: bool  # False where pruning may stop trials early: then the price is at most
    cheaper: tuple[str, str] | None = None  # (the changes as `dvc exp run -S` arguments, what it costs and gives up)
    longer_seconds: float = 0.0  # device-seconds of every final run trained again up to runs.plateau_cap, at most
    plateau_cap: int = 1

    @property
    def beyond_bound(self) -> bool:
        """Whether even the fastest wall-clock is beyond the device's bound."""
        return self.wall_seconds[0] > self.bound

    def lines(self) -> list[str]:
        """The price as validate prints it."""
        calibration, (fast, slow) = self.calibration, self.wall_seconds
        wall = f"about {duration(fast)}" if math.isclose(fast, slow) else f"{duration(fast)} to {duration(slow)}"
        gpu = not calibration.device.startswith("cpu")
        packed = "one run at a time" if self.runs_at_once == 1 else f"{self.runs_at_once} runs at once" + (
            " (from as fast as one alone to no faster)" if gpu else
            f" (taking turns on {calibration.free_cores} free core(s))"
            if calibration.free_cores < self.runs_at_once * calibration.threads else "")
        lines = [
            f"price: calibrated on {calibration.device} in {calibration.seconds:.1f} s ({calibration.iterations} steps"
            f"{', as the study is shorter than a calibration' if calibration.iterations == WARM_UP else ''}), "
            f"{calibration.threads} thread(s) a run, load average {calibration.load:.1f} on {available_cores()} cores "
            f"({calibration.free_cores} free): a step {calibration.step * 1e3:.1f} "
            f"ms, a run's start {calibration.start:.2f} s, a val evaluation {calibration.val * 1e3:.0f} ms, test "
            f"{calibration.test * 1e3:.0f} ms ({calibration.full_test * 1e3:.0f} ms with every metric), a process's "
            f"start {calibration.process_start:.1f} s",
            f"price: {'at most ' if not self.exact else ''}{duration(self.device_seconds)} of device time (the "
            f"searches {duration(self.search_seconds)}), {wall} of wall-clock with {packed} and {self.starts} stage "
            "and worker starts; prepare's data and the report's figures come on top",
        ]
        if self.plateau_cap > 1:
            lines.append(f"price: a method whose runs miss the plateau rule trains them again at twice the length, up "
                         f"to {self.plateau_cap}x (runs.plateau_cap): at most {duration(self.longer_seconds)} more "
                         "device time")
        if self.beyond_bound:
            lines.append(f"price: beyond {duration(self.bound)} on {calibration.device.split(':')[0]}; "
                         + (f"cheaper, the same question: {self.cheaper[0]} ({self.cheaper[1]})" if self.cheaper else
                            "no design of the same question fits: train shorter (train.max_iterations) or on a GPU"))
        return lines


def process_age() -> float:
    """Seconds since this process started (Linux's /proc; 0 elsewhere): a stage's start, its imports included."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return max(0.0, uptime - int(stat[19]) / os.sysconf("SC_CLK_TCK"))


def first_split(params: StudyParams) -> tuple[str, dict[str, ImageSet]] | None:
    """The source and the splits prepare makes for the study's first class split, labels only (as validate plans
    them); None where the source is known only once prepare reads it."""
    try:
        planned = planned_source(params.data)
        if planned is None:
            return None
        source, image_set = planned
        return source, planned_splits(image_set, params.data, params.data.split_seeds()[0])
    except DataProblem:  # validate has said it
        return None


def native_shape(spec: str, stand_in: ImageSet, cache_dir: str | None) -> tuple[int, int] | None:
    """(H, W) of the images `spec` makes: the images themselves where validate holds them, else the source's answer
    from its spec (study.sources.image_shape); None for a folder of files (resized to data.image_size) and for
    sources known only once downloaded."""
    if stand_in.images is not None and stand_in.images.shape[-1] > 1:  # the images themselves (digits)
        return tuple(stand_in.images.shape[-2:])
    return image_shape(spec, cache_dir)


def stand_ins(splits: dict[str, ImageSet], shape: tuple[int, int] | None, train_images: int) -> dict[str, ImageSet]:
    """The splits with random pixels of `shape` (files kept as they are), the training split cut to
    `train_images` images of all its classes: what the calibration trains and evaluates on."""
    generator = torch.Generator().manual_seed(0)

    def stand_in(image_set: ImageSet, count: int) -> ImageSet:
        count = min(count, len(image_set))
        labels = image_set.labels[:count]
        if image_set.paths is not None:
            return ImageSet(labels, image_set.class_names, paths=image_set.paths[:count])
        channels = image_set.images.shape[1]
        images = torch.randint(0, 256, (count, channels, *shape), generator=generator, dtype=torch.uint8)
        return ImageSet(labels, image_set.class_names, images=images)

    return {"train": stand_in(splits["train"], train_images),
            **{name: stand_in(split, len(split)) for name, split in splits.items() if name != "train"}}


def calibrate(params: StudyParams, sets: dict[str, ImageSet], process_start: float,
              say: Callable[[str], None] | None = None, study_iterations: int | None = None) -> Calibration:
    """A first run of WARM_UP steps (what a process pays once: lazy initialisation, first kernels; and a first
    reading of the step), then one of enough steps for CALIBRATION_SECONDS on `sets` at the study's model, batch,
    device and threads per run, then one test evaluation of each kind, timed; the second run is left out where
    CALIBRATION_SHARE of `study_iterations` (the whole study's) is under CALIBRATION_ITERATIONS. Where the first run
    took over SAY_PROGRESS_AFTER seconds, `say` hears what it measured and how long the rest is expected to take."""
    began = time.perf_counter()
    threads = threads_per_run(params, runs_at_once(params.train)).train.threads or torch.get_num_threads()
    per_epoch = max(len(sets["train"]) // params.train.batch_size, 1)
    device = resolve_device(params.train.device)
    threads_before = torch.get_num_threads()

    def run(iterations: int, **schedule):
        config = params.train.replace(epochs=math.ceil(iterations / per_epoch), threads=threads, seed=0,
                                      max_iterations=iterations, checkpoint="last", **schedule)
        started = time.perf_counter()
        result = train(sets, loss_name=CALIBRATION_LOSS, model_config=params.model, config=config,
                       image_size=params.data.image_size, progress=False)
        if result.iterations < iterations:
            raise RuntimeError(f"the calibration run ended at iteration {result.iterations} ({result.status}: "
                               f"{result.reason})")
        full_test = _timed(lambda: evaluate(result.model, result.loss, sets, "test", config, device,
                                            params.data.image_size, full=True))
        return config, result, time.perf_counter() - started - result.seconds - full_test, full_test

    try:
        _, first, first_built, first_full_test = run(WARM_UP, eval_points=None, eval_every=WARM_UP)
        first_seconds = time.perf_counter() - began
        rough = training_seconds(first.history)[WARM_UP] / WARM_UP
        iterations = calibration_steps(rough, study_iterations)
        if iterations == WARM_UP:  # the study is shorter than a calibration: the first run prices it
            result, built, full_test = first, first_built, first_full_test
            test = full_test  # a test with every metric: at least one as a learning curve scores it
        else:
            if say is not None and first_seconds > SAY_PROGRESS_AFTER:
                say(rest_of_calibration(first.history, first_seconds, rough, first_full_test, iterations, device))
            config, result, built, full_test = run(iterations, eval_points=2)
            test = _timed(lambda: evaluate(result.model, result.loss, sets, "test", config, device,
                                           params.data.image_size))
    finally:
        torch.set_num_threads(threads_before)
    rows = {row["iteration"]: row for row in result.history}  # at 0, WARM_UP, (half-way and the end)
    trained = training_seconds(result.history)
    step = rough if iterations == WARM_UP else (trained[iterations] - trained[WARM_UP]) / (iterations - WARM_UP)
    later = [k for k in sorted(rows) if k > 0]  # the first evaluation also moves val onto the device
    val = (rows[later[-1]]["eval_seconds"] - rows[0]["eval_seconds"]) / len(later)
    start = built + max(0.0, trained[WARM_UP] - WARM_UP * step)
    # What the first run paid beyond a run of its length: once a process, so with each process's start.
    once = max(0.0, first_seconds - (start + WARM_UP * step + 2 * val + full_test))
    return Calibration(device=result.device, threads=threads, step=step, start=start, val=val, test=test,
                       full_test=full_test, process_start=process_start + once, free_cores=free_cores(),
                       load=_load(), iterations=iterations, seconds=time.perf_counter() - began)


def calibration_steps(rough_step: float, study_iterations: int | None = None) -> int:
    """The calibration's second run's steps at a first reading of the step: enough for CALIBRATION_SECONDS, within
    CALIBRATION_ITERATIONS to MAX_CALIBRATION_ITERATIONS and CALIBRATION_SHARE of the study's iterations; WARM_UP
    (no second run) where that share is under CALIBRATION_ITERATIONS."""
    steps = min(MAX_CALIBRATION_ITERATIONS, max(CALIBRATION_ITERATIONS, math.ceil(CALIBRATION_SECONDS
                                                                                 / max(rough_step, 1e-6))))
    if study_iterations is None:
        return steps
    share = math.floor(CALIBRATION_SHARE * study_iterations)
    return WARM_UP if share < CALIBRATION_ITERATIONS else min(steps, share)


def training_seconds(history: list[dict]) -> dict[int, float]:
    """By evaluated iteration, the seconds a run had spent by then on everything but its evaluations."""
    return {row["iteration"]: row["seconds"] - row["eval_seconds"] for row in history}


def rest_of_calibration(history: list[dict], first_seconds: float, step: float, full_test: float, iterations: int,
                        device: torch.device | str) -> str:
    """What the calibration's first run measured (its `history`, evaluated at 0 and WARM_UP; its `step`), and how long
    its second run and two test evaluations will take at that pace: `iterations` steps, val at 0, WARM_UP, half-way
    and the end, test with every metric and without."""
    rows = {row["iteration"]: row for row in history}
    val = rows[WARM_UP]["eval_seconds"] - rows[0]["eval_seconds"]
    rest = iterations * step + 4 * val + 2 * full_test

    def said(seconds: float) -> str:
        return f"{seconds:.1f} s" if seconds < 90 else duration(seconds)

    return (f"price: calibrating on {device}: its first run of {WARM_UP} steps took {said(first_seconds)} (a step "
            f"{said(step)}, a val evaluation {said(val)}, a test {said(full_test)}); the rest, {iterations} steps "
            f"and 6 evaluations, about {said(rest)} more")


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def free_cores() -> int:
    """This process's cores less the machine's other load: the 1-minute load average less this process's own one
    thread, rounded, at least one. Runs packed beyond the free cores only take turns with that load: measured on the
    2-core CPU at load 4, two packed runs took 33-52 s each where one alone took 12-16 s."""
    others = max(0.0, _load() - 1.0)
    return max(1, min(available_cores(), round(available_cores() - others)))


def _timed(work) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def price_study(params: StudyParams, process_start: float | None = None,
                say: Callable[[str], None] | None = None) -> Price | str:
    """The study's Price from a calibration on its first class split; or, where it cannot be priced before
    prepare, the line that says why. `process_start` is the stage's own start (default: this process's age); `say`
    hears a slow calibration's progress."""
    planned = first_split(params)
    if planned is None:
        return ("price: not before prepare has read the source (its image size is known only then); run "
                "`study plan` once it has")
    source, splits = planned
    shape = native_shape(source, splits["train"], params.data.cache_dir)
    if shape is None and splits["train"].paths is None:
        return f"price: not before prepare has read {source} (its image size is known only then)"
    train_images = params.train.batch_size * TRAIN_BATCHES
    sizes = train_sizes(params)
    calibration = calibrate(params, stand_ins(splits, shape, train_images),
                            process_age() if process_start is None else process_start, say,
                            study_cost(params, sizes).iterations)
    return priced(params, calibration, sizes, splits["test"].num_classes)


def train_sizes(params: StudyParams) -> list[int]:
    """Each class split's training images, as prepare will split them (labels only)."""
    source_and_set = planned_source(params.data)
    if source_and_set is None:
        return []
    return [len(planned_splits(source_and_set[1], params.data, split)["train"]) for split in params.data.split_seeds()]


def priced(params: StudyParams, calibration: Calibration, sizes: list[int], test_classes: int,
           propose: bool = True) -> Price:
    """The Price of `params`' design from `calibration`, with each class split's training size in `sizes`; beyond
    the bound, with the cheaper design `propose` finds."""
    train, search, runs = params.train, params.search, params.runs
    trials = len(search.losses) * search.repeats * search.n_trials
    rates = len(train.learning_rates or [train.lr])
    seeds = len(runs.seeds)
    parallel = runs_at_once(train)
    gpu = not calibration.device.startswith("cpu")
    # On a CPU, runs at once each hold their own free cores (threads per run); on a GPU they share it, measured
    # from 1.0x to 3x at 8 runs (docs/running.md): from as fast as one alone to no faster.
    cores = available_cores() if gpu else calibration.free_cores
    at_once = min(parallel, max(1, cores // calibration.threads))
    # (runs training at a time, whether packed workers start) for the fast and the slow wall-clock
    speedups = ((at_once, True), (1, False)) if gpu else ((at_once, True), (at_once, True))
    device = search_device = longer = 0.0
    walls = [0.0, 0.0]
    stages = 3 + 2 * len(search.losses) + len(runs.methods)  # prepare, search, runs, tuned, evaluate, report
    starts = stages
    for size in sizes:
        iterations = planned_iterations(size, train)
        evaluations = len(evaluation_schedule(iterations, train)) + 1  # and iteration 0
        trial = calibration.run_seconds(iterations, evaluations, final=False)
        final = calibration.run_seconds(iterations, evaluations, final=True)
        # With train.choose_at each rate trains until val chooses (its evaluations so far), then the chosen one on.
        choice = choice_iteration(iterations, train) if rates > 1 else None
        early = 0.0 if choice is None else calibration.run_seconds(
            choice, sum(point <= choice for point in evaluation_schedule(iterations, train)) + 1, final=True)
        # One packed block per search, per method and rate (and chosen rate), per tuned loss: (trainings, seconds).
        blocks = ([(search.repeats * search.n_trials, trial)] * len(search.losses)
                  + [(seeds, early)] * (len(runs.methods) * rates if choice else 0)
                  + [(seeds, final)] * (len(runs.methods) * (1 if choice else rates) + len(search.losses)))
        for count, seconds in blocks:
            # the stage's process and its packed workers, which join only a block that outlasts their delay
            spawned = min(parallel, count) if count * seconds > WORKERS_JOIN_AFTER_SECONDS else 1
            for which, (speedup, spawning) in enumerate(speedups):
                walls[which] += block_wall(count, seconds, min(speedup, count), spawned if spawning else 1,
                                           calibration.process_start)
            starts += spawned - 1
        search_device += trials * trial
        kept = (len(runs.methods) + len(search.losses)) * seeds  # the evaluate stage scores each kept run on test
        device += trials * trial + sum(count * seconds for count, seconds in blocks[len(search.losses):])
        device += kept * calibration.full_test
        for factor in longer_factors(runs.plateau_cap):
            extended = planned_iterations(size, params.at_length(factor).train)
            longer += kept * calibration.run_seconds(extended, len(evaluation_schedule(extended, train)) + 1, True)
        walls = [wall + kept * calibration.full_test for wall in walls]
    process_starts = stages * calibration.process_start
    price = Price(calibration=calibration, device_seconds=device, search_seconds=search_device,
                  wall_seconds=(walls[0] + process_starts, walls[1] + process_starts), runs_at_once=parallel,
                  starts=starts, bound=BOUNDS.get(calibration.device.split(":")[0], BOUNDS["cuda"]),
                  exact=search.pruner == "none", longer_seconds=longer, plateau_cap=runs.plateau_cap)
    if propose and price.beyond_bound:
        return replace(price, cheaper=cheaper_design(params, calibration, sizes, test_classes, price.bound))
    return price


def block_wall(count: int, seconds: float, at_once: int, spawned: int, worker_start: float) -> float:
    """Wall-clock of `count` runs of `seconds` each beside `spawned` - 1 packed workers, `at_once` of them training
    at a time: the stage's process trains while its workers join (after WORKERS_JOIN_AFTER_SECONDS) and start (each
    `worker_start`, taking its turn on the cores), then they share the runs."""
    alone = count * seconds
    if spawned <= 1:
        return alone
    if at_once <= 1:  # a worker that only takes turns: its start is paid, no gain
        return alone + (spawned - 1) * worker_start
    ready = WORKERS_JOIN_AFTER_SECONDS + worker_start
    if count <= math.ceil(ready / seconds):  # the stage has begun every run before a worker is ready: it only exits
        return max(alone, ready)
    return max((alone + (spawned - 1) * ready) / at_once, ready + seconds)


def cheaper_design(params: StudyParams, calibration: Calibration, sizes: list[int], test_classes: int,
                   bound: float) -> tuple[str, str] | None:
    """The fewest changes that bring the study within `bound`, cut in this order: the methods beside Fixed AdaCos
    (the question is tuned ArcFace against it), class splits where each holds MANY_TEST_CLASSES test classes, then
    trials per search down to MIN_TRIALS; None where even all of them are not enough."""
    changes, given_up = {}, []

    def within(changed: StudyParams) -> bool:
        kept_sizes = sizes[:len(changed.data.split_seeds())]
        return not priced(changed, calibration, kept_sizes, test_classes, propose=False).beyond_bound

    def with_splits(study: StudyParams, count: int) -> StudyParams:
        return study.replace(data={**study.data.to_dict(), "seeds": list(params.data.split_seeds()[:count])})

    def with_trials(study: StudyParams, count: int) -> StudyParams:
        return study.replace(search={**study.search.to_dict(), "n_trials": count})

    candidate = params
    if list(params.runs.methods) != ["fixed_adacos"]:
        candidate = candidate.replace(runs={**candidate.runs.to_dict(), "methods": ["fixed_adacos"]})
        changes["runs.methods"] = "[fixed_adacos]"
        given_up.append(f"the other methods ({', '.join(m for m in params.runs.methods if m != 'fixed_adacos')}), "
                        "which set the answer in context")
    splits = len(params.data.split_seeds())
    if not within(candidate) and splits > MIN_SPLITS and test_classes >= MANY_TEST_CLASSES:
        count = most_within(MIN_SPLITS, splits - 1, lambda count: within(with_splits(candidate, count)))
        candidate = with_splits(candidate, count)
        changes["data.seeds"] = "[" + ",".join(map(str, candidate.data.split_seeds())) + "]"
        given_up.append(f"{splits - count} class split(s): with {test_classes:,} test classes a split, splits differ "
                        "little (the report's variance decomposition says if they did)")
    if not within(candidate) and params.search.n_trials > MIN_TRIALS:
        count = most_within(MIN_TRIALS, params.search.n_trials - 1, lambda count: within(with_trials(candidate, count)))
        candidate = with_trials(candidate, count)
        changes["search.n_trials"] = str(count)
        given_up.append(f"the tuning curve beyond {count} trials")
    if not changes or not within(candidate):
        return None
    price = priced(candidate, calibration, sizes[:len(candidate.data.split_seeds())], test_classes, propose=False)
    arguments = " ".join(f"-S '{key}={value}'" for key, value in changes.items())
    return (f"dvc exp run {arguments}", f"{duration(price.wall_seconds[0])} of wall-clock, "
            f"{duration(price.device_seconds)} of device time; it gives up {'; '.join(given_up)}")


def most_within(low: int, high: int, fits) -> int:
    """The largest count in [low, high] that `fits` (which holds for all counts below one that does), by bisection;
    `low` where none does."""
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def say_before_training(params: StudyParams, process_start: float, out=None) -> None:
    """What validate says of a study that passed, beside its cost: the warnings (study/cautions.py), the searched
    scale against s_f and the price, each line to `out` (default stderr: the stage's output file never holds them,
    and its stdout stays the one line of its cost)."""
    out = sys.stderr if out is None else out
    planned = first_split(params)
    class_counts = {part: split.num_classes for part, split in planned[1].items()} if planned else None
    lines = [f"warning: {line}" for line in cautions(params, class_counts)]
    note = None if class_counts is None else scale_range_note(params, class_counts["train"])
    lines += [note] if note else []
    if lines:
        print("\n".join(lines), file=out, flush=True)
    try:
        price = price_study(params, process_start, say=lambda line: print(line, file=out, flush=True))
    except (RuntimeError, ValueError, OSError) as error:  # the price says how long, never whether: it stops nothing
        price = f"price: not calibrated: {error}"
    print(price if isinstance(price, str) else "\n".join(price.lines()), file=out, flush=True)
