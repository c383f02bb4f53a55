"""Softmax-family losses for metric learning, built by name.

Every cosine loss is one head with normalised class weights and two choices: how the
target logit is modified (the margin) and where the scale `s` comes from. The shared path
is written once in `CosineSoftmaxLoss`; each loss overrides one small method. The margin losses
(CosFace, ArcFace, SphereFace) are one head, `CombinedMarginLoss`, each setting one of its three margins.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from study.adacos_scale import fixed_adacos_scale

# Keeps acos finite and its gradient bounded at cos θ = ±1.
COS_EPS = 1e-7


def _check_scale(s: float) -> float:
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"scale s must be a finite number > 0, got {s}")
    return float(s)


class _StatsMixin:
    """Angle statistics of the last training step, computed only when read (at evaluations, not every step)."""

    _last_step: tuple[Callable[[], torch.Tensor], torch.Tensor, torch.Tensor | None] | None = None

    def _record_stats(self, cosines: Callable[[], torch.Tensor], labels: torch.Tensor, s: torch.Tensor | None) -> None:
        """Keep what the statistics need: `cosines` gives the step's (B, C) cosines, detached, when called; `s` is
        None for a loss without a scale."""
        self._last_step = (cosines, labels, None if s is None else s.detach().clone())

    @property
    def last_stats(self) -> dict[str, float]:
        """Scale, median target angle (degrees) and mean target / non-target cosine of the last training step."""
        if self._last_step is None:
            return {}
        cosines, labels, s = self._last_step
        cos = cosines()
        cos_target = cos.gather(1, labels[:, None]).squeeze(1)
        num_samples, num_classes = cos.shape
        nontarget_mean = (cos.sum() - cos_target.sum()) / (num_samples * max(num_classes - 1, 1))
        theta = torch.acos(cos_target.clamp(-1 + COS_EPS, 1 - COS_EPS))
        values = torch.stack([cos.new_tensor(math.nan) if s is None else s.to(cos.dtype),
                              torch.rad2deg(torch.quantile(theta, 0.5)), cos_target.mean(), nontarget_mean]).tolist()
        return dict(zip(("s", "theta_med_deg", "cos_target_mean", "cos_nontarget_mean"), values))


class CosineSoftmaxLoss(_StatsMixin, nn.Module):
    """Cross-entropy over s·cos θ with normalised embeddings and class weights; subclasses add a margin or a scale policy."""

    hyperparameters: tuple[str, ...] = ()

    def __init__(self, num_classes: int, embedding_size: int, s: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_classes, embedding_size))
        self.register_buffer("s", torch.tensor(_check_scale(s), dtype=torch.float64))

    def cosine(self, embeddings: torch.Tensor) -> torch.Tensor:
        """cos θ between every embedding and every class weight, at least in float32 even under autocast."""
        dtype = torch.promote_types(embeddings.dtype, torch.float32)
        with torch.autocast(device_type=embeddings.device.type, enabled=False):
            return F.linear(F.normalize(embeddings.to(dtype)), F.normalize(self.weight.to(dtype)))

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Classification logits s·cos θ, without margin."""
        return self.s * self.cosine(embeddings)

    def target_with_margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        """The modified target cosine; the identity for losses without a margin."""
        return cos_target

    def update_scale(self, cos: torch.Tensor, labels: torch.Tensor) -> None:
        """Adapt `s` from the batch before the logits are formed; fixed-scale losses keep it."""

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = self.cosine(embeddings)
        if self.training:
            with torch.no_grad():
                self.update_scale(cos, labels)
        target = self.target_with_margin(cos.gather(1, labels[:, None]))
        # The targets are written into the one (B, C) product in place: no copy of that size.
        logits = (self.s * cos).scatter_(1, labels[:, None], self.s * target)
        if self.training:
            detached = cos.detach()
            self._record_stats(lambda: detached, labels, self.s)
        return F.cross_entropy(logits, labels)


class NormFaceLoss(CosineSoftmaxLoss):
    """NormFace: s·cos θ for every class, fixed s."""

    hyperparameters = ("s",)

    def __init__(self, num_classes: int, embedding_size: int, *, s: float = 16.0):
        super().__init__(num_classes, embedding_size, s)


class CombinedMarginLoss(CosineSoftmaxLoss):
    """Target logit s·(cos(m1·θ + m2) − m3): SphereFace is m1, ArcFace m2, CosFace m3, and NormFace none of them.

    Past m1·θ + m2 = π, cos would rise again and reward a larger angle, so the target is continued to keep it
    decreasing in θ: with ArcFace's usual fallback cos θ − m2·sin m2 when m1 = 1 (ArcFace as published), otherwise
    with SphereFace's ψ = (−1)^k·cos(m1·θ + m2) − 2k, k = ⌊(m1·θ + m2)/π⌋, continuous and decreasing on [0, π].
    """

    hyperparameters = ("s", "m1", "m2", "m3")

    def __init__(self, num_classes: int, embedding_size: int, s: float, *, m1: float = 1.0, m2: float = 0.0,
                 m3: float = 0.0):
        super().__init__(num_classes, embedding_size, s)
        # Errors name the loss and its margin as the user wrote them: plain m for the one-margin losses below.
        loss = type(self).__name__.removesuffix("Loss")
        named = {slot: "m" if "m" in self.hyperparameters else slot for slot in ("m1", "m2", "m3")}
        if not (math.isfinite(m1) and m1 >= 1):
            raise ValueError(
                f"{loss} margin {named['m1']} multiplies the angle and must be a finite number ≥ 1, got {m1}; "
                "use 1 for no margin or about 1.5 to 4 for SphereFace (an angle added in radians is ArcFace's m)"
            )
        if not (math.isfinite(m2) and 0 <= m2 < math.pi):
            raise ValueError(
                f"{loss} margin {named['m2']} must be in radians within [0, π), got {m2}; "
                "a margin in degrees (e.g. 28.6) must be converted with math.radians first"
            )
        if not (math.isfinite(m3) and m3 >= 0):
            raise ValueError(f"{loss} margin {named['m3']} must be a finite number ≥ 0, got {m3}")
        self.m1, self.m2, self.m3 = float(m1), float(m2), float(m3)
        self.fallback_offset = self.m2 * math.sin(self.m2)

    def target_with_margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        if self.m1 != 1 or self.m2 != 0:
            cos_target = self._angular_margin(cos_target)
        return cos_target - self.m3

    def _angular_margin(self, cos_target: torch.Tensor) -> torch.Tensor:
        cos_target = cos_target.clamp(-1 + COS_EPS, 1 - COS_EPS)
        phi = self.m1 * torch.acos(cos_target) + self.m2
        if self.m1 == 1:
            return torch.where(phi <= math.pi, torch.cos(phi), cos_target - self.fallback_offset)
        k = torch.floor(phi.detach() / math.pi)  # which half-turn φ is in; a constant of the step, not differentiated
        return (1 - 2 * (k % 2)) * torch.cos(phi) - 2 * k


class CosFaceLoss(CombinedMarginLoss):
    """CosFace: target logit s·(cos θ − m) (m3)."""

    hyperparameters = ("s", "m")

    def __init__(self, num_classes: int, embedding_size: int, *, s: float = 64.0, m: float = 0.35):
        super().__init__(num_classes, embedding_size, s, m3=m)


class ArcFaceLoss(CombinedMarginLoss):
    """ArcFace: target logit s·cos(θ + m), m in radians (m2), with the usual fallback where θ + m > π."""

    hyperparameters = ("s", "m")

    def __init__(self, num_classes: int, embedding_size: int, *, s: float = 64.0, m: float = 0.5):
        super().__init__(num_classes, embedding_size, s, m2=m)


class SphereFaceLoss(CombinedMarginLoss):
    """SphereFace, normalised: target logit s·ψ(θ), ψ = (−1)^k·cos(m·θ) − 2k, k = ⌊m·θ/π⌋, m ≥ 1 (m1)."""

    hyperparameters = ("s", "m")

    def __init__(self, num_classes: int, embedding_size: int, *, s: float = 30.0, m: float = 1.5):
        super().__init__(num_classes, embedding_size, s, m1=m)


class FixedAdaCosLoss(CosineSoftmaxLoss):
    """Fixed AdaCos: s_f·cos θ with s_f = √2·ln(C−1); no hyperparameters."""

    def __init__(self, num_classes: int, embedding_size: int):
        super().__init__(num_classes, embedding_size, fixed_adacos_scale(num_classes))


class DynamicAdaCosLoss(CosineSoftmaxLoss):
    """Dynamic AdaCos: s re-estimated every training step from the batch's non-target logits and median target angle."""

    def __init__(self, num_classes: int, embedding_size: int):
        super().__init__(num_classes, embedding_size, fixed_adacos_scale(num_classes))

    def update_scale(self, cos: torch.Tensor, labels: torch.Tensor) -> None:
        # log Σ_{i,k≠y_i} exp(s·cos θ_ik), in log space: the plain exp sum overflows in float32. The targets are
        # blanked in place in the one (B, C) product: no mask or copy of that size.
        nontarget = (self.s * cos).scatter_(1, labels[:, None], -math.inf)
        log_sum = torch.logsumexp(nontarget.flatten(), dim=0)
        theta_target = torch.acos(cos.gather(1, labels[:, None]).squeeze(1).clamp(-1 + COS_EPS, 1 - COS_EPS))
        num_samples = torch.tensor(float(cos.shape[0]), device=cos.device, dtype=cos.dtype)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            log_sum, num_samples, theta_target = _combine_across_processes(log_sum, num_samples, theta_target)
        log_b_avg = log_sum - torch.log(num_samples)
        theta_med = torch.quantile(theta_target, 0.5)
        self.s.copy_(log_b_avg / torch.cos(torch.clamp(theta_med, max=math.pi / 4)))


def _combine_across_processes(log_sum, num_samples, theta_target):
    """Batch statistics of every DDP process, so that each replica computes the same s."""
    world = dist.get_world_size()
    log_sums = [torch.empty_like(log_sum) for _ in range(world)]
    dist.all_gather(log_sums, log_sum)
    dist.all_reduce(num_samples)
    # all_gather needs equal shapes: pad each process's angles with NaN to the largest batch.
    size = torch.tensor([theta_target.numel()], device=theta_target.device)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    padded = torch.full((int(max(sizes)),), math.nan, device=theta_target.device, dtype=theta_target.dtype)
    padded[: theta_target.numel()] = theta_target
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    thetas = torch.cat(gathered)
    return torch.logsumexp(torch.stack(log_sums), dim=0), num_samples, thetas[~torch.isnan(thetas)]


class P2SGradLoss(CosineSoftmaxLoss):
    """P2SGrad (Zhang et al., CVPR 2019): Σ_j (cos θ_ij − 1[j = y_i])², mean over the batch; no scale, no margin.

    Its gradients are the paper's Eq. 11, which replace the softmax's scale- and margin-dependent ones. The cosines
    are the logits (s = 1 is kept only so that argmax and the shared head apply; nothing scales them)."""

    def __init__(self, num_classes: int, embedding_size: int):
        super().__init__(num_classes, embedding_size, 1.0)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = self.cosine(embeddings)
        if self.training:
            detached = cos.detach()
            self._record_stats(lambda: detached, labels, None)
        # (cos − onehot)² summed over classes: ‖cos‖² − 2·cos_target + 1, without a (B, C) one-hot tensor.
        cos_target = cos.gather(1, labels[:, None]).squeeze(1)
        return (cos.square().sum(1) - 2 * cos_target + 1).mean()


class SoftmaxLoss(_StatsMixin, nn.Module):
    """Plain softmax cross-entropy: a linear layer with bias on the raw embedding."""

    hyperparameters: tuple[str, ...] = ()

    def __init__(self, num_classes: int, embedding_size: int):
        super().__init__()
        self.linear = nn.Linear(embedding_size, num_classes)

    @property
    def weight(self) -> nn.Parameter:
        return self.linear.weight

    def logits(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The linear layer's logits."""
        return self.linear(embeddings)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.training:
            # Angles are still informative for softmax (it has no scale); a copy of this step's weights costs less
            # than forming its cosines every step.
            embedded, weight = embeddings.detach().float(), self.linear.weight.detach().float().clone()
            self._record_stats(lambda: F.linear(F.normalize(embedded), F.normalize(weight)), labels, None)
        return F.cross_entropy(self.logits(embeddings), labels)


LOSSES: dict[str, type[nn.Module]] = {
    "softmax": SoftmaxLoss,
    "normface": NormFaceLoss,
    "cosface": CosFaceLoss,
    "arcface": ArcFaceLoss,
    "sphereface": SphereFaceLoss,
    "fixed_adacos": FixedAdaCosLoss,
    "dynamic_adacos": DynamicAdaCosLoss,
    "p2sgrad": P2SGradLoss,
}


def build_loss(name: str, num_classes: int, embedding_size: int, **hyperparameters: float) -> nn.Module:
    """The loss registered as `name`, its hyperparameters validated (s; m in radians, SphereFace's a factor ≥ 1)."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known losses: {', '.join(LOSSES)}")
    loss_class = LOSSES[name]
    unknown = sorted(set(hyperparameters) - set(loss_class.hyperparameters))
    if unknown:
        accepted = ", ".join(loss_class.hyperparameters) or "none (it is hyperparameter-free)"
        raise ValueError(f"loss {name!r} does not take {', '.join(unknown)}; it accepts: {accepted}")
    if num_classes < 2 or embedding_size < 1:
        raise ValueError(f"need num_classes ≥ 2 and embedding_size ≥ 1, got {num_classes} and {embedding_size}")
    return loss_class(num_classes, embedding_size, **{k: float(v) for k, v in hyperparameters.items()})
