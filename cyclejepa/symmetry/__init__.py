"""Group representations of cyclic coordinates on the latent space.

`groups` defines the registered symmetries (``u1``, ``torus``) and `bases` the bases
(``canonical``, ``householder``, ``stiefel``). The escnn cross-check lives in
`cyclejepa.symmetry.escnn_adapter` and is not named here (escnn is optional).

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from cyclejepa.registry import lazy_names

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
