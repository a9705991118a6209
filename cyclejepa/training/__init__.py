"""Pre-training: trainer, schedule, checkpoints, RNG streams, distributed data parallel."""

from cyclejepa.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from cyclejepa.training.distributed import Distributed, init_distributed
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
    "init_distributed",
    "latest_checkpoint",
    "learning_rate",
    "load_checkpoint",
    "load_trained",
    "save_checkpoint",
]
