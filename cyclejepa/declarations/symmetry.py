"""The built-in bases' typed options (`cyclejepa.symmetry.bases`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import Field

from cyclejepa.declarations.options import Declaration, declaration, NoOptions, Options


class HouseholderOptions(Options):
    """``reflections`` J (None: the dimension K, which reaches every orthogonal matrix of
    determinant (-1)^K)."""

    reflections: int | None = Field(None, ge=1)


DECLARED: Mapping[str, type[Declaration]] = MappingProxyType(
    {"canonical": declaration(NoOptions), "householder": declaration(HouseholderOptions), "stiefel": declaration(NoOptions)}
)
"""Registered name -> declaration (`cyclejepa.registry.BASES`)."""
