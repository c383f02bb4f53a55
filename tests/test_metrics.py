"""Metrics checked against independent references: pytorch-metric-learning, scikit-learn, hand-worked numbers."""

import numpy as np
import pytest
import torch
from pytorch_metric_learning.distances import CosineSimilarity
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from pytorch_metric_learning.utils.inference import CustomKNN
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.neighbors import KNeighborsClassifier

from study import metrics
from study.metrics import accuracy, knn_accuracy, retrieval_metrics, verification_metrics


def clustered(class_sizes, dim=8, spread=1.0, seed=0):
    """Noisy samples around one random centre per class, shuffled; unequal class sizes."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(class_sizes), dim))
    labels = np.repeat(np.arange(len(class_sizes)), class_sizes)
    embeddings = centres[labels] + spread * rng.normal(size=(len(labels), dim))
    order = rng.permutation(len(labels))
    return embeddings[order], labels[order]


def all_pair_scores(embeddings, labels):
    """Cosine similarity and genuine flag of every i<j pair, in plain numpy."""
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    first, second = np.triu_indices(len(labels), k=1)
    return (unit @ unit.T)[first, second], labels[first] == labels[second]


# ---------------------------------------------------------------- retrieval


def test_retrieval_matches_pytorch_metric_learning():
    # A singleton class (4) checks that lone queries are left out, as pml does.
    embeddings, labels = clustered([3, 40, 17, 90, 1, 8, 2], dim=16, spread=1.5)
    embeddings = embeddings.astype(np.float32)  # pml computes in float32
    calculator = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        # "max_bin_count": pml retrieves (largest class - 1) neighbours after removing the
        # query itself by index, so every query sees all of its R relevant neighbours.
        k="max_bin_count",
        knn_func=CustomKNN(CosineSimilarity()),
        device=torch.device("cpu"),
    )
    expected = calculator.get_accuracy(torch.from_numpy(embeddings), torch.from_numpy(labels))
    assert 0.1 < expected["mean_average_precision_at_r"] < 0.9  # not a degenerate case
    got = retrieval_metrics(embeddings, labels)
    assert got["precision_at_1"] == pytest.approx(expected["precision_at_1"], abs=1e-6)
    assert got["r_precision"] == pytest.approx(expected["r_precision"], abs=1e-6)
    assert got["map_at_r"] == pytest.approx(expected["mean_average_precision_at_r"], abs=1e-6)


def test_retrieval_hand_worked_example():
    # Points on the unit circle (cosine order = angular order), arbitrary norms.
    # Class 0 at 0, 10, 112 deg (R=2); class 1 at 25, 240 deg (R=1); class 2 at 280 deg (lone).
    # Nearest neighbours:  0 -> 1(hit), 3   |  1 -> 0(hit), 3  |  2 -> 3, 1(hit)
    #                      3 -> 1           |  4 -> 5          |  5 excluded
    # P@1 = 2/5; R-precision = (1/2 + 1/2 + 1/2 + 0 + 0)/5; MAP@R = (1/2 + 1/2 + 1/4 + 0 + 0)/5.
    angles = np.deg2rad([0, 10, 112, 25, 240, 280])
    norms = np.array([1.0, 2.0, 3.0, 0.5, 4.0, 1.0])
    embeddings = norms[:, None] * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    got = retrieval_metrics(embeddings, [0, 0, 0, 1, 1, 2])
    assert got == pytest.approx({"precision_at_1": 0.4, "r_precision": 0.3, "map_at_r": 0.25})


def test_retrieval_block_size_does_not_change_result():
    embeddings, labels = clustered([30, 5, 12, 50], seed=1)
    small = retrieval_metrics(torch.from_numpy(embeddings), torch.from_numpy(labels), block_size=7)
    large = retrieval_metrics(embeddings, labels, block_size=4096)
    assert small == pytest.approx(large, abs=1e-12)


# ---------------------------------------------------------------- verification


def equal_error_rate_reference(genuine, scores):
    """EER from sklearn's ROC: where the segment between two ROC points crosses FAR == FRR."""
    far, tar, _ = roc_curve(genuine, scores, drop_intermediate=False)
    frr = 1.0 - tar
    i = int(np.argmax(far >= frr))  # first ROC point past the crossing
    if far[i] == frr[i]:
        return far[i]
    t = (frr[i - 1] - far[i - 1]) / ((far[i] - far[i - 1]) - (frr[i] - frr[i - 1]))
    return far[i - 1] + t * (far[i] - far[i - 1])


def check_against_sklearn(embeddings, labels):
    scores, genuine = all_pair_scores(embeddings, labels)
    got = verification_metrics(embeddings, labels)
    far, tar, _ = roc_curve(genuine, scores, drop_intermediate=False)
    assert got["roc_auc"] == pytest.approx(roc_auc_score(genuine, scores), abs=1e-9)
    assert got["eer"] == pytest.approx(equal_error_rate_reference(genuine, scores), abs=1e-9)
    assert got["tar_at_far_1e-2"] == pytest.approx(tar[far <= 1e-2].max(), abs=1e-12)
    assert got["tar_at_far_1e-3"] == pytest.approx(tar[far <= 1e-3].max(), abs=1e-12)
    return got, scores, genuine


def test_verification_matches_sklearn_on_all_pairs():
    embeddings, labels = clustered([60, 25, 80, 10, 45, 30], spread=1.2, seed=2)
    got, scores, genuine = check_against_sklearn(embeddings, labels)
    assert 0.6 < got["roc_auc"] < 0.99 and 0.0 < got["tar_at_far_1e-3"] < 1.0
    # Accuracy is taken over balanced pairs (as LFW's lists are), cross-validated: close to the
    # best balanced accuracy any single threshold reaches, (TAR + 1 - FAR) / 2.
    far, tar, _ = roc_curve(genuine, scores, drop_intermediate=False)
    best_balanced = np.max((tar + 1 - far) / 2)
    assert got["verification_accuracy"] == pytest.approx(best_balanced, abs=0.02)
    assert got["verification_accuracy"] < best_balanced + 0.005


def test_verification_with_tied_scores_matches_sklearn():
    # Samples share six 0/1 vectors with four ones each: cosines are exact multiples of 1/4,
    # so many pair scores tie exactly in any floating-point evaluation.
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, size=120)
    prototypes = np.array([rng.permutation([1.0] * 4 + [0.0] * 4) for _ in range(6)])
    embeddings = prototypes[(labels + rng.integers(0, 3, size=120)) % 6]
    check_against_sklearn(embeddings, labels)


def test_perfectly_separated_classes():
    embeddings, labels = clustered([10, 15, 12, 20], dim=4, spread=0.0, seed=4)
    embeddings = embeddings + 0.01 * np.random.default_rng(0).normal(size=embeddings.shape)
    got = verification_metrics(embeddings, labels)
    assert got["roc_auc"] == 1.0 and got["eer"] == 0.0 and got["verification_accuracy"] == 1.0
    assert got["tar_at_far_1e-3"] == 1.0
    assert retrieval_metrics(embeddings, labels) == {"precision_at_1": 1.0, "r_precision": 1.0, "map_at_r": 1.0}


def test_sampled_pairs_are_balanced_distinct_and_close_to_exact():
    embeddings, labels = clustered([150, 60, 100, 90], spread=2.0, seed=5)  # 79,800 pairs
    first, second, is_genuine = metrics._verification_pairs(labels, 6000, np.random.default_rng(0))
    assert is_genuine.sum() == (~is_genuine).sum() == 3000
    assert np.array_equal(is_genuine, labels[first] == labels[second])
    unordered = np.minimum(first, second) * len(labels) + np.maximum(first, second)
    assert (first != second).all() and len(np.unique(unordered)) == len(unordered)

    exact = verification_metrics(embeddings, labels)
    sampled = verification_metrics(embeddings, labels, max_pairs=6000, seed=1)
    assert sampled["roc_auc"] == pytest.approx(exact["roc_auc"], abs=0.02)
    assert sampled == verification_metrics(embeddings, labels, max_pairs=6000, seed=1)


def test_sampled_pairs_keep_every_genuine_pair_when_few():
    labels = np.repeat(np.arange(50), 2)  # 50 genuine pairs among 4,950
    first, second, is_genuine = metrics._verification_pairs(labels, 1000, np.random.default_rng(0))
    assert is_genuine.sum() == (~is_genuine).sum() == 50
    assert set(labels[first[is_genuine]]) == set(range(50))  # one genuine pair per class


@pytest.mark.parametrize("population,size", [(10**12, 5000), (1000, 600), (100, 100)])
def test_sample_distinct_draws_distinct_in_range(population, size):
    drawn = metrics._sample_distinct(np.random.default_rng(0), population, size)
    assert len(drawn) == size == len(np.unique(drawn))
    assert drawn.min() >= 0 and drawn.max() < population


# ---------------------------------------------------------------- classification


def test_knn_accuracy_matches_sklearn():
    train, train_labels = clustered([40, 70, 30, 60], spread=1.5, seed=6)
    test, test_labels = clustered([20, 30, 25, 25], spread=1.5, seed=6)  # same centres
    expected = KNeighborsClassifier(n_neighbors=1, metric="cosine").fit(train, train_labels)
    expected = expected.score(test, test_labels)
    assert 0.3 < expected < 1.0
    assert knn_accuracy(test, test_labels, train, train_labels, block_size=16) == pytest.approx(expected)
    as_tensors = [torch.from_numpy(a) for a in (test, test_labels, train, train_labels)]
    assert knn_accuracy(*as_tensors) == pytest.approx(expected)


def test_accuracy_is_argmax_accuracy():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [0.2, 0.1, 0.0]])
    assert accuracy(logits, [0, 0, 2, 0]) == pytest.approx(0.75)
    assert accuracy(logits.numpy(), np.array([1, 1, 1, 1])) == pytest.approx(0.25)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: retrieval_metrics(np.ones((4, 2)), [0, 0, 1]), "3 entries but there are 4"),
        (lambda: retrieval_metrics(np.ones(4), [0, 0, 1, 1]), "must be 2-D"),
        (lambda: retrieval_metrics(np.ones((2, 2, 2)), [0, 0]), "must be 2-D"),
        (lambda: retrieval_metrics(np.empty((0, 3)), []), "empty"),
        (lambda: retrieval_metrics(np.eye(3), [0, 1, 2]), "two or more samples"),
        (lambda: retrieval_metrics(np.full((2, 2), np.nan), [0, 0]), "NaN"),
        (lambda: retrieval_metrics(np.eye(2), [0.5, 1.5]), "integers"),
        (lambda: retrieval_metrics(np.eye(2), [0, 0], block_size=0), "block_size"),
        (lambda: verification_metrics(np.eye(3), [0, 1, 2]), "genuine"),
        (lambda: verification_metrics(np.eye(3), [1, 1, 1]), "impostor"),
        (lambda: verification_metrics(np.eye(3), [0, 0, 1]), "folds=10"),
        (lambda: verification_metrics(np.eye(3), [0, 0]), "2 entries but there are 3"),
        (lambda: knn_accuracy(np.eye(3), [0, 1, 2], np.ones((2, 4)), [0, 1]), "dimension"),
        (lambda: knn_accuracy(np.eye(3), [0, 1, 2], np.empty((0, 3)), []), "reference_embeddings is empty"),
        (lambda: knn_accuracy(np.eye(3), [0, 1], np.eye(3), [0, 1, 2]), "query_labels"),
        (lambda: accuracy(np.ones(3), [0, 1, 2]), "logits must be 2-D"),
        (lambda: accuracy(np.ones((3, 2)), [0, 1]), "2 entries but there are 3"),
    ],
)
def test_bad_inputs_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def lfw_accuracy_by_hand(scores, genuine, folds, seed):
    """insightface's LFW protocol by brute force: per fold, the threshold best on the other folds (the highest of
    equally good ones) applied to the held-out fold; the folds are the same seeded permutation split in ten."""
    fold_members = np.array_split(np.random.default_rng(seed).permutation(len(scores)), folds)
    accuracies = []
    for held_out in fold_members:
        rest = np.setdiff1d(np.arange(len(scores)), held_out)
        distinct = np.unique(scores[rest])[::-1]
        candidates = [np.inf, *((distinct[:-1] + distinct[1:]) / 2), -np.inf]
        train_accuracy = [np.mean((scores[rest] >= t) == genuine[rest]) for t in candidates]
        threshold = candidates[int(np.argmax(train_accuracy))]
        accuracies.append(np.mean((scores[held_out] >= threshold) == genuine[held_out]))
    return float(np.mean(accuracies))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ten_fold_verification_accuracy_equals_the_protocol_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    genuine = rng.random(400) < 0.5
    scores = np.where(genuine, rng.normal(0.6, 0.2, 400), rng.normal(0.2, 0.2, 400))
    scores[:40] = np.round(scores[:40], 1)  # some exact ties
    order = np.argsort(-scores, kind="stable")
    got = metrics._cross_validated_accuracy(scores[order], genuine[order], 10, np.random.default_rng(seed))
    assert got == pytest.approx(lfw_accuracy_by_hand(scores[order], genuine[order], 10, seed), abs=1e-12)
    assert 0.7 < got < 0.95
