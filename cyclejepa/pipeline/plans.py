"""The runs of an experiment config (`RunPlan`: one arm × seed with its folder and identity)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from cyclejepa.config import ArmConfig, ExperimentConfig
from cyclejepa.jsonio import read_json
from cyclejepa.outputs import OutputFolder, RunFolder
from cyclejepa.pipeline.identity import training_identity


@dataclass(frozen=True)
class RunPlan:
    """One pre-training run: arm, seed, folder and (when first asked: it resolves the device) identity."""

    arm: ArmConfig
    seed: int
    folder: RunFolder
    experiment: ExperimentConfig = field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return run_name(self.arm, self.seed)

    @property
    def directory(self) -> Path:
        return self.folder.path

    @cached_property
    def identity(self) -> dict[str, Any]:
        return training_identity(self.experiment, self.arm.transport_weight, self.seed)

    def finished(self) -> bool:
        """Whether the run has its done.json, of the same identity."""
        done = self.folder.done
        return done.exists() and read_json(done).get("identity") == self.identity


def run_name(arm: ArmConfig, seed: int) -> str:
    """``<arm>-seed<seed>``: a run's folder and its name in every result."""
    return f"{arm.name}-seed{seed}"


def run_plan(cfg: ExperimentConfig, arm: ArmConfig, seed: int) -> RunPlan:
    return RunPlan(arm, seed, OutputFolder(Path(cfg.output_dir)).run(run_name(arm, seed)), cfg)


def plan_runs(cfg: ExperimentConfig) -> list[RunPlan]:
    """Every arm × seed of the experiment, arm-major."""
    return [run_plan(cfg, arm, seed) for arm in cfg.runs.arms for seed in cfg.runs.seeds]


def write_resolved_config(cfg: ExperimentConfig) -> Path:
    """Write ``config.yaml``: the config with every derived key filled."""
    path = OutputFolder(Path(cfg.output_dir)).config
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path
