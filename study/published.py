"""Published numbers this suite reproduces, as data: seed 003's setups, what its code computed, its protocol.

Every published number lives here and nowhere else; the report's "Reproduction" section and
the `report.reproduce` key of params.yaml look setups up by name. Accuracies are in percent,
as published. No computation happens here (see `study.analysis.reproduction_table`).
"""

from __future__ import annotations

from dataclasses import dataclass

# The AdaCos paper (Zhang et al., CVPR 2019) shows AdaCos overtaking ArcFace only after about
# this many iterations in its training curves; the "Convergence claim" section tests it.
ADACOS_PAPER_CROSSOVER_ITERATIONS = 20_000

# How seed 003 scored each model, and the test metric of ours that scores it the same way.
EVALUATIONS = {
    "knn": ("1-NN on embeddings, against the training set", "test_knn_accuracy"),
    "argmax": ("argmax of the classifier's logits", "test_accuracy"),
}


@dataclass(frozen=True)
class PublishedResult:
    """One published test accuracy, the run of ours that computes the same loss, and how both are scored."""

    label: str  # the name seed 003 published it under
    accuracy_percent: float
    method: str  # our method (a hyperparameter-free loss or a named `runs.fixed` run of the preset)
    evaluation: str  # a key of EVALUATIONS
    computed: str = ""  # what the published code really computed, where its name or setup differs from ours

    @property
    def metric(self) -> str:
        """Our test metric that scores this result the way seed 003 did."""
        return EVALUATIONS[self.evaluation][1]

    @property
    def evaluation_text(self) -> str:
        """How seed 003 scored it, in words."""
        return EVALUATIONS[self.evaluation][0]


@dataclass(frozen=True)
class PublishedSetup:
    """A published comparison: its data and protocol, and its results mapped onto our methods."""

    name: str  # the preset, and the value of `report.reproduce`
    description: str
    data: str  # the data its numbers are on, in words
    classes: int
    images: int
    train_images: int | None  # None where the published split is only given as fractions
    test_images: int | None
    split: str
    # Our data sources that hold the same images as the published set (our split still differs: see the report).
    same_data_sources: tuple[str, ...]
    protocol: tuple[str, ...]  # model, optimiser and schedule, as published
    results: tuple[PublishedResult, ...]


_ADACOS_COMPUTED = ("its \"AdaCos\" adds m to every logit, a constant that softmax ignores, so it is Fixed AdaCos "
                    "exactly (s = s_f = √2·ln(C−1)): our `fixed_adacos`")
_ARCFACE_COMPUTED = ("its ArcFace is pytorch-metric-learning's ArcFaceLoss (s = 64, margin 28.6° = 0.499 rad) with a "
                     "CenterInvariant weight regulariser; our `seed003_arcface` is ArcFace at the same s and margin "
                     "without that regulariser")
_SOFTMAX_COMPUTED = "a plain linear layer with cross-entropy, scored by argmax: our `softmax`"

SEED003_MNIST = PublishedSetup(
    name="seed003-mnist",
    description="its MNIST comparison",
    data="full MNIST, 60,000 training and 10,000 test images",
    classes=10, images=70_000, train_images=60_000, test_images=10_000,
    split="MNIST's own train / test split",
    same_data_sources=("torchvision:MNIST",),
    protocol=("a two-conv CNN (32 and 64 filters, 3×3, max-pool, dropout 0.25 / 0.5, 128-unit hidden layer, "
              "128-d embedding)", "Adam lr 0.01, batch 128, 10 epochs"),
    results=(
        PublishedResult("ArcFace", 97.36, "seed003_arcface", "knn", _ARCFACE_COMPUTED),
        PublishedResult("Simple_ArcFace", 95.78, "seed003_simple_arcface", "knn",
                        "its \"Simple_ArcFace\" subtracts 28.6 from the target cosine before scaling by 64: that is "
                        "CosFace with m = 28.6 and s = 64, not ArcFace, and the target logit 64·(cos θ − 28.6) lies "
                        "below every other logit whatever θ is; our `seed003_simple_arcface` computes exactly that"),
        PublishedResult("Fixed AdaCos", 98.09, "fixed_adacos", "knn", _ADACOS_COMPUTED),
        PublishedResult("cross-entropy", 98.17, "softmax", "argmax", _SOFTMAX_COMPUTED),
    ),
)

SEED003_FACES = PublishedSetup(
    name="seed003-faces",
    description="its face comparison",
    data="its own face folder: 16 identities, 2,602 images",
    classes=16, images=2_602, train_images=None, test_images=None,
    split="a random 80/20 train / test split",
    same_data_sources=(),  # the folder was never published: any folder of ours is different images
    protocol=("timm efficientnetv2_rw_s, pretrained, 224 px", "batch 16, 10 epochs"),
    results=(
        PublishedResult("ArcFace", 85.22, "seed003_arcface", "knn", _ARCFACE_COMPUTED),
        PublishedResult("Fixed AdaCos", 90.02, "fixed_adacos", "knn", _ADACOS_COMPUTED),
        PublishedResult("cross-entropy", 89.44, "softmax", "argmax", _SOFTMAX_COMPUTED),
    ),
)

PUBLISHED_SETUPS: dict[str, PublishedSetup] = {setup.name: setup for setup in (SEED003_MNIST, SEED003_FACES)}


def published_setup(name: str) -> PublishedSetup:
    """The published setup of that name, or a KeyError listing the known ones."""
    try:
        return PUBLISHED_SETUPS[name]
    except KeyError:
        raise KeyError(f"no published setup {name!r}; the known ones are: {', '.join(PUBLISHED_SETUPS)}") from None


# ArcFace's best hyperparameters found by Musgrave et al., "A Metric Learning Reality Check" (ECCV 2020), by Bayesian
# optimisation on each data set's validation folds (BN-Inception pretrained on ImageNet, 128-d embeddings, batch 32),
# as published in powerful-benchmarker's docs/papers/mlrc.md. The first half of the classes train (CUB200: 100,
# Cars196: 98; SOP: 11,318).
MLRC_ARCFACE = (
    {"data": "CUB200", "train_classes": 100, "s": 100.0, "margin_degrees": 23.22},
    {"data": "Cars196", "train_classes": 98, "s": 49.50, "margin_degrees": 20.52},
    {"data": "SOP", "train_classes": 11_318, "s": 220.3, "margin_degrees": 18.63},
)
