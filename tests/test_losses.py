"""Losses against direct float64 transcriptions of SPEC's formulas and against pytorch-metric-learning."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pytorch_metric_learning import losses as pml_losses

from study.losses import LOSSES, build_loss, fixed_adacos_scale

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


# The usual fallback keeps the curve monotonic while cos m + m·sin m ≥ 1, i.e. m up to about 2.3 rad,
# far past the searched range [0, 1].
@pytest.mark.parametrize("m", [0.5, 1.0, 2.0])
def test_arcface_target_logit_is_monotonic_and_finite_past_the_fallback(m):
    loss = build_loss("arcface", C, D, s=10.0, m=m).double()
    cos = torch.linspace(-1.0, 1.0, 20001, dtype=torch.float64, requires_grad=True)
    target = loss.target_with_margin(cos)
    target.sum().backward()
    assert torch.isfinite(target).all() and torch.isfinite(cos.grad).all()
    # Increasing in cos θ everywhere, so decreasing in θ: a larger angle is never rewarded.
    assert (target.diff() >= 0).all()
    fallback = cos.detach() < math.cos(math.pi - m) - 1e-6
    torch.testing.assert_close(target.detach()[fallback], cos.detach()[fallback] - m * math.sin(m))


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
        ("arcfce", {}, "known losses: softmax, normface, cosface, arcface, fixed_adacos, dynamic_adacos"),
        ("arcface", {"s": 30.0, "m": -0.1}, r"within \[0, π\)"),
        ("arcface", {"s": 30.0, "m": math.pi}, r"within \[0, π\)"),
        ("arcface", {"s": 30.0, "m": 28.6}, "degrees"),
        ("arcface", {"s": 0.0, "m": 0.5}, "s must be"),
        ("cosface", {"s": -1.0}, "s must be"),
        ("normface", {"s": float("nan")}, "s must be"),
        ("fixed_adacos", {"s": 3.0}, "hyperparameter-free"),
        ("cosface", {"margin": 0.3}, "accepts: s, m"),
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
