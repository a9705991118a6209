"""Group representations of cyclic coordinates on the latent space.

Importing this package registers the symmetries (``u1``, ``torus``) and the bases
(``canonical``, ``householder``, ``stiefel``). The escnn cross-check lives in
`cyclejepa.symmetry.escnn_adapter` and is not imported here (escnn is optional).
"""

from cyclejepa.symmetry.admissible import admissible_covariance_projection, is_admissible
from cyclejepa.symmetry.bases import (
    Basis,
    CanonicalBasis,
    HouseholderBasis,
    StiefelBasis,
    manifold_parameters,
)
from cyclejepa.symmetry.groups import PhaseSymmetry, TorusSymmetry, U1Symmetry
from cyclejepa.symmetry.spectrum import HarmonicSpectrum, SpectrumTerm

__all__ = [
    "Basis",
    "CanonicalBasis",
    "HarmonicSpectrum",
    "HouseholderBasis",
    "PhaseSymmetry",
    "SpectrumTerm",
    "StiefelBasis",
    "TorusSymmetry",
    "U1Symmetry",
    "admissible_covariance_projection",
    "is_admissible",
    "manifold_parameters",
]
