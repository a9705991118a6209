"""Where an experiment's stages put their files: the runs of its grid (arm × seed) and the
one layout of an output directory (`OutputFolder`, `RunFolder`). The runner writes them; the
evaluation, embed and export read them back.

    <output_dir>/
      config.yaml                 the resolved configuration (`OutputFolder.config`)
      cache/                      the preprocessing cache (unless data.cache_dir says otherwise)
      runs/<arm>-seed<seed>/      `RunFolder`: metrics.jsonl, checkpoints/step_XXXXXX.pt, done.json
      evaluation/<arm>-seed<seed>-step<step>.json
      report/                     report.md, report.json, figures/ (*.png)
      folds_used.jsonl            the folds each stage read (`cyclejepa.seal`)
      unseal_audit.jsonl          one line per use of the sealed fold
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cyclejepa.config import ArmConfig, ExperimentConfig
from cyclejepa.identity import training_identity


@dataclass(frozen=True)
class RunPlan:
    """One pre-training run of the grid."""

    arm: ArmConfig
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm.name}-seed{self.seed}"

    def identity(self, cfg: ExperimentConfig) -> dict:
        """What this run's weights depend on (`cyclejepa.identity.training_identity`)."""
        return training_identity(cfg, self.arm.transport_weight, self.seed)


@dataclass(frozen=True)
class RunFolder:
    """The files of one pre-training run (``runs/<arm>-seed<seed>/``, or a fine-tuning's folder)."""

    path: Path

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def done(self) -> Path:
        return self.path / "done.json"


@dataclass(frozen=True)
class OutputFolder:
    """The files of one experiment's output directory (the module docstring draws it)."""

    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def evaluation(self) -> Path:
        return self.path / "evaluation"

    @property
    def report(self) -> Path:
        return self.path / "report"

    def run(self, name: str) -> RunFolder:
        return RunFolder(self.path / "runs" / name)


def plan_runs(cfg: ExperimentConfig) -> list[RunPlan]:
    """Every arm × seed of the experiment, arm-major."""
    return [RunPlan(arm, seed) for arm in cfg.runs.arms for seed in cfg.runs.seeds]


def cache_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.data.cache_dir or Path(cfg.output_dir) / "cache")


def run_dir(cfg: ExperimentConfig, plan: RunPlan) -> Path:
    return run_folder(cfg, plan).path


def run_folder(cfg: ExperimentConfig, plan: RunPlan) -> RunFolder:
    return OutputFolder(Path(cfg.output_dir)).run(plan.name)
