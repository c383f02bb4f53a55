"""Typed, validated configuration: each section of params.yaml is one frozen pydantic model here.

An unknown key or a bad value stops with a message naming the key and what is allowed, so a
typo in params.yaml fails at once instead of after an hour of training.
"""

from __future__ import annotations

import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt,
                      StrictStr, ValidationError, ValidationInfo, field_validator, model_validator)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from typing_extensions import Self

from study.database_url import storage_location
from study.plain_yaml import MAX_PARAMS_BYTES, NotPlainData, PlainDataLoader
from study.plain_yaml import Quoted as _Quoted


class ConfigError(ValueError):
    """A params value that is unknown, of the wrong type or out of range."""


# PyYAML reads 1e-4 and 1.0e6 as strings (YAML 1.1 wants a dot and a signed exponent): Float reads them as numbers.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")

# Strict types, so that nothing is silently converted: true is no 1, 2.5 no integer, "yes" no boolean.
Int = StrictInt
# (The finiteness check comes before a field's bounds, which would otherwise answer for nan.)
Float = Annotated[float, Field(strict=True, allow_inf_nan=False),
                  BeforeValidator(lambda v: float(v) if isinstance(v, str) and _NUMBER.fullmatch(v) else v)]
Text = Annotated[StrictStr, Field(min_length=1)]


COMPOSE_SYNTAX = "compose:<parts>:<instances per class>:<base dataset>, e.g. compose:2:60:mnist5k"


def _spec_not_a_mapping(value: Any) -> Any:
    """A dataset spec ending in ':' (compose:2:40:) reads in YAML (and `--set`, `dvc exp run -S`) as a mapping of one
    key to null: said in the spec's own words, not as a Python dict."""
    if isinstance(value, dict) and len(value) == 1 and None in value.values():
        spec = f"{next(iter(value))}:"
        syntax = (f"a composed dataset is {COMPOSE_SYNTAX}" if spec.startswith("compose:") else
                  "give what follows the last ':' (e.g. folder:/data/faces), or leave the ':' out")
        raise ValueError(f"{_Quoted(spec)} ends in ':' with nothing after it, which YAML reads as a mapping; {syntax}")
    return value


# A dataset spec, `<name>[:<argument>]` (study/sources' SOURCES).
DatasetSpec = Annotated[Text, BeforeValidator(_spec_not_a_mapping)]


def _check(test: Callable[[Any], bool], problem: str) -> AfterValidator:
    """A check of one value; `problem` (with {value} filled in) is its error and says what is accepted."""
    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(problem.format(value=_Quoted(value)))
        return value
    return AfterValidator(check)


# What numpy (np.random.seed) and torch (torch.manual_seed) both take as a seed; numpy refuses anything else.
SEED_LIMIT = 2**32
# The type of every seed in params.yaml (a list of them: tuple[Seed, ...]).
Seed = Annotated[Int, _check(lambda seed: 0 <= seed < SEED_LIMIT,
                             "{value} is no seed: numpy and torch take whole numbers from 0 to 2**32 − 1 "
                             f"({SEED_LIMIT - 1}); give one in that range")]


def _invalid(key: str, problem: str) -> PydanticCustomError:
    """The error of a check across fields: `key` extends the location of the model checked ('' for none)."""
    return PydanticCustomError("params", "{at}: {problem}", {"at": key, "problem": problem})


class ParamsModel(BaseModel):
    """A part of params.yaml (a section, an entry of one, or all of it): frozen, typed, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None, where: str | None = None, *, build_losses: bool = True) -> Self:
        """Built from `values` (None: the defaults); a ConfigError names every bad key, its problem and the fix.
        `build_losses=False` leaves out building each fixed run's loss (see `FixedRun`), which imports torch."""
        if where is None:  # a section validated on its own is still named as in params.yaml
            where = next((name for name, f in StudyParams.model_fields.items() if f.annotation is cls), "")
        try:
            return cls.model_validate({} if values is None else values, context={"build_losses": build_losses})
        except ValidationError as error:
            raise ConfigError("\n".join(_problem(e, cls, where) for e in error.errors())) from None

    def to_dict(self) -> dict[str, Any]:
        """As plain data, as it would appear in params.yaml."""
        return self.model_dump()

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes`, validated again."""
        return self.from_dict({**self.to_dict(), **changes})


class DataConfig(ParamsModel):
    """Which images, how they are split, and the seed of the split."""

    dataset: DatasetSpec = "glyphs:100:40"
    protocol: Literal["closed", "open"] = "open"
    fractions: Annotated[
        tuple[Float, ...],
        _check(lambda f: len(f) == 3 and min(f) > 0, "give three positive fractions for train, val, test"),
        _check(lambda f: abs(sum(f) - 1) < 1e-6, "must sum to 1, got {value}")] = (0.5, 0.25, 0.25)
    seed: Seed = 0
    # Several class splits, one study of the whole protocol each (split seeds): the analysis pairs by split and
    # seed, and the verdict's interval carries split-to-split (and search-to-search) variance. null: `seed` alone
    # (what `study train` and each split's own stages use).
    seeds: Optional[Annotated[tuple[Seed, ...], _check(lambda s: len(s) >= 1 and len(set(s)) == len(s),
                                                      "give distinct split seeds, e.g. [0, 1, 2]")]] = (0, 1, 2)
    image_size: Optional[Int] = Field(None, ge=8)
    cache_dir: Optional[Text] = None
    # Used instead of `dataset` when that cannot be had (e.g. offline); the manifest and report say so.
    fallback: Optional[DatasetSpec] = None
    # Keep only this many of the source's classes (a seeded choice, nested across counts); null keeps all.
    classes: Optional[Int] = Field(None, ge=2)

    def split_seeds(self) -> tuple[int, ...]:
        """The class splits the study runs: `seeds`, or `seed` alone."""
        return self.seeds if self.seeds is not None else (self.seed,)


class ModelConfig(ParamsModel):
    """The backbone, looked up by name, and its embedding size."""

    name: Text = "cnn"
    embedding_size: Int = Field(64, ge=2)
    pretrained: StrictBool = False


def _learning_rates(rates: tuple[float, ...]) -> tuple[float, ...]:
    """train.learning_rates: two or more, none beyond 1 (where every run diverges to chance), and distinct as printed
    (`{rate:g}`), since a rate's runs are stored and reported under its printed name (lr0.001)."""
    example = "e.g. [0.001, 0.003, 0.009]"
    if len(set(rates)) < 2:
        raise ValueError(f"give at least two different learning rates, {example}, or null for train.lr alone")
    twice = next((rate for rate in rates if rates.count(rate) > 1), None)
    if twice is not None:
        raise ValueError(f"{twice!r} is listed {rates.count(twice)} times; list each rate once, {example}")
    if max(rates) > 1:
        raise ValueError(f"{max(rates):g} is beyond 1, far above the rates Adam and SGD train at, where runs diverge "
                         f"and end at chance; give rates in (0, 1], {example}")
    printed = [f"{rate:g}" for rate in rates]
    alike = next((rate for rate, name in zip(rates, printed) if printed.count(name) > 1), None)
    if alike is not None:
        same = [repr(rate) for rate, name in zip(rates, printed) if name == f"{alike:g}"]
        raise ValueError(f"{', '.join(same)} {'both' if len(same) == 2 else 'all'} print as {alike:g}, the name their runs are stored and reported "
                         f"under (lr{alike:g}); give rates distinct in their first 6 significant digits, {example}")
    return rates


class TrainConfig(ParamsModel):
    """Optimiser, schedule, budget and device: identical for every loss of a study."""

    epochs: Int = Field(64, ge=1)
    batch_size: Int = Field(64, ge=2)
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    lr: Float = Field(3e-3, gt=0)
    # The learning rate chosen by val for every method alike (docs/analysis.md): each hyperparameter-free method
    # trains its seeds at every rate listed and keeps, per class split, the one whose mean val is best; a searched
    # loss draws its rate log-uniformly between the smallest and the largest. null: every method at `lr`.
    learning_rates: Optional[Annotated[tuple[Annotated[Float, Field(gt=0)], ...],
                                       AfterValidator(_learning_rates)]] = None
    # With learning_rates: the share of each run's length at which val chooses the rate. Every rate trains its seeds
    # that far (the same runs as the full length's first part: the schedule spans the whole length); only the chosen
    # rate trains on to the end. null: every rate trains to the end before val chooses.
    choose_at: Optional[Float] = Field(0.3, gt=0, lt=1)
    weight_decay: Float = Field(0.0, ge=0)
    momentum: Float = Field(0.9, ge=0, lt=1)  # SGD's: at 1 or more a step's velocity never decays
    schedule: Literal["constant", "cosine"] = "cosine"
    max_iterations: Optional[Int] = Field(None, ge=1)
    eval_every: Int = Field(10, ge=1)
    # A log-spaced schedule of about this many val evaluations (half-way and the last iteration always among them);
    # null: one every eval_every iterations. A 20,000-iteration learning curve costs 21 evaluations.
    eval_points: Optional[Int] = Field(20, ge=2)
    # Which weights a run ends with: the evaluation val scored best (early stopping, as users deploy) or the last.
    checkpoint: Literal["best_val", "last"] = "best_val"
    eval_batch_size: Int = Field(1024, ge=1)
    device: Annotated[Text, _check(lambda d: d == "auto" or d.split(":")[0] in ("cpu", "cuda", "mps"),
                                   "{value!r} is not a device; use auto, cpu, cuda, cuda:N or mps")] = "auto"
    amp: StrictBool = False
    num_workers: Int = Field(0, ge=0)
    # Torch's threads per process; null: torch's default (one per core), or cores ÷ parallel when runs are packed.
    threads: Optional[Int] = Field(None, ge=1)
    # Runs trained at once on one device, a process each (search trials, final seeds): auto is 4 on a GPU and
    # one per core, up to 4, on a CPU. Neither knob changes what a run means (see study/packing.py).
    parallel: Annotated[Any, _check(lambda v: v == "auto" or (type(v) is int and v >= 1),
                        "{value!r} runs at once: give auto or a whole number of at least 1")] = "auto"
    seed: Seed = 0  # a single `study train` run's seed; search trials and final runs derive or list their own
    objective: Literal["accuracy", "knn_accuracy", "precision_at_1", "r_precision", "map_at_r"] = "map_at_r"


TUNABLE_LOSSES = ("arcface", "cosface", "normface", "sphereface")
MAX_GRID_POINTS = 1000
# CosFace's target logit is s·(cos θ − m), and a cosine is at most 1.
COSFACE_MAX_M = 1.0
COSFACE_MARGIN_PROBLEM = ("CosFace subtracts m from a cosine, which is at most 1: beyond m = 1 the target logit stays "
                          "negative even at θ = 0, and from m = 2 it lies below every other class's, so training "
                          "learns nothing")
HYPERPARAMETER_FREE_LOSSES = ("fixed_adacos", "dynamic_adacos", "p2sgrad", "softmax")


class SearchConfig(ParamsModel):
    """The Optuna search over (s, m) for each tunable loss."""

    losses: Annotated[tuple[Text, ...], _check(len, "give at least one loss to search, e.g. [arcface]; the "
                                                     "study's question is what searching one buys")] = ("arcface",)
    n_trials: Int = Field(8, ge=1)
    max_failed_trials: Int = Field(32, ge=0)
    # Random search by default: its trials are independent draws, for which the tuning-cost curve is exact.
    sampler: Literal["tpe", "random", "grid", "qmc"] = "random"
    # Independent searches per loss (sampler seeds differ, same budget): the tuning curve of an adaptive
    # sampler such as TPE is the mean over them; for independent samplers their trials are pooled.
    repeats: Int = Field(1, ge=1)
    # halving: successive halving (Optuna's), its first rung at train.choose_at of the length, a third going on at
    # each rung; none by default, since a pruned trial's score is not its trained one and the tuning curve, exact for
    # random search, becomes approximate (docs/analysis.md).
    pruner: Literal["none", "median", "hyperband", "halving"] = "none"
    seed: Seed = 0
    storage: Optional[Annotated[Text, AfterValidator(storage_location)]] = None
    # How often workers sharing a database say they are alive; one silent for 3 beats is dead, its trial retried.
    heartbeat_seconds: Int = Field(30, ge=1)
    s_range: Annotated[tuple[Float, ...], _check(lambda r: len(r) == 2 and 0 < r[0] < r[1],
                       "give [low, high] with 0 < low < high (searched log-uniformly)")] = (1.0, 128.0)
    # Radians, except SphereFace's m, which multiplies the angle.
    m_range: dict[str, Annotated[tuple[Float, ...], _check(lambda r: len(r) == 2 and 0 <= r[0] <= r[1],
                                                           "give [low, high] with 0 ≤ low ≤ high")]] = Field(
        default_factory=lambda: {"arcface": (0.0, 1.0), "cosface": (0.0, 0.7), "sphereface": (1.0, 4.0)})
    # Optuna's grid sampler lists every (s, m) point at once: 1000 a side is a million points, 100 MB per worker.
    grid_points: Int = Field(5, ge=2, le=MAX_GRID_POINTS)
    # Search in rounds and stop once `study advise` says so, its prior none ("flat") or the committed benchmark's (read
    # then, not a DVC dependency); off (null) by default: its error rates hold but it saved little (docs/analysis.md).
    stop_early: Optional[Literal["flat", "benchmark"]] = None

    @model_validator(mode="after")
    def _searchable(self) -> Self:
        for loss in self.losses + tuple(self.m_range):
            if loss not in TUNABLE_LOSSES:
                where = "losses" if loss in self.losses else f"m_range.{loss}"
                raise _invalid(where, f"{loss!r} cannot be searched; choose from {', '.join(TUNABLE_LOSSES)}")
        if len(set(self.losses)) < len(self.losses):
            raise _invalid("losses", "lists a loss twice")
        if self.m_range.get("arcface", (0, 0))[1] >= math.pi:
            raise _invalid("m_range.arcface", "must stay below π radians")
        if self.m_range.get("cosface", (0, 0))[1] > COSFACE_MAX_M:
            raise _invalid("m_range.cosface", f"{COSFACE_MARGIN_PROBLEM}; give [low, high] with high ≤ 1 (the "
                           "CosFace paper's best m is 0.35)")
        if self.m_range.get("sphereface", (1, 1))[0] < 1:  # cos(mθ) with m < 1 eases the target: no margin
            raise _invalid("m_range.sphereface", "SphereFace multiplies the angle by m: give [low, high], 1 ≤ low")
        for loss in self.losses:
            if loss != "normface" and loss not in self.m_range:
                raise _invalid("m_range", f"has no range for {loss!r}; add m_range.{loss}: [low, high]")
        return self


class FixedRun(ParamsModel):
    """A loss run at given hyperparameters, e.g. ArcFace at the paper's s=64, m=0.5: what users get untuned."""

    loss: Text
    s: Optional[Float] = None
    m: Optional[Float] = None  # radians
    m_degrees: Optional[Float] = None  # for published setups quoted in degrees; converted, never guessed

    @model_validator(mode="after")
    def _buildable(self, info: ValidationInfo) -> Self:
        if info.context and not info.context["build_losses"]:  # params that validate already passed, read without torch
            return self
        from study.losses import LOSSES, build_loss  # torch, imported only once a fixed run is checked

        if self.loss not in LOSSES:
            raise _invalid("loss", f"{self.loss!r} is unknown; choose from {', '.join(LOSSES)}")
        if self.m is not None and self.m_degrees is not None:
            raise _invalid("m", "give m (radians) or m_degrees, not both")
        if self.loss == "sphereface" and self.m_degrees is not None:
            raise _invalid("m_degrees", "SphereFace's m multiplies the angle and has no unit; give m (≥ 1) instead")
        try:  # the loss's own validation, on a toy size, so a bad value stops here and not mid-study
            build_loss(self.loss, 3, 2, **self.hyperparameters())
        except ValueError as error:
            raise _invalid("", str(error)) from None
        return self

    def hyperparameters(self) -> dict[str, float]:
        """The loss's keyword arguments, the margin in radians."""
        values = {"s": self.s, "m": math.radians(self.m_degrees) if self.m_degrees is not None else self.m}
        return {k: v for k, v in values.items() if v is not None}


class RunsConfig(ParamsModel):
    """The final runs at several seeds: the methods below, and each searched loss at its best trial's (s, m)."""

    seeds: Annotated[tuple[Seed, ...], _check(lambda s: s and len(set(s)) == len(s),
                                             "give at least one seed, each once")] = (0, 1)
    # Hyperparameter-free losses and names of `fixed` runs; `fixed_adacos` is the reference of every comparison. The
    # default keeps the two AdaCos and ArcFace at its usual values, so that the default study converges within ten
    # minutes on two cores (P2SGrad and softmax train in the benchmark).
    methods: tuple[Text, ...] = ("fixed_adacos", "dynamic_adacos", "arcface_default")
    fixed: dict[str, FixedRun] = Field(
        default_factory=lambda: {"arcface_default": FixedRun(loss="arcface", s=64.0, m=0.5)})
    # A method whose final runs, over every class split, miss the plateau rule (study/plateau.py) trains them again at
    # 2x, 4x, ... the declared length, up to this many times it; 1: never. Search trials keep the declared length.
    plateau_cap: Int = Field(4, ge=1)

    @model_validator(mode="after")
    def _known_methods(self) -> Self:
        for name in self.fixed:  # the names of the losses' own runs and of the searched losses' runs
            if name in HYPERPARAMETER_FREE_LOSSES or name.endswith("_tuned"):
                raise _invalid(f"fixed.{name}", "this name is taken; name fixed runs after what they are, "
                               "e.g. arcface_default")
        known = HYPERPARAMETER_FREE_LOSSES + tuple(self.fixed)
        for method in self.methods:
            if method not in known:
                raise _invalid("methods", f"{method!r} is neither hyperparameter-free nor a run of runs.fixed; choose "
                               f"from {', '.join(known)} (searched losses are run at their best values automatically)")
        if len(set(self.methods)) < len(self.methods):
            raise _invalid("methods", "lists a method twice")
        if "fixed_adacos" not in self.methods:
            raise _invalid("methods", "must include fixed_adacos, the reference every comparison is made against")
        return self

    def hyperparameters(self, method: str) -> tuple[str, dict[str, float]]:
        """The loss name and hyperparameters of one of `methods`."""
        if method in self.fixed:
            return self.fixed[method].loss, self.fixed[method].hyperparameters()
        return method, {}


# The kinds of test metric that share an equivalence margin (see study/analysis/comparison.py for which metric is which).
METRIC_KINDS = ("accuracy", "retrieval", "verification")
# Which kind (and so which margin) each test metric is.
METRIC_KIND = {"accuracy": "accuracy", "knn_accuracy": "accuracy", "precision_at_1": "retrieval",
               "r_precision": "retrieval", "map_at_r": "retrieval", "roc_auc": "verification", "eer": "verification",
               "tar_at_far_1e-2": "verification", "tar_at_far_1e-3": "verification",
               "verification_accuracy": "verification"}


_RELATIVE_MARGIN = re.compile(r"(\d+\.?\d*|\.\d+)\s*(sd|%)(\s+of\s+score)?")


def relative_margin(text: str) -> tuple[float, str]:
    """A relative equivalence margin as (value, unit): "0.5sd" → (0.5, "sd"), "5%" (of the remaining error) →
    (5.0, "%"), "2% of score" (of Fixed AdaCos's mean) → (2.0, "% of score")."""
    match = _RELATIVE_MARGIN.fullmatch(text.strip())
    if match is None or (match.group(3) and match.group(2) != "%"):
        raise ValueError(f"{text!r} is not a relative margin such as 0.5sd, 5% or 2% of score")
    return float(match.group(1)), match.group(2) + (" of score" if match.group(3) else "")


def _valid_margin(margin: float | str) -> bool:
    if isinstance(margin, str):
        try:
            value, unit = relative_margin(margin)
        except ValueError:
            return False
        return 0 < value and (unit == "sd" or value < 100)
    return 0 < margin < 1


def price_share(text: str) -> float:
    """analysis.price_per_training as a share of the score: "0.1% of score" → 0.001."""
    value, unit = relative_margin(text)
    if unit != "% of score" or value >= 100:
        raise ValueError(f"{text!r} is not a price such as '0.1% of score'")
    return value / 100.0


def _valid_price(text: str) -> bool:
    try:
        return price_share(text) >= 0
    except ValueError:
        return False


class AnalysisConfig(ParamsModel):
    """Confidence levels, bootstrap size, the tuning-cost estimator, equivalence margins and convergence targets."""

    confidence: Float = Field(0.95, ge=0.5, lt=1)
    n_bootstrap: Int = Field(1000, ge=100)
    convergence_targets: Annotated[tuple[Float, ...], _check(lambda t: t and all(0 < f <= 1 for f in t),
                                   "give fractions in (0, 1] of the best final val score")] = (0.95, 0.99)
    seed: Seed = 0
    # Order statistics of n trials drawn without replacement from the N run (unbiased for n ≤ N; Tang et al.
    # 2020) or with replacement (Dodge et al. 2019, biased): the pooled tuning curve of independent samplers.
    estimator: Literal["without_replacement", "with_replacement"] = "without_replacement"
    # Differences smaller than these (per metric kind) count as practically none: two one-sided tests (TOST) then
    # call two methods equivalent, and a significant difference must reach it to count. Absolute (0.01), or relative
    # to Fixed AdaCos's seed-to-seed sd ("0.5sd"), to its remaining error ("5%" of 1 − mean; of the mean for EER) or
    # to its mean score ("2% of score": the benchmark's margin, which reads the same on every data set).
    equivalence_margin: Annotated[
        dict[str, Annotated[Union[Float, StrictStr], _check(_valid_margin, "must be an absolute difference in (0, 1), "
                                                             "a multiple of the seed sd such as 0.5sd, a share of the "
                                                             "score such as '2% of score', or a share of "
                                                             "the remaining error such as 5%")]],
        _check(lambda m: set(m) == set(METRIC_KINDS),
               f"give one margin for each metric kind: {', '.join(METRIC_KINDS)}"),
    ] = Field(default_factory=lambda: {kind: "2% of score" for kind in METRIC_KINDS})
    # For the smallest detectable difference and the seeds that would resolve an open question.
    power: Float = Field(0.8, ge=0.5, lt=1)
    # What one training is worth, as a share of Fixed AdaCos's score: `study advise` keeps tuning only while more
    # trials are expected to be worth more than their trainings, and tuning pays only beyond what its search costs.
    # "0.1% of score": a gain of the 2% margin pays for 20 trainings, the middle of the 6-30 a benchmark search took.
    price_per_training: Annotated[StrictStr, _check(_valid_price, "{value} must be a share of the score that one "
                                                    "training is worth, such as '0.1% of score' (0 or more, below "
                                                    "100%)")] = "0.1% of score"

    def score_share(self, kind: str) -> float:
        """A metric kind's margin as a share of Fixed AdaCos's score (0.02 for "2% of score"); NaN where it is
        declared otherwise (absolute, in seed sds or as a share of the remaining error)."""
        margin = self.equivalence_margin[kind]
        if isinstance(margin, str):
            value, unit = relative_margin(margin)
            if unit == "% of score":
                return value / 100.0
        return math.nan


class ReportConfig(ParamsModel):
    """How the report looks: title, figure resolution and palette; and which published setup it reproduces."""

    title: Text = "Is AdaCos worth it, or should I tune ArcFace?"
    dpi: Int = Field(120, ge=50, le=600)
    palette: Text = "colorblind"
    html: StrictBool = True
    # A published setup of study/published.py: the report then compares its numbers with ours.
    reproduce: Optional[Literal["seed003-mnist", "seed003-faces"]] = None


class StudyParams(ParamsModel):
    """All of params.yaml, one typed section per stage."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_section(cls, values: Any) -> Any:
        return {} if values is None else values  # `train:` with nothing under it: all defaults

    def at_learning_rate(self, lr: float) -> Self:
        """The params of the runs at one learning rate of train.learning_rates (the list stays: what the runs mean)."""
        return self.replace(train=self.train.replace(lr=lr))

    def at_length(self, factor: int) -> Self:
        """The params of final runs trained `factor` times the declared length (runs.plateau_cap)."""
        train = self.train
        return self.replace(train=train.replace(epochs=train.epochs * factor, max_iterations=train.max_iterations
                                                and train.max_iterations * factor))

    def for_split(self, split: int) -> Self:
        """The params of one class split's study: data.seed set to it, data.seeds cleared (what its stages and study
        names see)."""
        return self.replace(data=self.data.replace(seed=split, seeds=None))

    @model_validator(mode="after")
    def _objective_fits_protocol(self) -> Self:
        if self.data.protocol == "open" and self.train.objective in ("accuracy", "knn_accuracy"):
            raise _invalid("train.objective", f"{self.train.objective} classifies into the training classes, which "
                           "the open protocol's val and test classes never are; choose map_at_r, r_precision or "
                           "precision_at_1, or set data.protocol: closed")
        return self

    @model_validator(mode="after")
    def _stop_early_can_be_judged(self) -> Self:
        if self.search.stop_early is None:
            return self
        kind, search = METRIC_KIND[self.train.objective], self.search
        problems = {"search.sampler": (search.sampler != "random", "must be random: its trials independent draws"),
                    "search.repeats": (search.repeats != 1, "must be 1: the advice follows one search a split"),
                    "search.n_trials": (search.n_trials < 2, "must be at least 2: the advice judges from round 2"),
                    "train.learning_rates": (self.train.learning_rates is not None,
                                             "must be null: the advice's reference is Fixed AdaCos at one rate"),
                    f"analysis.equivalence_margin.{kind}": (math.isnan(self.analysis.score_share(kind)),
                                                            "must be a share of the score such as '2% of score'")}
        for where, (wrong, fix) in problems.items():
            if wrong:
                raise _invalid(where, f"{fix} (search.stop_early is {self.search.stop_early!r}; or set it to null)")
        return self

    @model_validator(mode="after")
    def _cosface_margins_can_learn(self) -> Self:
        if self.report.reproduce is not None:  # a published setup is reproduced as it was, margin and all
            return self
        for name, run in self.runs.fixed.items():
            margin = run.hyperparameters().get("m", 0)
            if run.loss == "cosface" and margin > COSFACE_MAX_M:
                raise _invalid(f"runs.fixed.{name}.m", f"{margin:g}: {COSFACE_MARGIN_PROBLEM}; give m in [0, 1] (the "
                               "CosFace paper's is 0.35), or set report.reproduce to the published setup that used it")
        return self


def read_plain_yaml(path: str) -> Any:
    """The plain data of a YAML file; a ConfigError says what in it is not plain data, where, and the fix."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found; run from the study's folder or pass the params file") from None
    if len(raw) > MAX_PARAMS_BYTES:
        raise ConfigError(f"{path} holds {len(raw):,} bytes, and a study's params take a few thousand; is it the "
                          "right file?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[:error.start].count(b"\n") + 1
        raise ConfigError(f"{path} is not UTF-8 text: byte 0x{raw[error.start]:02x} on line {line} is not UTF-8; "
                          "save the file as UTF-8") from None
    try:
        return yaml.load(text, Loader=PlainDataLoader)
    except NotPlainData as error:
        raise ConfigError(f"{path} is not plain data, {error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None


def load_params(path: str = "params.yaml", *, build_losses: bool = True) -> StudyParams:
    """params.yaml read and validated; `build_losses=False` for a stage that trains nothing and runs after validate,
    which built every fixed run's loss (building one imports torch: seconds at each start)."""
    values = read_plain_yaml(path)
    if values is None:  # an empty file would otherwise run the default study, unasked
        raise ConfigError(f"{path} is empty; write the study's params there (`study preset default` writes the "
                          "default study)")
    if not isinstance(values, dict):
        sections = ", ".join(StudyParams.model_fields)
        raise ConfigError(f"{path} must be a mapping of sections ({sections}), got {_Quoted(values)!r}")
    return StudyParams.from_dict(values, build_losses=build_losses)


# Pydantic's errors in the words of params.yaml: {key} is the full key, {parent} the key holding it.
_EXPECTED = {"int_type": "an integer", "float_type": "a finite number", "finite_number": "a finite number",
             "bool_type": "true or false", "string_type": "a non-empty string", "string_too_short": "a non-empty string",
             "tuple_type": "a list", "dict_type": "a mapping", "model_type": "a mapping of keys ({keys})"}
_PROBLEMS = {
    **{kind: f"{{key}}: expected {expected}, got {{input!r}}" for kind, expected in _EXPECTED.items()},
    "literal_error": "{key}: {input!r} is not allowed; choose one of {choices}",
    "missing": "{parent} lacks the required key {key}",
    "extra_forbidden": "unknown key {key}; the keys of {parent} are: {keys}",
    "value_error": "{key}: {error}",  # from _check
    "params": "{key}: {problem}",  # from _invalid
    **dict.fromkeys(("greater_than", "greater_than_equal", "less_than", "less_than_equal"), "{key}: {bounds}"),
}
_SIGNS = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤"}


def _problem(error: ErrorDetails, model: type[ParamsModel], where: str) -> str:
    """One line for one of pydantic's errors: the full key, what is wrong and what is accepted."""
    kind, ctx = error["type"], error.get("ctx", {})
    loc = error["loc"] + (tuple(ctx["at"].split(".")) if ctx.get("at") else ())
    if kind == "extra_forbidden" and model is StudyParams and len(loc) == 1:
        return f"unknown section {loc[0]!r}; the sections are: {', '.join(StudyParams.model_fields)}"
    declared, field = _declared(model, loc[:-1] if kind == "extra_forbidden" else loc)
    return _PROBLEMS.get(kind, "{key}: {msg}").format(
        **ctx, key=_key(where, loc) or "params", parent=_key(where, loc[:-1]) or "params",
        input=_Quoted(error.get("input")),
        msg=error["msg"], keys=", ".join(getattr(declared, "model_fields", ())),
        choices=ctx.get("expected", "").replace(" or ", ", "),  # pydantic writes 'a', 'b' or 'c'
        bounds=_bounds(field) if field else error["msg"])


def _key(where: str, loc: tuple[int | str, ...]) -> str:
    """The dotted key of a location, list items numbered: search.m_range.arcface, data.fractions[2]."""
    key = where
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else str(part)
    return key


def _declared(model: type[ParamsModel], loc: tuple[int | str, ...]) -> tuple[Any, FieldInfo | None]:
    """The type declared at `loc` below `model`, and its field where `loc` ends at a model's field."""
    declared, field = model, None
    for part in loc:
        field = getattr(declared, "model_fields", {}).get(part)
        declared = field.annotation if field else (typing.get_args(declared) or (None,))[-1]  # a dict's entry
    return declared, field


def _bounds(field: FieldInfo) -> str:
    """A field's bounds as a reader of params.yaml says them: must be ≥ 1, in [0.5, 1), ≥ 2 or null."""
    bounds = sorted((getattr(m, sign), sign) for m in field.metadata for sign in _SIGNS if hasattr(m, sign))
    if len(bounds) == 2:
        (low, low_sign), (high, high_sign) = bounds
        opening, closing = "(" if low_sign == "gt" else "[", ")" if high_sign == "lt" else "]"
        text = f"must be in {opening}{low}, {high}{closing}"
    else:
        text = " and ".join(f"must be {_SIGNS[sign]} {value}" for value, sign in bounds)
    return text + (" or null" if type(None) in typing.get_args(field.annotation) else "")
