"""Backbones: patch MLP + causal conv encoder, projector, causal Transformer predictor.

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.models.encoder import (
        CausalConv1d as CausalConv1d,
        CausalConvEncoder as CausalConvEncoder,
        ContextBlock as ContextBlock,
    )
    from cyclejepa.models.jepa import (
        JEPAModel as JEPAModel,
        build_model as build_model,
        parameter_breakdown as parameter_breakdown,
        winder_model as winder_model,
    )
    from cyclejepa.models.predictor import (
        CausalTransformerPredictor as CausalTransformerPredictor,
        PredictorBlock as PredictorBlock,
    )
    from cyclejepa.models.projector import ProjectorMLP as ProjectorMLP, TokenMLP as TokenMLP
    from cyclejepa.models.streaming import (
        CausalPhaseTracker as CausalPhaseTracker,
        StreamingEncoder as StreamingEncoder,
        TransportMonitor as TransportMonitor,
    )

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
