"""Published numbers this suite reproduces, as data: seed 003's setups, what its code computed, its protocol; and
the same-setup comparisons of ArcFace against AdaCos that others published.

Every published number lives here and nowhere else; the report's "Reproduction" section and
the `report.reproduce` key of params.yaml look setups up by name. Accuracies are in percent,
as published. No computation happens here (see `study.analysis.reproduction_table` and
`study.analysis.published_beside_prediction`).
"""

from __future__ import annotations

import math
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


@dataclass(frozen=True)
class PublishedArcFaceAdaCos:
    """A published comparison of ArcFace at its defaults against AdaCos in the same setup, both scores as published."""

    source: str  # the GitHub repository, owner/name
    file: str  # the file in it that publishes both scores
    commit: str  # the commit whose copy of that file the scores were checked against
    model: str
    training_data: str
    classes: int  # training classes C (which sets AdaCos's s_f = √2·ln(C − 1))
    epochs: int
    arcface_s: float
    arcface_m: float  # radians
    adacos_variant: str  # the AdaCos its code computes, "dynamic" or "fixed" (the benchmark's reference is fixed)
    benchmark: str
    arcface: float  # accuracy, %
    adacos: float  # accuracy, %
    note: str  # how the scores were taken, and what the code really did where it matters


_FACEX_ZOO = dict(
    source="JDAI-CV/FaceX-Zoo", file="training_mode/README.md", commit="0552e24ea2ae4b58b3a3f7aff0760b9decc9f7bb",
    model="MobileFaceNet", classes=72_778, epochs=18, arcface_s=32.0, arcface_m=0.35, adacos_variant="dynamic",
    training_data="MS-Celeb-1M-v1c less the identities that overlap its test sets (72,778 identities, about 3.28M "
                  "images)")
# Its AdaCos head (head/AdaCos.py, taken from 4uiiurz1's) normalises the class weights but not MobileFaceNet's
# features, and trains under nn.DataParallel, whose per-GPU replicas lose the `self.scale` that forward assigns.
_FACEX_ZOO_ADACOS = "its AdaCos scales un-normalised features, under DataParallel, which may drop the scale update"
_YKESAMARU = dict(source="yKesamaru/adacos", commit="2b3a24210a544c8e05ab1e0026020a155e295308", epochs=10,
                  arcface_s=64.0, arcface_m=math.radians(28.6),  # pytorch-metric-learning's ArcFaceLoss default, 28.6°
                  adacos_variant="fixed")
# Seed 003's numbers (SEED003_FACES, SEED003_MNIST): the tests check that both places agree.
_YKESAMARU_NOTE = ("1-NN on embeddings against the training set, one run; its AdaCos is Fixed AdaCos, the benchmark's "
                   "reference; its ArcFace adds a weight regulariser")

PUBLISHED_ARCFACE_ADACOS = (
    PublishedArcFaceAdaCos(**_FACEX_ZOO, benchmark="LFW", arcface=99.57, adacos=99.65,
                           note=f"best checkpoint on the benchmark itself; {_FACEX_ZOO_ADACOS}"),
    PublishedArcFaceAdaCos(**_FACEX_ZOO, benchmark="CPLFW", arcface=83.68, adacos=83.27,
                           note=f"best checkpoint on the benchmark itself; {_FACEX_ZOO_ADACOS}"),
    PublishedArcFaceAdaCos(**_FACEX_ZOO, benchmark="CALFW", arcface=93.98, adacos=92.63,
                           note=f"best checkpoint on the benchmark itself; {_FACEX_ZOO_ADACOS}"),
    PublishedArcFaceAdaCos(**_FACEX_ZOO, benchmark="AgeDB-30", arcface=96.23, adacos=95.38,
                           note=f"best checkpoint on the benchmark itself; {_FACEX_ZOO_ADACOS}"),
    PublishedArcFaceAdaCos(**_FACEX_ZOO, benchmark="MegaFace rank-1", arcface=88.39, adacos=82.95,
                           note=f"last checkpoint; {_FACEX_ZOO_ADACOS}"),
    PublishedArcFaceAdaCos(
        source="4uiiurz1/pytorch-adacos", file="README.md", commit="7f7098598a6aba3dd682936fc1773391c30711e6",
        model="ResNet18 (ImageNet-pretrained)", training_data="Omniglot, all 1,623 characters, a stratified 80% of "
        "their images", classes=1_623, epochs=50, arcface_s=30.0, arcface_m=0.5, adacos_variant="dynamic",
        benchmark="Omniglot acc@1", arcface=89.54, adacos=90.06,
        note="argmax on the other 20%; its optimiser trains the backbone only, so both losses' class weights stay at "
             "their random initialisation"),
    PublishedArcFaceAdaCos(
        **_YKESAMARU, file="README.md (loss_test_face_recognition.py's output)",
        model="EfficientNetV2-S (timm efficientnetv2_rw_s, ImageNet-pretrained)",
        training_data="its own face folder, a random 80% of 2,602 images", classes=16,
        benchmark="16 face identities", arcface=85.22, adacos=90.02, note=_YKESAMARU_NOTE),
    PublishedArcFaceAdaCos(
        **_YKESAMARU, file="README.md (loss_test.py's output)", model="a two-conv CNN (loss_test.py's SimpleCNN)",
        training_data="MNIST's 60,000 training images", classes=10, benchmark="MNIST", arcface=97.36, adacos=98.09,
        note=_YKESAMARU_NOTE),
)
