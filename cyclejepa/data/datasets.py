"""The dataset interface: what the cache, the runner and the evaluation need from a corpus.

A dataset is a class registered in `cyclejepa.registry.DATASETS` and built from the config as
``DATASETS.build(data.dataset, root=data.root, **data.options)``. It lists its records as
`Entry` rows (integer id, name, patient, fold 1..10, age, sex, multi-label targets per
`LabelLevel`), reads one record as a `Record` (signal in mV, rate, channel names) and reports
what it rejected while indexing. Reading a record verifies it: a record that fails a check
raises `RecordRejected` naming the check, and the cache logs it to rejections.csv.

Everything after reading is generic (`conform`): the dataset's channels are picked by name,
the signal resampled to the cache's rate and cut into windows of the model's length
(`cyclejepa.data.preprocess.cut_windows`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.preprocess import resample

__all__ = [
    "Dataset", "Entry", "LabelLevel", "Record", "RecordRejected", "conform", "hash_fold", "sha256_of",
]  # fmt: skip


class RecordRejected(Exception):
    """A record failed a verification check.

    Attributes
    ----------
    record_id : the record's id (PTB-XL: the ecg_id, the file name when read without one)
    check : what failed (PTB-XL's are `cyclejepa.data.ptbxl.CHECKS`; ``extent`` also when a
        record is shorter than one window)
    detail : what was found
    """

    def __init__(self, record_id: object, check: str, detail: str):
        self.record_id, self.check, self.detail = record_id, check, detail
        super().__init__(f"record {record_id} rejected ({check}): {detail}")

    def __reduce__(self):  # picklable across worker processes
        return type(self), (self.record_id, self.check, self.detail)


@dataclass(frozen=True)
class Record:
    """One verified record: ``signal`` (channels, samples) float32 in mV at ``fs`` Hz."""

    id: int
    signal: np.ndarray
    fs: float
    channels: tuple[str, ...]


@dataclass(frozen=True)
class LabelLevel:
    """A multi-label vocabulary: meta.csv holds one 0/1 column ``{prefix}_{class}`` per class."""

    name: str
    prefix: str
    classes: tuple[str, ...]

    def columns(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}_{c}" for c in self.classes)


@dataclass(frozen=True)
class Entry:
    """One record of a dataset's index.

    ``id`` is a positive integer unique in the dataset (the cache's ``ecg_id``), ``name`` what
    the source calls the record, ``fold`` 1..10 (all records of one patient in one fold), ``age``
    NaN when unknown, ``sex`` 0 male, 1 female, -1 unknown; ``labels`` maps a `LabelLevel` name
    to the classes present.
    """

    id: int
    name: str
    patient_id: int
    fold: int
    age: float = float("nan")
    sex: int = -1
    labels: dict[str, frozenset[str]] = field(default_factory=dict)


class Dataset:
    """Base of a registered dataset (subclass it and register it in `DATASETS`).

    A subclass sets `channels` and `label_levels` and implements `entries` and `read`; it
    overrides `rejected` when indexing can reject records and `fingerprint` with what its
    contents depend on (the cache is rebuilt when that changes).
    """

    channels: tuple[str, ...] = ()
    """The channels the cache keeps, in this order (matched to a record's names case-insensitively)."""
    label_levels: tuple[LabelLevel, ...] = ()

    def entries(self) -> list[Entry]:
        """Every indexed record, in a fixed order."""
        raise NotImplementedError

    def read(self, entry: Entry) -> Record:
        """The verified record of ``entry``; raises `RecordRejected` naming the failed check."""
        raise NotImplementedError

    def rejected(self) -> list[RecordRejected]:
        """Records (or metadata rows) rejected while indexing, before any signal is read."""
        return []

    def fingerprint(self) -> dict[str, Any]:
        """What the dataset's contents depend on, JSON-serialisable (part of the cache hash)."""
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}"}


def conform(record: Record, channels: tuple[str, ...], fs: float) -> np.ndarray:
    """``record``'s ``channels`` (by name, case-insensitive) resampled to ``fs``: (C, L) float32.

    Raises `RecordRejected`: ``lead_order`` when a channel is missing, ``non_finite`` when a
    sample is not finite.
    """
    lower = [name.lower() for name in record.channels]
    missing = [c for c in channels if c.lower() not in lower]
    if missing:
        raise RecordRejected(record.id, "lead_order", f"no channel {missing} (the record has {list(record.channels)})")
    x = np.asarray(record.signal)[[lower.index(c.lower()) for c in channels]]
    bad = [channels[i] for i in np.flatnonzero(~np.isfinite(x).all(axis=1))]
    if bad:
        raise RecordRejected(record.id, "non_finite", f"non-finite samples on {bad}")
    return resample(x.astype(np.float32), record.fs, fs)


def hash_fold(key: str) -> int:
    """A deterministic fold 1..10 of ``key`` (a patient or record name): sha256 modulo 10, plus 1."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) % 10 + 1


def sha256_of(paths: list[Path], root: Path | None = None) -> str:
    """One sha256 over the names (relative to ``root``) and contents of ``paths``."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(os.fsencode(path.relative_to(root) if root else path) + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()
