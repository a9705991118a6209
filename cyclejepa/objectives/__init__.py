"""Training objectives: latent prediction, the regularisers (SIGReg, VICReg) and phase transport.

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from cyclejepa.registry import lazy_names

_HOMES = {
    "prediction_loss": "prediction",
    "sample_cutoffs": "prediction",
    "Regulariser": "regulariser",
    "SlicingTest": "regulariser",
    "UnivariateStatistic": "regulariser",
    "sample_directions": "regulariser",
    "sliced_statistic": "regulariser",
    "SIGReg": "sigreg",
    "sigreg": "sigreg",
    "EppsPulley": "statistics",
    "Moments": "statistics",
    "pairwise_similarities": "transport",
    "transport_loss": "transport",
    "VICReg": "vicreg",
    "vicreg": "vicreg",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
