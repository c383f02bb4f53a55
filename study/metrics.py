"""Evaluation metrics on embeddings compared by cosine similarity.

Retrieval follows Musgrave et al., "A Metric Learning Reality Check" (ECCV 2020):
leave-one-out inside the evaluated set, R = number of *other* samples of the query's class.
Verification scores pairs of the evaluated set by cosine similarity; a pair is genuine when
both samples share a label. No N x N matrix is ever built (retrieval and 1-NN work in blocks
of query rows, verification scores only the chosen pairs), so 20,000 x 512-d embeddings fit
in about a GB. Inputs may be torch tensors (on any device) or numpy arrays.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

_PAIR_CHUNK = 16_384  # pairs scored at once: bounds the gathered (chunk x d) copies


# ---------------------------------------------------------------- input validation


def _as_tensor(values, name: str) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach()
    try:
        return torch.as_tensor(np.asarray(values))
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} could not be converted to an array: {error}") from error


def _embeddings(values, name: str = "embeddings") -> torch.Tensor:
    """Validated, L2-normalised embeddings; float64 input stays float64, anything else is float32."""
    x = _as_tensor(values, name)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, dim), got shape {tuple(x.shape)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)})")
    x = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    if not torch.isfinite(x).all():
        # A diverged run yields NaN embeddings; a metric computed from them would be noise.
        raise ValueError(f"{name} contain NaN or inf values")
    return F.normalize(x, dim=1)


def _labels(values, n_samples: int, name: str = "labels", device=None) -> torch.Tensor:
    y = _as_tensor(values, name)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(y.shape)}")
    if y.shape[0] != n_samples:
        raise ValueError(f"{name} has {y.shape[0]} entries but there are {n_samples} samples")
    if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got dtype {y.dtype}")
    return y.to(device=device, dtype=torch.int64)


def _check_block_size(block_size: int) -> None:
    if int(block_size) < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")


# ---------------------------------------------------------------- classification


def accuracy(logits, labels) -> float:
    """Fraction of samples whose argmax logit is the true label."""
    scores = _as_tensor(logits, "logits")
    if scores.ndim != 2:
        raise ValueError(f"logits must be 2-D (n_samples, n_classes), got shape {tuple(scores.shape)}")
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"logits is empty (shape {tuple(scores.shape)})")
    y = _labels(labels, scores.shape[0], device=scores.device)
    return (scores.argmax(dim=1) == y).double().mean().item()


def knn_accuracy(query_embeddings, query_labels, reference_embeddings, reference_labels,
                 block_size: int = 1024) -> float:
    """Accuracy of 1-nearest-neighbour classification (cosine) of queries against a reference set."""
    _check_block_size(block_size)
    queries = _embeddings(query_embeddings, "query_embeddings")
    reference = _embeddings(reference_embeddings, "reference_embeddings").to(queries)
    if queries.shape[1] != reference.shape[1]:
        raise ValueError(f"query_embeddings have dimension {queries.shape[1]} but "
                         f"reference_embeddings have {reference.shape[1]}")
    y_query = _labels(query_labels, len(queries), "query_labels", queries.device)
    y_reference = _labels(reference_labels, len(reference), "reference_labels", queries.device)
    correct = 0
    for start in range(0, len(queries), block_size):
        nearest = (queries[start:start + block_size] @ reference.T).argmax(dim=1)
        correct += (y_reference[nearest] == y_query[start:start + block_size]).sum().item()
    return correct / len(queries)


# ---------------------------------------------------------------- retrieval


def retrieval_metrics(embeddings, labels, block_size: int = 1024) -> dict:
    """Leave-one-out precision@1, R-precision and MAP@R (Musgrave et al. 2020) inside one set."""
    _check_block_size(block_size)
    x = _embeddings(embeddings)
    y = _labels(labels, len(x), device=x.device)
    _, inverse, counts = torch.unique(y, return_inverse=True, return_counts=True)
    r_all = counts[inverse] - 1  # other samples of the same class
    k = int(r_all.max())
    if k == 0:
        raise ValueError("retrieval needs at least one class with two or more samples")
    totals = {"precision_at_1": 0.0, "r_precision": 0.0, "map_at_r": 0.0}
    ranks = torch.arange(1, k + 1, device=x.device, dtype=x.dtype)
    for start in range(0, len(x), block_size):
        rows = torch.arange(start, min(start + block_size, len(x)), device=x.device)
        rows = rows[r_all[rows] > 0]  # a query with no other sample of its class has no answer
        if len(rows) == 0:
            continue
        similarity = x[rows] @ x.T
        similarity[torch.arange(len(rows), device=x.device), rows] = -torch.inf  # leave one out
        neighbours = similarity.topk(k, dim=1).indices
        r = r_all[rows].to(x.dtype)
        hits = (y[neighbours] == y[rows, None]) & (ranks[None, :] <= r[:, None])
        hits = hits.to(x.dtype)
        totals["precision_at_1"] += hits[:, 0].sum().item()
        totals["r_precision"] += (hits.sum(dim=1) / r).sum().item()
        precision_at_rank = hits.cumsum(dim=1) / ranks
        totals["map_at_r"] += ((precision_at_rank * hits).sum(dim=1) / r).sum().item()
    n_queries = int((r_all > 0).sum())
    return {name: total / n_queries for name, total in totals.items()}


# ---------------------------------------------------------------- verification pairs


def _row_pair_ranges(labels: np.ndarray):
    """Per sample, in label-sorted order, the column ranges of its genuine and impostor partners.

    After sorting by label, the partners j > i of sample i with the same label are exactly
    [i+1, class_end(i)) and those with another label are [class_end(i), N). A linear index
    into either family can then be decoded to (i, j) without listing the family.
    """
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    n = len(labels)
    class_end = np.searchsorted(sorted_labels, sorted_labels, side="right")
    rows = np.arange(n)
    genuine = (rows + 1, class_end - rows - 1)
    impostor = (class_end, n - class_end)
    return order, genuine, impostor


def _decode_pairs(linear_index: np.ndarray, first_column: np.ndarray, count: np.ndarray):
    """Map linear indices into a family of pairs (row-major over rows) to (row, column)."""
    ends = np.cumsum(count)
    row = np.searchsorted(ends, linear_index, side="right")
    column = first_column[row] + linear_index - (ends[row] - count[row])
    return row, column


def _sample_distinct(rng: np.random.Generator, population: int, size: int) -> np.ndarray:
    """`size` distinct integers drawn uniformly from [0, population), memory O(size)."""
    if size >= population:
        return np.arange(population)
    if 4 * size >= population:
        return rng.choice(population, size=size, replace=False)
    chosen = np.empty(0, dtype=np.int64)
    while len(chosen) < size:
        draws = rng.integers(0, population, size=int(1.2 * (size - len(chosen))) + 16)
        chosen = np.unique(np.concatenate([chosen, draws]))
    # Distinct values of uniform draws form a uniform random subset; thin it uniformly.
    return rng.choice(chosen, size=size, replace=False)


def _verification_pairs(labels: np.ndarray, max_pairs: int, rng: np.random.Generator):
    """Index arrays (first, second, is_genuine) of the pairs to score."""
    order, genuine, impostor = _row_pair_ranges(labels)
    n_genuine, n_impostor = int(genuine[1].sum()), int(impostor[1].sum())
    if n_genuine == 0:
        raise ValueError("verification needs genuine pairs: no label occurs twice")
    if n_impostor == 0:
        raise ValueError("verification needs impostor pairs: all samples share one label")
    if n_genuine + n_impostor <= max_pairs:
        sizes = (n_genuine, n_impostor)  # every i<j pair: exact
    else:
        n_each = min(n_genuine, max_pairs // 2)
        sizes = (n_each, min(n_impostor, n_each))
    firsts, seconds = [], []
    for (first_column, count), size in zip((genuine, impostor), sizes):
        row, column = _decode_pairs(_sample_distinct(rng, int(count.sum()), size), first_column, count)
        firsts.append(order[row])
        seconds.append(order[column])
    is_genuine = np.repeat([True, False], sizes)
    return np.concatenate(firsts), np.concatenate(seconds), is_genuine


def _pair_scores(x: torch.Tensor, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    first_t, second_t = torch.as_tensor(first, device=x.device), torch.as_tensor(second, device=x.device)
    scores = [torch.einsum("ij,ij->i", x.index_select(0, first_t[s:s + _PAIR_CHUNK]),
                           x.index_select(0, second_t[s:s + _PAIR_CHUNK]))
              for s in range(0, len(first), _PAIR_CHUNK)]
    return torch.cat(scores).cpu().numpy()


# ---------------------------------------------------------------- verification statistics
# All statistics below take the pairs sorted by descending score, so one sort serves them all.


def _roc_curve(sorted_scores: np.ndarray, genuine: np.ndarray):
    """(far, tar) at every distinct threshold (accept score >= it), from (0, 0) to (1, 1)."""
    last_of_value = np.r_[sorted_scores[1:] != sorted_scores[:-1], True]
    true_accepts = np.cumsum(genuine)[last_of_value]
    false_accepts = np.cumsum(~genuine)[last_of_value]
    return (np.r_[0.0, false_accepts / false_accepts[-1]],
            np.r_[0.0, true_accepts / true_accepts[-1]])


def _area_under(far: np.ndarray, tar: np.ndarray) -> float:
    # Trapezoids over distinct thresholds: a tie between a genuine and an impostor pair is a
    # diagonal step, i.e. counted half, exactly as in the Mann-Whitney statistic.
    return float(np.sum(np.diff(far) * (tar[1:] + tar[:-1])) / 2.0)


def _equal_error_rate(far: np.ndarray, tar: np.ndarray) -> float:
    # Along the ROC far + tar rises strictly from 0 to 2; FAR == FRR (= 1 - TAR) where it is 1.
    return float(np.interp(1.0, far + tar, far))


def _best_threshold(sorted_scores: np.ndarray, genuine: np.ndarray) -> float:
    """Threshold (accept score >= it) with the highest accuracy on these pairs."""
    # Accepting the k highest scores, k = 0..n, but only cuts between distinct values.
    correct = np.r_[0, np.cumsum(np.where(genuine, 1, -1))] + (~genuine).sum()
    valid = np.r_[True, sorted_scores[1:] != sorted_scores[:-1], True]
    k = int(np.argmax(np.where(valid, correct, -1)))
    if k == 0:
        return np.inf
    if k == len(sorted_scores):
        return -np.inf
    return (sorted_scores[k - 1] + sorted_scores[k]) / 2.0


def _cross_validated_accuracy(sorted_scores, genuine, folds: int, rng: np.random.Generator) -> float:
    """LFW protocol (insightface): threshold chosen on the other folds, accuracy on the held-out one."""
    if len(sorted_scores) < folds:
        raise ValueError(f"verification_accuracy needs at least folds={folds} pairs, got {len(sorted_scores)}")
    # Pairs are in score order here, so a random permutation is what shuffles them into folds.
    fold_of_pair = np.empty(len(sorted_scores), dtype=np.int64)
    for fold, members in enumerate(np.array_split(rng.permutation(len(sorted_scores)), folds)):
        fold_of_pair[members] = fold
    accuracies = []
    for fold in range(folds):
        held_out = fold_of_pair == fold
        threshold = _best_threshold(sorted_scores[~held_out], genuine[~held_out])
        accuracies.append(np.mean((sorted_scores[held_out] >= threshold) == genuine[held_out]))
    return float(np.mean(accuracies))


def verification_metrics(embeddings, labels, max_pairs: int = 2_000_000, seed: int = 0,
                         folds: int = 10) -> dict:
    """ROC AUC, EER, TAR at FAR 1e-2 / 1e-3 and 10-fold verification accuracy over pairs of the set."""
    if int(max_pairs) < 2:
        raise ValueError(f"max_pairs must be at least 2, got {max_pairs}")
    if int(folds) < 2:
        raise ValueError(f"folds must be at least 2, got {folds}")
    x = _embeddings(embeddings)
    y = _labels(labels, len(x)).cpu().numpy()
    rng = np.random.default_rng(seed)
    first, second, is_genuine = _verification_pairs(y, int(max_pairs), rng)
    scores = _pair_scores(x, first, second)
    order = np.argsort(-scores, kind="stable")
    sorted_scores, genuine = scores[order], is_genuine[order]
    far, tar = _roc_curve(sorted_scores, genuine)
    return {
        "roc_auc": _area_under(far, tar),
        "eer": _equal_error_rate(far, tar),
        "tar_at_far_1e-2": float(tar[far <= 1e-2].max()),
        "tar_at_far_1e-3": float(tar[far <= 1e-3].max()),
        "verification_accuracy": _cross_validated_accuracy(*_balanced(sorted_scores, genuine, rng), int(folds), rng),
    }


def _balanced(sorted_scores: np.ndarray, genuine: np.ndarray, rng: np.random.Generator):
    """As many impostor as genuine pairs (the larger family thinned at random), as in LFW's pair lists.

    Over all pairs of a set impostors outnumber genuine pairs about C to 1, and an accuracy
    over them would mostly reward rejecting everything.
    """
    genuine_index, impostor_index = np.flatnonzero(genuine), np.flatnonzero(~genuine)
    size = min(len(genuine_index), len(impostor_index))
    keep = np.sort(np.concatenate([rng.choice(genuine_index, size, replace=False),
                                   rng.choice(impostor_index, size, replace=False)]))
    return sorted_scores[keep], genuine[keep]
