"""Where an experiment's stages put their files: the runs of its grid (arm × seed) and their
folders under ``output_dir``. The runner writes them; the evaluation reads them back.

See `cyclejepa.runner` for the whole layout of an output directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cyclejepa.config import ArmConfig, ExperimentConfig


@dataclass(frozen=True)
class RunPlan:
    """One pre-training run of the grid."""

    arm: ArmConfig
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm.name}-seed{self.seed}"

    def identity(self, cfg: ExperimentConfig) -> dict:
        """What this run's weights depend on (`ExperimentConfig.training_identity`)."""
        return cfg.training_identity(self.arm.transport_weight, self.seed)


def plan_runs(cfg: ExperimentConfig) -> list[RunPlan]:
    """Every arm × seed of the experiment, arm-major."""
    return [RunPlan(arm, seed) for arm in cfg.runs.arms for seed in cfg.runs.seeds]


def cache_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.data.cache_dir or Path(cfg.output_dir) / "cache")


def run_dir(cfg: ExperimentConfig, plan: RunPlan) -> Path:
    return Path(cfg.output_dir) / "runs" / plan.name
