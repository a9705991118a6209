"""Group representations of cyclic coordinates on the latent space.

`groups` defines the symmetries (``u1``, ``torus``), `bases` the bases (``canonical``,
``householder``, ``stiefel``); the optional escnn cross-check (`escnn_adapter`) is not named
here. Names are imported on first use (PEP 562).
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.symmetry.admissible import admissible_covariance_projection as admissible_covariance_projection
    from cyclejepa.symmetry.admissible import is_admissible as is_admissible
    from cyclejepa.symmetry.bases import Basis as Basis
    from cyclejepa.symmetry.bases import CanonicalBasis as CanonicalBasis
    from cyclejepa.symmetry.bases import HouseholderBasis as HouseholderBasis
    from cyclejepa.symmetry.bases import StiefelBasis as StiefelBasis
    from cyclejepa.symmetry.bases import manifold_parameters as manifold_parameters
    from cyclejepa.symmetry.groups import PhaseSymmetry as PhaseSymmetry
    from cyclejepa.symmetry.groups import TorusSymmetry as TorusSymmetry
    from cyclejepa.symmetry.groups import U1Symmetry as U1Symmetry
    from cyclejepa.symmetry.spectrum import HarmonicSpectrum as HarmonicSpectrum
    from cyclejepa.symmetry.spectrum import SpectrumTerm as SpectrumTerm

_HOMES = {
    "admissible_covariance_projection": "admissible",
    "is_admissible": "admissible",
    "Basis": "bases",
    "CanonicalBasis": "bases",
    "HouseholderBasis": "bases",
    "StiefelBasis": "bases",
    "manifold_parameters": "bases",
    "PhaseSymmetry": "groups",
    "TorusSymmetry": "groups",
    "U1Symmetry": "groups",
    "HarmonicSpectrum": "spectrum",
    "SpectrumTerm": "spectrum",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
