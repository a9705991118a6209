"""A dataset of pulse waves: the PLETH (or ABP) channel of WFDB records, at the channel's own rate.

Registered as ``pulse-wave`` once this module is imported, which a plugin entry point does
(``[project.entry-points."cyclejepa.plugins"]`` ``pulse-wave = "pulse_wave_dataset"``; see
docs/own-signal.md). In a config::

    data:
      dataset: pulse-wave
      root: ../shared/data/physionet-samples
      options: {channels: [PLETH]}

Every ``*.hea`` record under ``root`` that holds the channels (case-insensitive) is indexed, one
subject per record, no labels; a record without them is rejected while indexing (check
``lead_order``). A record is one entry, folded by `hash_fold` of its name, or, with
``segment_s``, cut into entries of that length (``a103l/0``, ``a103l/1``, ...) folded by
record (``split: subject``) or each by its own name (``split: segment``: training and evaluation
then share subjects, for a corpus too small to hold one out). No fold is sealed. Reading a
record (`read`, and `read_path` for a record file given by its path, as ``cyclejepa embed``
reads one):

- each channel at its own rate: a multi-rate record (``mixedsignals``: ECG at 250 Hz, pulse
  waves at 125 Hz, in 62.5 Hz frames) is read frame by frame, not averaged to the frame rate;
  channels of one record at different rates are refused (``sampling_rate``);
- ADC wrap-around undone (`cyclejepa.data.wfdb_folder.unwrap`): a pulse wave beyond its 12-bit
  range wraps to the other end (``v102s``'s PLETH does, about 1,000 times); only a step where the
  signal runs into one limit and comes back from the other is a wrap;
- each channel in its declared unit (`UNITS`: PLETH ``NU``, ABP ``mmHg``; another is refused,
  ``units``);
- missing samples at either end cut off, runs of missing samples up to ``max_gap_s`` inside
  interpolated; a longer one rejects the record (``non_finite``).

The cache resamples to 125 Hz (pulse timing to 8 ms) and the model reads 25 Hz, the pulse
wave's band, in 80 ms tokens (about seven per beat) of 10 s windows.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import cached_property
from pathlib import Path

import numpy as np

from cyclejepa.data.datasets import (
    Dataset, DatasetNotFound, Entry, FoldProtocol, Record, RecordRejected, fill_gaps, hash_fold, in_units, sha256_of,
)  # fmt: skip
from cyclejepa.data.wfdb_folder import adc_limits, unwrap
from cyclejepa.data.wfdb_format import HeaderError, WfdbHeader, read_header, resolve_inside
from cyclejepa.registry import DATASETS

UNITS = {"PLETH": "NU", "ABP": "mmHg"}
"""The unit each pulse-wave channel is declared in."""


@DATASETS.register("pulse-wave")
class PulseWaves(Dataset):
    """WFDB records under ``root`` with pulse-wave channels, one entry per record.

    Parameters
    ----------
    root : the folder searched for ``*.hea`` headers (any depth), when the index is first needed.
    channels : the channels kept, from `UNITS` (``PLETH``, ``ABP``).
    max_gap_s : longest run of missing samples filled by linear interpolation.
    segment_s : the length of one entry in seconds (None: a whole record).
    split : ``"subject"`` (folds by record) or ``"segment"`` (folds by segment).
    """

    channels = ("PLETH",)
    units = ("NU",)
    fs = None  # 125 or 250 Hz, record by record
    cache_fs = 125.0
    decimation = 5
    token_patch = 2
    window_s = 10.0
    folds = FoldProtocol(sealed=())

    def __init__(self, root: str | os.PathLike | None = None, channels: list[str] | tuple[str, ...] = ("PLETH",),
                 max_gap_s: float = 0.5, segment_s: float | None = None, split: str = "subject"):  # fmt: skip
        super().__init__(root)
        unknown = [c for c in channels if c.upper() not in UNITS]
        if unknown or not channels:
            raise ValueError(f"channels must be some of {', '.join(UNITS)} (their units are declared), got {list(channels)}")
        if max_gap_s < 0 or (segment_s is not None and segment_s <= 0) or split not in ("subject", "segment"):
            raise ValueError(f"need max_gap_s >= 0, segment_s > 0 or None, split 'subject' or 'segment'; got "
                             f"{max_gap_s}, {segment_s}, {split!r}")  # fmt: skip
        self.channels = tuple(channels)
        self.units = tuple(UNITS[c.upper()] for c in self.channels)
        self.max_gap_s, self.segment_s, self.split = float(max_gap_s), segment_s, split

    def __repr__(self) -> str:
        return f"PulseWaves({str(self.root)!r}, channels={list(self.channels)})"

    @cached_property
    def _headers(self) -> list[Path]:
        if self.root is None or not self.root.is_dir():
            raise DatasetNotFound(f"pulse-wave folder {self.root} does not exist (set data.root)")
        return sorted(self.root.rglob("*.hea"))

    @cached_property
    def _index(self) -> tuple[list[Entry], dict[int, tuple[str, int]], list[RecordRejected]]:
        entries, segments, rejected = [], {}, []
        for patient, path in enumerate(self._headers, start=1):
            name = path.relative_to(self.root).with_suffix("").as_posix()
            try:
                header = read_header(path)
                self._rows(name, header)
            except (HeaderError, OSError) as error:
                rejected.append(RecordRejected(name, "unreadable", f"header {path}: {error}"))
                continue
            except RecordRejected as rejection:
                rejected.append(rejection)
                continue
            seconds = (header.samples or 0) / header.fs
            count = int(seconds // self.segment_s) if self.segment_s else 1
            for k in range(count):
                label = f"{name}/{k}" if self.segment_s else name
                fold = hash_fold(label if self.split == "segment" else name)
                entries.append(Entry(len(entries) + 1, label, patient, fold))
                segments[len(entries)] = (name, k)
            if not count:
                rejected.append(RecordRejected(name, "extent", f"lasts {seconds:.1f} s, shorter than one {self.segment_s:g} s segment"))
        return entries, segments, rejected

    def entries(self) -> list[Entry]:
        """Every record with the channels (or its segments), in path order."""
        return self._index[0]

    def rejected(self) -> list[RecordRejected]:
        """Records without the channels, with an unreadable header, or shorter than a segment."""
        return self._index[2]

    def fingerprint(self) -> dict:
        """The root, the options and one sha256 over every header."""
        headers = sha256_of(self._headers, self.root)
        return {"root": str(self.root.resolve()), "headers_sha256": headers, "channels": list(self.channels),
                "max_gap_s": self.max_gap_s, "segment_s": self.segment_s, "split": self.split}  # fmt: skip

    def read(self, entry: Entry) -> Record:
        """The record of ``entry`` (see the module docstring), or its ``segment_s`` segment."""
        name, k = self._index[1][entry.id]
        record = self._read(self.root / name, entry.name)
        if self.segment_s:
            length = round(self.segment_s * record.fs)
            record = replace(record, signal=record.signal[:, k * length : (k + 1) * length])
        return replace(record, id=entry.id)

    def read_path(self, path: str | os.PathLike) -> Record:
        """The record file at ``path`` (WFDB, no extension), read as `read` reads an entry."""
        path = Path(path)
        if not path.with_name(path.name + ".hea").is_file():
            raise FileNotFoundError(f"WFDB record {str(path)!r} not found (give the path without extension)")
        return self._read(path, str(path))

    def _rows(self, name: str, header: WfdbHeader) -> list[int]:
        """The header's rows of the channels; `RecordRejected` (``lead_order``) naming what it has."""
        lower = [n.lower() for n in header.names]
        missing = [c for c in self.channels if c.lower() not in lower]
        if missing:
            raise RecordRejected(name, "lead_order", f"no channel {missing} (the record has {list(header.names)})")
        return [lower.index(c.lower()) for c in self.channels]

    def _read(self, path: Path, name: str) -> Record:
        import wfdb

        try:
            header = read_header(path)
            rows = self._rows(name, header)
            for row in rows:
                resolve_inside(path.parent, header.signals[row].file, path.parent)
            data = wfdb.rdrecord(str(path), channels=rows, smooth_frames=False)
        except (HeaderError, OSError, ValueError) as error:
            raise RecordRejected(name, "unreadable", f"{path}: {error}") from error
        specs = [header.signals[row] for row in rows]
        rates = sorted({header.fs * spec.samples_per_frame for spec in specs})
        if len(rates) > 1:
            raise RecordRejected(name, "sampling_rate", f"channels {list(self.channels)} at different rates {rates} Hz")
        signal = np.stack([unwrap(np.asarray(x, dtype=np.float64), *adc_limits(spec)) for x, spec in zip(data.e_p_signal, specs)])
        units = [spec.units if spec.units_stated else None for spec in specs]
        signal = in_units(name, signal, [spec.name for spec in specs], units, self.units)
        present = np.flatnonzero(np.isfinite(signal).all(axis=0))
        if not len(present):
            raise RecordRejected(name, "non_finite", f"no sample with every channel of {list(self.channels)} present")
        signal = fill_gaps(name, signal[:, present[0] : present[-1] + 1], rates[0], self.max_gap_s, self.channels)
        return Record(name, signal.astype(np.float32), rates[0], self.channels)

