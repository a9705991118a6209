"""A dataset for a new corpus: multiparameter WFDB records with an ECG lead and a RESP channel.

Registered as ``multiparameter`` once this module is imported, which a plugin entry point does
(``[project.entry-points."cyclejepa.plugins"]`` ``multiparameter = "multiparameter_dataset"``,
beside ``resp = "custom_phase_provider"``; see docs/cardio-respiratory.md). In a config::

    data:
      dataset: multiparameter
      root: ../shared/data/physionet-samples
      window_s: 16

Every ``*.hea`` record under ``root`` with an ECG lead (the first of ``ecg_leads`` it has) and
a ``RESP`` channel is indexed; a record without them is rejected while indexing (check
``channel_order``), one shorter than a segment too (``extent``), one whose channels are in other
units than ``mV`` and ``NU`` when read (``units``). A record is cut into segments of
``segment_s`` seconds (the cache cuts each segment into windows); the segments of a record
share its patient (one subject per record) and, with ``split: subject`` (the default), its fold
(`hash_fold` of the record name). ``split: segment`` folds each segment by its own name
(``v102s/3``): training and evaluation then share subjects, for a corpus too small to hold
out a subject. `read_path` reads a record file as `read` reads a segment (``cyclejepa embed``:
the same channels, units check and gap filling). The only label is trivial: ``part`` is ``early`` for the first half of a record's segments and
``late`` for the rest, so that the probes have a task; it says nothing clinical.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

import numpy as np

from cyclejepa.data.channels import channel_key
from cyclejepa.data.datasets import (
    Dataset, DatasetNotFound, Entry, LabelLevel, Record, RecordRejected, fill_gaps, hash_fold, in_units, sha256_of,
)  # fmt: skip
from cyclejepa.data.wfdb_format import HeaderError, WfdbRecord, read_header, read_record
from cyclejepa.registry import DATASETS

ECG_LEADS = ("II", "MLII", "MCL1", "I", "V", "V5")
"""ECG leads looked for, in order of preference (case-insensitive)."""


@DATASETS.register("multiparameter")
class Multiparameter(Dataset):
    """WFDB multiparameter records under ``root``, as channels ``ECG`` and ``RESP``.

    Parameters
    ----------
    root : the folder searched for ``*.hea`` headers (any depth), when the index is first needed.
    ecg_leads : ECG lead names to take as ``ECG``, first found wins.
    segment_s : the length of one entry (s); a multiple of the cache's window loses nothing more.
    max_gap_s : longest run of missing (NaN) samples filled by linear interpolation; a longer one
        rejects the segment (check ``non_finite``).
    split : ``"subject"`` (folds by record) or ``"segment"`` (folds by segment, within subjects).
    """

    channels = ("ECG", "RESP")
    units = ("mV", "NU")
    label_levels = (LabelLevel("part", "part", ("early", "late")),)
    fs = None  # 125 or 250 Hz, record by record
    cache_fs = 500.0  # the R-peak detector's rate; the breathing example sets its own (data.cache_fs)
    decimation = 5
    token_patch = 8

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        ecg_leads: list[str] | tuple[str, ...] = ECG_LEADS,
        segment_s: float = 64.0,
        max_gap_s: float = 0.5,
        split: str = "subject",
    ):
        super().__init__(root)
        if segment_s <= 0 or max_gap_s < 0:
            raise ValueError(f"segment_s must be > 0 and max_gap_s >= 0, got {segment_s}, {max_gap_s}")
        if split not in ("subject", "segment"):
            raise ValueError(f"split must be 'subject' or 'segment', got {split!r}")
        self.split, self.ecg_leads = split, tuple(ecg_leads)
        self.segment_s, self.max_gap_s = float(segment_s), float(max_gap_s)

    def __repr__(self) -> str:
        return f"Multiparameter({str(self.root)!r})"

    @cached_property
    def _headers(self) -> list[Path]:
        if self.root is None or not self.root.is_dir():
            raise DatasetNotFound(f"multiparameter folder {self.root} does not exist (set data.root)")
        return sorted(self.root.rglob("*.hea"))

    def _rows(self, names: list[str]) -> list[int] | None:
        """Rows of the ECG lead (the first of ``ecg_leads`` present) and RESP in ``names``, or None
        (names compared by the library's rule, `channel_key`: ``RESP,`` is RESP)."""
        keys = [channel_key(name) for name in names]
        ecg = next((keys.index(channel_key(lead)) for lead in self.ecg_leads if channel_key(lead) in keys), None)
        return None if ecg is None or "resp" not in keys else [ecg, keys.index("resp")]

    @cached_property
    def _index(self) -> tuple[list[Entry], dict[int, tuple[str, int]], list[RecordRejected]]:
        entries, sources, rejected = [], {}, []
        for patient, path in enumerate(self._headers, start=1):
            name = path.relative_to(self.root).with_suffix("").as_posix()
            try:
                header = read_header(path)
            except (HeaderError, OSError) as error:
                rejected.append(RecordRejected(name, "unreadable", f"header {path}: {error}"))
                continue
            if self._rows(list(header.names)) is None:
                detail = f"needs one of {list(self.ecg_leads)} and RESP, has {list(header.names)}"
                rejected.append(RecordRejected(name, "channel_order", detail))
                continue
            length = round(self.segment_s * header.fs)
            n = (header.samples or 0) // length
            if n == 0:
                detail = f"lasts {(header.samples or 0) / header.fs:.1f} s, shorter than one {self.segment_s:g} s segment"
                rejected.append(RecordRejected(name, "extent", detail))
                continue
            for k in range(n):
                number = len(entries) + 1
                part = "early" if k < n / 2 else "late"
                fold = hash_fold(name if self.split == "subject" else f"{name}/{k}")
                entries.append(Entry(number, f"{name}/{k}", patient, fold, labels={"part": frozenset([part])}))
                sources[number] = (name, k * length)
        return entries, sources, rejected

    def entries(self) -> list[Entry]:
        """The segments of every record with an ECG lead and RESP, in path order."""
        return self._index[0]

    def rejected(self) -> list[RecordRejected]:
        """Records without an ECG lead or RESP, shorter than a segment, or with an unreadable header."""
        return self._index[2]

    def fingerprint(self) -> dict:
        """The root, the options and one sha256 over every header."""
        return {
            "root": str(self.root.resolve()), "headers_sha256": sha256_of(self._headers, self.root),
            "ecg_leads": list(self.ecg_leads), "segment_s": self.segment_s, "max_gap_s": self.max_gap_s, "split": self.split,
        }  # fmt: skip

    def read(self, entry: Entry) -> Record:
        """One segment, ECG in mV and RESP in NU (check ``units``); short gaps filled (see ``max_gap_s``)."""
        name, start = self._index[1][entry.id]
        path = self.root / name
        try:
            record = read_record(path)
        except (OSError, ValueError) as error:
            raise RecordRejected(entry.name, "unreadable", f"signals of {path}: {error}") from error
        length = round(self.segment_s * record.fs)
        signal = self._signal(entry.name, record)[:, start : start + length]
        return self._filled(entry.id, entry.name, signal, record.fs)

    def read_path(self, path: str | os.PathLike) -> Record:
        """The record file at ``path`` (WFDB, no extension) as `read` reads a segment: the same
        channels, units check and gap filling, over the whole record."""
        record = read_record(path)
        return self._filled(str(path), str(path), self._signal(str(path), record), record.fs)

    def _signal(self, name: str, record: WfdbRecord) -> np.ndarray:
        """(ECG, RESP) of ``record`` in mV and NU; `RecordRejected` (``channel_order``, ``units``)."""
        rows = self._rows(list(record.names))
        if rows is None:
            raise RecordRejected(name, "channel_order", f"needs one of {list(self.ecg_leads)} and RESP, has {list(record.names)}")
        names, units = [record.names[r] for r in rows], [record.units[r] for r in rows]
        return in_units(name, record.signal[rows], names, units, self.units)

    def _filled(self, record_id: int | str, name: str, signal: np.ndarray, fs: float) -> Record:
        """``signal`` (ECG, RESP) with runs of missing samples up to ``max_gap_s`` interpolated;
        a longer one rejects it (check ``non_finite``, `fill_gaps`)."""
        filled = fill_gaps(name, signal, fs, self.max_gap_s, self.channels)
        return Record(record_id, filled.astype(np.float32), fs, self.channels)
