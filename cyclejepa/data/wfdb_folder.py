"""Any folder of WFDB records as a dataset, registered as ``wfdb``: no labels, no metadata table.

In a config::

    data:
      dataset: wfdb
      root: path/to/records
      options: {channels: [PLETH]}
    phase: {provider: pulse}

Every ``*.hea`` under ``root`` (any depth) is a record named by its relative path without
extension (``site2/rec7``). Indexing rejects, by name and check, a record lacking a ``channels``
name or matching one twice (``channel_order``; `match_channels`: ``PLETH`` finds ``PLETH,``),
one slower than the phase provider reads (``sampling_rate``, `Dataset.require_rate`; never
upsampled), and one in a unit not convertible to the corpus's (``units``; voltages convert).

Reading (`read`, `read_path`): samples through `read_samples`; each channel at its own rate,
resampled to the highest; ADC wrap-around undone (`unwrap`; ``unwrap: off`` keeps it); missing
ends cut, inner gaps up to ``max_gap_s`` interpolated, longer ones rejected (``non_finite``).

Folds: `hash_fold` of the record name, or of its subject from ``subjects.csv`` (``record,subject``)
so one person never sits on both sides; an unlisted record is rejected (``subject``). No fold
is sealed. Rates come from the phase provider's ``cycle_band_hz`` (`band_rates`).

Preparation (`Dataset.preparation`): with a cycle band (low, high), ``"auto"`` is a zero-phase
high-pass at low / 2 (the fundamental keeps 94 % of its power), the corpus-wide z-score, and
1.5 / low seconds dropped at the start; without a band, no filter and no drop
(docs/your-signal.md).
"""

from __future__ import annotations

import csv
import os
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.channels import ChannelError, channel_key, match_channels
from cyclejepa.data.datasets import (
    MV_PER_UNIT,
    Dataset,
    DatasetNotFound,
    Entry,
    Record,
    RecordRejected,
    as_float32,
    fill_gaps,
    hash_fold,
    in_units,
    sha256_file,
    sha256_of,
)
from cyclejepa.data.preprocess import SCOPES, SignalPreparation, resample
from cyclejepa.data.samples import SampleError, read_samples
from cyclejepa.data.wfdb_format import HeaderError, SignalSpec, WfdbHeader, read_header, resolve_inside
from cyclejepa.declarations.datasets import WfdbFolderDeclaration
from cyclejepa.registry import DATASETS

__all__ = ["FORMAT_BITS", "SUBJECTS_FILE", "WfdbFolder", "adc_limits", "unwrap"]

SUBJECTS_FILE = "subjects.csv"
FORMAT_BITS = {8: 8, 16: 16, 24: 24, 32: 32, 61: 16, 80: 8, 160: 16, 212: 12, 310: 10, 311: 10, 508: 8, 516: 16, 524: 24}
"""Bits of a sample in each WFDB storage format, for a header that states no ADC resolution."""
WRAP_MARGIN = 1 / 8
"""How near one ADC limit (fraction of the range) a step must leave, and the other arrive, to wrap."""


@DATASETS.register("wfdb")
class WfdbFolder(WfdbFolderDeclaration, Dataset):
    """The WFDB records under ``root`` (module docstring), keeping ``channels`` in order.

    ``units``: per channel (None: the first record's); ``subjects``: a ``record,subject`` CSV
    inside the root (None: ``subjects.csv`` if present); ``highpass_hz``: ``"auto"``, None, Hz
    or one per channel; ``normalisation``: ``"auto"`` or a `SignalPreparation` scope; ``drop_s``:
    ``"auto"`` or seconds; ``max_gap_s``: longest gap interpolated; ``unwrap``: ``"auto"``/``"off"``.
    """

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        channels: list[str] | tuple[str, ...] = (),
        units: list[str] | tuple[str, ...] | None = None,
        subjects: str | None = None,
        highpass_hz: Any = "auto",
        normalisation: str = "auto",
        drop_s: Any = "auto",
        max_gap_s: float = 0.5,
        unwrap: str = "auto",
    ):
        super().__init__(root)
        if isinstance(channels, str) or not channels or not all(isinstance(c, str) and channel_key(c) for c in channels):
            raise ValueError(f"data.options.channels: give the channel names to keep as a list, e.g. [PLETH]; got {channels!r}")
        try:
            match_channels(channels, channels)
        except ValueError as error:
            raise ValueError(f"data.options.channels: {error}") from None
        self.channels = tuple(channels)
        if units is not None and len(units) != len(channels):
            raise ValueError(
                f"data.options.units: {len(units)} units {list(units)} for {len(channels)} channels {list(channels)}"
            )
        if normalisation != "auto" and normalisation not in SCOPES:
            raise ValueError(f"data.options.normalisation: {normalisation!r} is not auto, {', '.join(SCOPES)}")
        if unwrap not in ("auto", "off") or not max_gap_s >= 0:
            raise ValueError(f"data.options: need unwrap 'auto' or 'off' and max_gap_s >= 0, got {unwrap!r}, {max_gap_s!r}")
        self._units, self.subjects = (tuple(units) if units else None), subjects
        self.highpass_hz, self.normalisation, self.drop_s = highpass_hz, normalisation, drop_s
        self.max_gap_s, self.unwrap = float(max_gap_s), unwrap
        self.preparation(None)  # a malformed option fails here, before any file is read

    def __repr__(self) -> str:
        return f"WfdbFolder({str(self.root)!r}, channels={list(self.channels)})"

    # ignore[override]: a Dataset fact is never assigned through the base; mypy cannot declare it read-only
    @property
    def units(self) -> tuple[str, ...]:  # type: ignore[override]
        """The ``units`` option, else the units the indexed records state (mV where none does)."""
        if self._units is not None:
            return self._units
        if self.root is None or not self.root.is_dir():
            return ()
        return self._index[3]

    def preparation(self, cycle_band_hz: tuple[float, float] | None = None) -> SignalPreparation:
        """The options, ``auto`` resolved from ``cycle_band_hz`` (module docstring)."""
        low = cycle_band_hz[0] if cycle_band_hz else None
        cutoffs = (low / 2 if low else None) if self.highpass_hz == "auto" else self.highpass_hz
        if not isinstance(cutoffs, (list, tuple)):
            cutoffs = [cutoffs] * len(self.channels)
        if len(cutoffs) != len(self.channels):
            raise ValueError(f"data.options.highpass_hz: {len(cutoffs)} cut-offs for {len(self.channels)} channels")
        scope = "corpus" if self.normalisation == "auto" else self.normalisation
        drop = (1.5 / low if low else 0.0) if self.drop_s == "auto" else self.drop_s
        try:
            return SignalPreparation(tuple(None if c is None else float(c) for c in cutoffs), scope, float(drop))
        except (TypeError, ValueError) as error:
            raise ValueError(f"data.options (highpass_hz, normalisation, drop_s): {error}") from None

    @cached_property
    def _folder(self) -> Path:
        """The root; `DatasetNotFound` when there is none or it is not a folder."""
        if self.root is None or not self.root.is_dir():
            raise DatasetNotFound(f"wfdb: the folder {self.root} does not exist (set data.root to a folder of WFDB records)")
        return self.root

    @cached_property
    def _headers(self) -> list[Path]:
        return sorted(self._folder.rglob("*.hea"))

    # ignore[override]: a Dataset fact is never assigned through the base; mypy cannot declare it read-only
    @property
    def subjects_known(self) -> bool:  # type: ignore[override]
        """Whether a subjects file names each recording's person (else each is its own subject)."""
        return self.root is not None and (self.root / (self.subjects or SUBJECTS_FILE)).is_file()

    @cached_property
    def _subject_of(self) -> dict[str, str] | None:
        """record name -> subject from the subjects file, None without one."""
        path = self._folder / (self.subjects or SUBJECTS_FILE)
        if not path.is_file():
            if self.subjects:
                raise DatasetNotFound(f"wfdb: data.options.subjects names {path}, which does not exist")
            return None
        rows = _read_subjects(path, self._folder)
        found: dict[str, str] = {}
        for line, row in enumerate(rows, start=2):
            name, subject = (row["record"] or "").strip(), (row["subject"] or "").strip()
            if not name or not subject or found.get(name, subject) != subject:
                raise ValueError(f"{path}, line {line}: record {name!r} with subject {subject!r} is empty or listed twice")
            found[name] = subject
        return found

    @cached_property
    def _index(self) -> tuple[list[Entry], dict[int, str], list[RecordRejected], tuple[str, ...]]:
        kept, rejected, units = [], [], list(self._units or [None] * len(self.channels))
        for path in self._headers:
            name = path.relative_to(self._folder).with_suffix("").as_posix()
            try:
                _check_text(name)
                resolve_inside(self._folder, path.relative_to(self._folder).as_posix(), self._folder)
                header = read_header(path)
                self._check_rate(name, header)
                specs = [header.signals[row] for row in self._rows(name, header)]
                for c, spec in enumerate(specs):
                    units[c] = units[c] or (spec.units if spec.units_stated else None)
                    _check_unit(name, spec, units[c])
                subject = self._subject(name)
            except (HeaderError, OSError) as error:
                check = "outside_root" if "outside the dataset root" in str(error) else "unreadable"
                rejected.append(RecordRejected(name, check, f"header {path}: {error}"))
                continue
            except RecordRejected as rejection:
                rejected.append(rejection)
                continue
            kept.append((name, subject))
        subjects = {s: k for k, s in enumerate(sorted({s for _, s in kept}), start=1)}
        entries = [Entry(i, name, subjects[s], hash_fold(s, self.folds.count)) for i, (name, s) in enumerate(kept, start=1)]
        return entries, {e.id: e.name for e in entries}, rejected, tuple(u or "mV" for u in units)

    def _subject(self, name: str) -> str:
        table = self._subject_of
        if table is None:
            return name
        if name not in table:
            raise RecordRejected(name, "subject", f"not listed in {self.subjects or SUBJECTS_FILE}")
        return table[name]

    def entries(self) -> list[Entry]:
        """Every record with the channels, in path order."""
        return self._index[0]

    def rejected(self) -> list[RecordRejected]:
        """The records indexing rejected (module docstring)."""
        return self._index[2]

    def fingerprint(self) -> dict:
        """The root, the options, one sha256 over every header and the subjects file's."""
        subjects = self._folder / (self.subjects or SUBJECTS_FILE)
        return {
            "root": str(self._folder.resolve()),
            "headers_sha256": sha256_of(self._headers, self._folder),
            "subjects_sha256": sha256_file(subjects) if subjects.is_file() else None,
            "channels": list(self.channels),
            "units": list(self.units),
            "max_gap_s": self.max_gap_s,
            "unwrap": self.unwrap,
        }

    def read(self, entry: Entry) -> Record:
        """The record of ``entry`` (module docstring), its id the entry's."""
        record = self._read(self._folder / self._index[1][entry.id], entry.name)
        return Record(entry.id, record.signal, record.fs, record.channels)

    def read_path(self, path: str | os.PathLike) -> Record:
        """The record file at ``path`` (WFDB, no extension), read as `read` reads an entry."""
        path = Path(path)
        if not path.with_name(path.name + ".hea").is_file():
            raise FileNotFoundError(f"WFDB record {str(path)!r} not found (give the path without extension)")
        return self._read(path, str(path))

    def _check_rate(self, name: str, header: WfdbHeader) -> None:
        """`check_native_rate` of the record's slowest kept channel (lacking one: its fastest)."""
        rates = [header.fs * spec.samples_per_frame for spec in header.signals]
        try:
            rows = match_channels(self.channels, header.names)
        except ChannelError:
            rows = []
        if rates:
            self.check_native_rate(name, min(rates[row] for row in rows) if rows else max(rates))

    def _rows(self, name: str, header: WfdbHeader) -> list[int]:
        """The header's rows of the channels; `RecordRejected` (``channel_order``) otherwise."""
        try:
            return match_channels(self.channels, header.names)
        except ChannelError as error:
            raise RecordRejected(name, "channel_order", str(error)) from None

    def _read(self, path: Path, name: str) -> Record:
        """The record at ``path`` (module docstring); `RecordRejected` naming ``name`` and the check."""
        header, specs, samples = self._samples(path, name)
        rates = [header.fs * spec.samples_per_frame for spec in specs]
        fs = max(rates)
        channels = []
        for x, spec, rate in zip(samples, specs, rates, strict=True):
            x = unwrap(x, *adc_limits(spec)) if self.unwrap == "auto" else x
            channels.append(x if rate == fs else _resample_gappy(x, rate, fs))
        length = min(len(x) for x in channels)
        units = [spec.units if spec.units_stated else None for spec in specs]
        signal = in_units(
            name,
            np.stack([x[:length] for x in channels]),
            [spec.name for spec in specs],
            units,
            self.units or [None] * len(specs),
        )
        present = np.flatnonzero(np.isfinite(signal).all(axis=0))
        if not len(present):
            raise RecordRejected(name, "non_finite", f"no sample with every channel of {list(self.channels)} present")
        signal = fill_gaps(name, signal[:, present[0] : present[-1] + 1], fs, self.max_gap_s, self.channels)
        return Record(name, as_float32(name, signal, self.channels), fs, self.channels)  # beyond float32: rejected, named

    def _samples(self, path: Path, name: str) -> tuple[WfdbHeader, list[SignalSpec], list[np.ndarray]]:
        """The header, the channels' signal lines and physical samples (each at its own rate, NaN
        where missing) by `read_samples`; `RecordRejected` naming ``name`` and the check."""
        try:
            header = read_header(path)
            rows = self._rows(name, header)
            samples = read_samples(path, rows=rows, header=header)
        except SampleError as error:
            raise RecordRejected(name, error.check, f"{path}: {error}") from None
        except (HeaderError, OSError) as error:
            raise RecordRejected(name, "unreadable", f"{path}: {error}") from None
        return header, list(samples.specs), [samples.physical(i) for i in range(len(rows))]


def _read_subjects(path: Path, root: Path) -> list[dict[str, str]]:
    """Rows of the subjects file (UTF-8, BOM allowed); ValueError naming it when it leads outside
    ``root``, is not UTF-8 or lacks the columns record,subject."""
    try:
        resolve_inside(path.parent, path.name, root, what="subjects file")
    except HeaderError as error:
        raise ValueError(f"data.options.subjects: {error}; copy the file into the folder") from None
    try:
        with path.open(newline="", encoding="utf-8-sig") as stream:
            rows = list(csv.DictReader(stream))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8 (CSV UTF-8)") from None
    if not rows or not {"record", "subject"} <= set(rows[0]):
        found = f"{len(rows[0])} other columns" if rows else "no rows"
        raise ValueError(f"{path}: needs a header line with the columns record,subject and a row per record (has {found})")
    return rows


def _resample_gappy(x: np.ndarray, fs: float, fs_out: float) -> np.ndarray:
    """(L,) ``x`` resampled from ``fs`` to ``fs_out`` (gaps interpolated first); an output sample
    nearest a missing input stays missing, so the gap check sees the gap."""
    missing = ~np.isfinite(x)
    if missing.all():
        return np.full(int(np.ceil(len(x) * fs_out / fs)), np.nan)
    filled = np.interp(np.arange(len(x)), np.flatnonzero(~missing), x[~missing]) if missing.any() else x
    y = resample(filled, fs, fs_out).astype(np.float64)
    nearest = np.minimum(np.round(np.arange(len(y)) * fs / fs_out).astype(int), len(x) - 1)
    y[missing[nearest]] = np.nan
    return y


def _check_text(name: str) -> None:
    """`RecordRejected` (``unreadable``, named by ``ascii``) for a file name that is not UTF-8."""
    try:
        name.encode()
    except UnicodeEncodeError:
        raise RecordRejected(ascii(name), "unreadable", f"the file name {ascii(name)} is not UTF-8") from None


def _check_unit(name: str, spec: SignalSpec, unit: str | None) -> None:
    """`RecordRejected` (``units``) when ``spec`` states a unit that cannot be converted to ``unit``."""
    if not spec.units_stated or unit is None or spec.units.lower() == unit.lower():
        return
    if spec.units.lower() not in MV_PER_UNIT or unit.lower() not in MV_PER_UNIT:
        raise RecordRejected(name, "units", f"channel {spec.name} is in {spec.units}, the corpus's {spec.name} in {unit}")


def adc_limits(spec: SignalSpec) -> tuple[float, float]:
    """ADC range [low, high) in physical units: low = (adc_zero − 2^(bits−1) − baseline) / gain,
    high = low + 2^bits / gain; bits the header's ADC resolution, else the format's."""
    bits = spec.adc_resolution or FORMAT_BITS.get(spec.format, 16)
    low = (spec.adc_zero - 2 ** (bits - 1) - spec.baseline) / spec.gain
    high = low + 2**bits / spec.gain
    return min(low, high), max(low, high)


def unwrap(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """``x`` with ADC wrap-around undone in [``low``, ``high``).

    A step a → b between finite samples wraps upward when a + max(a − a_prev, 0) comes within
    `WRAP_MARGIN` × (high − low) of ``high`` and b − max(b_next − b, 0) within it of ``low``:
    the range is added from b on (downward: the mirror image). Other steps are the signal's.

    >>> unwrap(np.array([0.5, 0.7, 0.9, 0.05, 0.25, 0.3]), 0.0, 1.0)
    array([0.5 , 0.7 , 0.9 , 1.05, 1.25, 1.3 ])
    """
    span, margin = high - low, WRAP_MARGIN * (high - low)
    finite = np.flatnonzero(np.isfinite(x))
    xf = np.asarray(x, dtype=np.float64)[finite]
    slope = np.diff(xf, prepend=xf[:1])  # into each sample
    a, b, into_a, out_of_b = xf[:-1], xf[1:], slope[:-1], np.append(slope[2:], 0.0)
    rise = (a + np.maximum(into_a, 0) >= high - margin) & (b - np.maximum(out_of_b, 0) <= low + margin)
    fall = (a + np.minimum(into_a, 0) <= low + margin) & (b - np.minimum(out_of_b, 0) >= high - margin)
    out = np.array(x, dtype=np.float64)
    out[finite[1:]] += np.cumsum(rise.astype(np.float64) - fall) * span
    return out
