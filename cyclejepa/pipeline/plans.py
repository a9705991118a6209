"""The runs of an experiment config and where they live: `RunPlan` (one arm × seed),
`plan_runs`, and the folders `cyclejepa.outputs` lays out under ``output_dir``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from cyclejepa.config import ArmConfig, ExperimentConfig
from cyclejepa.jsonio import read_json
from cyclejepa.outputs import OutputFolder, RunFolder
from cyclejepa.pipeline.identity import training_identity


@dataclass(frozen=True)
class RunPlan:
    """One pre-training run of the grid."""

    arm: ArmConfig
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm.name}-seed{self.seed}"

    def identity(self, cfg: ExperimentConfig) -> dict:
        """What this run's weights depend on (`cyclejepa.pipeline.identity.training_identity`)."""
        return training_identity(cfg, self.arm.transport_weight, self.seed)


def plan_runs(cfg: ExperimentConfig) -> list[RunPlan]:
    """Every arm × seed of the experiment, arm-major."""
    return [RunPlan(arm, seed) for arm in cfg.runs.arms for seed in cfg.runs.seeds]


def cache_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.data.cache_dir or Path(cfg.output_dir) / "cache")


def run_dir(cfg: ExperimentConfig, plan: RunPlan) -> Path:
    return run_folder(cfg, plan).path


def run_folder(cfg: ExperimentConfig, plan: RunPlan) -> RunFolder:
    return OutputFolder(Path(cfg.output_dir)).run(plan.name)


def finished(cfg: ExperimentConfig, plan: RunPlan) -> bool:
    """Whether ``plan``'s run has its done.json, written for the same run identity."""
    done = run_folder(cfg, plan).done
    return done.exists() and read_json(done).get("identity") == plan.identity(cfg)


def write_resolved_config(cfg: ExperimentConfig) -> Path:
    """``config.yaml`` of the output directory: the config with every derived key filled."""
    path = OutputFolder(Path(cfg.output_dir)).config
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path
