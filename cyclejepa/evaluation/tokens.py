"""Tokens and phases as the evaluation's metrics read them: checked tensors, record chunks, coordinates.

Tokens are (N, T, K), phases (N, T) or (N, T, C) on a torus, numpy arrays or tensors. On a
torus, the spectrum's terms k·e_c (k ≥ 0) form a U(1) representation on which only φ_c acts
(`coordinate_view`), so every U(1) metric applies to it unchanged (`per_coordinate`); mixed terms
such as (1,1) belong to no single coordinate.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cyclejepa.objectives.transport import valid_tokens
from cyclejepa.symmetry import PhaseSymmetry, U1Symmetry

__all__ = [
    "ArrayLike",
    "CoordinateView",
    "RECORD_CHUNK",
    "coordinate_view",
    "per_coordinate",
    "record_chunks",
    "token_tensors",
]

ArrayLike = np.ndarray | Tensor

RECORD_CHUNK = 256
"""Records processed at once, so float64 copies of a corpus's tokens never exist whole."""


def token_tensors(tokens: ArrayLike, phases: ArrayLike, caller: str) -> tuple[Tensor, Tensor]:
    """Tokens (N, T, K) and phases (N, T) or (N, T, d) as tensors on one device (memmaps not copied)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        tokens = torch.as_tensor(tokens)
        phases = torch.as_tensor(phases, device=tokens.device)
    if tokens.dim() != 3 or phases.dim() not in (2, 3) or phases.shape[:2] != tokens.shape[:2]:
        raise ValueError(
            f"{caller}: tokens must have shape (N, T, K) and phases (N, T) or (N, T, C) with the "
            f"same N and T; "
            f"got tokens {tuple(tokens.shape)} and phases {tuple(phases.shape)}"
        )
    if not torch.isfinite(tokens).all():
        raise ValueError(f"{caller}: tokens contain NaN or infinite values")
    return tokens, phases


def record_chunks(n: int) -> Iterator[slice]:
    """Consecutive slices of at most `RECORD_CHUNK` records."""
    return (slice(start, start + RECORD_CHUNK) for start in range(0, n, RECORD_CHUNK))


@dataclass(frozen=True)
class CoordinateView:
    """The part of a torus representation on which only coordinate c acts: the canonical
    coordinates (N, T, K_c) of the terms k·e_c, φ_c (NaN where any coordinate is undefined) and
    their `U1Symmetry` (e.g. ``"4x0+8x1"``)."""

    tokens: Tensor
    phases: Tensor
    symmetry: U1Symmetry


def coordinate_view(tokens: ArrayLike, phases: ArrayLike, symmetry: PhaseSymmetry, coordinate: int) -> CoordinateView:
    """The `CoordinateView` of ``coordinate``; ValueError when no term k·e_c has k ≠ 0."""
    tokens, phases = token_tensors(tokens, phases, "coordinate_view")
    rank = symmetry.rank
    if phases.dim() != 3 or phases.shape[-1] != rank or not 0 <= coordinate < rank:
        raise ValueError(
            f"coordinate_view: coordinate {coordinate} of phases {tuple(phases.shape)} under "
            f"spectrum {symmetry.spectrum} (rank {rank}, phases (N, T, {rank}))"
        )
    terms = [
        (term, span)
        for term, span in zip(symmetry.spectrum.terms, symmetry.spectrum.term_slices, strict=True)
        if all(n == 0 for c, n in enumerate(term.vector) if c != coordinate)
    ]
    if all(term.is_invariant for term, _ in terms):
        raise ValueError(
            f"coordinate_view: spectrum {symmetry.spectrum} has no term acting on coordinate "
            f"{coordinate} alone (a frequency vector k·e_{coordinate}, k > 0)"
        )
    columns = torch.cat([torch.arange(span.start, span.stop) for _, span in terms])
    canonical = symmetry.basis.to_canonical(tokens.double())[..., columns.to(tokens.device)]
    spectrum = "+".join(f"{term.multiplicity}x{term.vector[coordinate]}" for term, _ in terms)
    own = torch.where(valid_tokens(phases), phases[..., coordinate].double(), float("nan"))
    return CoordinateView(canonical.detach(), own, U1Symmetry(spectrum).to(tokens.device))


def per_coordinate(
    metric: Callable[..., Any],
    tokens: ArrayLike,
    phases: ArrayLike,
    symmetry: PhaseSymmetry,
    names: list[str] | tuple[str, ...] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """``{name: metric(view.tokens, view.phases, view.symmetry, **options)}`` over each coordinate's
    view, e.g. ``per_coordinate(transport_gain, z, phi, torus, ("cardiac", "respiratory"))``."""
    names = [str(c) for c in range(symmetry.rank)] if names is None else list(names)
    if len(names) != symmetry.rank:
        raise ValueError(f"per_coordinate: {len(names)} names for a rank-{symmetry.rank} symmetry")
    views = (coordinate_view(tokens, phases, symmetry, c) for c in range(symmetry.rank))
    return {name: metric(v.tokens, v.phases, v.symmetry, **options) for name, v in zip(names, views, strict=True)}
