"""Orthogonal changes of basis Q between the learned latent and the canonical irrep basis.

The group acts as rho(g) = Q B(g) Q^T, where B(g) is block diagonal in the canonical basis.
Every basis exposes ``matrix()`` (Q, or None for the identity), ``to_canonical(z)`` (Q^T z)
and ``from_canonical(y)`` (Q y), batched over any leading dimensions.
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor, nn

from cyclejepa.registry import BASES


class Basis(nn.Module):
    """An orthogonal K x K change of basis; subclasses implement `matrix`."""

    def __init__(self, dim: int):
        super().__init__()
        if dim < 1:
            raise ValueError(f"basis dimension must be positive, got {dim}")
        self.dim = dim

    def matrix(self) -> Tensor | None:
        """Q as a (K, K) tensor, or None when Q is the identity."""
        raise NotImplementedError

    def to_canonical(self, z: Tensor) -> Tensor:
        """Q^T z for z of shape (..., K)."""
        q = self.matrix()
        return z if q is None else z @ q.to(z)

    def from_canonical(self, y: Tensor) -> Tensor:
        """Q y for y of shape (..., K)."""
        q = self.matrix()
        return y if q is None else y @ q.to(y).mT

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


@BASES.register("canonical")
class CanonicalBasis(Basis):
    """Q = I: no parameters and no matrix product (the paper's choice)."""

    def matrix(self) -> None:
        return None


@BASES.register("householder")
class HouseholderBasis(Basis):
    """Q = H(v_1) ... H(v_J) with H(v) = I - 2 v v^T / v^T v; orthogonal for any v_j.

    J = ``reflections`` (default K: by Cartan-Dieudonne, K reflections reach every orthogonal
    matrix of determinant (-1)^K); ``generator`` seeds the standard-normal v_j.
    """

    def __init__(self, dim: int, reflections: int | None = None, generator: torch.Generator | None = None):
        super().__init__(dim)
        count = dim if reflections is None else reflections
        if count < 1:
            raise ValueError(f"householder basis needs at least one reflection, got {count}")
        self.vectors = nn.Parameter(torch.randn(count, dim, generator=generator))

    def matrix(self) -> Tensor:
        """Q = I - U^T T^{-1} U with unit rows u_j of U and T = triu(U U^T, 1) + I / 2: the product
        of the J reflections in one triangular solve (the "UT transform", Joffrain et al., 2006)."""
        u = nn.functional.normalize(self.vectors, dim=-1)
        eye_j = torch.eye(u.shape[0], dtype=u.dtype, device=u.device)
        t = torch.triu(u @ u.mT, diagonal=1) + 0.5 * eye_j
        correction = u.mT @ torch.linalg.solve_triangular(t, u, upper=True)
        return torch.eye(self.dim, dtype=u.dtype, device=u.device) - correction

    def extra_repr(self) -> str:
        return f"dim={self.dim}, reflections={self.vectors.shape[0]}"


@BASES.register("stiefel")
class StiefelBasis(Basis):
    """Q as a geoopt `ManifoldParameter` on O(K), initialised to I: `EuclideanStiefel` with K x K
    points, whose QR retraction keeps Q orthogonal to rounding error. Step it with
    `geoopt.optim.RiemannianAdam` (`manifold_parameters`); a Euclidean optimiser leaves the manifold.
    """

    def __init__(self, dim: int):
        super().__init__(dim)
        try:
            import geoopt
        except ImportError as error:
            raise ImportError("the 'stiefel' basis needs geoopt: pip install geoopt") from error
        self.weight = geoopt.ManifoldParameter(torch.eye(dim), manifold=geoopt.EuclideanStiefel())

    def matrix(self) -> Tensor:
        return self.weight


def manifold_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The geoopt manifold parameters of ``module`` (for RiemannianAdam); never imports geoopt
    (if it has not been imported, no manifold parameter can exist)."""
    geoopt = sys.modules.get("geoopt")
    if geoopt is None:
        return []
    return [p for p in module.parameters() if isinstance(p, geoopt.ManifoldParameter)]
