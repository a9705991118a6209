"""Backbones: patch MLP + causal conv encoder, projector, causal Transformer predictor."""

from cyclejepa.models.encoder import CausalConv1d, CausalConvEncoder, ContextBlock
from cyclejepa.models.jepa import JEPAModel, build_model, parameter_breakdown, winder_model
from cyclejepa.models.predictor import CausalTransformerPredictor, PredictorBlock
from cyclejepa.models.projector import ProjectorMLP, TokenMLP

__all__ = [
    "CausalConv1d",
    "CausalConvEncoder",
    "CausalTransformerPredictor",
    "ContextBlock",
    "JEPAModel",
    "PredictorBlock",
    "ProjectorMLP",
    "TokenMLP",
    "build_model",
    "parameter_breakdown",
    "winder_model",
]

from cyclejepa.models.streaming import CausalPhaseTracker, StreamingEncoder, TransportMonitor  # noqa: E402, I001

__all__ += ["CausalPhaseTracker", "StreamingEncoder", "TransportMonitor"]
