"""Training objectives: latent prediction, the regularisers (SIGReg, VICReg) and phase transport."""

from cyclejepa.objectives.prediction import prediction_loss, sample_cutoffs
from cyclejepa.objectives.regulariser import Regulariser, SlicingTest, UnivariateStatistic, sample_directions, sliced_statistic
from cyclejepa.objectives.sigreg import SIGReg, sigreg
from cyclejepa.objectives.statistics import EppsPulley, Moments
from cyclejepa.objectives.transport import pairwise_similarities, transport_loss
from cyclejepa.objectives.vicreg import VICReg, vicreg

__all__ = [
    "EppsPulley",
    "Moments",
    "Regulariser",
    "SIGReg",
    "SlicingTest",
    "UnivariateStatistic",
    "VICReg",
    "pairwise_similarities",
    "prediction_loss",
    "sample_cutoffs",
    "sample_directions",
    "sigreg",
    "sliced_statistic",
    "transport_loss",
    "vicreg",
]
