"""Phase-equivariant transport of unit latent directions, in O(T·K) per record.

For tokens t, t' of one record with phases φ_t, φ_t' the transported cosine similarity is
c_R = ⟨ρ(φ_t' − φ_t) ẑ_t, ẑ_t'⟩ with ẑ = z / ‖z‖. Because ρ is an orthogonal homomorphism,
ρ(φ_t' − φ_t) = ρ(φ_t') ρ(φ_t)⁻¹ and c_R = ⟨w_t, w_t'⟩ with w_t = ρ(φ_t)⁻¹ ẑ_t. Over all ordered
pairs t ≠ t' of the n valid tokens,

    Σ_{t≠t'} ⟨w_t, w_t'⟩ = ‖Σ_t w_t‖² − Σ_t ‖w_t‖²,

so the mean over the n(n − 1) pairs costs one canonicalisation and two sums per record.

Token phases have shape (B, T) for one cyclic coordinate or (B, T, C) for C coordinates (a
point of the torus U(1)^C per token, e.g. cardiac and respiratory phase), with C the rank of
the symmetry's spectrum; (B, T, 1) and (B, T) give bit-identical results. A token takes part
when all its coordinates are finite.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from cyclejepa.registry import OBJECTIVES


class Canonicalizer(Protocol):
    """What the transport needs of a symmetry (a `PhaseSymmetry`): the group element of
    per-token phase coordinates, and ρ(g)⁻¹ z batched over leading dimensions."""

    def element(self, coordinates: Tensor) -> Tensor: ...

    def canonicalize(self, z: Tensor, g: Tensor) -> Tensor: ...


def valid_tokens(phi: Tensor) -> Tensor:
    """(B, T) mask of the tokens whose phase is defined (every coordinate finite)."""
    return torch.isfinite(phi).reshape(*phi.shape[:2], -1).all(-1)


def _unit_tokens(z: Tensor, phi: Tensor, symmetry: Canonicalizer, caller: str) -> tuple[Tensor, Tensor, Tensor]:
    """Unit directions ẑ (zero stays zero), the valid-token mask, and the group elements of the
    phases, undefined (non-finite) coordinates set to 0 so that no NaN reaches the trigonometry."""
    if z.dim() != 3 or phi.dim() not in (2, 3) or phi.shape[:2] != z.shape[:2]:
        raise ValueError(
            f"{caller}: z must have shape (B, T, K) and phi (B, T) or (B, T, C) (C cyclic "
            f"coordinates) with the same B and T; got z {tuple(z.shape)} and phi {tuple(phi.shape)}"
        )
    dtype = torch.promote_types(z.dtype, torch.float32)
    coordinates = phi if phi.dim() == 3 else phi.unsqueeze(-1)
    coordinates = torch.where(torch.isfinite(coordinates), coordinates, 0.0).to(dtype)
    try:
        elements = symmetry.element(coordinates)
    except ValueError as error:
        raise ValueError(
            f"{caller}: phi of shape {tuple(phi.shape)} has {coordinates.shape[-1]} phase "
            f"coordinate(s) per token, which the symmetry does not take: {error}"
        ) from None
    return F.normalize(z.to(dtype), dim=-1), valid_tokens(phi), elements


def _mean_pair_inner_product(w: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Mean of ⟨w_t, w_t'⟩ over the ordered pairs t ≠ t' of valid tokens, per record.

    Parameters
    ----------
    w
        Token vectors, shape (B, T, K).
    valid
        Mask of the tokens that take part, shape (B, T).

    Returns
    -------
    tuple of Tensor
        The means (B,), 0 where a record has fewer than two valid tokens, and the number of
        ordered pairs n(n − 1) (B,), int64.
    """
    w = w * valid.unsqueeze(-1)
    off_diagonal = w.sum(1).square().sum(-1) - w.square().sum((1, 2))
    count = valid.sum(1)
    pairs = count * (count - 1)
    return off_diagonal / pairs.clamp_min(1), pairs


@OBJECTIVES.register("transport")
def transport_loss(z: Tensor, phi: Tensor, symmetry: Canonicalizer) -> Tensor:
    """Transport loss: mean over records of 1 − (mean transported cosine over valid pairs).

    Parameters
    ----------
    z
        Projected tokens, shape (B, T, K).
    phi
        Token phases in radians, shape (B, T) or (B, T, C); NaN marks an undefined phase.
    symmetry
        Provides ``element`` and ``canonicalize(z, g)`` = ρ(g)⁻¹ z.

    Returns
    -------
    Tensor
        Scalar averaged over the records with at least two valid tokens; a zero attached to the
        graph of ``z`` when there are none. Never NaN.
    """
    unit, valid, phases = _unit_tokens(z, phi, symmetry, "transport_loss")
    cosine, pairs = _mean_pair_inner_product(symmetry.canonicalize(unit, phases), valid)
    counted = (pairs > 0).to(cosine.dtype)
    return ((1 - cosine) * counted).sum() / counted.sum().clamp_min(1)


def pairwise_similarities(z: Tensor, phi: Tensor, symmetry: Canonicalizer) -> tuple[Tensor, Tensor, Tensor]:
    """Per-record mean transported (c_R) and untransported (c_I) cosine similarity.

    Both are averaged over the same ordered pairs t ≠ t' of valid tokens.

    Returns
    -------
    tuple of Tensor
        ``c_R`` (B,), ``c_I`` (B,) (NaN for records with fewer than two valid tokens) and
        ``n_pairs`` (B,) int64, the number of ordered pairs n(n − 1).
    """
    unit, valid, phases = _unit_tokens(z, phi, symmetry, "pairwise_similarities")
    transported, pairs = _mean_pair_inner_product(symmetry.canonicalize(unit, phases), valid)
    untransported, _ = _mean_pair_inner_product(unit, valid)
    undefined = pairs == 0
    return (
        transported.masked_fill(undefined, float("nan")),
        untransported.masked_fill(undefined, float("nan")),
        pairs,
    )
