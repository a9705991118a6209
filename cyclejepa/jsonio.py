"""Atomic JSON files holding numpy values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def write_json(path: str | Path, value: Any) -> Path:
    """Write ``value`` as JSON atomically (temporary file, then rename); numpy values become lists/scalars."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(value, indent=1, default=_plain))
    temporary.replace(path)
    return path


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
