"""Pre-training: trainer, schedule, checkpoints, RNG streams, distributed data parallel.

Names are imported on first use (PEP 562).
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:  # each name's type for type checkers and editors (`X as X`: re-exported); nothing imported at run time
    from cyclejepa.training.checkpoint import latest_checkpoint as latest_checkpoint
    from cyclejepa.training.checkpoint import load_checkpoint as load_checkpoint
    from cyclejepa.training.checkpoint import save_checkpoint as save_checkpoint
    from cyclejepa.training.distributed import Distributed as Distributed
    from cyclejepa.training.distributed import process_group as process_group
    from cyclejepa.training.rng import STREAMS as STREAMS
    from cyclejepa.training.rng import RNGStreams as RNGStreams
    from cyclejepa.training.schedule import build_optimisers as build_optimisers
    from cyclejepa.training.schedule import learning_rate as learning_rate
    from cyclejepa.training.trainer import JEPAObjective as JEPAObjective
    from cyclejepa.training.trainer import Trainer as Trainer
    from cyclejepa.training.trainer import initial_objective as initial_objective
    from cyclejepa.training.trainer import load_trained as load_trained

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
    "initial_objective": "trainer",
    "load_trained": "trainer",
}
"""Each public name and the submodule that defines it."""

__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
