"""The built-in bases' typed options (`cyclejepa.symmetry.bases`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field

from cyclejepa.declarations.options import Declaration, NoOptions, Options


class HouseholderOptions(Options):
    """``reflections`` J (None: the dimension K, which reaches every orthogonal matrix of
    determinant (-1)^K)."""

    reflections: int | None = Field(None, ge=1)


class FixedBasisDeclaration(Declaration):
    Options = NoOptions


class HouseholderDeclaration(Declaration):
    Options = HouseholderOptions


DECLARED: Mapping[str, type[Declaration]] = MappingProxyType(
    {"canonical": FixedBasisDeclaration, "householder": HouseholderDeclaration, "stiefel": FixedBasisDeclaration}
)
"""Registered name -> declaration (`cyclejepa.registry.BASES`)."""
