"""Checks that run before any stage deletes an output: params.yaml whole, with the facts that cross its sections or
depend on this machine (the `validate` stage, first in dvc.yaml), and the data once read and split (`prepare`).

Every problem is one line naming the key or file, what is wrong and the fix; all are reported at once.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from study.config import ConfigError, DataConfig, StudyParams, TrainConfig, load_params
from study.data import (DEFAULT_CACHE_DIR, ImageSet, check_torchvision_name, idx_labels, keep_classes, load_dataset,
                        mnist5k_labels, rgb_image, split_dataset)
from study.composed import composed_labels, parse_composed_spec
from study.glyphs import GlyphSpec, check_glyph_classes, max_glyph_classes, parse_glyph_spec
from study.models import check_model
from study.storage import check_storage
from study.training import resolve_device
from study.workers import available_cores

# The validate stage's output, which every other stage depends on. Always the same bytes: a params change that
# passes changes nothing downstream stages depend on, so only the stages that read the changed keys rerun.
VALIDATED = Path("results/validated.txt")
VALIDATED_TEXT = "params.yaml passed study/validation.py's checks\n"
# A link to a folder dataset's images, a dependency of prepare: DVC hashes the folder through it, so images
# added, changed or removed there make prepare out of date (`dvc status` says so) without any stage running.
SOURCE_LINK = Path("data/source")
NO_SOURCE_FOLDER = "this dataset is not read from a folder: nothing to watch\n"
FOLDER_SOURCES = ("folder", "idx")
ADACOS_METHODS = ("fixed_adacos", "dynamic_adacos")
MIN_ADACOS_CLASSES = 3  # AdaCos's s_f = √2·ln(C − 1) needs C ≥ 3


def validate_params(path: str = "params.yaml") -> StudyParams:
    """params.yaml read and checked whole; a ConfigError lists every problem, each with its key and the fix."""
    params = load_params(path)  # unknown sections and keys, types, ranges, and checks within a section
    problems = params_problems(params)
    if problems:
        raise ConfigError("\n".join(problems))
    return params


def params_problems(params: StudyParams) -> list[str]:
    """The problems of valid-looking params that only show across sections or on this machine, one line each."""
    model, problems = params.model, []
    problems += _problem("model.name", check_model, model.name) or _problem(
        "model.pretrained", check_model, model.name, model.pretrained)
    problems += _problem("train.device", resolve_device, params.train.device)
    problems += [problem.replace("search.storage: search.storage", "search.storage")  # said once is enough
                 for problem in _problem("search.storage", check_storage, params.search)]
    problems += _problem("report.palette", check_palette, params.report.palette)
    problems += cores_problems(params.train, available_cores())
    return problems + data_problems(params)


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


class DataProblem(ValueError):
    """A problem of the data section, already worded as a line naming its key."""


def data_problems(params: StudyParams) -> list[str]:
    """What the data cannot support, on every class split prepare will make: one line per problem, each once."""
    try:
        planned = planned_source(params.data)
    except DataProblem as problem:
        return [str(problem)]
    memory = training_memory(params.train.device)  # once, however many class splits
    if planned is None:
        return memory_problems(params, None, memory)
    source, image_set = planned
    problems = []
    for split in params.data.split_seeds():
        try:
            splits = planned_splits(image_set, params.data, split)
        except DataProblem as problem:
            found = [str(problem)]
        else:
            found = (training_split_problems(splits["train"], params, source)
                     + evaluation_split_problems(splits, params.data, source)
                     + memory_problems(params, splits, memory))
        problems += [problem for problem in found if problem not in problems]
    return problems


def planned_source(data: DataConfig) -> tuple[str, ImageSet] | None:
    """The source prepare will read and its labels, where they come cheaply (no image decoded or made); None for
    sources that must be downloaded or read whole, which prepare checks."""
    try:
        source, image_set = data.dataset, _labels_only(data.dataset, data.cache_dir)
    except (RuntimeError, FileNotFoundError) as error:  # unavailable: prepare falls back, where it may
        if data.fallback is None:
            raise DataProblem(f"data.dataset: {error}") from None
        source, image_set = data.fallback, _labels_only_as("data.fallback", data.fallback, data.cache_dir)
    except (ValueError, OSError) as error:
        raise DataProblem(f"data.dataset: {error}") from None
    return (source, image_set) if image_set is not None else None


def planned_splits(image_set: ImageSet, data: DataConfig, split: int) -> dict[str, ImageSet]:
    """The splits prepare will make of `image_set` for the class split seeded by `split`."""
    try:
        if data.classes is not None:
            image_set = keep_classes(image_set, data.classes, seed=split)
        return split_dataset(image_set, data.protocol, data.fractions, seed=split)
    except ValueError as error:  # keep_classes names data.classes itself
        raise DataProblem(str(error) if str(error).startswith("data.") else f"data.dataset: {error}") from None


def _labels_only_as(key: str, spec: str, cache_dir: str | None) -> ImageSet | None:
    try:
        return _labels_only(spec, cache_dir)
    except (ValueError, RuntimeError, OSError) as error:
        raise DataProblem(f"{key}: {error}") from None


def _labels_only(spec: str, cache_dir: str | None) -> ImageSet | None:
    name, _, argument = spec.strip().partition(":")
    if name == "glyphs":  # the labels follow from the spec; the images (blank stand-ins here) are never rendered
        return _glyph_labels(parse_glyph_spec(argument), cache_dir)
    if name == "compose":  # the base's labels give the composed ones; nothing is composed here
        spec = parse_composed_spec(argument)
        base = _labels_only(spec.base, cache_dir)
        if base is None:
            raise ValueError(f"{spec}: the base {spec.base} is only downloaded by prepare; compose an offline base")
        return composed_labels(spec, base)
    if name == "idx":  # the label files, and the image files' headers and sizes
        return idx_labels(argument)
    if name == "mnist5k":  # its class sizes are fixed; parsing its CSV takes seconds
        return mnist5k_labels(argument)
    if name == "torchvision":  # the name resolves offline; the files are downloaded, or found, by prepare
        check_torchvision_name(argument)
        return None
    # Small sets shipped with their packages; a folder's files are only listed; an unknown name gets its error.
    return load_dataset(spec, cache_dir)


def _glyph_labels(glyphs: GlyphSpec, cache_dir: str | None) -> ImageSet:
    """The labels of a glyphs spec, once its class count is checked against this install and its size against
    this machine's memory; the images are blank stand-ins."""
    check_glyph_classes(glyphs.num_classes, max_glyph_classes(cache_dir or DEFAULT_CACHE_DIR))
    count = glyphs.num_classes * glyphs.instances_per_class
    needed, memory = count * glyphs.image_side ** 2, machine_memory()
    if memory is not None and needed > memory:
        raise ValueError(f"{glyphs} makes {count:,} images of {glyphs.image_side}×{glyphs.image_side} pixels, "
                         f"{_size(needed)} in memory, more than this machine's {_size(memory)}; ask for fewer "
                         "instances per class")
    labels = np.repeat(np.arange(glyphs.num_classes), glyphs.instances_per_class)
    return ImageSet(labels, [str(k) for k in range(glyphs.num_classes)],
                    images=torch.zeros((len(labels), 1, 1, 1), dtype=torch.uint8))


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


def evaluation_split_problems(splits: dict[str, ImageSet], data: DataConfig, source: str) -> list[str]:
    """Val and test splits that retrieval and verification cannot score: no class with two images to compare."""
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
    return problems


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
    return memory, f"this machine's {_size(memory)} of {'GPU ' if device.type == 'cuda' else ''}memory"


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
        problems.append(f"model.embedding_size: {size} needs at least {_size(head)} for the loss head alone ({classes} "
                        f"training classes × {size} float32 weights, and their gradients), more than {within}; give "
                        "a smaller size, e.g. 512")
    if params.data.image_size is not None:
        side, batch = params.data.image_size, max(params.train.batch_size, params.train.eval_batch_size)
        batch = min(batch, max(map(len, splits.values()))) if splits else batch
        channels = 3 if params.data.dataset.startswith("folder:") else 1
        images = 4 * batch * channels * side ** 2
        if images > memory:
            problems.append(f"data.image_size: {side}×{side} images, {batch} to a batch (train.batch_size, "
                            f"train.eval_batch_size), take at least {_size(images)} as float32, more than {within}; "
                            "give a smaller data.image_size, e.g. 224")
    return problems


def machine_memory() -> int | None:
    """Bytes of this machine's memory, within a container's limit; None where unknown."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return memory
    return min(memory, int(limit)) if limit.isdigit() else memory


def device_memory(device: torch.device) -> int | None:
    """Bytes of memory of `device`: a GPU's own, else this machine's; None where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return machine_memory()


def _size(count: float) -> str:
    """A byte count as people say it: 3.2 GB, 640.0 TB."""
    units = ("bytes", "KB", "MB", "GB", "TB")
    power = min(int(math.log10(max(count, 1)) // 3), len(units) - 1)
    return f"{count / 1000 ** power:,.1f} {units[power]}"


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
    name, _, argument = data.dataset.strip().partition(":")
    if name not in FOLDER_SOURCES:
        return None
    if name == "idx":
        try:
            idx_labels(argument)
        except FileNotFoundError:
            return None
    folder = Path(argument).expanduser().resolve()
    return folder if folder.is_dir() else None


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
