"""Univariate statistics of samples against N(0, 1), the components of a `SlicingTest`.

Each is a function of sample means of per-sample features (`UnivariateStatistic`), registered in
`cyclejepa.registry.STATISTICS` under the name ``objectives.regulariser.options.statistic`` gives.
"""

from __future__ import annotations

import functools
import math
import operator

import torch
from torch import Tensor

from cyclejepa.objectives.regulariser import UnivariateStatistic
from cyclejepa.registry import STATISTICS


def _trapezoid(
    knots: int, t_max: float, *, device: torch.device | None = None, dtype: torch.dtype | None = None
) -> tuple[Tensor, Tensor]:
    """Knots on [0, t_max] and weights Δ·[1, 2, …, 2, 1] for an even integrand on [−t_max, t_max]."""
    if knots < 2 or t_max <= 0:
        raise ValueError(f"Epps–Pulley quadrature needs knots >= 2 and t_max > 0, got {knots}, {t_max}")
    t = torch.linspace(0.0, t_max, knots, device=device, dtype=dtype)
    weights = torch.full_like(t, 2.0 * t_max / (knots - 1))
    weights[0] /= 2
    weights[-1] /= 2
    return t, weights


@STATISTICS.register("epps-pulley")
class EppsPulley(UnivariateStatistic):
    """Epps–Pulley statistic: N ∫_R |φ̂(t) − e^{−t²/2}|² e^{−t²/2} dt, φ̂(t) = (1/R) Σ_r e^{i t x_r}.

    The integrand is even: twice the integral over [0, ∞), truncated to [0, t_max], by the trapezoid
    rule on ``knots`` points (weights Δ·[1, 2, …, 2, 1], Δ = t_max / (knots − 1)). The sample means
    are the empirical characteristic function (2, knots, M): the means of cos(t x) and sin(t x).
    """

    def __init__(self, knots: int = 17, t_max: float = 3.0):
        _trapezoid(knots, t_max)  # validates early
        self.knots, self.t_max = knots, t_max

    def sample_means(self, projections: Tensor) -> Tensor:
        t, _ = _trapezoid(self.knots, self.t_max, device=projections.device, dtype=projections.dtype)
        # (R, M, J) phases: the one tensor autograd keeps for cos/sin backward (see docs/objectives.md).
        phases = projections.unsqueeze(-1) * t
        return torch.stack((phases.cos().mean(0), phases.sin().mean(0))).transpose(1, 2)  # (2, J, M)

    def statistic(self, means: Tensor, samples: float | Tensor) -> Tensor:
        t, weights = _trapezoid(self.knots, self.t_max, device=means.device, dtype=means.dtype)
        target = torch.exp(-0.5 * t.square()).unsqueeze(-1)  # φ0(t_j) = e^{−t²/2}, shape (J, 1)
        squared_error = (means[0] - target).square() + means[1].square()  # |φ̂ − φ0|², shape (J, M)
        return samples * ((weights.unsqueeze(-1) * target) * squared_error).sum(0)

    def __repr__(self) -> str:
        return f"EppsPulley(knots={self.knots}, t_max={self.t_max})"


def normal_moment(order: int) -> int:
    """E[X^k] of X ~ N(0, 1): 0 for odd k, (k − 1)!! for even k."""
    return 0 if order % 2 else math.prod(range(order - 1, 0, -2))


@STATISTICS.register("moments")
class Moments(UnivariateStatistic):
    """Standardised moment matching: N Σ_{k=1}^{order} (m̂_k − μ_k)² / (μ_{2k} − μ_k²).

    m̂_k = (1/R) Σ_r x_r^k, μ_k = E[X^k] under N(0, 1) and μ_{2k} − μ_k² = Var(X^k): each term is
    the squared z-score of m̂_k for N samples. Blind beyond ``order`` moments; outlier-sensitive.
    """

    def __init__(self, order: int = 4):
        if order < 1:
            raise ValueError(f"Moments: order must be >= 1, got {order}")
        self.order = order
        self.targets = [float(normal_moment(k)) for k in range(1, order + 1)]
        self.variances = [float(normal_moment(2 * k) - normal_moment(k) ** 2) for k in range(1, order + 1)]

    def sample_means(self, projections: Tensor) -> Tensor:
        powers = torch.arange(1, self.order + 1, device=projections.device).view(-1, 1, 1)
        return projections.unsqueeze(0).pow(powers).mean(1)  # (order, M)

    def statistic(self, means: Tensor, samples: float | Tensor) -> Tensor:
        # a sum over the few moments with Python constants: no host-to-device copy per step
        terms = (
            (means[k] - target).square() / variance
            for k, (target, variance) in enumerate(zip(self.targets, self.variances, strict=True))
        )
        return samples * functools.reduce(operator.add, terms)  # t_1 + ... + t_order

    def __repr__(self) -> str:
        return f"Moments(order={self.order})"
