"""Phase-equivariant transport of unit latent directions, in O(T·K) per record.

For tokens t, t' of one record with phases φ_t, φ_t' the transported cosine similarity is
c_R = ⟨ρ(φ_t' − φ_t) ẑ_t, ẑ_t'⟩ with ẑ = z / ‖z‖. Because ρ is an orthogonal homomorphism,
ρ(φ_t' − φ_t) = ρ(φ_t') ρ(φ_t)⁻¹ and c_R = ⟨w_t, w_t'⟩ with w_t = ρ(φ_t)⁻¹ ẑ_t. Over all ordered
pairs t ≠ t' of the n valid tokens,

    Σ_{t≠t'} ⟨w_t, w_t'⟩ = ‖Σ_t w_t‖² − Σ_t ‖w_t‖²,

so the mean over the n(n − 1) pairs costs one canonicalisation and two sums per record.

Token phases are (B, T), or (B, T, C) for C cyclic coordinates (the rank of the symmetry's
spectrum; (B, T, 1) and (B, T) give bit-identical results); a token takes part when all its
coordinates are finite.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from cyclejepa.registry import OBJECTIVES


class Canonicalizer(Protocol):
    """What the transport needs of a symmetry (a `PhaseSymmetry`): ``element`` and ρ(g)⁻¹ z."""

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
    """Per record (B,): the mean of ⟨w_t, w_t'⟩ over ordered pairs t ≠ t' of ``valid`` (B, T) tokens
    of w (B, T, K), (‖Σ w‖² − Σ‖w‖²) / (n(n − 1)) (0 for n < 2), and the int64 pair count n(n − 1)."""
    w = w * valid.unsqueeze(-1)
    off_diagonal = w.sum(1).square().sum(-1) - w.square().sum((1, 2))
    count = valid.sum(1)
    pairs = count * (count - 1)
    return off_diagonal / pairs.clamp_min(1), pairs


@OBJECTIVES.register("transport")
def transport_loss(z: Tensor, phi: Tensor, symmetry: Canonicalizer) -> Tensor:
    """Mean over records with ≥ 2 valid tokens of 1 − c_R (mean transported cosine) of z (B, T, K)
    at phases ``phi`` (radians, NaN undefined); a zero on the graph of ``z`` when none. Never NaN."""
    unit, valid, phases = _unit_tokens(z, phi, symmetry, "transport_loss")
    cosine, pairs = _mean_pair_inner_product(symmetry.canonicalize(unit, phases), valid)
    counted = (pairs > 0).to(cosine.dtype)
    return ((1 - cosine) * counted).sum() / counted.sum().clamp_min(1)


def pairwise_similarities(z: Tensor, phi: Tensor, symmetry: Canonicalizer) -> tuple[Tensor, Tensor, Tensor]:
    """Per record (B,): mean transported (c_R) and untransported (c_I) cosine similarity over the
    ordered pairs of valid tokens (NaN with fewer than two), and the int64 pair count n(n − 1)."""
    unit, valid, phases = _unit_tokens(z, phi, symmetry, "pairwise_similarities")
    transported, pairs = _mean_pair_inner_product(symmetry.canonicalize(unit, phases), valid)
    untransported, _ = _mean_pair_inner_product(unit, valid)
    undefined = pairs == 0
    return (transported.masked_fill(undefined, float("nan")), untransported.masked_fill(undefined, float("nan")), pairs)
