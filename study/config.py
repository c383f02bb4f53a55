"""Typed, validated configuration: each section of params.yaml is one frozen dataclass here.

An unknown key or a bad value stops with a message naming the key and what is allowed, so a
typo in params.yaml fails at once instead of after an hour of training.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional


class ConfigError(ValueError):
    """A params value that is unknown, of the wrong type or out of range."""


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """`value` converted to `annotation`, or a ConfigError naming `key` and the allowed values."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, key)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        item_type = args[0]
        return origin(_coerce(v, item_type, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {str(k): _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: expected a non-empty string, got {value!r}")
        return value
    if dataclasses.is_dataclass(annotation):
        return annotation.from_dict(value, key)
    raise TypeError(f"unsupported config annotation {annotation!r} for {key}")


class Section:
    """Base of the config dataclasses: parsing from a mapping, then `check()` for ranges."""

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None, where: str = ""):
        """The section built from `values`, rejecting unknown keys and bad values."""
        values = {} if values is None else values
        prefix = f"{where}." if where else ""
        if not isinstance(values, dict):
            raise ConfigError(f"{where or 'params'}: expected a mapping of keys, got {values!r}")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ConfigError(
                f"unknown key {prefix}{unknown[0]}; the keys of {where or 'params'} are: {', '.join(names)}"
            )
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"{where or 'params'} lacks the required key {prefix}{missing[0]}")
        kwargs = {k: _coerce(v, hints[k], f"{prefix}{k}") for k, v in values.items()}
        section = cls(**kwargs)
        section.check(prefix)
        return section

    def check(self, prefix: str) -> None:
        """Range checks across fields; the default has none."""

    def to_dict(self) -> dict[str, Any]:
        """The section as plain data, as it would appear in params.yaml."""
        return dataclasses.asdict(self)


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"{key}: {message}")


@dataclass(frozen=True)
class DataConfig(Section):
    """Which images, how they are split, and the seed of the split."""

    dataset: str = "glyphs:160:40"
    protocol: Literal["closed", "open"] = "open"
    fractions: tuple[float, ...] = (0.5, 0.25, 0.25)
    seed: int = 0
    image_size: Optional[int] = None
    cache_dir: Optional[str] = None
    # Used instead of `dataset` when that cannot be had (e.g. offline); the manifest and report say so.
    fallback: Optional[str] = None
    # Keep only this many of the source's classes (a seeded choice, nested across counts); null keeps all.
    classes: Optional[int] = None

    def check(self, prefix: str) -> None:
        _require(len(self.fractions) == 3 and all(f > 0 for f in self.fractions),
                 f"{prefix}fractions", "give three positive fractions for train, val, test")
        _require(abs(sum(self.fractions) - 1) < 1e-6, f"{prefix}fractions", f"must sum to 1, got {sum(self.fractions)}")
        _require(self.image_size is None or self.image_size >= 8, f"{prefix}image_size", "must be ≥ 8 pixels or null")
        _require(self.classes is None or self.classes >= 2, f"{prefix}classes", "must be ≥ 2 or null (all classes)")


@dataclass(frozen=True)
class ModelConfig(Section):
    """The backbone, looked up by name, and its embedding size."""

    name: str = "cnn"
    embedding_size: int = 64
    pretrained: bool = False

    def check(self, prefix: str) -> None:
        _require(self.embedding_size >= 2, f"{prefix}embedding_size", "must be ≥ 2")


@dataclass(frozen=True)
class TrainConfig(Section):
    """Optimiser, schedule, budget and device: identical for every loss of a study."""

    epochs: int = 10
    batch_size: int = 64
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: float = 3e-3
    weight_decay: float = 0.0
    momentum: float = 0.9
    schedule: Literal["constant", "cosine"] = "cosine"
    max_iterations: Optional[int] = None
    eval_every: int = 10
    eval_batch_size: int = 1024
    device: str = "auto"
    amp: bool = False
    num_workers: int = 0
    seed: int = 0  # a single `study train` run's seed; search trials and final runs derive or list their own
    objective: Literal["accuracy", "knn_accuracy", "precision_at_1", "r_precision", "map_at_r"] = "map_at_r"

    def check(self, prefix: str) -> None:
        _require(self.epochs >= 1, f"{prefix}epochs", "must be ≥ 1")
        _require(self.batch_size >= 2, f"{prefix}batch_size", "must be ≥ 2")
        _require(self.lr > 0, f"{prefix}lr", "must be > 0")
        _require(self.weight_decay >= 0, f"{prefix}weight_decay", "must be ≥ 0")
        _require(self.max_iterations is None or self.max_iterations >= 1, f"{prefix}max_iterations", "must be ≥ 1 or null")
        _require(self.eval_every >= 1, f"{prefix}eval_every", "must be ≥ 1")
        _require(self.eval_batch_size >= 1, f"{prefix}eval_batch_size", "must be ≥ 1")
        _require(self.num_workers >= 0, f"{prefix}num_workers", "must be ≥ 0")
        _require(self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda", "mps"),
                 f"{prefix}device", f"{self.device!r} is not a device; use auto, cpu, cuda, cuda:N or mps")

    def replace(self, **changes) -> "TrainConfig":
        """A copy with `changes`, validated again."""
        return TrainConfig.from_dict({**self.to_dict(), **changes}, "train")


TUNABLE_LOSSES = ("arcface", "cosface", "normface")
HYPERPARAMETER_FREE_LOSSES = ("fixed_adacos", "dynamic_adacos", "softmax")


@dataclass(frozen=True)
class SearchConfig(Section):
    """The Optuna search over (s, m) for each tunable loss."""

    losses: tuple[str, ...] = ("arcface",)
    n_trials: int = 32
    max_failed_trials: int = 32
    # Random search by default: its trials are independent draws, for which the tuning-cost curve is exact.
    sampler: Literal["tpe", "random", "grid", "qmc"] = "random"
    # Independent searches per loss (sampler seeds differ, same budget): the tuning curve of an adaptive
    # sampler such as TPE is the mean over them; for independent samplers their trials are pooled.
    repeats: int = 1
    pruner: Literal["none", "median", "hyperband"] = "none"
    seed: int = 0
    storage: Optional[str] = None
    s_range: tuple[float, ...] = (1.0, 128.0)
    m_range: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: {"arcface": (0.0, 1.0), "cosface": (0.0, 0.7)})
    grid_points: int = 5

    def check(self, prefix: str) -> None:
        for loss in self.losses:
            _require(loss in TUNABLE_LOSSES, f"{prefix}losses",
                     f"{loss!r} cannot be searched; choose from {', '.join(TUNABLE_LOSSES)}")
        _require(len(set(self.losses)) == len(self.losses), f"{prefix}losses", "lists a loss twice")
        _require(self.n_trials >= 1, f"{prefix}n_trials", "must be ≥ 1")
        _require(self.repeats >= 1, f"{prefix}repeats", "must be ≥ 1")
        _require(self.max_failed_trials >= 0, f"{prefix}max_failed_trials", "must be ≥ 0")
        _require(len(self.s_range) == 2 and 0 < self.s_range[0] < self.s_range[1], f"{prefix}s_range",
                 "give [low, high] with 0 < low < high (searched log-uniformly)")
        for loss, bounds in self.m_range.items():
            _require(loss in TUNABLE_LOSSES, f"{prefix}m_range.{loss}", f"choose from {', '.join(TUNABLE_LOSSES)}")
            _require(len(bounds) == 2 and 0 <= bounds[0] <= bounds[1], f"{prefix}m_range.{loss}",
                     "give [low, high] in radians with 0 ≤ low ≤ high")
            _require(loss != "arcface" or bounds[1] < math.pi, f"{prefix}m_range.arcface", "must stay below π radians")
        for loss in self.losses:
            _require(loss == "normface" or loss in self.m_range, f"{prefix}m_range",
                     f"has no range for {loss!r}; add m_range.{loss}: [low, high]")
        _require(self.grid_points >= 2, f"{prefix}grid_points", "must be ≥ 2")


@dataclass(frozen=True)
class FixedRun(Section):
    """A loss run at given hyperparameters, e.g. ArcFace at the paper's s=64, m=0.5: what users get untuned."""

    loss: str
    s: Optional[float] = None
    m: Optional[float] = None  # radians
    m_degrees: Optional[float] = None  # for published setups quoted in degrees; converted, never guessed

    def check(self, prefix: str) -> None:
        from study.losses import LOSSES, build_loss

        _require(self.loss in LOSSES, f"{prefix}loss", f"{self.loss!r} is unknown; choose from {', '.join(LOSSES)}")
        _require(self.m is None or self.m_degrees is None, f"{prefix}m", "give m (radians) or m_degrees, not both")
        try:  # the loss's own validation, on a toy size, so a bad value stops here and not mid-study
            build_loss(self.loss, 3, 2, **self.hyperparameters())
        except ValueError as error:
            raise ConfigError(f"{prefix[:-1]}: {error}") from None

    def hyperparameters(self) -> dict[str, float]:
        """The loss's keyword arguments, the margin in radians."""
        values = {"s": self.s, "m": math.radians(self.m_degrees) if self.m_degrees is not None else self.m}
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class RunsConfig(Section):
    """The final runs at several seeds: the methods below, and each searched loss at its best trial's (s, m)."""

    seeds: tuple[int, ...] = tuple(range(10))
    # Hyperparameter-free losses and names of `fixed` runs; `fixed_adacos` is the reference of every comparison.
    methods: tuple[str, ...] = HYPERPARAMETER_FREE_LOSSES + ("arcface_default",)
    fixed: dict[str, FixedRun] = field(default_factory=lambda: {"arcface_default": FixedRun("arcface", 64.0, 0.5)})

    def check(self, prefix: str) -> None:
        _require(len(self.seeds) >= 1 and len(set(self.seeds)) == len(self.seeds), f"{prefix}seeds",
                 "give at least one seed, each once")
        for name in self.fixed:
            _require(name not in HYPERPARAMETER_FREE_LOSSES and not name.endswith("_tuned"), f"{prefix}fixed.{name}",
                     "this name is taken; name fixed runs after what they are, e.g. arcface_default")
        known = HYPERPARAMETER_FREE_LOSSES + tuple(self.fixed)
        for method in self.methods:
            _require(method in known, f"{prefix}methods",
                     f"{method!r} is neither hyperparameter-free nor a run of {prefix}fixed; choose from "
                     f"{', '.join(known)} (searched losses are run at their best values automatically)")
        _require(len(set(self.methods)) == len(self.methods), f"{prefix}methods", "lists a method twice")
        _require("fixed_adacos" in self.methods, f"{prefix}methods",
                 "must include fixed_adacos, the reference every comparison is made against")

    def hyperparameters(self, method: str) -> tuple[str, dict[str, float]]:
        """The loss name and hyperparameters of one of `methods`."""
        if method in self.fixed:
            return self.fixed[method].loss, self.fixed[method].hyperparameters()
        return method, {}


# The kinds of test metric that share an equivalence margin (see study/analysis.py for which metric is which).
METRIC_KINDS = ("accuracy", "retrieval", "verification")


@dataclass(frozen=True)
class AnalysisConfig(Section):
    """Confidence levels, bootstrap size, the tuning-cost estimator, equivalence margins and convergence targets."""

    confidence: float = 0.95
    n_bootstrap: int = 1000
    convergence_targets: tuple[float, ...] = (0.95, 0.99)
    seed: int = 0
    # Order statistics of n trials drawn without replacement from the N run (unbiased for n ≤ N; Tang et al.
    # 2020) or with replacement (Dodge et al. 2019, biased): the pooled tuning curve of independent samplers.
    estimator: Literal["without_replacement", "with_replacement"] = "without_replacement"
    # Differences smaller than these (absolute, per metric kind) count as practically none: two one-sided
    # tests (TOST) then call two methods equivalent.
    equivalence_margin: dict[str, float] = field(
        default_factory=lambda: {"accuracy": 0.005, "retrieval": 0.01, "verification": 0.01})
    power: float = 0.8  # for the smallest detectable difference and the seeds that would resolve an open question

    def check(self, prefix: str) -> None:
        _require(0.5 <= self.confidence < 1, f"{prefix}confidence", "must be in [0.5, 1)")
        _require(self.n_bootstrap >= 100, f"{prefix}n_bootstrap", "must be ≥ 100")
        _require(all(0 < f <= 1 for f in self.convergence_targets) and self.convergence_targets,
                 f"{prefix}convergence_targets", "give fractions in (0, 1] of the best final val score")
        _require(set(self.equivalence_margin) == set(METRIC_KINDS), f"{prefix}equivalence_margin",
                 f"give one margin for each metric kind: {', '.join(METRIC_KINDS)}")
        for kind, margin in self.equivalence_margin.items():
            _require(0 < margin < 1, f"{prefix}equivalence_margin.{kind}", "must lie in (0, 1)")
        _require(0.5 <= self.power < 1, f"{prefix}power", "must be in [0.5, 1)")


@dataclass(frozen=True)
class ReportConfig(Section):
    """How the report looks: title, figure resolution and palette; and which published setup it reproduces."""

    title: str = "Is AdaCos worth it, or should I tune ArcFace?"
    dpi: int = 120
    palette: str = "colorblind"
    html: bool = True
    # A published setup of study/published.py: the report then compares its numbers with ours.
    reproduce: Optional[Literal["seed003-mnist", "seed003-faces"]] = None

    def check(self, prefix: str) -> None:
        _require(50 <= self.dpi <= 600, f"{prefix}dpi", "must be in [50, 600]")


SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "search": SearchConfig,
            "runs": RunsConfig, "analysis": AnalysisConfig, "report": ReportConfig}


@dataclass(frozen=True)
class StudyParams:
    """All of params.yaml, one typed section per stage."""

    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    search: SearchConfig = SearchConfig()
    runs: RunsConfig = RunsConfig()
    analysis: AnalysisConfig = AnalysisConfig()
    report: ReportConfig = ReportConfig()

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "StudyParams":
        """Every section validated; unknown sections or keys are refused."""
        if not isinstance(values, dict):
            raise ConfigError(f"params must be a mapping of sections ({', '.join(SECTIONS)}), got {values!r}")
        unknown = sorted(set(values) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"unknown section {unknown[0]!r}; the sections are: {', '.join(SECTIONS)}")
        params = cls(**{name: SECTIONS[name].from_dict(values.get(name), name) for name in SECTIONS})
        if params.data.protocol == "open" and params.train.objective in ("accuracy", "knn_accuracy"):
            raise ConfigError(f"train.objective: {params.train.objective} classifies into the training classes, "
                              "which the open protocol's val and test classes never are; choose map_at_r, "
                              "r_precision or precision_at_1, or set data.protocol: closed")
        return params

    def to_dict(self) -> dict[str, Any]:
        """The params as plain data."""
        return {name: getattr(self, name).to_dict() for name in SECTIONS}


def load_params(path: str = "params.yaml") -> StudyParams:
    """params.yaml read and validated."""
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle) or {}
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found; run from the study's folder or pass the params file") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None
    return StudyParams.from_dict(values)
