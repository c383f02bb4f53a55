"""Checks that run before any stage deletes an output: params.yaml whole, with the facts that cross its sections or
depend on this machine (the `validate` stage, first in dvc.yaml), and the data once read and split (`prepare`).

Every problem is one line naming the key or file, what is wrong and the fix; all are reported at once. Everything
that can be known before training is checked here: the data's folds (the test split's verification pairs), a folder
source's image files, the trial journal's lines, a secret in a URL (with how to purge it from .git), and what the
study will cost, refused beyond a documented bound unless STUDY_ALLOW_LARGE=1.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

from study.config import ConfigError, DataConfig, StudyParams, TrainConfig, load_params
from study.database_url import SECRET_REFUSED, purge_advice
from study.environment import machine_memory, readable_bytes
from study.metrics import verification_metrics
from study.results import JOURNAL
from study.models import check_model
from study.sources import ImageSet, labels_only, source_named
from study.splits import class_split, rgb_image
from study.stop_early import stop_early_problems
from study.storage import check_storage
from study.training import choice_iteration, planned_iterations, resolve_device
from study.packing import available_cores, thread_variable_problems

# The validate stage's output, which every other stage depends on. Always the same bytes: a params change that
# passes changes nothing downstream stages depend on, so only the stages that read the changed keys rerun.
VALIDATED = Path("results/validated.txt")
VALIDATED_TEXT = "params.yaml passed study/validation.py's checks\n"
# A link to a folder dataset's images, an output of validate and a dependency of prepare: DVC hashes the folder
# through it, so images added, changed or removed there make validate and prepare out of date (`dvc status` says so)
# without any stage running, and validate checks the folder again before prepare's output is deleted.
SOURCE_LINK = Path("data/source")
NO_SOURCE_FOLDER = "this dataset is not read from a folder: nothing to watch\n"
ADACOS_METHODS = ("fixed_adacos", "dynamic_adacos")
MIN_ADACOS_CLASSES = 3  # AdaCos's s_f = √2·ln(C − 1) needs C ≥ 3


def validate_params(path: str = "params.yaml") -> StudyParams:
    """params.yaml read and checked whole; a ConfigError lists every problem, each with its key and the fix."""
    return validate_study(path)[0]


def validate_study(path: str | Path = "params.yaml",
                   served: Callable[[StudyParams], StudyParams] = lambda params: params) -> tuple[StudyParams, Cost]:
    """The params file of the study in its folder read and checked whole (as `served` changes them: a worker's own
    thread count), and what the study will cost; a ConfigError lists every problem, each with its key and the fix."""
    try:
        params = served(load_params(str(path)))  # unknown sections and keys, types, ranges, checks within a section
    except ConfigError as error:  # a secret in a URL: say too how to get it out of .git, where DVC may have put it
        raise ConfigError("\n".join(f"{line}; {purge_advice()}" if SECRET_REFUSED in line else line
                                     for line in str(error).splitlines())) from None
    problems, cost = study_problems(params, Path(path).parent / JOURNAL)
    problems += stop_early_problems(params, Path(path).parent)
    if problems:
        raise ConfigError("\n".join(problems))
    return params, cost


def params_problems(params: StudyParams) -> list[str]:
    """The problems of valid-looking params that only show across sections or on this machine, one line each."""
    return study_problems(params)[0]


def study_problems(params: StudyParams, journal: Path = JOURNAL) -> tuple[list[str], Cost]:
    """The problems of valid-looking params that only show across sections or on this machine, one line each, and
    the study's cost (its sizes beyond the bound are among the problems); its trial journal at `journal`."""
    model, problems = params.model, []
    problems += _problem("model.name", check_model, model.name) or _problem(
        "model.pretrained", check_model, model.name, model.pretrained)
    problems += _problem("train.device", resolve_device, params.train.device)
    problems += [problem.replace("search.storage: search.storage", "search.storage")  # said once is enough
                 for problem in _problem("search.storage", check_storage, params.search, journal)]
    problems += _problem("report.palette", check_palette, params.report.palette)
    problems += cores_problems(params.train, available_cores()) + thread_variable_problems()
    found, cost = declared_problems(params)
    return problems + found, cost


def declared_problems(params: StudyParams) -> tuple[list[str], Cost]:
    """What the params ask that their data cannot support, or that costs beyond the bound, one line each, and the
    study's cost: the problems a benchmark's plan can know of a cell before it is written."""
    found, train_sizes = _data_problems(params)
    cost = study_cost(params, train_sizes)
    return found + cost_problems(params, cost), cost


def _problem(key: str, check, *args) -> list[str]:
    """The error of `check(*args)` as a problem of `key`, or none."""
    try:
        check(*args)
    except (ValueError, RuntimeError) as error:
        return [f"{key}: {error}"]
    return []


# Seaborn's own palettes, known without importing seaborn (seconds); any other name is asked of seaborn itself.
SEABORN_PALETTES = tuple(f"{name}{variant}" for name in ("deep", "muted", "bright", "pastel", "dark", "colorblind")
                         for variant in ("", "6"))


def check_palette(name: str) -> None:
    """A ValueError when seaborn (and through it matplotlib) knows no palette called `name`."""
    if name in SEABORN_PALETTES:
        return
    import seaborn

    try:
        seaborn.color_palette(name, n_colors=10)
    except (ValueError, TypeError):
        own = ", ".join(SEABORN_PALETTES[::2])
        raise ValueError(f"{name!r} is not a palette seaborn knows; use one of its own ({own}, husl), a matplotlib "
                         "colormap (viridis, tab10, ...) or a spec such as light:#5A9") from None


# Beyond this many runs per core, packed runs only take turns on the cores, each holding its own copy of the data.
MAX_RUNS_PER_CORE = 4


def cores_problems(train: TrainConfig, cores: int) -> list[str]:
    """Processes and threads that this machine's `cores` cannot run: one line per key, with the bound."""
    problems = []
    if train.parallel != "auto" and train.parallel > MAX_RUNS_PER_CORE * cores:
        problems.append(f"train.parallel: {train.parallel} runs at once is more than {MAX_RUNS_PER_CORE} per core of "
                        f"this machine's {cores}: each run is a process with its own copy of the data, and the extra "
                        f"ones only take turns on the cores; give at most {MAX_RUNS_PER_CORE * cores}, or auto")
    if train.threads is not None and train.threads > cores:
        problems.append(f"train.threads: {train.threads} threads per run is more than this machine's {cores} cores, "
                        f"and threads beyond the cores only slow each other down; give at most {cores}, or null "
                        "(torch's default, shared among packed runs)")
    if train.num_workers > cores:
        problems.append(f"train.num_workers: {train.num_workers} image-loading processes per run is more than this "
                        f"machine's {cores} cores (torch's own limit for a DataLoader); give at most {cores}")
    return problems


# The largest study validate lets through unasked (docs/configuration.md): beyond either bound a slip such as
# n_trials: 1000000000 would train for years before anyone noticed. STUDY_ALLOW_LARGE=1 in the environment runs it;
# any other value is refused, so that no `false`, `no` or `0.0` ever reads as yes.
MAX_TRAININGS = 100_000
MAX_ITERATIONS = 10**9
ALLOW_LARGE, ALLOWED = "STUDY_ALLOW_LARGE", "1"
BOUND = f"validate's bound of {MAX_TRAININGS:,} trainings or {MAX_ITERATIONS:,} iterations (docs/configuration.md)"


@dataclass(frozen=True)
class Cost:
    """What a study trains: on each class split its search trials (every loss and repeat) and its final runs (every
    method and tuned loss at every seed), and the optimiser steps of them all; a lower bound where not `exact` (the
    source's size is known only once prepare reads it: an epoch takes at least one step)."""

    splits: int
    trials: int
    finals: int
    iterations: int
    exact: bool = True
    early: int = 0  # of the final runs, those trained only until val chooses the learning rate (train.choose_at)

    @property
    def trainings(self) -> int:
        return self.splits * (self.trials + self.finals)

    @property
    def beyond_bound(self) -> bool:
        """Whether the study is larger than validate lets through unless ALLOW_LARGE says otherwise."""
        return self.trainings > MAX_TRAININGS or self.iterations > MAX_ITERATIONS

    def __str__(self) -> str:
        return (f"{self.trainings:,} trainings ({self.splits:,} class split(s) × ({self.trials:,} search trials + "
                f"{self.finals:,} final runs{self._early_words()})), {'' if self.exact else 'at least '}"
                f"{self.iterations:,} iterations in all")

    def _early_words(self) -> str:
        return f", {self.early:,} of them until val chooses the learning rate" if self.early else ""

    def said(self) -> str:
        """The cost as validate says it once the study passed: beyond the bound, with what allowed it."""
        return f"{self}, beyond {BOUND}, allowed by {ALLOW_LARGE}={ALLOWED}" if self.beyond_bound else str(self)


def study_cost(params: StudyParams, train_sizes: list[int] | None) -> Cost:
    """The study's Cost, from each class split's training size (None: unknown before prepare)."""
    search, runs, train = params.search, params.runs, params.train
    splits = len(params.data.split_seeds())
    trials = len(search.losses) * search.repeats * search.n_trials
    # Each hyperparameter-free method trains its seeds at every rate of train.learning_rates; a tuned loss at one.
    # With train.choose_at every rate trains only until val chooses, and the chosen one again to the end.
    rates = len(train.learning_rates or [train.lr])
    early = len(runs.seeds) * len(runs.methods) * rates if rates > 1 and train.choose_at is not None else 0
    whole = trials + len(runs.seeds) * (len(runs.methods) * (1 if early else rates) + len(search.losses))

    def iterations(size: int) -> int:
        total = planned_iterations(size, train)
        return whole * total + early * (choice_iteration(total, train) or 0)

    finals = whole - trials + early
    if train_sizes and len(train_sizes) == splits:
        return Cost(splits, trials, finals, sum(iterations(size) for size in train_sizes), early=early)
    # Unknown size: an epoch takes at least one step (a size of 1 plans that).
    return Cost(splits, trials, finals, splits * iterations(1), exact=False, early=early)


def cost_problems(params: StudyParams, cost: Cost) -> list[str]:
    """A value of ALLOW_LARGE other than ALLOWED, whatever the study's size; a study beyond MAX_TRAININGS or
    MAX_ITERATIONS unless ALLOW_LARGE allows it: one line naming its largest size."""
    allow = os.environ.get(ALLOW_LARGE, "")
    if allow not in ("", ALLOWED):
        return [f"{ALLOW_LARGE}: {allow!r} in the environment is not a value it takes: {ALLOW_LARGE}={ALLOWED} "
                f"allows a study beyond {BOUND}, and nothing else does; set it to {ALLOWED}, or unset it"]
    if not cost.beyond_bound or allow == ALLOWED:
        return []
    if cost.trainings > MAX_TRAININGS:
        search = "search.n_trials" if params.search.n_trials >= params.search.repeats else "search.repeats"
        sizes = {"data.seeds": cost.splits, "runs.seeds": cost.finals, search: cost.trials}
        key = max(sizes, key=sizes.get)
    else:
        key = "train.epochs" if params.train.max_iterations is None else "train.max_iterations"
    return [f"{key}: the study would make {cost}, beyond {BOUND}; lower {key}, or if you mean it run it with "
            f"{ALLOW_LARGE}={ALLOWED} in the environment (e.g. {ALLOW_LARGE}={ALLOWED} dvc repro)"]


class DataProblem(ValueError):
    """A problem of the data section, already worded as a line naming its key."""


def data_problems(params: StudyParams) -> list[str]:
    """What the data cannot support, on every class split prepare will make: one line per problem, each once."""
    return _data_problems(params)[0]


def _data_problems(params: StudyParams) -> tuple[list[str], list[int] | None]:
    """data_problems, and the size of each class split's training split (None where the source's size is known only
    once prepare reads it)."""
    try:
        planned = planned_source(params.data)
    except DataProblem as problem:
        return [str(problem)], None
    memory = training_memory(params.train.device)  # once, however many class splits
    if planned is None:
        return memory_problems(params, None, memory), None
    source, image_set = planned
    problems, train_sizes = image_file_problems(image_set, source), []
    for split in params.data.split_seeds():
        try:
            splits = planned_splits(image_set, params.data, split)
        except DataProblem as problem:
            found = [str(problem)]
        else:
            train_sizes.append(len(splits["train"]))
            found = (training_split_problems(splits["train"], params, source)
                     + evaluation_split_problems(splits, params.data, source)
                     + memory_problems(params, splits, memory))
        problems += [problem for problem in found if problem not in problems]
    return problems, train_sizes


def planned_source(data: DataConfig) -> tuple[str, ImageSet] | None:
    """The source prepare will read and its labels, where they come cheaply (no image decoded or made); None for
    sources that must be downloaded or read whole, which prepare checks."""
    try:
        source, image_set = data.dataset, labels_only(data.dataset, data.cache_dir)
    except (RuntimeError, FileNotFoundError) as error:  # unavailable: prepare falls back, where it may
        if data.fallback is None:
            raise DataProblem(f"data.dataset: {error}") from None
        source, image_set = data.fallback, _labels_only_as("data.fallback", data.fallback, data.cache_dir)
    except (ValueError, OSError) as error:
        raise DataProblem(f"data.dataset: {error}") from None
    return (source, image_set) if image_set is not None else None


def planned_splits(image_set: ImageSet, data: DataConfig, split: int) -> dict[str, ImageSet]:
    """The splits prepare makes of `image_set` for the class split seeded by `split`; a DataProblem names the key."""
    try:
        return class_split(image_set, data, split)
    except ValueError as error:  # keep_classes names data.classes itself
        raise DataProblem(str(error) if str(error).startswith("data.") else f"data.dataset: {error}") from None


def _labels_only_as(key: str, spec: str, cache_dir: str | None) -> ImageSet | None:
    try:
        return labels_only(spec, cache_dir)
    except (ValueError, RuntimeError, OSError) as error:
        raise DataProblem(f"{key}: {error}") from None


def _described(source: str, data: DataConfig) -> str:
    return f"{source}{f' with data.classes: {data.classes}' if data.classes else ''} ({data.protocol} protocol)"


def training_split_problems(train: ImageSet, params: StudyParams, source: str) -> list[str]:
    """What the training split of `source` cannot support: too few classes for AdaCos, fewer images than a batch."""
    data, problems = params.data, []
    described = _described(source, data)
    adacos = [method for method in params.runs.methods if method in ADACOS_METHODS]
    if adacos and train.num_classes < MIN_ADACOS_CLASSES:
        share = ", which gives the training split data.fractions[0] of the classes" if data.protocol == "open" else ""
        problems.append(f"data.dataset: {described} leaves {train.num_classes} training class(es){share}, but "
                        f"{' and '.join(adacos)} in runs.methods need at least {MIN_ADACOS_CLASSES} (s_f = "
                        f"√2·ln(C − 1)); use a dataset with more classes")
    if params.train.batch_size > len(train):
        problems.append(f"train.batch_size: {params.train.batch_size} is more than the {len(train)} training images "
                        f"of {described}; set train.batch_size to at most {len(train)}, or use more images")
    if train.paths is not None and data.image_size is None:
        problems.append(f"data.image_size: {source} holds image files of any size, which training resizes to one; "
                        "set data.image_size, e.g. 64")
    return problems


# The folds of verification_accuracy, which every final run's test evaluation scores (study/training.py).
VERIFICATION_FOLDS = inspect.signature(verification_metrics).parameters["folds"].default


def evaluation_split_problems(splits: dict[str, ImageSet], data: DataConfig, source: str) -> list[str]:
    """Val and test splits that retrieval and verification cannot score: no class with two images to compare, or
    (test) fewer verification pairs than verification_accuracy's folds."""
    problems = []
    for name in ("val", "test"):
        split = splits[name]
        if len(split) and np.bincount(split.labels).max() < 2:
            key, fix = (("data.dataset", "give each class at least 2 images, e.g. glyphs:<classes>:2")
                        if data.protocol == "open" else
                        ("data.fractions", f"give each class more images, or {name} a larger share of them"))
            problems.append(f"{key}: {_described(source, data)} leaves each of the {split.num_classes} {name} classes "
                            f"a single image, and retrieval and verification, which score {name}, compare images of "
                            f"one class; {fix}")
        elif name == "test" and len(split) and verification_pairs(split.labels) < VERIFICATION_FOLDS:
            key, fix = (("data.dataset", "give the test classes more images, or use more classes")
                        if data.protocol == "open" else
                        ("data.fractions", "give test a larger share of each class's images, or use more images"))
            problems.append(f"{key}: {_described(source, data)} leaves {len(split)} test images of "
                            f"{split.num_classes} class(es), which make {verification_pairs(split.labels)} "
                            "verification pairs (as many of different classes as of one), and every final run's test "
                            f"verification_accuracy splits them into {VERIFICATION_FOLDS} folds, so needs at least "
                            f"{VERIFICATION_FOLDS}; {fix}")
    return problems


def verification_pairs(labels: np.ndarray) -> int:
    """The pairs verification_accuracy scores on images with these labels: as many impostor pairs (two classes) as
    genuine ones (one class), up to the smaller family (study/metrics.py)."""
    counts = np.bincount(labels).astype(np.int64)
    genuine = int((counts * (counts - 1) // 2).sum())
    impostor = int((len(labels) ** 2 - (counts ** 2).sum()) // 2)
    return 2 * min(genuine, impostor)


def training_memory(device_name: str) -> tuple[int, str] | None:
    """Bytes of memory of the training device and how a problem names them; None where the device is not there or
    its memory unknown."""
    try:
        device = resolve_device(device_name)
    except RuntimeError:  # said under train.device already
        return None
    memory = device_memory(device)
    if memory is None:
        return None
    return memory, f"this machine's {readable_bytes(memory)} of {'GPU ' if device.type == 'cuda' else ''}memory"


def memory_problems(params: StudyParams, splits: dict[str, ImageSet] | None,
                    available: tuple[int, str] | None) -> list[str]:
    """Sizes one run cannot hold in the training device's memory (training_memory), whatever the backbone: the loss
    head's weights and gradients (classes × embedding_size) and a batch of images at data.image_size. Lower bounds:
    a refusal is sure."""
    if available is None:
        return []
    memory, within = available
    problems, size = [], params.model.embedding_size
    classes = splits["train"].num_classes if splits else 2
    head = 2 * 4 * classes * size
    if head > memory:
        problems.append(f"model.embedding_size: {size} needs at least {readable_bytes(head)} for the loss head alone "
                        f"({classes} training classes × {size} float32 weights, and their gradients), more than "
                        f"{within}; give a smaller size, e.g. 512")
    if params.data.image_size is not None:
        side, batch = params.data.image_size, max(params.train.batch_size, params.train.eval_batch_size)
        batch = min(batch, max(map(len, splits.values()))) if splits else batch
        channels = source_named(params.data.dataset)[0].channels
        images = 4 * batch * channels * side ** 2
        if images > memory:
            problems.append(f"data.image_size: {side}×{side} images, {batch} to a batch (train.batch_size, "
                            f"train.eval_batch_size), take at least {readable_bytes(images)} as float32, more than "
                            f"{within}; give a smaller data.image_size, e.g. 224")
    return problems


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory of `device`: a GPU's own, else this machine's; None where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return machine_memory()


# While a large folder's image files are checked, a line every this many seconds says how far it got.
PROGRESS_SECONDS = 5.0
# Bad image files named one line each, up to this many; one more line counts the rest.
MAX_NAMED_FILES = 20


def image_file_problems(image_set: ImageSet, source: str) -> list[str]:
    """The image files of a folder source that cannot be read, one line each: every header decoded, cheaply enough
    to run on every validate (see `image_file_problem`); prepare decodes every pixel later."""
    paths, bad = image_set.paths or [], []
    start = said = time.monotonic()
    for done, path in enumerate(paths, start=1):
        problem = image_file_problem(path)
        if problem:
            bad.append(problem)
        if time.monotonic() - said >= PROGRESS_SECONDS:
            said = time.monotonic()
            print(f"validate: checked {done:,} of the {len(paths):,} image files of {source}", file=sys.stderr,
                  flush=True)
    if said > start:
        print(f"validate: checked the {len(paths):,} image files of {source} in {time.monotonic() - start:.0f} s",
              file=sys.stderr, flush=True)
    lines = [f"data.dataset: {problem}; replace or delete it, then run `dvc repro` again"
             for problem in bad[:MAX_NAMED_FILES]]
    if len(bad) > MAX_NAMED_FILES:
        lines.append(f"data.dataset: {len(bad) - MAX_NAMED_FILES} more image files of {source} cannot be read; "
                     "`python -m stages.prepare` names each")
    return lines


def image_file_problem(path: str) -> str:
    """Why the image file at `path` cannot be read ('' when it can), found from its header and its data's end: PIL's
    verify() reads a PNG whole (every chunk's checksum); a JPEG that ends in its end marker is whole (the marker
    cannot occur inside the image data); any other file, or a JPEG without it, is decoded (a JPEG at 1/8 scale,
    which still reads every byte)."""
    try:
        with warnings.catch_warnings():  # PIL warns before it fails on a truncated TIFF
            warnings.simplefilter("ignore")
            with Image.open(path) as image:
                kind = image.format
                image.verify()
            if kind == "PNG" or (kind == "JPEG" and _ends_in_jpeg_end_marker(path)):
                return ""
            with Image.open(path) as image:
                image.draft("RGB", (1, 1))
                image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        reason = str(error).replace(f" '{path}'", "") or type(error).__name__  # PIL's message may name the file
        return f"{path} cannot be read as an image ({reason})"
    return ""


def _ends_in_jpeg_end_marker(path: str) -> bool:
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - 64))
        return handle.read().rstrip(b"\0\r\n ").endswith(b"\xff\xd9")


def check_images(image_set: ImageSet, source: str) -> None:
    """Decode every image file of `image_set` once, as training will; a ValueError names each one that fails."""
    bad = []
    for path in image_set.paths or []:
        try:
            with Image.open(path) as image:
                rgb_image(image, path)  # decodes every pixel: a truncated file fails here, not an hour into training
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
            bad.append(f"{path}: {error}")
    if bad:
        raise ValueError(f"{len(bad)} image file(s) of {source} cannot be decoded; replace or delete each, then rerun "
                         "`dvc repro`:\n  " + "\n  ".join(bad))


def check_training_split(train: ImageSet, params: StudyParams, source: str) -> None:
    """Raise a ConfigError, one line per problem, when the training split cannot support the study."""
    problems = training_split_problems(train, params, source)
    if problems:
        raise ConfigError("\n".join(problems))


def _source_folder(data: DataConfig) -> Path | None:
    """The folder prepare reads a folder:/idx: dataset from; None for other sources and for a folder it falls back
    from (missing, or without IDX files: DVC would otherwise hash whatever that folder is, /etc say)."""
    source, argument = source_named(data.dataset)
    return source.folder(argument) if source.folder is not None else None


def link_source(data: DataConfig, link: Path = SOURCE_LINK) -> None:
    """Point `link` at the folder a folder:/idx: dataset is read from; otherwise make it a file saying there is none."""
    folder = _source_folder(data)
    if link.is_symlink() or link.is_file():
        link.unlink()  # the link itself, never what it points at
    elif link.exists():
        raise FileExistsError(f"{link} is a folder, but the validate stage keeps a link to the dataset's folder "
                              "there; move it elsewhere")
    link.parent.mkdir(parents=True, exist_ok=True)
    if folder is not None:
        link.symlink_to(folder, target_is_directory=True)
    else:  # a folder data.fallback is read instead of is watched no more than a generated source
        link.write_text(NO_SOURCE_FOLDER, encoding="utf-8")
