"""Training objectives: latent prediction, SIGReg, VICReg and phase transport."""

from cyclejepa.objectives.prediction import prediction_loss, sample_cutoffs
from cyclejepa.objectives.sigreg import SIGReg, sample_directions, sigreg
from cyclejepa.objectives.transport import pairwise_similarities, transport_loss
from cyclejepa.objectives.vicreg import VICReg, vicreg

__all__ = [
    "SIGReg",
    "VICReg",
    "pairwise_similarities",
    "prediction_loss",
    "sample_cutoffs",
    "sample_directions",
    "sigreg",
    "transport_loss",
    "vicreg",
]
