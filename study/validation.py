"""Checks that run before any stage deletes an output: params.yaml whole, with the facts that cross its sections or
depend on this machine (the `validate` stage, first in dvc.yaml), and the data once read and split (`prepare`).

Every problem is one line naming the key or file, what is wrong and the fix; all are reported at once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from study.config import ConfigError, DataConfig, StudyParams, load_params
from study.data import DATASETS, ImageSet, keep_classes, load_dataset, split_dataset
from study.glyphs import parse_glyph_spec
from study.models import check_model
from study.storage import check_storage
from study.training import resolve_device

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
    try:
        train = planned_train_split(params.data)
    except (ValueError, RuntimeError, OSError) as error:  # the messages of study.data name the fix
        return problems + [str(error) if str(error).startswith("data.") else f"data.dataset: {error}"]
    return problems + (training_split_problems(train, params, params.data.dataset) if train is not None else [])


def _problem(key: str, check, *args) -> list[str]:
    """The error of `check(*args)` as a problem of `key`, or none."""
    try:
        check(*args)
    except (ValueError, RuntimeError) as error:
        return [f"{key}: {error}"]
    return []


def planned_train_split(data: DataConfig) -> ImageSet | None:
    """The training split prepare will make, where the source's labels come cheaply (no image decoded or made);
    None for sources that must be downloaded or read whole, which prepare checks."""
    try:
        image_set = _labels_only(data.dataset, data.cache_dir)
    except (RuntimeError, FileNotFoundError):
        if data.fallback is None:
            raise
        image_set = _labels_only(data.fallback, data.cache_dir)  # as prepare falls back
    if image_set is None:
        return None
    if data.classes is not None:
        image_set = keep_classes(image_set, data.classes, seed=data.seed)
    return split_dataset(image_set, data.protocol, data.fractions, seed=data.seed)["train"]


def _labels_only(spec: str, cache_dir: str | None) -> ImageSet | None:
    name, _, argument = spec.strip().partition(":")
    if name == "glyphs":  # the labels follow from the spec; the images (blank stand-ins here) are never rendered
        glyphs = parse_glyph_spec(argument)
        labels = np.repeat(np.arange(glyphs.num_classes), glyphs.instances_per_class)
        return ImageSet(labels, [str(k) for k in range(glyphs.num_classes)],
                        images=torch.zeros((len(labels), 1, 1, 1), dtype=torch.uint8))
    # Small sets shipped with their packages; a folder's files are only listed; an unknown name gets its error.
    if name in ("digits", "mnist5k", "folder") or name not in DATASETS:
        return load_dataset(spec, cache_dir)
    return None


def training_split_problems(train: ImageSet, params: StudyParams, source: str) -> list[str]:
    """What the training split of `source` cannot support: too few classes for AdaCos, fewer images than a batch."""
    data, problems = params.data, []
    described = f"{source}{f' with data.classes: {data.classes}' if data.classes else ''} ({data.protocol} protocol)"
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


def check_images(image_set: ImageSet, source: str) -> None:
    """Decode every image file of `image_set` once, as training will; a ValueError names each one that fails."""
    bad = []
    for path in image_set.paths or []:
        try:
            with Image.open(path) as image:
                image.convert("RGB")  # decodes every pixel: a truncated file fails here, not an hour into training
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


def link_source(data: DataConfig, link: Path = SOURCE_LINK) -> None:
    """Point `link` at the folder a folder:/idx: dataset is read from; otherwise make it a file saying there is none."""
    name, _, argument = data.dataset.strip().partition(":")
    folder = Path(argument).expanduser().resolve() if name in FOLDER_SOURCES else None
    if link.is_symlink() or link.is_file():
        link.unlink()  # the link itself, never what it points at
    elif link.exists():
        raise FileExistsError(f"{link} is a folder, but the validate stage keeps a link to the dataset's folder "
                              "there; move it elsewhere")
    link.parent.mkdir(parents=True, exist_ok=True)
    if folder is not None and folder.is_dir():
        link.symlink_to(folder, target_is_directory=True)
    else:  # a missing folder (data.fallback is read instead) is watched no more than a generated source
        link.write_text(NO_SOURCE_FOLDER, encoding="utf-8")
