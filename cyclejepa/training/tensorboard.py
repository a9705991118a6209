"""TensorBoard event files of a training run, written beside its ``metrics.jsonl``.

`TensorBoardLog` is a trainer watcher (``Trainer.watchers``, called with the rows of every
flush of the metrics, on rank 0 only). Each step gets the scalars `TAGS` (the loss terms, the
learning rate, the gradient norm before clipping); every ``every`` steps, at the first flush
at or after a multiple of it (and at the first flush), the scalars ``diagnose(objective)``
returns, e.g. the held batch's effective rank and transport gain fraction
(`cyclejepa.evaluation.training_diagnostics.HeldBatch`, which the runner passes). Events written after the
checkpoint a run resumes from are dropped from view (``purge_step``), as the rows of
``metrics.jsonl`` after it are. Needs the ``tensorboard`` extra.
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
    """Writes a run's metrics rows, and periodic diagnostics, as TensorBoard scalars.

    Parameters
    ----------
    directory
        The run's folder (where ``metrics.jsonl`` lies); the event files go there.
    start_step
        The step training starts from (a resumed run's checkpoint step): later events of an
        earlier session are purged from view.
    diagnose
        objective (``.model``, ``.symmetry``) → {tag: value}; None for none.
    every
        Steps between diagnostics.
    """

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
