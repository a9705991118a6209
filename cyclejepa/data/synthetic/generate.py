"""Synthetic records and metadata in memory, a deterministic function of ``(records, seed)``."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from cyclejepa.data.synthetic.cohort import _plan
from cyclejepa.data.synthetic.waveforms import GAIN, _single_threaded_blas, _synthesise

CHUNK = 64  # records per waveform random stream (and per worker task)
MAX_RECORDS = 99_999  # ecg_id is written with five digits


class SyntheticRecords(NamedTuple):
    """Synthetic records in memory, exactly as `write_synthetic_corpus` stores them."""

    signals: np.ndarray  # (n, 12, 5000) float32 mV at 500 Hz, leads I, II, III, aVR … V6
    rpeaks: list[np.ndarray]  # R-peak sample indices (500 Hz) of each record
    metadata: list[dict[str, Any]]  # ptbxl_database.csv rows; scp_codes as a dict


def _check_arguments(records: int, seed: int) -> None:
    if not isinstance(records, (int, np.integer)) or not 1 <= records <= MAX_RECORDS:
        raise ValueError(f"records must be an integer in [1, {MAX_RECORDS}], got {records!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def _chunks(n: int) -> list[slice]:
    return [slice(start, min(start + CHUNK, n)) for start in range(0, n, CHUNK)]


def generate_metadata(records: int, seed: int = 0) -> list[dict[str, Any]]:
    """The ``ptbxl_database.csv`` rows `write_synthetic_corpus` writes, without signals: keyed by
    `DATABASE_COLUMNS`, ``scp_codes`` a ``{code: likelihood}`` dict, empty cells None."""
    _check_arguments(records, seed)
    return _plan(records, seed)[0]


def generate_records(records: int, seed: int = 0, *, noise: bool = True) -> SyntheticRecords:
    """Records in memory (240 kB each), equal to ``write_synthetic_corpus(dir, records, seed)``
    read back in mV; ``noise=False`` leaves out electrode noise, wander and mains (same beats)."""
    _check_arguments(records, seed)
    rows, plan = _plan(records, seed)
    signals, rpeaks = [], []
    with _single_threaded_blas():
        for k, chunk in enumerate(_chunks(records)):
            frames, peaks = _synthesise(plan.take(chunk), seed, k, noise)
            signals.append(frames.transpose(0, 2, 1).astype(np.float32) / np.float32(GAIN))
            rpeaks += peaks
    return SyntheticRecords(np.concatenate(signals), rpeaks, rows)
