"""Reference beats of annotated ECG records (WFDB beat annotations)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cyclejepa.data.wfdb_format import read_annotation

# WFDB annotation codes that mark a beat (the rest are rhythm, signal-quality or comment labels).
BEAT_SYMBOLS = frozenset(["N", "L", "R", "B", "A", "a", "J", "S", "V", "r", "F", "e", "j", "n", "E", "/", "f", "Q", "?"])


def read_beat_annotations(path: str | Path, extension: str = "atr") -> np.ndarray:
    """Sample indices of the reference beats of a WFDB record (non-beat labels dropped)."""
    annotation = read_annotation(path, extension)
    is_beat = np.isin(np.asarray(annotation.symbol), list(BEAT_SYMBOLS))
    return np.asarray(annotation.sample, dtype=np.int64)[is_beat]
