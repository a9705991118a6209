"""Pre-training: trainer, schedule, checkpoints, RNG streams, distributed data parallel."""

from cyclejepa.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from cyclejepa.training.distributed import Distributed, process_group
from cyclejepa.training.rng import STREAMS, RNGStreams
from cyclejepa.training.schedule import build_optimisers, learning_rate
from cyclejepa.training.trainer import JEPAObjective, Trainer, load_trained

__all__ = [
    "STREAMS",
    "Distributed",
    "JEPAObjective",
    "RNGStreams",
    "Trainer",
    "build_optimisers",
    "latest_checkpoint",
    "learning_rate",
    "load_checkpoint",
    "load_trained",
    "process_group",
    "save_checkpoint",
]
