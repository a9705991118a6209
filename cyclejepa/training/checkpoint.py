"""Atomic checkpoints, read back with ``weights_only=True``; damaged ones named, and skipped
when resuming."""

from __future__ import annotations

import io
import logging
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from cyclejepa.jsonio import writing
from cyclejepa.outputs import RunFolder

log = logging.getLogger(__name__)


class CheckpointDamaged(ValueError):
    """A checkpoint file that is truncated or corrupt (it fails its zip CRC checks)."""


class NonFiniteWeights(ValueError):
    """Weights that hold NaN or infinite values (a run that diverged), named with their source."""


def nonfinite_tensors(state: Mapping[str, Any] | list | tuple, prefix: str = "") -> list[str]:
    """Dotted names of the floating-point tensors in ``state`` (nested dicts and lists) holding NaN or inf."""
    items = state.items() if isinstance(state, Mapping) else enumerate(state)
    found = []
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, (Mapping, list, tuple)):
            found += nonfinite_tensors(value, name + ".")
        elif isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            found.append(name)
    return found


def require_finite(state: Mapping[str, Any], source: str) -> None:
    """Raise `NonFiniteWeights` naming ``source`` and the first `nonfinite_tensors` of ``state``."""
    bad = nonfinite_tensors(state)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise NonFiniteWeights(f"{source} holds non-finite (NaN or infinite) weights in {len(bad)} tensor(s): {shown}")


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write ``state`` to ``path`` atomically (a temporary file, then rename), serialised in memory first
    so that a failed write raises the system's `OSError` naming ``path``, not torch's opaque one."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    temporary = None
    try:
        with writing(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(handle, "wb") as stream:
                stream.write(buffer.getbuffer())
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, path)
    except BaseException:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a `save_checkpoint` file (tensors and plain values only); `CheckpointDamaged` names a damaged one."""
    path = Path(path)
    damage = _damage(path)
    if damage:
        raise CheckpointDamaged(f"checkpoint {path} is {damage}")
    return torch.load(path, map_location=map_location, weights_only=True)


def latest_checkpoint(run: RunFolder) -> Path | None:
    """The intact checkpoint of ``run`` with the highest step, or None; damaged later ones skipped with a warning."""
    for path in reversed(run.checkpoint_files()):
        damage = _damage(path)
        if not damage:
            return path
        log.warning("checkpoint %s is %s; falling back to the one before it", path, damage)
    return None


def _damage(path: Path) -> str | None:
    """What is wrong with a checkpoint file (None when its zip structure and CRCs are intact)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        return f"unreadable, truncated or not a checkpoint ({error})"
    return None if bad is None else f"corrupt (its part {bad} fails its CRC check)"
