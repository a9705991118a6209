"""Admissible Gaussian targets: covariances invariant under the latent group action.

A target N(0, Sigma) is admissible when R(g) Sigma R(g)^T = Sigma for every g, i.e. when the
group action does not move it (paper, "Learning Equivariant Transport").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cyclejepa.symmetry.groups import PhaseSymmetry, U1Symmetry

# A multiple of pi by an irrational number (the golden angle) and square roots of square-free
# integers without 5: the components of each test element are rationally independent of each
# other and of pi, so no two distinct frequency vectors share an eigenvalue of R(g).
_GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
_INDEPENDENT = (1.0, 2.0, 3.0, 7.0, 11.0, 13.0, 17.0, 19.0)


def generic_elements(symmetry: PhaseSymmetry, count: int = 3) -> Tensor:
    """``count`` generic group elements of shape (count,) on U(1) or (count, rank) on a torus."""
    if symmetry.rank > len(_INDEPENDENT):
        raise ValueError(f"generic elements are defined up to rank {len(_INDEPENDENT)}")
    steps = torch.arange(1, count + 1, dtype=torch.float64).unsqueeze(-1)
    roots = torch.tensor(_INDEPENDENT[: symmetry.rank], dtype=torch.float64).sqrt()
    elements = torch.remainder(steps * _GOLDEN_ANGLE * roots, 2 * math.pi)
    return elements.squeeze(-1) if isinstance(symmetry, U1Symmetry) else elements


def is_admissible(sigma: Tensor, symmetry: PhaseSymmetry, atol: float = 1e-5) -> bool:
    """Whether R(g) Sigma R(g)^T = Sigma for all g, to ``atol`` (max absolute entry).

    Checked at three generic elements g (angles rationally independent of pi and of each other).
    One suffices in exact arithmetic: distinct frequency vectors n then have distinct eigenvalues
    e^{i<n,g>}, so commuting with that R(g) means preserving each isotypic component and commuting
    with its rotation, i.e. invariance under the whole (connected, abelian) torus. The others guard
    against near-coincidences <n - m, g> ~ 2 pi k, which would make a violation small in floating point.
    """
    k = symmetry.dim
    if sigma.shape != (k, k):
        raise ValueError(f"covariance has shape {tuple(sigma.shape)}; expected ({k}, {k})")
    rotations = symmetry.matrix(generic_elements(symmetry).to(sigma.dtype)).to(sigma)
    moved = rotations @ sigma @ rotations.mT
    return bool(torch.allclose(moved, sigma.expand_as(moved), rtol=0.0, atol=atol))


def admissible_covariance_projection(sigma: Tensor, symmetry: PhaseSymmetry) -> Tensor:
    """Group average (Reynolds operator) of R(g) Sigma R(g)^T, in closed form, batched over leading dims.

    In the canonical basis S = Q^T Sigma Q it keeps the entries between coordinates of equal
    frequency vector (the others average out) and, between two pairs a, b of one harmonic, the part
    P_ab = (S_ab + J S_ab J^T) / 2 of the 2 x 2 block in span{I, J}, J = [[0, -1], [1, 0]]: the
    paper's form S_0 + sum_n (A_n (x) I + C_n (x) J) with A_n = A_n^T and C_n = -C_n^T for symmetric Sigma.
    """
    k = symmetry.dim
    if sigma.shape[-2:] != (k, k):
        raise ValueError(f"covariance has shape {tuple(sigma.shape)}; expected (..., {k}, {k})")
    q = symmetry.basis.matrix()
    s = sigma if q is None else q.to(sigma).mT @ sigma @ q.to(sigma)
    frequencies = symmetry.frequencies.to(sigma.device)
    same_frequency = (frequencies.unsqueeze(1) == frequencies.unsqueeze(0)).all(-1)
    # J S J^T entrywise: (J S J^T)[k, l] = t_k t_l S[p_k, p_l] with t the pair signs, and
    # t = 1 on invariant coordinates, whose partner is themselves (so the average keeps S).
    partner = symmetry.partner.to(sigma.device)
    t = torch.where(symmetry.sign == 0, 1, symmetry.sign).to(sigma)
    turned = (t.unsqueeze(-1) * t) * s[..., partner, :][..., :, partner]
    averaged = (s + turned) / 2 * same_frequency
    return averaged if q is None else q.to(sigma) @ averaged @ q.to(sigma).mT
