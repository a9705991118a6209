"""Annotated real ECG sets for R-peak validation (in ``../shared/data`` beside the checkout, or
``$CYCLEJEPA_SHARED_DATA``; see its README), each with its scoring convention:

- ``mitbih-100``: MIT-BIH Arrhythmia record 100, lead MLII, 360 Hz, 30 min, ±50 ms;
- ``cpsc2021``: 18 two-lead CPSC 2021 records, 200 Hz, first channel, ±50 ms;
- ``cpsc2019``: 50 single-lead CPSC 2019 records, 500 Hz, 10 s, ±75 ms, beats in the first and
  last 0.5 s ignored (the challenge's official rule).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cyclejepa.phase.ecg.annotations import read_beat_annotations
from cyclejepa.phase.track import detection_rates, match_events

__all__ = [
    "ReferenceRecord",
    "ReferenceSet",
    "REFERENCE_SETS",
    "arterial_pulses",
    "shared_data_dir",
    "load_set",
    "score_set",
]


@dataclass(frozen=True)
class ReferenceRecord:
    """One annotated record: (leads, samples) signal in mV, rate, lead names, reference beats."""

    name: str
    signal: np.ndarray
    fs: float
    channel_names: list[str]
    reference: np.ndarray


@dataclass(frozen=True)
class ReferenceSet:
    """A set's scoring convention: matching window and the span ignored at both record ends."""

    name: str
    title: str
    tolerance_s: float
    ignore_edges_s: float = 0.0


REFERENCE_SETS = {
    "mitbih-100": ReferenceSet("mitbih-100", "MIT-BIH 100, MLII, ±50 ms", 0.050),
    "cpsc2021": ReferenceSet("cpsc2021", "CPSC 2021, 18 records, ±50 ms", 0.050),
    "cpsc2019": ReferenceSet("cpsc2019", "CPSC 2019, 50 records, ±75 ms, 0.5 s edges ignored", 0.075, 0.5),
}


def shared_data_dir() -> Path:
    """``$CYCLEJEPA_SHARED_DATA``, else ``shared/data`` beside the repository checkout."""
    env = os.environ.get("CYCLEJEPA_SHARED_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "shared" / "data"


def load_set(name: str, data_dir: str | os.PathLike | None = None) -> Iterator[ReferenceRecord]:
    """The records of reference set ``name``, read lazily; FileNotFoundError naming an absent folder."""
    root = Path(data_dir) if data_dir is not None else shared_data_dir()
    loaders: dict[str, Callable[[Path], Iterator[ReferenceRecord]]] = {
        "mitbih-100": _mitbih_100,
        "cpsc2021": _cpsc2021,
        "cpsc2019": _cpsc2019,
    }
    if name not in loaders:
        raise KeyError(f"unknown reference set {name!r}; known: {sorted(loaders)}")
    return loaders[name](root)


def _need(path: Path) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (the shared data folder, see its README)")
    return path


def _wfdb(path: Path, channels: list[str] | None = None) -> ReferenceRecord:
    from cyclejepa.data.samples import read_record

    record = read_record(path)
    names = list(record.names)
    rows = list(range(len(names))) if channels is None else [names.index(c) for c in channels]
    signal = np.ascontiguousarray(record.signal[rows], dtype=np.float64)
    return ReferenceRecord(path.name, signal, float(record.fs), [names[r] for r in rows], read_beat_annotations(path))


def _mitbih_100(root: Path) -> Iterator[ReferenceRecord]:
    yield _wfdb(_need(root / "physionet-samples" / "100.hea").with_suffix(""), ["MLII"])


def _cpsc2021(root: Path) -> Iterator[ReferenceRecord]:
    folder = _need(root / "rpeak-dev" / "cpsc2021")
    for header in sorted(folder.glob("*.hea")):
        record = _wfdb(header.with_suffix(""))
        yield ReferenceRecord(record.name, record.signal[:1], record.fs, record.channel_names[:1], record.reference)


def _cpsc2019(root: Path) -> Iterator[ReferenceRecord]:
    from cyclejepa.data.samples import read_matlab_variable

    folder = _need(root / "rpeak-dev" / "cpsc2019")
    for data in sorted((folder / "data").glob("data_*.mat")):
        number = data.stem.split("_")[1]
        ecg = read_matlab_variable(data, "ecg")[:, 0].astype(np.float64)
        reference = read_matlab_variable(folder / "ref" / f"R_{number}.mat", "R_peak").ravel().astype(np.int64)
        yield ReferenceRecord(data.stem, ecg[None], 500.0, ["ECG"], np.sort(reference))


def score_set(
    reference_set: ReferenceSet | str,
    results: list[tuple[ReferenceRecord, np.ndarray]],
) -> dict[str, float | int]:
    """``{"sensitivity", "ppv", "tp", "fn", "fp", "records"}`` of (record, detections) pairs,
    pooled over a set, matched one to one within its window (`match_events`)."""
    if isinstance(reference_set, str):
        reference_set = REFERENCE_SETS[reference_set]
    tp = fn = fp = 0
    for record, detected in results:
        detected = np.sort(np.asarray(detected, dtype=np.int64))
        reference = record.reference
        if reference_set.ignore_edges_s:
            edge = reference_set.ignore_edges_s * record.fs
            n = record.signal.shape[-1]
            detected, reference = (x[(x >= edge) & (x <= n - edge)] for x in (detected, reference))
        matched, _ = match_events(detected, reference, reference_set.tolerance_s * record.fs)
        tp += len(matched)
        fn += len(reference) - len(matched)
        fp += len(detected) - len(matched)
    return detection_rates(tp, fn, fp, records=len(results))


def arterial_pulses(pressure: np.ndarray, fs: float, min_interval_s: float = 0.25, min_prominence: float = 5.0) -> np.ndarray:
    """Systolic peaks of an arterial pressure (mmHg), one per beat: ≥ ``min_prominence`` above
    their surroundings (a dicrotic wave is not) and ≥ ``min_interval_s`` apart."""
    from scipy.signal import find_peaks

    pressure = np.asarray(pressure, dtype=np.float64)
    if pressure.ndim != 1 or not np.isfinite(pressure).all():
        raise ValueError(f"arterial pressure must be one finite channel, got shape {pressure.shape}")
    found, _ = find_peaks(pressure, distance=max(1, round(min_interval_s * fs)), prominence=min_prominence)
    return found.astype(np.int64)
