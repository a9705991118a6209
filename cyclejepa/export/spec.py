"""What an export needs of its run besides the encoder: `ExportSpec` (config.json's run,
architecture and preprocessing facts) and `CardSpec` (the model card's training facts), built
by the export stage (`cyclejepa.pipeline.exporting.export_spec`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cyclejepa.evaluation.results import CheckpointResult

__all__ = ["CardSpec", "ExportSpec"]


@dataclass(frozen=True)
class CardSpec:
    """The training facts the model card states."""

    dataset: str
    """Registered name of the dataset the run read."""
    dataset_options: dict[str, Any]
    """The dataset's options (the card names them when there are any)."""
    data_licence: str
    """The dataset's licence, as it declares it (empty: undeclared)."""
    data_citation: str
    """How to cite the dataset, as it declares it (empty: undeclared)."""
    train_folds: tuple[int, ...]
    """Folds the encoder was pre-trained (and the normalisation measured) on."""
    eval_folds: tuple[int, ...]
    """Folds the run's evaluation measured on."""
    steps: int
    """Pre-training steps of the run."""
    batch_size: int
    """Pre-training batch size."""
    lr: float
    """The optimiser's learning rate."""
    augmentations: tuple[str, ...]
    """Names of the training augmentations, in order."""
    counts: dict[str, int]
    """The cache manifest's counts: ``records``, ``rejected``, ``kept``, ``qc_failed``."""


@dataclass(frozen=True)
class ExportSpec:
    """The run behind an exported encoder: its names, architecture, cache and evaluation."""

    experiment: str
    """The experiment's name."""
    run: str
    """The run's name, ``<arm>-seed<seed>``."""
    arm: str
    """The run's arm."""
    model_name: str
    """Registered name of the model."""
    encoder: dict[str, Any]
    """The encoder's constructor options (its config section as JSON)."""
    symmetry: dict[str, Any]
    """The phase action's config section as JSON (name, spectrum, basis, basis options)."""
    phase_convention: str
    """Where a token's phase is read (the phase section's ``convention``)."""
    phase_coordinates: list[Any]
    """The cache manifest's phase coordinates."""
    phase_revision: int
    """The phase detection revision the cache was built with."""
    cache_hash: str
    """The cache's config hash."""
    evaluation: CheckpointResult | None
    """The evaluation stage's result of the exported step, None when it was not evaluated."""
    card: CardSpec
    """The model card's training facts."""
