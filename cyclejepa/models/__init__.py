"""Backbones: patch MLP + causal conv encoder, projector, causal Transformer predictor.

Names are imported on first use (PEP 562).
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.models.encoder import CausalConv1d as CausalConv1d
    from cyclejepa.models.encoder import CausalConvEncoder as CausalConvEncoder
    from cyclejepa.models.encoder import ContextBlock as ContextBlock
    from cyclejepa.models.jepa import JEPAModel as JEPAModel
    from cyclejepa.models.jepa import build_model as build_model
    from cyclejepa.models.jepa import parameter_breakdown as parameter_breakdown
    from cyclejepa.models.jepa import winder_model as winder_model
    from cyclejepa.models.predictor import CausalTransformerPredictor as CausalTransformerPredictor
    from cyclejepa.models.predictor import PredictorBlock as PredictorBlock
    from cyclejepa.models.projector import ProjectorMLP as ProjectorMLP
    from cyclejepa.models.projector import TokenMLP as TokenMLP
    from cyclejepa.models.streaming import CausalPhaseTracker as CausalPhaseTracker
    from cyclejepa.models.streaming import StreamingEncoder as StreamingEncoder
    from cyclejepa.models.streaming import TransportMonitor as TransportMonitor

_HOMES = {
    "CausalConv1d": "encoder",
    "CausalConvEncoder": "encoder",
    "ContextBlock": "encoder",
    "JEPAModel": "jepa",
    "build_model": "jepa",
    "parameter_breakdown": "jepa",
    "winder_model": "jepa",
    "CausalTransformerPredictor": "predictor",
    "PredictorBlock": "predictor",
    "ProjectorMLP": "projector",
    "TokenMLP": "projector",
    "CausalPhaseTracker": "streaming",
    "StreamingEncoder": "streaming",
    "TransportMonitor": "streaming",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
