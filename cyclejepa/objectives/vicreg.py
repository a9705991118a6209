"""VICReg's variance and covariance terms, the literature's alternative to SIGReg.

VICReg (Bardes, Ponce & LeCun, 2022) regularises a batch ``z`` (N, K) with

    v(z) = (1/K) Σ_k max(0, γ − sqrt(Var(z_k) + ε)),    c(z) = (1/K) Σ_{k≠l} Cov(z)_{kl}²,

(unbiased variances and covariance, γ = 1, ε = 1e-4) weighted μ = 25 and ν = 1 next to an
invariance term of weight λ = 25. Here the prediction loss (weight 1) plays the invariance role,
so a trainer that wants VICReg's ratios uses λ_reg = 1/25 on this regulariser.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cyclejepa.objectives.regulariser import MeanReduce, Regulariser
from cyclejepa.registry import REGULARISERS


def vicreg(
    z: Tensor,
    *,
    variance_weight: float = 25.0,
    covariance_weight: float = 1.0,
    std_target: float = 1.0,
    eps: float = 1e-4,
    reduce: MeanReduce | None = None,
) -> Tensor:
    """``variance_weight`` · v(z) + ``covariance_weight`` · c(z) (μ, ν) of samples z (N ≥ 2, K), with
    γ = ``std_target`` and ε = ``eps``; a scalar in z's dtype (at least float32).

    ``reduce`` maps the first and second moments (one vector of K + K²) and N; under DDP to their
    n-weighted mean over ranks, so that every rank regularises the global batch.
    """
    if z.dim() != 2 or z.shape[0] < 2:
        raise ValueError(f"vicreg: z must have shape (N, K) with N >= 2, got {tuple(z.shape)}")
    dim = z.shape[1]
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    moments = torch.cat((z.mean(0), (z.T @ z).flatten() / z.shape[0]))
    n: int | Tensor = z.shape[0]
    if reduce is not None:
        moments, n = reduce(moments, n)
    mean, second = moments[:dim], moments[dim:].view(dim, dim)
    covariance = (second - torch.outer(mean, mean)) * (n / (n - 1))
    std = torch.sqrt(covariance.diagonal() + eps)
    variance_term = torch.relu(std_target - std).mean()
    off_diagonal = covariance - torch.diag_embed(covariance.diagonal())
    covariance_term = off_diagonal.square().sum() / dim
    return variance_weight * variance_term + covariance_weight * covariance_term


@REGULARISERS.register("vicreg")
class VICReg(Regulariser):
    """`vicreg` of all tokens of ``z`` (..., K): a `Regulariser` like `SIGReg` that draws nothing."""

    def __init__(self, variance_weight: float = 25.0, covariance_weight: float = 1.0, std_target: float = 1.0, eps: float = 1e-4):
        super().__init__()
        self.variance_weight, self.covariance_weight = variance_weight, covariance_weight
        self.std_target, self.eps = std_target, eps

    def forward(self, z: Tensor, *, reduce: MeanReduce | None = None) -> Tensor:
        """VICReg of the flattened tokens."""
        return vicreg(
            z.reshape(-1, z.shape[-1]),
            variance_weight=self.variance_weight,
            covariance_weight=self.covariance_weight,
            std_target=self.std_target,
            eps=self.eps,
            reduce=reduce,
        )

    def extra_repr(self) -> str:
        return (
            f"variance_weight={self.variance_weight}, covariance_weight={self.covariance_weight}, "
            f"std_target={self.std_target}, eps={self.eps}"
        )
