"""`study bench`: the suite's speed figures side by side, measured in one run on one device.

Each figure is one small function: the loss heads against plain normalised-softmax cross-entropy (and
pytorch-metric-learning's ArcFace), `train()` against a bare PyTorch loop, trials per hour with K runs
packed on the device (train.parallel), K runs stepped as one fused model against one by one (study/fused.py), one
run in channels-last memory against channels-first, and each backbone's images per second. Times are medians of
repeats after warm-up; a ratio divides two figures measured in the same run, one after the other.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import optuna
import torch
import torch.nn.functional as F
from torch import nn

from study.config import StudyParams, TrainConfig
from study.environment import cpu_model
from study.fused import fusable, fused_forward
from study.losses import LOSSES, build_loss
from study.models import build_model, model_names
from study.results import JOURNAL, prepared_dir
from study.search import FINISHED, run_searches
from study.sources import ImageSet, load_dataset
from study.splits import save_splits, split_dataset
from study.storage import open_storage
from study.training import build_modules, device_description, evaluate, resolve_device, train

PLAIN = "plain"  # the reference every head's time is divided by
PML_ARCFACE = "pml_arcface"


def synchronise(device: torch.device) -> None:
    """Wait for the device's queued work, so that a clock reading covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(steps: dict[str, Callable[[], object]], device: torch.device, repeats: int,
                   warmup: int = 2) -> dict[str, float]:
    """Median wall time of one call of each step, over `repeats` rounds that call every step once in turn (so a
    slow spell of a shared machine falls on all of them alike), after `warmup` untimed rounds."""
    for _ in range(warmup):  # allocator, kernel choice, thread pool
        for step in steps.values():
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            synchronise(device)
            start = time.perf_counter()
            step()
            synchronise(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


class PlainCosineHead(nn.Module):
    """Normalised-softmax cross-entropy written out plainly: logits s·cos θ, no margin, no statistics."""

    def __init__(self, num_classes: int, embedding_size: int, s: float = 64.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_classes, embedding_size))
        self.s = s

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.s * F.linear(F.normalize(embeddings), F.normalize(self.weight)), labels)


def loss_heads(num_classes: int, embedding_size: int) -> tuple[dict[str, nn.Module], str]:
    """The heads to time: the plain one, every loss of study.losses, and PML's ArcFace when importable."""
    heads = {PLAIN: PlainCosineHead(num_classes, embedding_size)}
    heads.update({name: build_loss(name, num_classes, embedding_size) for name in LOSSES})
    try:
        from pytorch_metric_learning.losses import ArcFaceLoss
    except ImportError as error:
        return heads, f"pytorch-metric-learning not importable ({error}); its ArcFace is left out"
    heads[PML_ARCFACE] = ArcFaceLoss(num_classes, embedding_size, margin=28.6, scale=64)  # m = 0.5 rad, s = 64
    return heads, ""


def time_loss_heads(heads: dict[str, nn.Module], batch_size: int, device: torch.device,
                    repeats: int) -> dict[str, dict[str, float]]:
    """Median forward + backward time of each head on one random batch, and its ratio to the plain head."""
    embedding_size = heads[PLAIN].weight.shape[1]
    num_classes = heads[PLAIN].weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    embeddings = torch.randn(batch_size, embedding_size, generator=generator).to(device).requires_grad_()
    labels = torch.randint(num_classes, (batch_size,), generator=generator).to(device)
    steps = {}
    for name, head in heads.items():
        head.to(device).train()

        def step(head=head) -> None:
            head.zero_grad(set_to_none=True)
            embeddings.grad = None
            head(embeddings, labels).backward()

        steps[name] = step
    times = median_seconds(steps, device, repeats)
    pml = times.get(PML_ARCFACE, math.nan)
    return {name: {"ms": 1e3 * seconds, "ratio": seconds / times[PLAIN], "ratio_to_pml": seconds / pml}
            for name, seconds in times.items()}


def bare_loop_seconds(model: nn.Module, head: nn.Module, sets: dict[str, ImageSet], params: StudyParams, steps: int,
                      device: torch.device) -> float:
    """Seconds of a hand-written loop: `steps` Adam steps on shuffled device-resident batches, with the val
    evaluations `train()` makes (at the start and the end), and nothing else."""
    config = params.train
    images = sets["train"].images.float().div(255).to(device)
    labels = torch.as_tensor(sets["train"].labels).to(device)
    optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=config.lr)
    model.to(device).train()
    head.to(device).train()
    synchronise(device)
    start = time.perf_counter()
    evaluate(model, head, sets, "val", config, device)
    model.train()
    per_epoch = max(len(images) // config.batch_size, 1)
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(images), device=device)
        batch = order[(step % per_epoch) * config.batch_size:][:config.batch_size]
        loss = head(model(images[batch]), labels[batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    evaluate(model, head, sets, "val", config, device)
    synchronise(device)
    return time.perf_counter() - start


def loop_config(train_config: TrainConfig, steps: int, device: torch.device | str) -> TrainConfig:
    """`train()`'s settings for the loop comparison: `steps` Adam steps at a constant rate, evaluated only at the start
    and the end as the bare loop is (eval_points off: its log-spaced schedule would add about 20 evaluations)."""
    return train_config.replace(device=str(device), epochs=10_000, max_iterations=steps, eval_every=steps,
                                eval_points=None, schedule="constant", optimizer="adam", weight_decay=0.0)


def training_loop_speed(params: StudyParams, sets: dict[str, ImageSet], steps: int,
                        device: torch.device) -> dict[str, float]:
    """Iterations per second of `train()` and of a bare loop on the same model, loss, data, steps and evaluations
    (at the start and the end), and their ratio."""
    config = loop_config(params.train, steps, device)
    params = params.replace(train=config)
    shape = tuple(sets["train"].images.shape[1:])
    train(sets, loss_name="arcface", model_config=params.model, config=config.replace(max_iterations=5),
          progress=False)  # warm-up
    suite = train(sets, loss_name="arcface", model_config=params.model, config=config, progress=False)
    torch.manual_seed(config.seed)
    model, head = build_modules(params.model, "arcface", {}, sets["train"].num_classes, shape)
    bare = bare_loop_seconds(model, head, sets, params, steps, device)
    train_rate, bare_rate = suite.iterations / suite.seconds, steps / bare
    return {"steps": steps, "train_its": train_rate, "bare_its": bare_rate, "ratio": train_rate / bare_rate}


def trials_per_hour(params: StudyParams, sets: dict[str, ImageSet], packings: tuple[int, ...],
                    trials_per_run: int) -> dict[str, dict[str, float]]:
    """Trials per hour of a random search of the study's trials with K = train.parallel packed runs (the stage's own
    mechanism, study/packing.py), K × `trials_per_run` trials each, and the ratio to the first K.

    `per_hour` counts the whole search, the K - 1 workers' join delay and start included (paid once per stage);
    `running_per_hour` only the span from the first trial's start to the last one's end.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rates, threads = {}, torch.get_num_threads()  # packed runs set this process's threads: the later figures need all
    # One class split's study, as the search stage hands it to run_searches: its packed workers serve that split's
    # params (data.seeds cleared), and a worker refuses a study whose params differ from its own.
    params = params.for_split(params.data.seed)
    data = params.data
    try:
        with tempfile.TemporaryDirectory() as folder:
            for parallel in packings:
                root = Path(folder) / f"K{parallel}"  # a study of its own: the same trials, none of them resumed
                save_splits(sets, root / prepared_dir(data.seed), source=data.dataset, protocol=data.protocol,
                            seed=data.seed, fractions=data.fractions)
                search = {**params.search.to_dict(), "n_trials": trials_per_run * parallel, "sampler": "random",
                          "storage": None, "pruner": "none", "repeats": 1}
                packed = params.replace(search=search, train=params.train.replace(parallel=parallel))
                studies = []
                start = time.perf_counter()
                run_searches("arcface", packed, open_storage(packed.search, root / JOURNAL), sets, root, studies)
                seconds = time.perf_counter() - start
                trials = studies[0].get_trials(deepcopy=False, states=FINISHED)
                running = (max(t.datetime_complete for t in trials)
                           - min(t.datetime_start for t in trials)).total_seconds()
                rates[parallel] = {"trials": len(trials), "seconds": seconds, "per_hour": 3600 * len(trials) / seconds,
                                   "running_seconds": running, "running_per_hour": 3600 * len(trials) / running}
    finally:
        torch.set_num_threads(threads)
    first = rates[packings[0]]
    return {f"K={k}": {**rate, "ratio": rate["per_hour"] / first["per_hour"],
                       "running_ratio": rate["running_per_hour"] / first["running_per_hour"]}
            for k, rate in rates.items()}


def fused_speed(params: StudyParams, sets: dict[str, ImageSet], fusions: tuple[int, ...], repeats: int,
                device: torch.device) -> dict[str, dict[str, float]]:
    """Training steps per second of K runs of the study's model and ArcFace head stepped one after another and
    stepped as one fused model (study/fused.py), on a batch of the study's size and shape, and their ratio; empty
    where the study's model cannot be fused."""
    shape, classes = tuple(sets["train"].images.shape[1:]), sets["train"].num_classes
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(params.train.batch_size, *shape, generator=generator).to(device)
    labels = torch.randint(0, classes, (params.train.batch_size,), generator=generator).to(device)
    speeds = {}
    for count in fusions:
        runs = [build_modules(params.model, "arcface", {}, classes, shape) for _ in range(count)]
        if not fusable(runs[0][0]):
            return {}
        for model, head in runs:
            model.to(device).train()
            head.to(device).train()
        optimizers = [torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3) for model, head in runs]

        def separate(runs=runs, optimizers=optimizers) -> None:
            for (model, head), optimizer in zip(runs, optimizers):
                optimizer.zero_grad(set_to_none=True)
                head(model(images), labels).backward()
                optimizer.step()

        def fused(runs=runs, optimizers=optimizers) -> None:
            embeddings = fused_forward([model for model, _ in runs], [images] * len(runs))
            losses = [head(embedding, labels) for (_, head), embedding in zip(runs, embeddings)]
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            torch.stack(losses).sum().backward()
            for optimizer in optimizers:
                optimizer.step()

        seconds = median_seconds({"separate": separate, "fused": fused}, device, repeats)
        speeds[f"K={count}"] = {"separate_steps": count / seconds["separate"], "fused_steps": count / seconds["fused"],
                                "ratio": seconds["separate"] / seconds["fused"]}
    return speeds


def channels_last_speed(params: StudyParams, sets: dict[str, ImageSet], repeats: int,
                        device: torch.device) -> dict[str, float]:
    """Training steps per second of the study's model and ArcFace head with its images and weights in channels-first
    (torch's default) and channels-last memory, and their ratio; empty for a model without convolutions."""
    shape, classes = tuple(sets["train"].images.shape[1:]), sets["train"].num_classes
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(params.train.batch_size, *shape, generator=generator).to(device)
    labels = torch.randint(0, classes, (params.train.batch_size,), generator=generator).to(device)
    steps = {}
    for name, memory in (("channels_first", torch.contiguous_format), ("channels_last", torch.channels_last)):
        model, head = build_modules(params.model, "arcface", {}, classes, shape)
        if not any(isinstance(layer, nn.Conv2d) for layer in model.modules()):
            return {}
        model = model.to(device, memory_format=memory).train()
        head = head.to(device).train()
        optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3)
        batch = images.contiguous(memory_format=memory)

        def step(model=model, head=head, optimizer=optimizer, batch=batch) -> None:
            optimizer.zero_grad(set_to_none=True)
            head(model(batch), labels).backward()
            optimizer.step()

        steps[name] = step
    seconds = median_seconds(steps, device, repeats)
    return {"channels_first": 1 / seconds["channels_first"], "channels_last": 1 / seconds["channels_last"],
            "ratio": seconds["channels_first"] / seconds["channels_last"]}


def backbone_speed(input_shape: tuple[int, int, int], batch_size: int, device: torch.device,
                   repeats: int) -> dict[str, float]:
    """Images per second of each registered backbone, forward + backward in training mode."""
    images = torch.rand(batch_size, *input_shape, generator=torch.Generator().manual_seed(0)).to(device)
    steps = {}
    for name in model_names():
        model = build_model(name, 128, input_shape).to(device).train()

        def step(model=model) -> None:
            model.zero_grad(set_to_none=True)
            model(images).square().mean().backward()

        steps[name] = step
    return {name: batch_size / seconds for name, seconds in median_seconds(steps, device, repeats).items()}


def bench_setup(device: torch.device, params: StudyParams | None = None) -> tuple[StudyParams, dict[str, ImageSet]]:
    """A study's data, model and training (by default the default study's), on `device`: its trials are the ones
    timed, on the class split of data.seed."""
    params = params or StudyParams()
    params = params.replace(train=params.train.replace(device=str(device)))
    data = params.data
    return params, split_dataset(load_dataset(data.dataset, data.cache_dir), data.protocol, data.fractions, data.seed)


def machine() -> dict[str, str]:
    """What the figures were measured on: device, CPU and GPU models, torch version and date."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return {"cpu": cpu_model(), "gpu": gpu, "torch": torch.__version__, "threads": str(torch.get_num_threads()),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


@dataclass(frozen=True)
class Sizes:
    """How big each figure's problem is and how often it is measured."""

    classes: int
    embedding: int = 512
    batch: int = 512
    repeats: int = 10
    loop_steps: int = 500
    packings: tuple[int, ...] = (1, 2, 4, 8)
    trials_per_run: int = 4
    backbone_batch: int = 128
    fusions: tuple[int, ...] = (1, 2, 4, 8, 16)


def bench_sizes(quick: bool, device: torch.device) -> Sizes:
    """The sizes of `study bench`: 10,000 classes on a CPU, 100,000 on a GPU; fewer repeats, steps and K with `quick`."""
    classes = 10_000 if device.type == "cpu" else 100_000
    if quick:
        return Sizes(classes, repeats=5, loop_steps=100, packings=(1, 2), trials_per_run=2, fusions=(1, 4))
    return Sizes(classes)


def run_bench(quick: bool = False, device_name: str = "auto", log: Callable[[str], None] = print,
              sizes: Sizes | None = None, setup: tuple[StudyParams, dict[str, ImageSet]] | None = None) -> dict:
    """Every figure on one device, at `sizes` (by default those of `quick`) and with the trials of `setup`'s study
    (by default the default study's)."""
    device = resolve_device(device_name)
    sizes = sizes or bench_sizes(quick, device)
    params, sets = setup or bench_setup(device)
    results = {"device": device_description(device), "quick": quick, **machine(), "sizes": asdict(sizes)}
    log(f"loss heads at C={sizes.classes}, d={sizes.embedding}, B={sizes.batch} on {results['device']}")
    heads, note = loss_heads(sizes.classes, sizes.embedding)
    results["loss_heads"] = {"classes": sizes.classes, "embedding": sizes.embedding, "batch": sizes.batch,
                             "note": note, "times": time_loss_heads(heads, sizes.batch, device, sizes.repeats)}
    log("train() against a bare loop")
    results["training_loop"] = training_loop_speed(params, sets, sizes.loop_steps, device)
    log(f"trials per hour at K = {', '.join(map(str, sizes.packings))}")
    results["trials_per_hour"] = trials_per_hour(params, sets, sizes.packings, sizes.trials_per_run)
    log(f"fused runs at K = {', '.join(map(str, sizes.fusions))}")
    results["fused_runs"] = {"model": params.model.name, "batch": params.train.batch_size,
                             "speeds": fused_speed(params, sets, sizes.fusions, sizes.repeats, device)}
    log("channels-last against channels-first")
    results["memory_format"] = {"model": params.model.name, "batch": params.train.batch_size,
                                "steps_per_second": channels_last_speed(params, sets, sizes.repeats, device)}
    log("backbones")
    shape = tuple(sets["train"].images.shape[1:])  # the study's images
    results["backbones"] = {"input": list(shape), "batch": sizes.backbone_batch, "images_per_second": backbone_speed(
        shape, sizes.backbone_batch, device, sizes.repeats)}
    return results


def format_table(results: dict) -> str:
    """The figures as a plain-text table, each with its ratio to the reference of its group."""
    lines = [f"study bench on {results['device']} ({results['cpu']}{', ' + results['gpu'] if results['gpu'] else ''}), "
             f"torch {results['torch']}, {results['date']}{' (quick)' if results['quick'] else ''}"]
    heads = results["loss_heads"]
    lines.append(f"\nloss head, forward + backward (C={heads['classes']}, d={heads['embedding']}, B={heads['batch']})"
                 f"{'  [' + heads['note'] + ']' if heads['note'] else ''}")
    lines += [f"  {name:<16}{row['ms']:10.2f} ms   x{row['ratio']:.2f} of {PLAIN}"
              + (f"   x{row['ratio_to_pml']:.2f} of {PML_ARCFACE}" if not math.isnan(row["ratio_to_pml"]) else "")
              for name, row in heads["times"].items()]
    loop = results["training_loop"]
    lines.append(f"\ntraining loop ({loop['steps']} steps and two val evaluations)")
    lines.append(f"  {'train()':<16}{loop['train_its']:10.1f} it/s   x{loop['ratio']:.2f} of the bare loop")
    lines.append(f"  {'bare loop':<16}{loop['bare_its']:10.1f} it/s")
    lines.append("\npacked trials on one device")
    lines.append(f"  {'':<16}{'trials/h':>10}{'of K=1':>9}{'running/h':>12}{'of K=1':>9}   (trials in s, of them running)")
    lines += [f"  {name:<16}{row['per_hour']:10.0f}{row['ratio']:8.2f}x{row['running_per_hour']:12.0f}"
              f"{row['running_ratio']:8.2f}x   ({row['trials']} in {row['seconds']:.1f} s, {row['running_seconds']:.1f} s)"
              for name, row in results["trials_per_hour"].items()]
    fused = results.get("fused_runs")
    if fused:
        lines.append(f"\nK runs as one fused model ({fused['model']}, batch {fused['batch']}, ArcFace head)")
        lines.append(f"  {'':<16}{'one by one':>12}{'fused':>10}   (steps/s of all K runs)")
        lines += [f"  {name:<16}{row['separate_steps']:12.1f}{row['fused_steps']:10.1f}   x{row['ratio']:.2f}"
                  for name, row in fused["speeds"].items()]
        if not fused["speeds"]:
            lines.append(f"  {fused['model']} cannot be fused (study/fused.py): its runs train one at a time")
    memory = results.get("memory_format")
    if memory:
        speeds = memory["steps_per_second"]
        lines.append(f"\nmemory format ({memory['model']}, batch {memory['batch']}, ArcFace head), training steps")
        lines += ([f"  {'channels-first':<16}{speeds['channels_first']:10.1f} steps/s",
                   f"  {'channels-last':<16}{speeds['channels_last']:10.1f} steps/s   x{speeds['ratio']:.2f}"]
                  if speeds else [f"  {memory['model']} has no convolutions: its memory format changes nothing"])
    backbones = results["backbones"]
    lines.append(f"\nbackbones, forward + backward ({'x'.join(map(str, backbones['input']))}, batch {backbones['batch']})")
    speeds = backbones["images_per_second"]
    fastest = max(speeds.values())
    lines += [f"  {name:<16}{speed:10.0f} images/s   x{speed / fastest:.2f} of the fastest" for name, speed in speeds.items()]
    return "\n".join(lines)


def checked_out_dir(out_dir: str | Path) -> Path:
    """--out, checked before anything is measured (a run takes minutes): a folder that exists or can be made, and
    written in; a ValueError of one line naming it and the fix otherwise."""
    out = Path(out_dir)
    existing = next(parent for parent in (out, *out.parents, Path(".")) if parent.exists())
    if not existing.is_dir():
        raise ValueError(f"--out {out}: {existing} is a file, so no folder can be made there; give a folder, e.g. "
                         "--out benchmarks/results")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: no permission to write in {existing}; give a folder you can write, e.g. "
                         f"--out /tmp/bench, or make it writable (chmod u+w {existing})")
    return out


def write_results(results: dict, out_dir: str | Path) -> Path:
    """The figures as JSON in `out_dir`, named after the device and the date."""
    device = re.sub(r"[^a-z0-9]+", "-", results["device"].lower()).strip("-")
    path = Path(out_dir) / f"{device}-{results['date'][:10]}{'-quick' if results['quick'] else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return path
