"""Backbones: patch MLP + causal conv encoder, projector, causal Transformer predictor.

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from cyclejepa.registry import lazy_names

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
