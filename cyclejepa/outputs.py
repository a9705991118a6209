"""Where an experiment's stages put their files: the runs of its grid (arm × seed) and the
one layout of an output directory (`OutputFolder`, `RunFolder`). The pipeline's stages write
them; the evaluation, embed and export read them back; `cyclejepa.pipeline.plans` names the
runs of a config.

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

from dataclasses import dataclass
from pathlib import Path


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
