"""What the throughput benchmark reads: `ThroughputSpec`, built from the experiment config by
`cyclejepa.bench.commands.throughput_spec`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from cyclejepa.training.spec import ObjectiveSpec, TrainingSpec


@dataclass(frozen=True)
class ThroughputSpec:
    """The configured model, objective and trainers the benchmark times, on one device."""

    device: torch.device
    """Where every section runs; each trainer's spec names it as ``training.device``."""
    objective: ObjectiveSpec
    """The model, symmetry and objectives the parts (transport, SIGReg, inference) are built from."""
    batch_size: int
    """``training.batch_size``: records per training step and per timed transport and SIGReg call."""
    channels: int
    """Input channels of the model (``model.encoder.leads``) and of the synthetic training arrays."""
    tokens: int
    """Tokens per record, T = `SAMPLES` / ``model.encoder.patch``."""
    trainers: Mapping[str, TrainingSpec]
    """Per variant of `VARIANTS`: the trainer's spec with the variant's ``training.precision`` and
    ``training.compile``, seed 0, λ_trans = 1 and no identity (timed, never saved nor resumed); its
    ``directory`` is replaced by a temporary folder per timed trainer."""
    ensemble: TrainingSpec
    """The spec of the ensemble section's runs, eager in the product precision (bf16 on CUDA,
    float32 on the CPU); seed, λ_trans and folder are set per run."""
    config_hash: str
    """The short hash of the whole parsed config, reported with the figures."""
    config_overrides: dict[str, Any]
    """The config as given (empty: the paper's), reported with the figures."""
