"""What validate warns of without refusing: a margin loss's scale far above AdaCos's s_f at the study's class count,
more class splits than the classes make with disjoint test classes, and `train.device: auto` training on the CPU of a
machine that has an NVIDIA GPU torch cannot use.

None is an error: a study may mean to run ArcFace at the paper's s = 64 (what users get untuned), splits beyond the
disjoint ones still narrow the interval around these classes, and a CPU fallback still trains, only slower. Each is
one line naming the key, what was found and the fix.
"""

from __future__ import annotations

import inspect
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import torch

from study.adacos_scale import fixed_adacos_scale
from study.config import StudyParams
from study.losses import LOSSES
from study.class_splits import disjoint_test_splits

# A fixed scale beyond this many times s_f = √2·ln(C − 1) is warned of. The face recipes that chose s = 64 train at
# 4-5× s_f (CASIA-WebFace's 10,572 identities: s_f = 13.1; MS1M's 85,742: 16.1), where it works; the reported
# failures lie at 10× and beyond: arcface-pytorch #38 (92 classes, s = 64, 10× s_f = 6.4) trained at chance until s
# was lowered to 4, and insightface #1153 asks the same of a small set. 8× lies between: s = 64 is warned of below
# 288 training classes (s_f < 8).
SCALE_CAUTION = 8.0
# Where torch sees no CUDA, the signs that an NVIDIA GPU is there all the same: its device files, or its tool.
NVIDIA_DEVICE_FILES = ("/dev/nvidia0",)
# The driver a CUDA major version needs (NVIDIA's minor version compatibility: 11.x from 450, 12.x from 525, 13.x
# from 580), for the line that says why torch cannot use the GPU.
MIN_DRIVER = {11: 450, 12: 525, 13: 580}


def scale_of(loss: str, hyperparameters: dict) -> float | None:
    """The scale s a run of `loss` trains at: given, or the loss's own default; None for losses without one."""
    if "s" in hyperparameters:
        return float(hyperparameters["s"])
    parameter = inspect.signature(LOSSES[loss].__init__).parameters.get("s")
    return None if parameter is None or parameter.default is inspect.Parameter.empty else float(parameter.default)


def scale_cautions(params: StudyParams, train_classes: int) -> list[str]:
    """A line for each fixed run whose s exceeds SCALE_CAUTION × s_f at `train_classes`, and one for a search
    range that lies wholly beyond it."""
    if train_classes < 3:  # s_f is not defined; validate refuses AdaCos there already
        return []
    s_f = fixed_adacos_scale(train_classes)
    lines = []
    for name, run in params.runs.fixed.items():
        if name not in params.runs.methods:
            continue
        s = scale_of(run.loss, run.hyperparameters())
        if s is not None and s > SCALE_CAUTION * s_f:
            lines.append(f"runs.fixed.{name}.s: {s:g} is {s / s_f:.1f}× s_f = √2·ln(C − 1) = {s_f:.2f} at C = "
                         f"{train_classes:,} training classes; beyond {SCALE_CAUTION:g}× a margin loss is known to "
                         "stall at chance with few classes (arcface-pytorch #38: 92 classes, trained once s was "
                         f"lowered from 64 to 4); kept as asked (what users get untuned), or give s ≈ {4 * s_f:.0f}, "
                         "4× s_f, where the face recipes train")
    low, high = params.search.s_range
    scaled = [loss for loss in params.search.losses if scale_of(loss, {}) is not None]
    if scaled and low > SCALE_CAUTION * s_f:
        lines.append(f"search.s_range: [{low:g}, {high:g}] lies wholly beyond {SCALE_CAUTION:g}× s_f = "
                     f"{SCALE_CAUTION * s_f:.1f} at C = {train_classes:,} training classes, where training is known "
                     f"to stall at chance; let it reach s_f = {s_f:.2f}, e.g. [1, {max(high, 16 * s_f):.0f}]")
    return lines


def scale_range_note(params: StudyParams, train_classes: int) -> str | None:
    """The searched scale range in units of s_f at `train_classes`, as validate states it; None without one."""
    if train_classes < 3 or not any(scale_of(loss, {}) is not None for loss in params.search.losses):
        return None
    s_f = fixed_adacos_scale(train_classes)
    low, high = params.search.s_range
    return (f"search.s_range [{low:g}, {high:g}] is {low / s_f:.2g}–{high / s_f:.2g}× s_f = √2·ln(C − 1) = "
            f"{s_f:.2f} at C = {train_classes:,} training classes (warned of beyond {SCALE_CAUTION:g}× s_f)")


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version as nvidia-smi says it; None where nvidia-smi is absent or fails."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    version = done.stdout.strip().splitlines()
    return version[0].strip() if done.returncode == 0 and version else None


def gpu_fallback_caution(device: str, cuda_available: Callable[[], bool] = torch.cuda.is_available,
                         device_files=NVIDIA_DEVICE_FILES, driver: Callable[[], str | None] = nvidia_driver) -> str | None:
    """A line when `device: auto` will train on the CPU although this machine shows an NVIDIA GPU (its device file
    or nvidia-smi) that torch cannot use, saying why where it can; None otherwise."""
    if device != "auto" or cuda_available():
        return None
    found = [path for path in device_files if Path(path).exists()]
    version = driver()
    if not found and version is None:
        return None
    seen = ", ".join(found + ([f"driver {version}"] if version else []))
    build = torch.version.cuda
    if build is None:
        why = f"this torch ({torch.__version__}) is built without CUDA"
    else:
        major = int(build.split(".")[0])
        needed = MIN_DRIVER.get(major)
        why = (f"this torch ({torch.__version__}) is built for CUDA {build}"
               + (f", which needs driver ≥ {needed}" if needed else ""))
    return (f"train.device: auto trains on the CPU, but this machine has an NVIDIA GPU ({seen}) that torch cannot "
            f"use: {why}; update the driver, or install the torch build for its CUDA (docs/running.md, \"On a "
            "GPU\"); or set train.device: cpu to say the CPU is meant")


def split_caution(params: StudyParams, class_counts: dict[str, int]) -> str | None:
    """Where the open protocol's class splits (data.seeds) are more than the classes make with disjoint test classes
    (`class_counts`: one split's classes per part): the splits beyond those test on classes already tested."""
    seeds = params.data.split_seeds()
    most = disjoint_test_splits(params.data.protocol, class_counts)
    if most is None or len(seeds) <= most:
        return None
    return (f"data.seeds: {len(seeds)} class splits, but these {sum(class_counts.values())} classes make only {most} "
            f"with disjoint test classes ({class_counts['test']} test classes each): the splits beyond those test on "
            f"classes already tested, so they narrow the interval around these classes, not around the source's; "
            f"give at most {most} seeds, or more classes (data.classes, or a larger source)")


def cautions(params: StudyParams, class_counts: dict[str, int] | None) -> list[str]:
    """Every warning validate prints for `params`; the scale and split ones where the classes of each part of the
    first class split (train, val, test) are known."""
    found = [] if class_counts is None else scale_cautions(params, class_counts["train"])
    split = split_caution(params, class_counts) if class_counts else None
    fallback = gpu_fallback_caution(params.train.device)
    return found + [line for line in (split, fallback) if line]
