"""Bad params, data, checkpoints and paths: each stops with a message that names the problem (its key or file) and
the fix; through the DVC stages, before anything earlier is deleted."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import stages.prepare
import stages.validate
import study.training
from study import cli
from study.config import ConfigError, ModelConfig
from study.sources import glyphs
from study.sources.glyphs import max_glyph_classes
from study.training import build_modules, load_checkpoint, save_checkpoint
from study.validation import validate_params

from conftest import REPO, STUDY_FILES, copy_study

COPIED = [name for name in STUDY_FILES if name != "params.yaml"]  # each test writes its own
PREVIOUS_REPORT = "# The previous report\n"

# The smallest study: digits (10 classes, closed protocol), an MLP, one epoch on the CPU.
TINY = yaml.safe_load((REPO / "params.yaml").read_text())
TINY["data"].update(dataset="digits", protocol="closed")
TINY["model"].update(name="mlp", embedding_size=16)
TINY["train"].update(epochs=1, device="cpu", lr=0.01, objective="accuracy")
TINY["search"].update(n_trials=2)
TINY["runs"].update(seeds=[0], plateau_cap=1)  # the declared length: tiny runs never converge
TINY["analysis"].update(n_bootstrap=100)


def params_text(values: dict, raw: dict[str, str] | None = None) -> str:
    """TINY with `values` set by dotted key ({'train.lr': 0}) and `raw` YAML lines replaced ({'lr': '1.0e6'})."""
    params = yaml.safe_load(yaml.safe_dump(TINY))
    for key, value in values.items():
        *sections, name = key.split(".")
        node = params
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    text = yaml.safe_dump(params, sort_keys=False)
    for name, literal in (raw or {}).items():
        text = re.sub(rf"(?m)^(\s+{name}): .*$", rf"\1: {literal}", text)
    return text


def image_folder(root: Path, classes: int = 3, per_class: int = 4, bad: dict[str, bytes] | None = None) -> Path:
    """`classes` sub-folders of `per_class` small PNGs each, plus `bad` files (relative path → bytes)."""
    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / f"class{c}" / f"{i}.png")
    for name, data in (bad or {}).items():
        (root / name).write_bytes(data)
    return root


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((16, 16, 3), 128, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_bytes() -> bytes:
    """A JPEG whose image data is long enough to cut inside it (where PIL's verify() reads nothing)."""
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()


# --- how a case is run: each returns the message the bad input gave ---------------------------------------------


def validated(values: dict | None = None, raw: dict[str, str] | None = None, text: str | bytes | None = None,
              setup: Callable[[Path, pytest.MonkeyPatch], dict] | None = None):
    """validate_params on a params.yaml in the case's folder (`setup` may make files there and return more values)."""
    def run(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
        more = setup(folder, monkeypatch) if setup else {}
        content = text if text is not None else params_text({**(values or {}), **more}, raw)
        (folder / "params.yaml").write_bytes(content.encode() if isinstance(content, str) else content)
        try:
            params = validate_params(str(folder / "params.yaml"))
        except (ConfigError, FileNotFoundError) as error:
            return str(error)
        return f"accepted: lr={params.train.lr!r} weight_decay={params.train.weight_decay!r}"
    return run


def through_stage(module, values: dict, setup: Callable[[Path, pytest.MonkeyPatch], dict] | None = None):
    """A stage's main() run in the case's folder, as DVC runs it, with a previous report there that must survive."""
    def run(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
        more = setup(folder, monkeypatch) if setup else {}
        (folder / "params.yaml").write_text(params_text({**values, **more}))
        (folder / "reports").mkdir()
        (folder / "reports" / "report.md").write_text(PREVIOUS_REPORT)
        monkeypatch.chdir(folder)
        with pytest.raises((SystemExit, ValueError, ConfigError)) as error:
            module.main()
        assert (folder / "reports" / "report.md").read_text() == PREVIOUS_REPORT
        return str(error.value.code if isinstance(error.value, SystemExit) else error.value)
    return run


def folder_dataset(**folder_options) -> Callable[[Path, pytest.MonkeyPatch], dict]:
    def setup(folder: Path, monkeypatch) -> dict:
        image_folder(folder / "images", **folder_options)
        return {"data.dataset": f"folder:{folder / 'images'}", "data.image_size": 8, "train.batch_size": 4}
    return setup


def journal_with(lines: list[bytes]) -> Callable[[Path, pytest.MonkeyPatch], dict]:
    """The case's folder as the study's checkout (the validate stage's working directory), its trial journal holding
    `lines`."""
    def setup(folder: Path, monkeypatch) -> dict:
        monkeypatch.chdir(folder)
        (folder / "results" / "trials").mkdir(parents=True)
        (folder / "results" / "trials" / "journal.log").write_bytes(b"".join(lines))
        return {}
    return setup


RECORD = b'{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [2]}\n'


def allow_large(folder: Path, monkeypatch) -> dict:
    monkeypatch.setenv("STUDY_ALLOW_LARGE", "1")
    return {}


def no_cuda(folder: Path, monkeypatch) -> dict:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return {}


def one_gpu(folder: Path, monkeypatch) -> dict:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    return {}


def no_mps(folder: Path, monkeypatch) -> dict:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    return {}


def unset_variable(folder: Path, monkeypatch) -> dict:
    monkeypatch.delenv("STUDY_TEST_UNSET_STORAGE", raising=False)
    return {}


def fifo_in_folder(folder: Path, monkeypatch) -> dict:
    """An image folder holding a FIFO named like an image, which DVC's hashing of the folder would block on."""
    values = folder_dataset()(folder, monkeypatch)
    os.mkfifo(folder / "images" / "class0" / "pipe.png")
    return values


# Each list holds nine aliases of the one before: 9**6 strings from six lines, a 4 MB value once written out.
ALIAS_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]\n" for previous, name in zip("abcde", "bcdef"))


def checkpoint(write: Callable[[Path], None]):
    """load_checkpoint of a file `write` makes, into the modules the tiny study builds."""
    def run(folder: Path, monkeypatch) -> str:
        path = folder / "results" / "runs" / "fixed_adacos" / "seed0.pt"
        path.parent.mkdir(parents=True)
        write(path)
        model, loss = build_modules(ModelConfig(name="mlp", embedding_size=16), "fixed_adacos", {}, 10, (1, 8, 8))
        with pytest.raises((ValueError, FileNotFoundError)) as error:
            load_checkpoint(path, model, loss)
        return str(error.value)
    return run


def a_real_checkpoint(path: Path, name: str = "mlp") -> None:
    model, loss = build_modules(ModelConfig(name=name, embedding_size=16), "fixed_adacos", {}, 10, (1, 8, 8))
    save_checkpoint(study.training.RunResult("completed", "", model=model, loss=loss), path, loss="fixed_adacos")


def truncated(path: Path) -> None:
    a_real_checkpoint(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def save_to(target: Callable[[Path], Path]):
    """`study train --save` to a bad place: it must stop before any training."""
    def run(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
        def never(*args, **kwargs):
            raise AssertionError("training started although the checkpoint could not be saved")
        monkeypatch.setattr(study.training, "train", never)
        code = cli.main(["train", "--dataset", "digits", "--model", "mlp", "--epochs", "1", "--device", "cpu",
                         "--save", str(target(folder))])
        assert code == 2
        return ""  # the message went to stderr; the test reads it
    return run


@dataclass
class Case:
    name: str
    run: Callable
    needles: tuple[str, ...]  # the problem (its key or file) and the fix, as the message must say them
    absent: tuple[str, ...] = ()  # what an unclear message said instead (tests/test_unclear_inputs.py)


CORRUPT = b"this is not an image"
CASES = [
    # --- params.yaml, whole: sections, keys, types and ranges -----------------------------------------------------
    Case("unknown section", validated({"trian.epochs": 3}), ("unknown section 'trian'", "the sections are: data")),
    Case("unknown key", validated({"train.epoch": 3}), ("unknown key train.epoch", "the keys of train are: epochs")),
    Case("bad analysis.confidence", validated({"analysis.confidence": 1.5}), ("analysis.confidence", "[0.5, 1)")),
    Case("bad report.dpi", validated({"report.dpi": 5}), ("report.dpi", "must be in [50, 600]")),
    Case("repeated runs.seeds", validated({"runs.seeds": [1, 1]}), ("runs.seeds", "each once")),
    Case("no runs.seeds", validated({"runs.seeds": []}), ("runs.seeds", "give at least one seed")),
    Case("lr a word", validated({"train.lr": "fast"}), ("train.lr", "expected a finite number")),
    Case("lr zero", validated({"train.lr": 0}), ("train.lr", "must be > 0")),
    Case("threads zero", validated({"train.threads": 0}), ("train.threads", "must be ≥ 1 or null")),
    Case("batch of one", validated({"train.batch_size": 1}), ("train.batch_size", "must be ≥ 2")),
    Case("fractions not summing to 1", validated({"data.fractions": [0.5, 0.5, 0.5]}), ("data.fractions", "sum to 1")),
    Case("not YAML", validated(text="train: [epochs: 1\n"), ("is not valid YAML",)),
    Case("not a mapping", validated(text="- train\n"), ("must be a mapping of sections", "data, model, train")),
    # --- search and runs ------------------------------------------------------------------------------------------
    Case("unknown loss in search.losses", validated({"search.losses": ["arcfase"]}),
         ("search.losses: 'arcfase' cannot be searched", "choose from arcface")),
    Case("m_range upside down", validated({"search.m_range": {"arcface": [1.0, 0.2]}}),
         ("search.m_range.arcface", "give [low, high] with 0 ≤ low ≤ high")),
    Case("m_range beyond π", validated({"search.m_range": {"arcface": [0.0, 4.0]}}),
         ("search.m_range.arcface", "below π")),
    Case("unknown method", validated({"runs.methods": ["fixed_adacos", "adacos"]}),
         ("runs.methods: 'adacos' is neither", "choose from fixed_adacos")),
    Case("methods without the reference", validated({"runs.methods": ["softmax"]}),
         ("runs.methods", "must include fixed_adacos")),
    # --- search.storage: its form, and whether it can be opened ---------------------------------------------------
    Case("storage garbage", validated({"search.storage": "garbage"}),
         ("search.storage: neither a database URL", "dialect[+driver]://", "env:VARNAME", "null")),
    Case("storage unknown dialect", validated({"search.storage": "garbage://x"}),
         ("search.storage", "no database 'garbage'", "postgresql", "sqlite")),
    Case("storage sqlite in a missing folder", validated({"search.storage": "sqlite:////nonexistent/study/trials.db"}),
         ("search.storage", "/nonexistent/study does not exist", "mkdir -p /nonexistent/study")),
    Case("storage URL with a password", validated({"search.storage": "postgresql://ann:hunter2@db.example/study"}),
         ("search.storage", "carries a password", "PGPASSWORD", "~/.pgpass", "env:VARNAME")),
    Case("storage password in the query", validated({"search.storage": "postgresql://ann@db/study?password=hunter2"}),
         ("search.storage", "carries a password", "PGPASSWORD")),
    Case("storage in memory", validated({"search.storage": "sqlite://"}),
         ("search.storage", "in-memory", "give a file")),
    Case("storage env: without a name", validated({"search.storage": "env:1DB"}),
         ("search.storage", "env: must be followed by an environment variable's name", "env:STUDY_STORAGE")),
    Case("storage env:VAR unset", validated({"search.storage": "env:STUDY_TEST_UNSET_STORAGE"}, setup=unset_variable),
         ("search.storage", "STUDY_TEST_UNSET_STORAGE is not set", "export STUDY_TEST_UNSET_STORAGE=")),
    # --- model and device -----------------------------------------------------------------------------------------
    Case("unknown model", validated({"model.name": "resnet"}),
         ("model.name", "unknown model 'resnet'", "cnn, mlp, seed_cnn", "timm/<model_name>")),
    Case("unknown timm model", validated({"model.name": "timm/resnet10000"}),
         ("model.name", "unknown timm model 'resnet10000'", "timm.list_models()")),
    Case("pretrained without weights", validated({"model.pretrained": True}),
         ("model 'mlp' has no pretrained weights", "pretrained: false")),
    Case("cuda without a GPU", validated({"train.device": "cuda"}, setup=no_cuda),
         ("train.device", "CUDA is not available", "auto", "cpu")),
    Case("a GPU that is not there", validated({"train.device": "cuda:3"}, setup=one_gpu),
         ("train.device", "'cuda:3'", "cuda:0 to cuda:0")),
    Case("mps without Apple GPU", validated({"train.device": "mps"}, setup=no_mps),
         ("train.device", "MPS", "auto or cpu")),
    # --- the data, as the spec and folders tell without loading images --------------------------------------------
    Case("glyphs:2 with AdaCos", validated({"data.dataset": "glyphs:2"}),
         ("data.dataset: glyphs:2", "leaves 2 training class(es)", "fixed_adacos and dynamic_adacos",
          "at least 3", "more classes")),
    Case("open protocol leaving 2 training classes", validated(
        {"data.dataset": "glyphs:8", "data.protocol": "open", "data.fractions": [0.25, 0.375, 0.375],
         "train.objective": "map_at_r"}),
         ("leaves 2 training class(es)", "data.fractions[0]", "at least 3")),
    Case("batch larger than the digits' train split", validated({"train.batch_size": 5000}),
         ("train.batch_size: 5000 is more than the", "set train.batch_size to at most")),
    Case("batch larger than the glyphs' train split", validated(
        {"data.dataset": "glyphs:10:4", "train.batch_size": 64}),
         ("train.batch_size: 64 is more than the 20 training images of glyphs:10:4", "at most 20")),
    Case("more classes kept than there are", validated({"data.classes": 50}),
         ("data.classes=50", "the source has 10 classes", "keep between 2 and 10")),
    Case("unknown dataset", validated({"data.dataset": "imagenet"}),
         ("data.dataset", "unknown dataset 'imagenet'", "known: digits")),
    Case("bad glyphs spec", validated({"data.dataset": "glyphs:many"}), ("data.dataset", "bad glyphs spec")),
    Case("open protocol with too few classes", validated(
        {"data.dataset": "glyphs:5", "data.protocol": "open", "train.objective": "map_at_r"}),
         ("data.dataset", "the open protocol needs at least 2 classes", "takes at least 8 classes")),
    Case("missing folder", validated({"data.dataset": "folder:/nonexistent/faces", "data.image_size": 8}),
         ("data.dataset", "/nonexistent/faces does not exist", "one sub-folder of images per class")),
    Case("empty folder", validated(setup=lambda folder, mp: (folder / "empty").mkdir() or {
        "data.dataset": f"folder:{folder / 'empty'}", "data.image_size": 8}),
         ("data.dataset", "has no class sub-folders", "in its own sub-folder")),
    Case("folder with one class", validated(setup=folder_dataset(classes=1)),
         ("data.dataset: folder:", "leaves 1 training class(es)", "at least 3")),
    Case("a class folder without images", validated(setup=lambda folder, mp: (
        image_folder(folder / "images"), (folder / "images" / "class9").mkdir(),
        {"data.dataset": f"folder:{folder / 'images'}", "data.image_size": 8})[-1]),
         ("class9", "contains no images", "add images to it or remove it")),
    Case("folder without image_size", validated(setup=lambda folder, mp: {
        **folder_dataset()(folder, mp), "data.image_size": None}),
         ("data.image_size", "set data.image_size")),
    # --- found at validate, before DVC deletes an output, not once training has started (issue 28) ----------------
    Case("too few test images for verification's folds", validated(setup=folder_dataset(classes=4, per_class=10)),
         ("data.fractions: folder:", "leaves 8 test images of 4 class(es), which make 8 verification pairs",
          "10 folds", "give test a larger share")),
    Case("too few test images for verification's folds, open protocol", validated(
        {"data.dataset": "glyphs:8:2", "data.protocol": "open", "train.objective": "map_at_r", "train.batch_size": 4}),
         ("data.dataset: glyphs:8:2 (open protocol) leaves 4 test images of 2 class(es)", "4 verification pairs",
          "more images")),
    Case("validate: corrupt image", validated(setup=folder_dataset(bad={"class0/broken.png": CORRUPT})),
         ("data.dataset: ", "class0/broken.png cannot be read as an image", "replace or delete it")),
    Case("validate: truncated PNG", validated(setup=folder_dataset(bad={"class1/cut.png": png_bytes()[:60]})),
         ("data.dataset: ", "class1/cut.png cannot be read as an image", "replace or delete it")),
    Case("validate: JPEG cut inside its image data", validated(setup=folder_dataset(
        bad={"class2/cut.jpg": jpeg_bytes()[:-300]})), ("class2/cut.jpg cannot be read as an image", "truncated")),
    Case("validate: empty image file", validated(setup=folder_dataset(bad={"class2/empty.jpg": b""})),
         ("class2/empty.jpg cannot be read as an image", "replace or delete it")),
    Case("a corrupt line inside the trial journal", validated(setup=journal_with([RECORD, b"{garbage\n", RECORD])),
         ("search.storage: ", "journal.log line 2 is corrupt (not a journal record)", "head -n 1",
          "delete it to start the searches afresh")),
    Case("a journal line that is JSON but no record", validated(setup=journal_with([RECORD, b"[1, 2]\n"])),
         ("journal.log line 2 is corrupt",)),
    Case("a billion search trials", validated({"search.n_trials": 10**9}),
         ("search.n_trials: the study would make 3,000,000,012 trainings", "bound of 100,000 trainings",
          "docs/configuration.md", "STUDY_ALLOW_LARGE=1")),
    Case("a billion epochs", validated({"train.epochs": 10**9}),
         ("train.epochs: the study would make 18 trainings", "252,000,000,000 iterations in all",
          "1,000,000,000 iterations", "lower train.epochs", "STUDY_ALLOW_LARGE=1")),
    Case("ten thousand final seeds", validated({"runs.seeds": list(range(10_000))}),
         ("runs.seeds: the study would make 120,006 trainings", "lower runs.seeds", "STUDY_ALLOW_LARGE=1")),
    Case("a billion epochs of a source known only at prepare", validated(
        {"data.dataset": "torchvision:CIFAR10", "train.epochs": 10**9}),
         ("train.epochs: ", "at least 18,000,000,000 iterations",)),
    # --- the data at prepare: every image decoded, the split checked ----------------------------------------------
    Case("corrupt image", through_stage(stages.prepare, {}, folder_dataset(bad={"class0/broken.png": CORRUPT})),
         ("1 image file(s)", "class0/broken.png", "replace or delete each")),
    Case("two corrupt images", through_stage(stages.prepare, {}, folder_dataset(
        bad={"class0/broken.png": CORRUPT, "class2/empty.jpg": b""})),
         ("2 image file(s)", "class0/broken.png", "class2/empty.jpg", "replace or delete each")),
    Case("truncated image", through_stage(stages.prepare, {}, folder_dataset(
        bad={"class1/cut.png": png_bytes()[:60]})), ("class1/cut.png", "replace or delete each")),
    Case("prepare: batch larger than the split", through_stage(stages.prepare, {}, lambda folder, mp: {
        **folder_dataset()(folder, mp), "train.batch_size": 100}),
         ("train.batch_size: 100 is more than the 6 training images", "at most 6")),
    # --- the validate stage as DVC runs it ------------------------------------------------------------------------
    Case("validate stage: storage garbage", through_stage(stages.validate, {"search.storage": "garbage"}),
         ("search.storage: neither a database URL", "No other stage ran and no output was deleted")),
    Case("validate stage: several problems at once", through_stage(
        stages.validate, {"model.name": "resnet", "train.batch_size": 5000}),
         ("model.name: unknown model 'resnet'", "train.batch_size: 5000", "No other stage ran")),
    # --- checkpoints ----------------------------------------------------------------------------------------------
    Case("garbage checkpoint", checkpoint(lambda path: path.write_bytes(b"garbage" * 100)),
         ("results/runs/fixed_adacos/seed0.pt cannot be loaded", "dvc repro --force runs@<method>")),
    Case("truncated checkpoint", checkpoint(truncated),
         ("seed0.pt cannot be loaded", "truncated", "dvc repro --force runs@<method>")),
    Case("empty checkpoint", checkpoint(lambda path: path.write_bytes(b"")), ("seed0.pt cannot be loaded", "rerun")),
    Case("checkpoint of another model", checkpoint(lambda path: a_real_checkpoint(path, "cnn")),
         ("seed0.pt cannot be loaded", "not a checkpoint of the modules params.yaml builds", "rerun")),
    Case("missing checkpoint", checkpoint(lambda path: None), ("seed0.pt is missing", "dvc repro --force")),
    # --- study train --save ---------------------------------------------------------------------------------------
    Case("train --save to a missing folder", save_to(lambda folder: folder / "nowhere" / "model.pt"),
         ("nowhere does not exist", "mkdir -p")),
    Case("train --save to a folder", save_to(lambda folder: folder), ("is a folder", "give a file name")),
    # --- values that validation used to accept, to fail after training or to be silently wrong (issue 22) ---------
    Case("unknown palette", validated({"report.palette": "nope"}),
         ("report.palette: 'nope' is not a palette seaborn knows", "viridis")),
    Case("negative final seed", validated({"runs.seeds": [-1]}), ("runs.seeds[0]: -1 is no seed", "0 to 2**32 − 1")),
    Case("final seed beyond 32 bits", validated({"runs.seeds": [0, 2**32]}),
         ("runs.seeds[1]: 4294967296 is no seed", "give one in that range")),
    Case("negative search seed", validated({"search.seed": -1}), ("search.seed: -1 is no seed", "2**32 − 1")),
    Case("negative momentum with sgd", validated({"train.optimizer": "sgd", "train.momentum": -1}),
         ("train.momentum: must be in [0, 1)",)),
    Case("embedding beyond memory", validated({"model.embedding_size": 10**12}),
         ("model.embedding_size: 1000000000000 needs at least", "for the loss head alone", "give a smaller size")),
    Case("image size beyond memory", validated({"data.image_size": 10**6}),
         ("data.image_size: 1000000×1000000 images", "as float32", "give a smaller data.image_size")),
    Case("glyph images beyond memory", validated({"data.dataset": "glyphs:100:100000000"}),
         ("data.dataset: glyphs:100:100000000:28 makes 10,000,000,000 images", "fewer instances per class")),
    Case("open protocol, one image per val and test class", validated(
        {"data.dataset": "glyphs:40:1", "data.protocol": "open", "train.objective": "map_at_r", "train.batch_size": 4}),
         ("data.dataset: glyphs:40:1 (open protocol) leaves each of the 10 val classes a single image",
          "each of the 10 test classes", "give each class at least 2 images")),
    Case("closed protocol, one image per val class", validated(
        {"data.dataset": "glyphs:10:3", "data.fractions": [0.34, 0.33, 0.33], "train.batch_size": 4}),
         ("data.fractions: glyphs:10:3 (closed protocol) leaves each of the 10 val classes", "a larger share")),
    Case("no loss to search", validated({"search.losses": []}),
         ("search.losses: give at least one loss to search", "[arcface]")),
    Case("grid beyond memory", validated({"search.grid_points": 100_000}),
         ("search.grid_points: must be in [2, 1000]",)),
    Case("cosface margins up to 100", validated(
        {"search.losses": ["cosface"], "search.m_range": {"cosface": [0, 100]}}),
         ("search.m_range.cosface: CosFace subtracts m from a cosine", "high ≤ 1")),
    Case("fixed cosface margin of 50", validated(
        {"runs.methods": ["fixed_adacos", "wide"], "runs.fixed": {"wide": {"loss": "cosface", "s": 30.0, "m": 50.0}}}),
         ("runs.fixed.wide.m: 50: CosFace", "give m in [0, 1]", "report.reproduce")),
    Case("a thousand packed runs", validated({"train.parallel": 1000}),
         ("train.parallel: 1000 runs at once", "per core", "give at most", "or auto")),
    Case("a million threads", validated({"train.threads": 10**6}),
         ("train.threads: 1000000 threads per run", "cores", "give at most")),
    Case("ten thousand loader processes", validated({"train.num_workers": 10**4}),
         ("train.num_workers: 10000", "cores", "give at most")),
    # --- datasets, resolved offline before prepare's output is deleted ---------------------------------------------
    Case("torchvision dataset that does not exist", validated({"data.dataset": "torchvision:NoSuch"}),
         ("data.dataset: torchvision has no dataset 'NoSuch'", "FashionMNIST")),
    Case("more glyph classes than the source has", validated({"data.dataset": "glyphs:6000"}),
         ("data.dataset: glyphs has at most", "6000 were asked for", "ask for at most")),
    Case("a million glyph classes", validated({"data.dataset": "glyphs:1000000"}),
         ("data.dataset: glyphs has at most", "1000000 were asked for")),
    Case("an IDX folder without IDX files", validated({"data.dataset": "idx:/etc"}),
         ("data.dataset: /etc holds no IDX files", "train-images-idx3-ubyte")),
    Case("a FIFO named .png in the image folder", validated(setup=fifo_in_folder),
         ("class0/pipe.png", "not a regular file", "remove it or move it out")),
    # --- params.yaml that is not plain data ------------------------------------------------------------------------
    Case("empty params.yaml", validated(text=""), ("params.yaml is empty", "study preset default")),
    Case("params.yaml of comments only", validated(text="# to do\n"), ("params.yaml is empty",)),
    Case("a byte that is not UTF-8", validated(text=b"report:\n  title: caf\xe9\n"),
         ("is not UTF-8 text: byte 0xe9 on line 2", "save the file as UTF-8")),
    Case("5,000 levels of nesting", validated(text="report: " + "[" * 5000 + "]" * 5000 + "\n"),
         ("line 1: nests deeper than", "remove the extra brackets")),
    Case("alias bomb", validated(text=ALIAS_BOMB), ("line 2: an alias (*name)", "write the value out")),
    Case("octal 010", validated(raw={"epochs": "010"}), ("010 is no plain decimal number", "as 8", "write 8")),
    Case("hexadecimal 0x10", validated(raw={"epochs": "0x10"}), ("0x10 is no plain decimal number", "write 16")),
    Case("base 60 1:30", validated(raw={"epochs": "1:30"}), ("1:30 is no plain decimal number", "write 90")),
    Case("yes for true", validated(raw={"amp": "yes"}), ("yes reads as true in YAML 1.1", "write true or false")),
    Case("a key twice", validated(text="train:\n  epochs: 1\n  epochs: 2\n"),
         ("line 3: the key epochs appears twice", "keep one")),
    Case("a megabyte of params", validated(text="# " + "x" * 2**20 + "\n"), ("a study's params take a few thousand",)),
    # --- positive controls: numbers PyYAML reads as strings are numbers -------------------------------------------
    Case("lr 1.0e6 accepted", validated(raw={"lr": "1.0e6", "weight_decay": "5e-4"}),
         ("accepted: lr=1000000.0 weight_decay=0.0005",)),
    Case("lr 1e-4 accepted", validated(raw={"lr": "1e-4"}), ("accepted: lr=0.0001",)),
    Case("ten thousand final seeds with STUDY_ALLOW_LARGE=1 accepted", validated(
        {"runs.seeds": list(range(10_000))}, setup=allow_large), ("accepted",)),
    Case("a torn last journal line accepted (the storage moves it aside)", validated(
        setup=journal_with([RECORD, b'{"op_code": 5, "wor'])), ("accepted",)),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_bad_input_names_its_problem_and_the_fix(case, tmp_path, monkeypatch, capsys):
    message = case.run(tmp_path, monkeypatch) or capsys.readouterr().err
    for needle in case.needles:
        assert needle in message, f"{needle!r} missing from:\n{message}"
    if case.run.__qualname__.startswith("validated"):
        assert "Traceback" not in message and "pydantic" not in message.lower()
        assert len(message) < 2000, f"{len(message):,} characters"  # one line per problem, values cut short


def test_the_positive_controls_are_read_by_pyyaml_as_strings():
    """Why the 1.0e6 case matters: PyYAML (YAML 1.1) reads these as strings, so the config must convert them."""
    values = yaml.safe_load("lr: 1.0e6\nweight_decay: 5e-4\nother: 1e-4\n")
    assert all(isinstance(value, str) for value in values.values())


@pytest.mark.parametrize("values", [
    {"data.dataset": "glyphs:1000000"},  # refused by its class count before a label is made
    {"data.dataset": "glyphs:5000:400"},  # 2,000,000 labels split class by class (closed protocol)
    {"data.dataset": "glyphs:5000:400", "data.classes": 4000},
], ids=["a million classes", "two million images, closed protocol", "kept classes"])
def test_validation_stays_fast_whatever_the_size(values, tmp_path, monkeypatch):
    """Validation reads labels only: it renders no image, and never scans every label once per class."""
    max_glyph_classes()  # the character table is built once per process (and counted once per install)

    def refuse(*args, **kwargs):
        raise AssertionError("validation rendered glyph images")

    monkeypatch.setattr(glyphs, "render_class", refuse)
    monkeypatch.setattr(glyphs, "generate_glyphs", refuse)
    start = time.perf_counter()
    message = validated(values)(tmp_path, None)
    # A bound far above a second or two on a loaded 2-core machine: it catches a scan of 2,000,000 labels per class
    # (minutes), not a slower machine.
    assert time.perf_counter() - start < 60, message


def test_every_class_split_is_checked_and_each_problem_said_once(tmp_path):
    message = validated({"data.dataset": "glyphs:40:1", "data.protocol": "open", "data.seeds": [0, 1, 2],
                         "train.objective": "map_at_r", "train.batch_size": 4})(tmp_path, None)
    assert [line.split(" leaves each of the 10 ")[1][:4] for line in message.splitlines()] == ["val ", "test"]


# --- through `dvc repro`: validate stops the pipeline before anything earlier is deleted --------------------------


def prepared_checkout(root: Path) -> Path:
    """A git + DVC checkout of the study in `root` with the tiny params, `dvc repro prepare` done and a previous
    report: conftest's `prepared_study`, which the tests of this module and test_found_before_training share."""
    if shutil.which("dvc") is None or shutil.which("git") is None:
        pytest.skip("dvc and git are needed")
    copy_study(root, COPIED)
    (root / "params.yaml").write_text(params_text({}))
    done = dvc(root, "repro", "prepare")
    assert done.returncode == 0, done.stdout + done.stderr
    (root / "reports" / "figures").mkdir(parents=True)
    (root / "reports" / "report.md").write_text(PREVIOUS_REPORT)
    (root / "reports" / "figures" / "tuning_trials.png").write_bytes(png_bytes())
    return root


def dvc(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(root), "DVC_NO_ANALYTICS": "1", **env}
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, env=environment, capture_output=True,
                          text=True)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for folder in ("data/prepared", "reports") for path in sorted((root / folder).rglob("*"))
            if path.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("values, env, needles", [
    ({"data.dataset": "glyphs:2"}, {}, ("data.dataset: glyphs:2", "at least 3")),
    ({"train.device": "cuda"}, {"CUDA_VISIBLE_DEVICES": ""}, ("train.device", "auto", "cpu")),
    ({"search.storage": "postgresql://ann:hunter2@db.example/study"}, {}, ("search.storage", "PGPASSWORD")),
    ({"data.dataset": "idx:/etc"}, {}, ("data.dataset: /etc holds no IDX files",)),
    ({"data.dataset": "torchvision:NoSuch"}, {}, ("data.dataset: torchvision has no dataset 'NoSuch'",)),
], ids=["glyphs:2 with AdaCos", "cuda without a GPU", "URL with a password", "idx:/etc", "torchvision:NoSuch"])
def test_dvc_repro_stops_at_validate_and_deletes_nothing(prepared_study, values, env, needles):
    root, before = prepared_study, snapshot(prepared_study)
    params = (root / "params.yaml").read_text()
    try:
        (root / "params.yaml").write_text(params_text(values))
        done = dvc(root, "repro", **env)
    finally:
        (root / "params.yaml").write_text(params)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    for needle in needles:
        assert needle in output, output
    assert "hunter2" not in output
    # data/prepared is an output of a stage whose params changed: DVC would have deleted it to rerun prepare.
    assert snapshot(root) == before and before["reports/report.md"] == PREVIOUS_REPORT.encode()
    assert "Running stage 'prepare'" not in output
