"""The one layout of an experiment's output directory (`OutputFolder`, `RunFolder`):

<output_dir>/
  config.yaml                 the resolved configuration (`OutputFolder.config`)
  cache/                      the preprocessing cache (unless data.cache_dir says otherwise)
  runs/<arm>-seed<seed>/      `RunFolder`: metrics.jsonl, checkpoints/step_XXXXXX.pt, done.json
  evaluation/<arm>-seed<seed>-step<step>.json
  report/                     report.md, report.json, figures/ (*.png)
  folds_used.jsonl            the folds each stage read (`cyclejepa.pipeline.seal`)
  unseal_audit.jsonl          one line per use of the sealed fold
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_NAME = re.compile(r"step_(\d+)\.pt")
"""A checkpoint's file name: ``step_XXXXXX.pt``, the step zero-padded to six digits (more past 999,999)."""


@dataclass(frozen=True)
class RunFolder:
    """The files of one pre-training run (``runs/<arm>-seed<seed>/``, or a fine-tuning's folder)."""

    path: Path

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        """``checkpoints/step_XXXXXX.pt``."""
        return self.checkpoints / f"step_{step:06d}.pt"

    def checkpoint_files(self) -> list[Path]:
        """The run's checkpoint files, by step."""
        named = (path for path in self.checkpoints.glob("step_*.pt") if CHECKPOINT_NAME.fullmatch(path.name))
        return sorted(named, key=checkpoint_step)

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def done(self) -> Path:
        return self.path / "done.json"


def checkpoint_step(path: Path) -> int:
    """The step in a checkpoint's file name."""
    match = CHECKPOINT_NAME.fullmatch(path.name)
    if match is None:
        raise ValueError(f"{path} is not named as a checkpoint (step_<step>.pt)")
    return int(match[1])


@dataclass(frozen=True)
class OutputFolder:
    """The files of one experiment's output directory."""

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
