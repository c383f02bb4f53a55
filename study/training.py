"""One training run, top to bottom: seed, build, train, evaluate on val at the scheduled steps.

The loop knows nothing about Optuna: the search layer passes a callback that receives each
evaluation row and returns True to stop the run (pruning).
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import pickle
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from study import metrics
from study.config import ModelConfig, TrainConfig
from study.losses import build_loss
from study.models import build_model
from study.results import write_bytes
from study.sources import ImageSet
from study.splits import batches

RETRIEVAL_METRICS = ("precision_at_1", "r_precision", "map_at_r")
STAT_KEYS = ("s", "theta_med_deg", "cos_target_mean", "cos_nontarget_mean")


@dataclass
class RunResult:
    """What one run produced: its status, history of evaluations, cost, and the trained modules."""

    status: str  # "completed", "diverged" (non-finite loss) or "stopped" (by the callback)
    reason: str
    history: list[dict] = field(default_factory=list)
    iterations: int = 0
    seconds: float = 0.0
    # The CPU time the run's process spent over the same span, every thread of it: on a CPU device what the machine's
    # other load does not move (a loaded machine stretches `seconds`, not this), where wall seconds are the cost a
    # user waits for.
    cpu_seconds: float = 0.0
    device: str = "cpu"
    model: nn.Module | None = None
    loss: nn.Module | None = None

    selected_iteration: int | None = None  # the evaluation whose weights the run ends with

    @property
    def final(self) -> dict:
        """The evaluation row of the weights the run ends with: the one val selected, or the last (empty when none)."""
        rows = [row for row in self.history if row["iteration"] == self.selected_iteration]
        return rows[-1] if rows else (self.history[-1] if self.history else {})


DEVICE = re.compile(r"(cpu|cuda|mps)(:\d+)?")  # the devices `resolve_device` takes, besides auto


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when present, else CPU; anything else as given, once this machine is seen to have it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not DEVICE.fullmatch(name):  # torch's own error lists its 18 device types, most of which nothing here runs on
        raise ValueError(f"device {name!r} is not one this suite trains on; use auto (CUDA when present), cpu, cuda, "
                         "cuda:N or mps")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")  # a value that names no GPU hides every one
        raise RuntimeError(f"device {name!r} was asked for but CUDA is not available on this machine"
                           + (f" (CUDA_VISIBLE_DEVICES={hidden!r} shows only the GPUs it lists: unset it, or list "
                              "them, e.g. CUDA_VISIBLE_DEVICES=0)" if hidden is not None else "")
                           + "; use device auto (CUDA when present) or cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise RuntimeError(f"device {name!r} was asked for but this machine has {torch.cuda.device_count()} CUDA "
                           f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}; use one of them, or auto")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(f"device {name!r} was asked for but MPS (Apple GPUs) is not available on this machine; "
                           "use device auto or cpu")
    return device


def device_description(device: torch.device) -> str:
    """A human-readable device name for the records (GPU model or CPU)."""
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return device.type


def input_shape_of(image_set: ImageSet, image_size: int | None) -> tuple[int, int, int]:
    """(C, H, W) the backbone will see: the tensors' shape, resized to `image_size` when given; RGB for image folders."""
    if image_set.images is not None:
        channels, height, width = image_set.images.shape[1:]
        return (channels, image_size, image_size) if image_size else (channels, height, width)
    if image_size is None:
        raise ValueError("image folders need data.image_size (e.g. 224) to resize their images")
    return (3, image_size, image_size)


def build_modules(model_config: ModelConfig, loss_name: str, hyperparameters: dict, num_classes: int,
                  input_shape: tuple[int, int, int]) -> tuple[nn.Module, nn.Module]:
    """The backbone and the loss head for one run."""
    model = build_model(model_config.name, model_config.embedding_size, input_shape, pretrained=model_config.pretrained)
    loss = build_loss(loss_name, num_classes, model_config.embedding_size, **hyperparameters)
    return model, loss


def _autocast(device: torch.device, enabled: bool):
    dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype, enabled=enabled and device.type == "cuda")


@torch.no_grad()
def embed(model: nn.Module, image_set: ImageSet, config: TrainConfig, device: torch.device,
          image_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings (float32, on CPU) and labels of a whole set, in evaluation mode."""
    was_training = model.training
    model.eval()
    chunks, labels = [], []
    for images, batch_labels in batches(image_set, config.eval_batch_size, device=device, image_size=image_size,
                                        num_workers=config.num_workers):
        with _autocast(device, config.amp):
            chunks.append(model(images).float().cpu())
        labels.append(batch_labels.cpu())
    model.train(was_training)
    return torch.cat(chunks), torch.cat(labels)


def evaluate(model: nn.Module, loss: nn.Module, sets: dict[str, ImageSet], split: str, config: TrainConfig,
             device: torch.device, image_size: int | None = None, full: bool = False) -> dict[str, float]:
    """Metrics of `sets[split]`: retrieval; with `full` also verification; and, when the split shares the training
    classes (closed protocol), argmax accuracy and (with `full`) 1-NN accuracy against the training embeddings."""
    embeddings, labels = embed(model, sets[split], config, device, image_size)
    results: dict[str, float] = {}
    if not torch.isfinite(embeddings).all():
        return {"nonfinite_embeddings": 1.0}
    # Under the open protocol no val or test class is a training class: classifying into those means nothing.
    shares_classes = sets[split].class_names == sets["train"].class_names
    if shares_classes:
        with torch.no_grad():
            results["accuracy"] = metrics.accuracy(loss.logits(embeddings.to(device)).cpu(), labels)
    results.update(metrics.retrieval_metrics(embeddings, labels))
    if shares_classes and (full or config.objective == "knn_accuracy"):
        train_embeddings, train_labels = embed(model, sets["train"], config, device, image_size)
        results["knn_accuracy"] = metrics.knn_accuracy(embeddings, labels, train_embeddings, train_labels)
    if full:
        results.update(metrics.verification_metrics(embeddings, labels))
    return results


def _optimizer(parameters, config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(parameters, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return optimizer_class(parameters, lr=config.lr, weight_decay=config.weight_decay)


def choice_iteration(total: int, config: TrainConfig) -> int | None:
    """The iteration at which val chooses among train.learning_rates (train.choose_at of the length, at least the
    first, short of the last); None where every rate trains to the end (no rates to choose among, or choose_at
    null)."""
    if not config.learning_rates or config.choose_at is None or total < 2:
        return None
    return min(max(int(round(config.choose_at * total)), 1), total - 1)


def evaluation_schedule(total: int, config: TrainConfig) -> frozenset[int]:
    """The iterations evaluated on val after iteration 0: every `eval_every`, or with `eval_points` about that many
    log-spaced from min(10, total), with half-way (the convergence rule reads it), the learning rate's choice
    (`choice_iteration`) and the last iteration among them."""
    choice = choice_iteration(total, config)
    chosen_at = {choice} if choice is not None else set()
    if config.eval_points is None:
        return frozenset(range(config.eval_every, total + 1, config.eval_every)) | {total} | chosen_at
    points = np.geomspace(min(10, total), total, config.eval_points)
    return frozenset(int(round(point)) for point in points) | {max(total // 2, 1), total} | chosen_at


def planned_iterations(num_train: int, config: TrainConfig) -> int:
    """Optimiser steps the run will take: epochs × full batches, capped by max_iterations."""
    per_epoch = max(num_train // config.batch_size, 1)
    total = config.epochs * per_epoch
    return min(total, config.max_iterations) if config.max_iterations else total


class Run:
    """One run's own state while it trains: its modules (its seed's initialisation), optimiser, schedule, data order,
    history and the weights val scored best. `train` steps one; study/fused.py steps K of them as one model."""

    def __init__(self, sets: dict[str, ImageSet], loss_name: str, hyperparameters: dict, model_config: ModelConfig,
                 config: TrainConfig, image_size: int | None, device: torch.device,
                 callback: Callable[[dict], bool] | None = None, curve_splits: tuple[str, ...] = ()):
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        self.sets, self.config, self.image_size, self.device = sets, config, image_size, device
        self.callback, self.curve_splits = callback, curve_splits
        train_set = sets["train"]
        self.model, self.loss = build_modules(model_config, loss_name, hyperparameters, train_set.num_classes,
                                              input_shape_of(train_set, image_size))
        self.model.to(device).train()
        self.loss.to(device).train()
        # The class weights train together with the backbone (a known slip of one reference implementation).
        self.optimizer = _optimizer(list(self.model.parameters()) + list(self.loss.parameters()), config)
        self.total = planned_iterations(len(train_set), config)
        self.schedule = evaluation_schedule(self.total, config)
        self.scheduler = (torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=self.total)
                          if config.schedule == "cosine" else None)
        self.scaler = torch.amp.GradScaler(enabled=config.amp and device.type == "cuda"
                                           and not torch.cuda.is_bf16_supported())
        self.generator = torch.Generator().manual_seed(config.seed)
        self.result = RunResult(status="completed", reason="", device=device_description(device), model=self.model,
                                loss=self.loss)
        self.start, self.cpu_start = time.perf_counter(), time.process_time()
        self.iteration, self.epoch, self.running_loss = 0, 0, math.nan
        # The mean training loss since the previous evaluation goes into each history row.
        self.loss_sum, self.loss_count = torch.zeros((), device=device), 0
        # The first non-finite loss is noted on the device and read at each evaluation: reading it every step would
        # make the host wait for a GPU at every step.
        self.first_nonfinite = torch.full((), -1, device=device)
        self.nonfinite_value = torch.zeros((), device=device)
        self.best_val, self.best_state = -math.inf, None  # the weights val scored best so far (checkpoint: best_val)
        self.eval_seconds = 0.0
        self.stopped = False

    def epoch_batches(self):
        """The next epoch of training batches, in this run's own order."""
        self.epoch += 1
        train_set = self.sets["train"]
        return batches(train_set, self.config.batch_size, device=self.device, shuffle=True, generator=self.generator,
                       image_size=self.image_size, num_workers=self.config.num_workers,
                       drop_last=len(train_set) > self.config.batch_size)

    def record(self) -> bool:
        """Evaluate on val (and `curve_splits`), append a history row, keep the weights val prefers, and ask the
        callback whether to stop."""
        began = time.perf_counter()
        config, model, loss = self.config, self.model, self.loss
        row = {"iteration": self.iteration, "epoch": self.epoch, "train_loss": self.running_loss}
        row.update({k: loss.last_stats.get(k, math.nan) for k in STAT_KEYS})
        row.update(evaluate(model, loss, self.sets, "val", config, self.device, self.image_size))
        for split in self.curve_splits:
            row[f"{split}_{config.objective}"] = evaluate(model, loss, self.sets, split, config, self.device,
                                                          self.image_size).get(config.objective, math.nan)
        self.eval_seconds += time.perf_counter() - began
        # seconds: since the run began; eval_seconds: of them, spent evaluating (training alone is the difference).
        row["seconds"], row["eval_seconds"] = time.perf_counter() - self.start, self.eval_seconds
        self.result.history.append(row)
        score = row.get(config.objective, math.nan)
        if config.checkpoint == "last" or (math.isfinite(score) and score > self.best_val):
            self.best_val, self.result.selected_iteration = score, self.iteration
            if config.checkpoint == "best_val":
                self.best_state = copy.deepcopy((model.state_dict(), loss.state_dict()))
        model.train()
        return bool(self.callback and self.callback(row))

    def stepped(self, batch_loss: torch.Tensor) -> None:
        """After the backward pass: the optimiser's and the schedule's step, and the step's loss noted."""
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        self.iteration += 1
        step_loss = batch_loss.detach().float()
        first = (self.first_nonfinite < 0) & ~torch.isfinite(step_loss)
        self.first_nonfinite = torch.where(first, self.iteration, self.first_nonfinite)
        self.nonfinite_value = torch.where(first, step_loss, self.nonfinite_value)
        self.loss_sum += step_loss
        self.loss_count += 1

    def evaluated(self, stop_at: int | None = None) -> bool:
        """At a scheduled iteration: the run found diverged, or evaluated; whether it stops here (diverged, stopped by
        the callback, or at `stop_at`). A stopped run is `stopped`."""
        if self.first_nonfinite.item() >= 0:  # the weights are no longer finite: there is nothing to evaluate
            self.result.status = "diverged"
            self.result.reason = (f"non-finite loss ({self.nonfinite_value.item()}) at iteration "
                                  f"{self.first_nonfinite.item()}")
            self.stopped = True
            return True
        self.running_loss = self.loss_sum.item() / self.loss_count
        self.loss_sum.zero_()
        self.loss_count = 0
        stop = self.record()
        if "nonfinite_embeddings" in self.result.history[-1]:
            self.result.status, self.result.reason = "diverged", f"non-finite embeddings at iteration {self.iteration}"
            stop = True
        elif stop:
            self.result.status, self.result.reason = "stopped", f"stopped by callback at iteration {self.iteration}"
        elif self.iteration == stop_at:
            self.result.reason = (f"trained until val chooses the learning rate, at iteration {self.iteration} of "
                                  f"{self.total}")
            stop = True
        self.stopped = stop
        return stop

    def finished(self) -> RunResult:
        """The run's result, its modules holding the weights val selected (early stopping) unless it diverged."""
        if self.best_state is not None and self.result.status != "diverged":
            self.model.load_state_dict(self.best_state[0])
            self.loss.load_state_dict(self.best_state[1])
        self.result.iterations = self.iteration
        self.result.seconds = time.perf_counter() - self.start
        self.result.cpu_seconds = time.process_time() - self.cpu_start
        return self.result


def train(sets: dict[str, ImageSet], *, loss_name: str, hyperparameters: dict | None = None,
          model_config: ModelConfig = ModelConfig(), config: TrainConfig = TrainConfig(),
          image_size: int | None = None, callback: Callable[[dict], bool] | None = None,
          progress: bool | None = None, curve_splits: tuple[str, ...] = (), until_choice: bool = False) -> RunResult:
    """Train `model_config`'s backbone with `loss_name` on sets['train'], evaluating on sets['val'] as it goes.

    `curve_splits` (e.g. ("test",)) are scored on the objective at every evaluation too, as `<split>_<objective>`:
    a whole learning curve from one run. Only val selects (the checkpoint, pruning); they are recorded only.
    `until_choice`: stop after the evaluation at which val chooses the learning rate (`choice_iteration`), the run
    so far being the full-length run's first part, iteration for iteration.
    """
    if config.threads is not None:  # workers sharing one machine each take their part of its cores
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    run = Run(sets, loss_name, hyperparameters or {}, model_config, config, image_size, device, callback, curve_splits)
    stop_at = choice_iteration(run.total, config) if until_choice else None
    if until_choice and stop_at is None:
        raise ValueError("a run until the learning rate's choice needs train.learning_rates and train.choose_at")
    bar = tqdm(total=run.total, desc=f"{loss_name}", unit="it",
               disable=(None if progress is None else not progress), leave=False)
    try:  # an interrupted run (Ctrl-C, SIGTERM: see study/workers.py) clears its progress bar too
        stop = run.record()
        while not stop and run.iteration < run.total:
            for images, labels in run.epoch_batches():
                with _autocast(device, config.amp):
                    batch_loss = run.loss(run.model(images), labels)
                run.optimizer.zero_grad(set_to_none=True)
                run.scaler.scale(batch_loss).backward()
                run.stepped(batch_loss)
                bar.update(1)
                if run.iteration in run.schedule:
                    stop = run.evaluated(stop_at)
                    bar.set_postfix(loss=f"{run.running_loss:.3f}", s=f"{run.loss.last_stats.get('s', math.nan):.2f}")
                if stop or run.iteration >= run.total:
                    break
    finally:
        bar.close()
    return run.finished()


def save_checkpoint(result: RunResult, path: str | Path, **metadata) -> None:
    """The trained backbone and loss head (its `s` buffer included) with what is needed to rebuild them.

    Only tensors and plain data (JSON's types) are stored, so `load_checkpoint` can read it with
    `weights_only=True`, which runs no code from the file.

    The bytes are made in memory and written whole (study/results.py's `write_bytes`): a full disk raises an
    OSError naming `path`, which the stage says in one line, and leaves no temporary file (torch writing to a
    file itself fails with a RuntimeError of its own, and leaves one).
    """
    plain = json.loads(json.dumps(metadata))  # a TypeError for any value that is not plain data
    buffer = io.BytesIO()
    torch.save({"model": result.model.state_dict(), "loss": result.loss.state_dict(), "metadata": plain}, buffer)
    write_bytes(buffer.getvalue(), path)


def load_checkpoint(path: str | Path, model: nn.Module, loss: nn.Module) -> dict:
    """Restore a checkpoint written by `save_checkpoint` into freshly built modules; returns its metadata."""
    fix = ("rerun the stage that wrote it (for a final run `dvc repro --force runs@<method>`, or tuned@<loss>), "
           "or train it again with `study train --save`")
    try:
        # weights_only: tensors and plain data only, so a tampered file cannot run code when it is read.
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        loss.load_state_dict(state["loss"])
        return state["metadata"]
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {path} is missing; {fix}") from None
    except Exception as error:  # a truncated, foreign or mismatched file fails in many ways inside torch
        if isinstance(error, pickle.UnpicklingError):  # not torch's message: it suggests weights_only=False
            raise ValueError(f"checkpoint {path} cannot be loaded: it is corrupt, or holds objects other than tensors "
                             f"and plain data, which could run code when read, so it was refused; {fix}") from None
        reason = " ".join([f"{type(error).__name__}:", *str(error).split()[:25]]).rstrip(":")
        raise ValueError(f"checkpoint {path} cannot be loaded ({reason}): it is truncated, corrupt, or not a "
                         f"checkpoint of the modules params.yaml builds; {fix}") from error
