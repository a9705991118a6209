"""What building, naming and opening one cache needs (`CacheSpec`).

The experiment's stage that prepares the data builds it from the config
(`cyclejepa.pipeline.preparation.cache_spec`); a library user writes one by hand. A rate, shape
or fold left None is the dataset's own (`Dataset.geometry`, `Dataset.folds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CacheSpec"]


@dataclass(frozen=True)
class CacheSpec:
    """One cache: where it lives, the dataset it is built from, its rates and window, the phase
    provider that tags it and the folds its normalisation is fitted on."""

    directory: Path
    """The cache's folder."""
    dataset: str | None = None
    """The dataset's registered name (`cyclejepa.registry.DATASETS`); None: not compared on opening."""
    root: Path | None = None
    """The dataset's root (None: the dataset's own default)."""
    dataset_options: Mapping[str, Any] = field(default_factory=dict)
    """The keyword options the dataset is built with, recorded in the manifest."""
    cache_fs: float | None = None
    """The cache rate (Hz): records are resampled to it and phased at it."""
    decimation: int | None = None
    """The model rate's divisor: the model reads cache_fs / decimation."""
    token_patch: int | None = None
    """Samples per token at the model rate."""
    window_s: float | None = None
    """The window (the model's record length) in seconds."""
    phase_provider: str | None = None
    """The registered phase provider (None: the dataset's `Dataset.phase_provider`)."""
    phase_options: Mapping[str, Any] = field(default_factory=dict)
    """The phase provider's constructor options."""
    amplitude_limits: Mapping[str, float] = field(default_factory=dict)
    """Unit -> largest sample magnitude, over the defaults of `amplitude_limit`."""
    train_folds: tuple[int, ...] | None = None
    """The folds the normalisation statistics are fitted on (None: the dataset's ``folds.train``)."""
    workers: int = 1
    """Processes reading records in parallel while building (1: this process); not in the identity."""
    part_bytes: int | None = None
    """Largest size of one signal part file (None: `cyclejepa.data.cache.files.PART_BYTES`, 1 GiB);
    not in the identity."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        if self.root is not None:
            object.__setattr__(self, "root", Path(self.root))
        if self.train_folds is not None:
            object.__setattr__(self, "train_folds", tuple(self.train_folds))
