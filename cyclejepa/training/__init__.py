"""Pre-training: trainer, schedule, checkpoints, RNG streams, distributed data parallel.

Names are imported on first use (PEP 562), so that importing one module does not import
its siblings and their dependencies.
"""

from cyclejepa.registry import lazy_names

_HOMES = {
    "latest_checkpoint": "checkpoint",
    "load_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "Distributed": "distributed",
    "process_group": "distributed",
    "RNGStreams": "rng",
    "STREAMS": "rng",
    "build_optimisers": "schedule",
    "learning_rate": "schedule",
    "JEPAObjective": "trainer",
    "Trainer": "trainer",
    "load_trained": "trainer",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
