"""TensorBoard event files of a training run, written beside its ``metrics.jsonl``.

`TensorBoardLog` is a trainer watcher (``Trainer.watchers``, rank 0). Each step gets the scalars
`TAGS`; at the first flush and the first at or after each multiple of ``every`` steps, those of
``diagnose(objective)`` (e.g. `cyclejepa.evaluation.training_diagnostics.HeldBatch`). Events after the checkpoint
a run resumes from are purged from view, as metrics rows are. Needs the ``tensorboard`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from torch import nn

__all__ = ["TAGS", "TensorBoardLog"]

TAGS = {
    "loss": "loss/total",
    "prediction": "loss/prediction",
    "regulariser": "loss/regulariser",
    "transport": "loss/transport",
    "lr": "train/learning_rate",
    "grad_norm": "train/grad_norm",
}
"""TensorBoard tag of each column of a metrics row."""


class TensorBoardLog:
    """Writes a run's metrics rows and diagnostics (``diagnose``: objective → {tag: value}) as
    TensorBoard scalars into its ``directory``; events after ``start_step`` are purged from view."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        start_step: int = 0,
        diagnose: Callable[[nn.Module], dict[str, float]] | None = None,
        every: int = 250,
    ):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError("training.tensorboard needs tensorboard: pip install 'cyclejepa[tensorboard]'") from None
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.writer = SummaryWriter(log_dir=str(directory), purge_step=start_step + 1)
        self.diagnose, self.every = diagnose, every
        self.diagnosed: int | None = None

    def __call__(self, trainer, records: list[dict[str, float]]) -> None:
        """Write ``records`` (metrics rows of consecutive steps) and, when due, the diagnostics."""
        for record in records:
            for column, tag in TAGS.items():
                self.writer.add_scalar(tag, record[column], record["step"])
        step = int(records[-1]["step"])
        if self.diagnose is not None and (self.diagnosed is None or step // self.every > self.diagnosed // self.every):
            for tag, value in self.diagnose(trainer.objective).items():
                self.writer.add_scalar(tag, value, step)
            self.diagnosed = step
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
