"""What pre-training reads, built from the experiment config: the objective and one arm × seed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cyclejepa.config import AugmentationConfig, ModelConfig, ObjectivesConfig, OptimiserConfig, SymmetryConfig, TrainingConfig


@dataclass(frozen=True)
class ObjectiveSpec:
    """The sections the training objective (`JEPAObjective`) is built from."""

    model: ModelConfig
    symmetry: SymmetryConfig
    objectives: ObjectivesConfig
    precision: str
    """``training.precision``: float32, bf16 or auto (bf16 autocast on CUDA)."""


@dataclass(frozen=True)
class TrainingSpec:
    """One pre-training run: its objective, optimisation, data augmentation and identity."""

    objective: ObjectiveSpec
    optimiser: OptimiserConfig
    augmentations: tuple[AugmentationConfig, ...]
    """Applied to each batch, in order."""
    training: TrainingConfig
    """Steps, batch size, checkpoints, device, compile mode, non-finite step skipping."""
    transport_weight: float
    """λ_trans of the run's arm."""
    seed: int
    """The run's seed; every RNG stream derives from it."""
    identity: dict[str, Any]
    """What the run's weights depend on (``{key path: value}``), written into every checkpoint."""
    run_hash: str
    """The short hash of ``identity``."""
    directory: Path
    """The run's output folder (checkpoints, ``metrics.jsonl``)."""
