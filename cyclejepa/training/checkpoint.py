"""Atomic checkpoints, read back with ``weights_only=True``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write ``state`` to ``path`` atomically: a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            torch.save(state, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint` (tensors and plain Python values only)."""
    return torch.load(Path(path), map_location=map_location, weights_only=True)


def checkpoint_path(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step_{step:06d}.pt"


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint with the highest step in ``directory``, or None."""
    found = sorted(Path(directory).glob("step_*.pt"))
    return found[-1] if found else None
