"""What the PTB-XL benchmark is given: `BenchmarkSpec`, built from an experiment config by
`cyclejepa.bench.commands` (its folds already passed through the seal, its pre-trained runs
already trained)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from cyclejepa.config import ModelConfig
from cyclejepa.training.finetune import FinetuneSettings


@dataclass(frozen=True)
class PretrainedRun:
    """One pre-trained run whose checkpoint the benchmark starts from."""

    name: str
    """The run's name (``<arm>-seed<seed>``): its cells' run."""
    arm: str
    """The arm the run belongs to."""
    checkpoint: Path
    """Its checkpoint at the benchmark step."""
    run_hash: str
    """The hash of the run's training identity (untrained: of its weights): a cell of other weights is recomputed."""
    untrained_seed: int | None = None
    """For the random baseline (``random-seed<s>``): the seed whose step-0 weights it is (no checkpoint)."""


@dataclass(frozen=True)
class Scoring:
    """How a cell's test logits are scored and its linear probe fitted."""

    probe_c: float | str
    """The probe's logistic-regression C, or ``"cv"`` (``evaluation.probe_c``)."""
    bootstrap: int
    """Patient-clustered bootstrap replicates of each interval (``evaluation.bootstrap``)."""
    seed: int
    """The bootstrap's seed (``evaluation.seed``)."""
    device: str
    """Where frozen features are computed (``evaluation.device``)."""


@dataclass(frozen=True)
class Training:
    """Where and how the fine-tuning and from-scratch networks are trained."""

    settings: FinetuneSettings
    """Optimisation of every fine-tuning and from-scratch run."""
    device: str
    """``training.device``."""
    precision: str
    """``training.precision``."""
    compile: bool | str
    """``training.compile``."""


@dataclass(frozen=True)
class BenchmarkSpec:
    """Every cell of the benchmark: tasks × protocols × runs × fractions × seeds, and where they go."""

    tasks: tuple[str, ...]
    """Statement tasks (`cyclejepa.data.ptbxl_tasks.TASKS`)."""
    protocols: tuple[str, ...]
    """Protocols (`cyclejepa.bench.ptbxl.run.PROTOCOLS`)."""
    fractions: tuple[float, ...]
    """Label fractions of the fit records, each in (0, 1]."""
    seeds: tuple[int, ...]
    """Fine-tuning seeds (head, batches, label subsets)."""
    step: int
    """The pre-trained checkpoint's step."""
    runs: tuple[PretrainedRun, ...]
    """The pre-trained runs, each at ``step``."""
    load_model: Callable[[Path, torch.device], nn.Module]
    """The trained model of a checkpoint, on a device."""
    random_runs: tuple[PretrainedRun, ...]
    """The random baseline's runs of the ``random-linear`` protocol: one per pre-training seed."""
    initial_model: Callable[[int, torch.device], nn.Module]
    """The untrained model a seed's runs start from (the trainer's step-0 weights), on a device."""
    model: ModelConfig
    """The network of the from-scratch cells (and their identity)."""
    scoring: Scoring
    """Probe and scores."""
    training: Training
    """Fine-tuning and from scratch."""
    out: Path
    """The benchmark's folder (``<output_dir>/benchmark/ptbxl``)."""
