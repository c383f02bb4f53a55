"""Losses against direct float64 transcriptions of SPEC's formulas and against pytorch-metric-learning."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pytorch_metric_learning import losses as pml_losses

from study.losses import LOSSES, CombinedMarginLoss, build_loss, fixed_adacos_scale

C, D, N = 10, 8, 32


def make_inputs(seed=0, n=N, c=C, d=D, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    embeddings = torch.randn(n, d, generator=g, dtype=dtype)
    labels = torch.randint(0, c, (n,), generator=g)
    return embeddings, labels


def reference_loss(embeddings, weight, labels, loss_name, s=None, m=None):
    """SPEC's table written out term by term, in float64."""
    x = embeddings / embeddings.norm(dim=1, keepdim=True)
    w = weight / weight.norm(dim=1, keepdim=True)
    cos = x @ w.T
    target = cos[torch.arange(len(labels)), labels]
    if loss_name == "arcface":
        theta = torch.acos(target.clamp(-1 + 1e-7, 1 - 1e-7))
        modified = torch.where(theta + m <= math.pi, torch.cos(theta + m), target - m * math.sin(m))
    elif loss_name == "cosface":
        modified = target - m
    else:
        modified = target
    if loss_name in ("fixed_adacos", "dynamic_adacos"):
        s = math.sqrt(2) * math.log(weight.shape[0] - 1)
    one_hot = F.one_hot(labels, weight.shape[0]).bool()
    logits = s * torch.where(one_hot, modified[:, None], cos)
    return (torch.logsumexp(logits, dim=1) - logits[one_hot]).mean()


@pytest.mark.parametrize(
    "name, hyperparameters",
    [("normface", {"s": 16.0}), ("cosface", {"s": 30.0, "m": 0.35}), ("arcface", {"s": 30.0, "m": 0.5}),
     ("arcface", {"s": 64.0, "m": 1.2}), ("fixed_adacos", {})],
)
def test_cosine_loss_value_and_gradient_match_the_formula(name, hyperparameters):
    embeddings, labels = make_inputs()
    loss = build_loss(name, C, D, **hyperparameters).double()
    x1 = embeddings.clone().requires_grad_(True)
    value = loss(x1, labels)
    value.backward()

    weight = loss.weight.detach().clone().requires_grad_(True)
    x2 = embeddings.clone().requires_grad_(True)
    expected = reference_loss(x2, weight, labels, name, hyperparameters.get("s"), hyperparameters.get("m"))
    expected.backward()
    torch.testing.assert_close(value, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(loss.weight.grad, weight.grad, rtol=1e-8, atol=1e-10)


def test_softmax_is_a_linear_layer_with_bias_and_cross_entropy():
    embeddings, labels = make_inputs()
    loss = build_loss("softmax", C, D).double()
    x1 = embeddings.clone().requires_grad_(True)
    value = loss(x1, labels)
    value.backward()
    # log Σ_j exp(x·W_j + b_j) − (x·W_y + b_y), averaged, written out in float64 numpy.
    x, w, b = embeddings.numpy(), loss.weight.detach().numpy(), loss.linear.bias.detach().numpy()
    rows, y = np.arange(N), labels.numpy()
    logits = x @ w.T + b
    top = logits.max(axis=1, keepdims=True)
    probabilities = np.exp(logits - top) / np.exp(logits - top).sum(axis=1, keepdims=True)
    expected = np.mean(np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0] - logits[rows, y])
    # Gradient of the mean cross-entropy: (softmax − one-hot) / N, through x·Wᵀ + b.
    delta = (probabilities - np.eye(C)[y]) / N
    assert value.item() == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(x1.grad.numpy(), delta @ w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(loss.weight.grad.numpy(), delta.T @ x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(loss.linear.bias.grad.numpy(), delta.sum(axis=0), rtol=1e-10, atol=1e-12)
    assert loss.weight.shape == (C, D)


def test_arcface_equals_pytorch_metric_learning_with_margin_in_degrees():
    # Keep θ + m < π for every sample: pml has no fallback branch.
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(C, D, generator=g)
    labels = torch.randint(0, C, (N,), generator=g)
    embeddings = F.normalize(weight[labels], dim=1) + 0.3 * torch.randn(N, D, generator=g)

    ours = build_loss("arcface", C, D, s=64.0, m=math.radians(28.6))
    theta = torch.acos((F.normalize(embeddings) @ F.normalize(weight).T)[torch.arange(N), labels])
    assert (theta + math.radians(28.6) < math.pi).all()
    ours.weight.data.copy_(weight)
    theirs = pml_losses.ArcFaceLoss(num_classes=C, embedding_size=D, margin=28.6, scale=64)
    theirs.W.data.copy_(weight.T)

    x1 = embeddings.clone().requires_grad_(True)
    x2 = embeddings.clone().requires_grad_(True)
    ours_value, theirs_value = ours(x1, labels), theirs(x2, labels)
    ours_value.backward()
    theirs_value.backward()
    torch.testing.assert_close(ours_value, theirs_value, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.weight.grad, theirs.W.grad.T, rtol=1e-4, atol=1e-5)


def test_p2sgrad_is_pytorch_metric_learnings_mse_summed_over_classes():
    # pml's P2SGradLoss is MSELoss(cos, one-hot): the mean over batch *and* classes, C times less than SPEC's sum.
    embeddings, labels = make_inputs(seed=3, dtype=torch.float32)
    ours = build_loss("p2sgrad", C, D)
    theirs = pml_losses.P2SGradLoss(descriptors_dim=D, num_classes=C)
    ours.weight.data.copy_(theirs.weight.data.T)  # pml keeps its (D, C) weights at unit norm per class
    x1 = embeddings.clone().requires_grad_(True)
    x2 = embeddings.clone().requires_grad_(True)
    ours_value, theirs_value = ours(x1, labels), theirs(x2, labels)
    ours_value.backward()
    theirs_value.backward()
    torch.testing.assert_close(ours_value, C * theirs_value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x1.grad, C * x2.grad, rtol=1e-4, atol=1e-6)


def test_p2sgrad_gradient_is_the_papers_eq_11():
    # Eq. 11: ∂L_i/∂x_i = Σ_j 2(cos θ_ij − 1[j = y_i]) · ∂cos θ_ij/∂x_i, with ∂cos θ_ij/∂x = (Ŵ_j − cos θ_ij·x̂)/‖x‖.
    embeddings, labels = make_inputs(seed=4, n=5)
    loss = build_loss("p2sgrad", C, D).double()
    x = embeddings.clone().requires_grad_(True)
    loss(x, labels).backward()
    x_hat = embeddings / embeddings.norm(dim=1, keepdim=True)
    w_hat = loss.weight.detach() / loss.weight.detach().norm(dim=1, keepdim=True)
    cos = x_hat @ w_hat.T
    residual = cos - F.one_hot(labels, C).double()
    d_cos = (w_hat[None, :, :] - cos[:, :, None] * x_hat[:, None, :]) / embeddings.norm(dim=1)[:, None, None]
    expected = (2 * residual[:, :, None] * d_cos).sum(1) / len(labels)
    torch.testing.assert_close(x.grad, expected)
    assert loss.hyperparameters == ()


def target_over_every_angle(name: str, m: float):
    """The loss, cos θ over all of [−1, 1] and its target logit there, checked finite with finite gradients and
    increasing in cos θ (so decreasing in θ: a larger angle is never rewarded)."""
    loss = build_loss(name, C, D, s=30.0, m=m).double()
    cos = torch.linspace(-1.0, 1.0, 20001, dtype=torch.float64, requires_grad=True)
    target = loss.target_with_margin(cos)
    target.sum().backward()
    assert torch.isfinite(target).all() and torch.isfinite(cos.grad).all()
    assert (target.diff() >= 0).all()
    return loss, cos, target


# The usual fallback keeps the curve monotonic while cos m + m·sin m ≥ 1, i.e. m up to about 2.3 rad,
# far past the searched range [0, 1].
@pytest.mark.parametrize("m", [0.5, 1.0, 2.0])
def test_arcface_target_logit_is_monotonic_and_finite_past_the_fallback(m):
    loss, cos, target = target_over_every_angle("arcface", m)
    fallback = cos.detach() < math.cos(math.pi - m) - 1e-6
    torch.testing.assert_close(target.detach()[fallback], cos.detach()[fallback] - m * math.sin(m))


def sphereface_psi(cos_value, m):
    """SPEC's SphereFace target for one cosine, in float64 scalars: (−1)^k·cos(m·θ) − 2k with k = ⌊m·θ/π⌋."""
    theta = math.acos(min(max(cos_value, -1 + 1e-7), 1 - 1e-7))
    k = math.floor(m * theta / math.pi)
    return (-1) ** k * math.cos(m * theta) - 2 * k


def combined_target(cos_value, m1, m2, m3):
    """cos(m1·θ + m2) − m3 for one cosine, continued past π as SPEC says: ArcFace's fallback at m1 = 1, else ψ."""
    theta = math.acos(min(max(cos_value, -1 + 1e-7), 1 - 1e-7))
    phi = m1 * theta + m2
    if m1 == 1:
        angular = math.cos(phi) if phi <= math.pi else math.cos(theta) - m2 * math.sin(m2)
    else:
        k = math.floor(phi / math.pi)
        angular = (-1) ** k * math.cos(phi) - 2 * k
    return angular - m3


def elementwise_loss(x, w, labels, s, target):
    """Mean cross-entropy over s·cos θ_ij with the target logit s·target(cos θ_iy), one float64 scalar at a time."""
    rows = []
    for xi, yi in zip(x.tolist(), labels.tolist()):
        x_norm = math.sqrt(math.fsum(v * v for v in xi))
        logits = []
        for j, wj in enumerate(w.tolist()):
            cos = math.fsum(a * b for a, b in zip(xi, wj)) / (x_norm * math.sqrt(math.fsum(v * v for v in wj)))
            logits.append(s * (target(cos) if j == yi else cos))
        top = max(logits)
        rows.append(top + math.log(math.fsum(math.exp(v - top) for v in logits)) - logits[yi])
    return math.fsum(rows) / len(rows)


def central_differences(f, array, h=1e-6):
    """∂f/∂array by central differences, one element at a time."""
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        plus, minus = array.copy(), array.copy()
        plus[index] += h
        minus[index] -= h
        grad[index] = (f(plus) - f(minus)) / (2 * h)
    return grad


def embeddings_at_angles(weight, labels, angles, seed=0):
    """Embeddings at the given angles θ_iy from their class weights, with random norms and directions otherwise."""
    rng = np.random.default_rng(seed)
    w = weight[labels] / np.linalg.norm(weight[labels], axis=1, keepdims=True)
    r = rng.standard_normal(w.shape)
    u = r - (r * w).sum(axis=1, keepdims=True) * w
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    x = np.cos(angles)[:, None] * w + np.sin(angles)[:, None] * u
    return x * rng.uniform(0.5, 3.0, (len(labels), 1))


SPHEREFACE_MARGINS = [1.0, 1.5, 2.0, 4.0]


def angle_grid(m):
    """Angles over [0, π], the k = ⌊m·θ/π⌋ boundaries among them, kept off the clamped ends."""
    boundaries = [j * math.pi / m for j in range(1, math.ceil(m))]
    return np.sort(np.concatenate([np.linspace(1e-3, math.pi - 1e-3, 2001), boundaries]))


@pytest.mark.parametrize("m", SPHEREFACE_MARGINS)
def test_sphereface_target_equals_psi_at_every_angle(m):
    loss = build_loss("sphereface", C, D, s=30.0, m=m).double()
    theta = angle_grid(m)
    cos = np.cos(theta)
    ours = loss.target_with_margin(torch.from_numpy(cos)).numpy()
    expected = np.array([sphereface_psi(c, m) for c in cos])
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-12)
    k = np.floor(m * theta / np.pi)
    # The k ≥ 1 pieces, θ > π/m, are a share 1 − 1/m of the grid: not only k = 0 is checked.
    assert (k >= 1).mean() == pytest.approx(1 - 1 / m, abs=0.01)
    assert k.max() == math.ceil(m) - 1


@pytest.mark.parametrize("m", SPHEREFACE_MARGINS + [2.5, 3.3])
def test_sphereface_target_decreases_in_the_angle_and_has_finite_gradients(m):
    loss, cos, target = target_over_every_angle("sphereface", m)
    theta = torch.linspace(0.0, math.pi, 20001, dtype=torch.float64)
    assert (loss.target_with_margin(torch.cos(theta)).diff() <= 0).all()
    # Continuous: at each boundary θ = jπ/m both pieces meet (ψ = −(2j − 1) there).
    for j in range(1, math.ceil(m)):
        boundary = torch.tensor([j * math.pi / m - 1e-9, j * math.pi / m + 1e-9], dtype=torch.float64)
        values = loss.target_with_margin(torch.cos(boundary))
        torch.testing.assert_close(values, torch.full_like(values, 1.0 - 2 * j), rtol=0, atol=1e-7)


@pytest.mark.parametrize("s, m", [(30.0, 1.0), (30.0, 1.5), (16.0, 2.0), (10.0, 4.0)])
def test_sphereface_loss_value_and_gradient_match_the_formula(s, m):
    n = 12
    g = torch.Generator().manual_seed(7)
    labels = torch.randint(0, C, (n,), generator=g)
    loss = build_loss("sphereface", C, D, s=s, m=m).double()
    weight = loss.weight.detach().numpy().copy()
    angles = np.linspace(0.02, math.pi - 0.02, n)  # target angles over [0, π], k ≥ 1 for the larger ones
    embeddings = embeddings_at_angles(weight, labels.numpy(), angles)
    assert max(np.floor(m * angles / np.pi)) == math.ceil(m) - 1

    x = torch.from_numpy(embeddings.copy()).requires_grad_(True)
    value = loss(x, labels)
    value.backward()
    target = lambda c: sphereface_psi(c, m)
    expected = elementwise_loss(embeddings, weight, labels, s, target)
    assert value.item() == pytest.approx(expected, rel=1e-11)
    assert torch.isfinite(x.grad).all() and torch.isfinite(loss.weight.grad).all()
    expected_x_grad = central_differences(lambda e: elementwise_loss(e, weight, labels, s, target), embeddings)
    expected_w_grad = central_differences(lambda w: elementwise_loss(embeddings, w, labels, s, target), weight)
    np.testing.assert_allclose(x.grad.numpy(), expected_x_grad, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.weight.grad.numpy(), expected_w_grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sphereface_with_m_1_is_normface(dtype):
    embeddings, labels = make_inputs(seed=8, dtype=dtype)
    torch.manual_seed(0)
    sphereface = build_loss("sphereface", C, D, s=20.0, m=1.0).to(dtype).train()
    normface = build_loss("normface", C, D, s=20.0).to(dtype).train()
    normface.weight.data.copy_(sphereface.weight.data)
    x1, x2 = embeddings.clone().requires_grad_(True), embeddings.clone().requires_grad_(True)
    ours, theirs = sphereface(x1, labels), normface(x2, labels)
    ours.backward()
    theirs.backward()
    assert torch.equal(ours, theirs)
    assert torch.equal(x1.grad, x2.grad) and torch.equal(sphereface.weight.grad, normface.weight.grad)
    assert sphereface.last_stats == normface.last_stats


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m", SPHEREFACE_MARGINS)
def test_sphereface_gradient_is_finite_at_zero_and_pi(m, dtype):
    loss = build_loss("sphereface", C, D, s=30.0, m=m).to(dtype).train()
    labels = torch.arange(C)
    directions = loss.weight.detach()[labels]
    # θ = 0 and θ = π exactly (up to rounding): the acos clamp keeps the gradient finite.
    embeddings = torch.cat([2.0 * directions, -0.5 * directions]).requires_grad_(True)
    value = loss(embeddings, torch.cat([labels, labels]))
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(embeddings.grad).all() and torch.isfinite(loss.weight.grad).all()
    stats = loss.last_stats
    assert stats["s"] == 30.0 and 0.0 <= stats["theta_med_deg"] <= 180.0


def test_sphereface_is_searchable_with_s_and_m():
    assert LOSSES["sphereface"].hyperparameters == ("s", "m")
    loss = build_loss("sphereface", C, D)
    assert (float(loss.s), loss.m1) == (30.0, 1.5)


def _same_weights(*losses):
    for loss in losses[1:]:
        loss.weight.data.copy_(losses[0].weight.data)
    return losses


@pytest.mark.parametrize(
    "name, hyperparameters, margins",
    [("sphereface", {"s": 30.0, "m": 1.5}, {"m1": 1.5}), ("sphereface", {"s": 10.0, "m": 4.0}, {"m1": 4.0}),
     ("arcface", {"s": 30.0, "m": 0.5}, {"m2": 0.5}), ("arcface", {"s": 10.0, "m": 2.0}, {"m2": 2.0}),
     ("cosface", {"s": 30.0, "m": 0.35}, {"m3": 0.35}), ("normface", {"s": 16.0}, {})],
)
def test_the_combined_margin_reproduces_each_margin_loss(name, hyperparameters, margins):
    embeddings, labels = make_inputs(seed=9)
    embeddings[:4] = -embeddings[:4]  # some large angles, past ArcFace's fallback and SphereFace's first boundary
    single = build_loss(name, C, D, **hyperparameters).double().train()
    combined = CombinedMarginLoss(C, D, hyperparameters["s"], **margins).double().train()
    single, combined = _same_weights(single, combined)
    embeddings[:4] = -single.weight.detach()[labels[:4]]
    x1, x2 = embeddings.clone().requires_grad_(True), embeddings.clone().requires_grad_(True)
    a, b = single(x1, labels), combined(x2, labels)
    a.backward()
    b.backward()
    assert torch.equal(a, b) and torch.equal(x1.grad, x2.grad) and torch.equal(single.weight.grad, combined.weight.grad)
    assert single.last_stats == combined.last_stats
    cos = torch.linspace(-1.0, 1.0, 2001, dtype=torch.float64)
    assert torch.equal(single.target_with_margin(cos), combined.target_with_margin(cos))


@pytest.mark.parametrize("m1, m2, m3", [(1.0, 0.3, 0.2), (1.0, 1.0, 0.1), (2.0, 0.3, 0.0), (1.35, 0.5, 0.15)])
def test_combined_margins_follow_the_formula_and_keep_decreasing(m1, m2, m3):
    loss = CombinedMarginLoss(C, D, 30.0, m1=m1, m2=m2, m3=m3).double()
    theta = np.linspace(1e-3, math.pi - 1e-3, 4001)
    ours = loss.target_with_margin(torch.from_numpy(np.cos(theta))).numpy()
    expected = np.array([combined_target(c, m1, m2, m3) for c in np.cos(theta)])
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-12)
    assert (m1 * theta + m2 > math.pi).any()  # past π, where the continuation matters
    cos = torch.linspace(-1.0, 1.0, 20001, dtype=torch.float64, requires_grad=True)
    target = loss.target_with_margin(cos)
    target.sum().backward()
    assert (target.diff() >= 0).all() and torch.isfinite(cos.grad).all()


@pytest.mark.parametrize(
    "margins, message",
    [({"m1": 0.9}, "CombinedMargin margin m1 .* ≥ 1"), ({"m2": math.pi}, r"margin m2 must be in radians within \[0, π\)"),
     ({"m2": 28.6}, "degrees"), ({"m3": -0.1}, "margin m3 must be a finite number ≥ 0")],
)
def test_combined_margin_refuses_bad_margins_by_name(margins, message):
    with pytest.raises(ValueError, match=message):
        CombinedMarginLoss(C, D, 30.0, **margins)


@pytest.mark.parametrize("num_classes, expected", [(10, 3.107), (16, 3.829), (100, 6.499), (10575, 13.10), (85742, 16.06)])
def test_fixed_adacos_scale_matches_published_values(num_classes, expected):
    assert fixed_adacos_scale(num_classes) == pytest.approx(expected, abs=1e-2)
    if num_classes <= 100:
        assert float(build_loss("fixed_adacos", num_classes, D).s) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("name", ["fixed_adacos", "dynamic_adacos"])
def test_adacos_refuses_fewer_than_three_classes(name):
    with pytest.raises(ValueError, match="at least 3"):
        build_loss(name, 2, D)


def hand_computed_dynamic_scale(cos, labels, s_previous):
    """SPEC's Dynamic AdaCos step in float64 numpy, the exp sum taken in log space by hand."""
    cos = np.asarray(cos, dtype=np.float64)
    labels = np.asarray(labels)
    rows = np.arange(len(labels))
    nontarget = np.delete(s_previous * cos, labels + rows * cos.shape[1]).reshape(-1)
    top = nontarget.max()
    log_b_avg = top + np.log(np.exp(nontarget - top).sum()) - np.log(len(labels))
    theta_med = np.median(np.arccos(np.clip(cos[rows, labels], -1 + 1e-7, 1 - 1e-7)))
    return log_b_avg / np.cos(min(np.pi / 4, theta_med))


def test_one_dynamic_adacos_step_equals_the_formula():
    embeddings, labels = make_inputs(seed=3)
    loss = build_loss("dynamic_adacos", C, D).double().train()
    s0 = float(loss.s)
    assert s0 == pytest.approx(math.sqrt(2) * math.log(C - 1))
    cos = (F.normalize(embeddings) @ F.normalize(loss.weight.detach()).T).numpy()
    expected_s = hand_computed_dynamic_scale(cos, labels.numpy(), s0)
    value = loss(embeddings, labels)
    assert float(loss.s) == pytest.approx(expected_s, rel=1e-10)
    # The new scale is the one used in this step's logits.
    logits = expected_s * torch.from_numpy(cos)
    assert value.item() == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-10)
    stats = loss.last_stats
    assert stats["s"] == pytest.approx(expected_s)
    target = cos[np.arange(N), labels.numpy()]
    assert stats["theta_med_deg"] == pytest.approx(np.degrees(np.median(np.arccos(target))), rel=1e-6)
    assert stats["cos_target_mean"] == pytest.approx(target.mean())
    assert stats["cos_nontarget_mean"] == pytest.approx((cos.sum() - target.sum()) / (N * (C - 1)))
    # Gradients flow through cos θ only: s is a constant of the step, never differentiated.
    x = embeddings.clone().requires_grad_(True)
    loss.s.fill_(s0)
    loss.weight.grad = None
    loss(x, labels).backward()
    weight = loss.weight.detach().clone().requires_grad_(True)
    x_reference = embeddings.clone().requires_grad_(True)
    reference_loss(x_reference, weight, labels, "normface", s=expected_s).backward()
    torch.testing.assert_close(x.grad, x_reference.grad, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(loss.weight.grad, weight.grad, rtol=1e-8, atol=1e-10)
    # A second step starts from the updated scale.
    loss(embeddings, labels)
    assert float(loss.s) == pytest.approx(hand_computed_dynamic_scale(cos, labels.numpy(), expected_s), rel=1e-10)


def test_dynamic_adacos_scale_stays_finite_where_the_naive_exp_sum_overflows():
    g = torch.Generator().manual_seed(4)
    loss = build_loss("dynamic_adacos", 50, D).train()
    loss.weight.data.copy_(F.normalize(torch.randn(50, D, generator=g)))
    labels = torch.randint(0, 50, (64,), generator=g)
    # Embeddings close to a non-target class, so that s·cos is large there.
    embeddings = loss.weight.detach()[(labels + 1) % 50] + 0.01 * torch.randn(64, D, generator=g)
    loss.s.fill_(200.0)
    cos32 = F.normalize(embeddings) @ F.normalize(loss.weight.detach()).T
    assert not torch.isfinite(torch.exp(200.0 * cos32).sum())  # the naive sum overflows in float32
    expected = hand_computed_dynamic_scale(cos32.numpy(), labels.numpy(), 200.0)
    value = loss(embeddings, labels)
    assert math.isfinite(float(loss.s)) and torch.isfinite(value)
    assert float(loss.s) == pytest.approx(expected, rel=1e-4)


def test_dynamic_adacos_scale_does_not_move_in_eval_mode_and_is_restored_from_state_dict():
    embeddings, labels = make_inputs(seed=5, dtype=torch.float32)
    loss = build_loss("dynamic_adacos", C, D).eval()
    s0 = float(loss.s)
    loss(embeddings, labels)
    loss.logits(embeddings)
    assert float(loss.s) == s0
    loss.train()(embeddings, labels)
    trained_s = float(loss.s)
    assert trained_s != s0
    state = loss.state_dict()
    assert "s" in state and "s" not in dict(loss.named_parameters())
    fresh = build_loss("dynamic_adacos", C, D)
    assert float(fresh.s) == pytest.approx(s0)
    fresh.load_state_dict(state)
    assert float(fresh.s) == trained_s


def test_logits_carry_no_margin():
    embeddings, labels = make_inputs(dtype=torch.float32)
    loss = build_loss("arcface", C, D, s=30.0, m=0.5)
    expected = 30.0 * F.normalize(embeddings) @ F.normalize(loss.weight.detach()).T
    torch.testing.assert_close(loss.logits(embeddings), expected)


def test_every_loss_reports_its_statistics_after_a_training_step():
    embeddings, labels = make_inputs(dtype=torch.float32)
    for name in LOSSES:
        loss = build_loss(name, C, D).train()
        loss(embeddings, labels)
        assert set(loss.last_stats) == {"s", "theta_med_deg", "cos_target_mean", "cos_nontarget_mean"}
        assert all(isinstance(v, float) for v in loss.last_stats.values())
        assert loss.weight.shape == (C, D) and loss.weight.requires_grad


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("arcfce", {}, "known losses: softmax, normface, cosface, arcface, sphereface, fixed_adacos, dynamic_adacos, p2sgrad"),
        ("arcface", {"s": 30.0, "m": -0.1}, r"within \[0, π\)"),
        ("arcface", {"s": 30.0, "m": math.pi}, r"within \[0, π\)"),
        ("arcface", {"s": 30.0, "m": 28.6}, "degrees"),
        ("arcface", {"s": 0.0, "m": 0.5}, "s must be"),
        ("cosface", {"s": -1.0}, "s must be"),
        ("normface", {"s": float("nan")}, "s must be"),
        ("fixed_adacos", {"s": 3.0}, "hyperparameter-free"),
        ("cosface", {"margin": 0.3}, "accepts: s, m"),
        ("sphereface", {"s": 30.0, "m": 0.5}, r"SphereFace margin m multiplies the angle .* ≥ 1, got 0.5; use 1"),
        ("sphereface", {"m": 0.0}, "≥ 1"),
        ("sphereface", {"m": -2.0}, "≥ 1"),
        ("sphereface", {"m": float("inf")}, "≥ 1"),
        ("sphereface", {"m": float("nan")}, "≥ 1"),
        ("sphereface", {"s": 0.0, "m": 2.0}, "s must be"),
        ("sphereface", {"m1": 2.0}, "accepts: s, m"),
    ],
)
def test_bad_hyperparameters_get_clear_errors(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_loss(name, C, D, **kwargs)


def _ddp_worker(rank, world_size, init_file, embeddings, labels, weight, results):
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    loss = build_loss("dynamic_adacos", C, D).double().train()
    loss.weight.data.copy_(weight)
    halves = [slice(0, 13), slice(13, None)]  # unequal shares of the batch
    loss(embeddings[halves[rank]], labels[halves[rank]])
    results[rank] = float(loss.s)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_dynamic_adacos_combines_statistics_across_processes(tmp_path):
    import torch.multiprocessing as mp

    embeddings, labels = make_inputs(seed=6)
    single = build_loss("dynamic_adacos", C, D).double().train()
    single(embeddings, labels)
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_ddp_worker, args=(2, str(tmp_path / "init"), embeddings, labels, single.weight.detach(), results),
                 nprocs=2, join=True)
        assert results[0] == results[1] == pytest.approx(float(single.s), rel=1e-12)
