"""Any folder of WFDB records as a dataset, registered as ``wfdb``: no labels, no metadata table.

In a config::

    data:
      dataset: wfdb
      root: path/to/records
      options: {channels: [PLETH]}
    phase: {provider: pulse}

Every ``*.hea`` header under ``root`` (any depth) is a record, named by its path relative to the
root without extension (``a103l``, ``site2/rec7``); its channels, their units and its rate come
from the header (`cyclejepa.data.wfdb_format.read_header`). ``channels`` picks channels by name
(`cyclejepa.data.channels.match_channels`: case, surrounding space and trailing punctuation
aside, so ``PLETH`` is PhysioNet's ``PLETH,``); a record lacking one, or with two channels one
name matches, is rejected while indexing (check ``channel_order``, naming what it has or both)
and counted in rejections.csv. A record slower than the phase provider reads (the provider's
``rate_problem``, handed over by the cache build: `Dataset.require_rate`) is rejected while
indexing too (check ``sampling_rate``, its rate and the requirement), never upsampled: the
``NAMEn`` numerics records (1 Hz) PhysioNet ships beside the waveforms. Each channel's unit is ``units`` when given,
else the unit the first record states; a record in another unit is converted when both are
voltages (µV, mV, V) and rejected otherwise (``units``, naming both).

Reading a record (`read`; `read_path` for a record file given by its path, as ``cyclejepa embed``
reads one): signal files in .dat or .mat read by the library's one sample reader
(`cyclejepa.data.samples.read_samples`, which bounds a record's memory); the chosen
channels each at its own rate (a multi-rate record such as ``mixedsignals`` stores 1, 2 or 4
samples per frame), resampled to the highest of them (`resample`); ADC wrap-around undone where
samples touch the ADC limits (`unwrap`; ``unwrap: off`` keeps the samples); missing samples at
either end cut off and inner runs of up to ``max_gap_s`` interpolated, a longer one rejects the
record (``non_finite``).

Folds: one subject per record, fold `hash_fold` of the record name; with ``subjects.csv`` at
the root (columns ``record,subject``, or another file named by ``subjects``) the fold is the
hash of the subject, so one person never sits on both sides of a split; a record the file does
not list is rejected (``subject``). No fold is sealed: training folds 1-9, evaluation fold 10
by default.

Rates: the dataset has none of its own. The cache and token rates the config leaves out come
from the phase provider's ``cycle_band_hz`` (`band_rates`: a heartbeat at 0.5-3.5 Hz gives a
125 Hz cache, a 25 Hz model, 80 ms tokens, 10 s windows).

Preparation before windowing (`Dataset.preparation`, recorded in the cache manifest and applied
by ``cyclejepa embed`` alike): ``highpass_hz``, ``normalisation`` and ``drop_s``, each
``"auto"`` by default. With a provider that declares a cycle band (low, high), ``auto`` is a
zero-phase high-pass at low / 2 on every channel (0.25 Hz for a heartbeat, 0.05 Hz for
breathing: an offset and drifts slower than the slowest cycle go, the fundamental keeps 94 % of
its power), the corpus-wide z-score after it, and 1.5 / low seconds dropped at the start (3 s
for a heartbeat: a camera's exposure settling and the filter's start). Without a band, ``auto``
is no filter and no drop. ``normalisation: auto`` is the corpus-wide z-score, the paper's (on a
raw camera-like corpus it trained a transport arm in 4 of 4 seeds, per record and per window in
3 of 4: docs/your-signal.md).
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
"""How near (a fraction of the ADC range) the signal must run to one limit, and come back from the
other, for a step to be a wrap (`unwrap`)."""


@DATASETS.register("wfdb")
class WfdbFolder(WfdbFolderDeclaration, Dataset):
    """The WFDB records under ``root``, one entry per record (see the module docstring).

    Parameters
    ----------
    root : the folder searched for ``*.hea`` headers (any depth).
    channels : the channel names kept, in this order (matched by `match_channels`).
    units : each channel's unit (None: the first record's).
    subjects : a CSV file (``record,subject``, UTF-8 with or without a byte-order mark), relative
        to the root and inside it; None: ``subjects.csv`` when the root has one.
    highpass_hz : ``"auto"``, None (no filter), a cut-off in Hz or one per channel (None for none).
    normalisation : ``"auto"``, ``"corpus"``, ``"record"`` or ``"window"`` (`SignalPreparation`).
    drop_s : ``"auto"`` or the leading seconds dropped from each record.
    max_gap_s : longest run of missing samples filled by linear interpolation.
    unwrap : ``"auto"`` (undo ADC wrap-around at the limits, `unwrap`) or ``"off"``.
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
        """Whether a subjects file names the person of each recording (else each recording is its
        own subject, and the same person may sit in training and evaluation)."""
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
                specs = self._specs(name, self._fast_enough(name, read_header(path)))
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
        """Records without the channels, too slow for the phase provider, in another unit, unlisted
        in the subjects file, or unreadable."""
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

    def _fast_enough(self, name: str, header: WfdbHeader) -> WfdbHeader:
        """``header`` when its record is fast enough for the phase provider (`check_native_rate`):
        the slowest of the channels kept, or the fastest of its channels when it lacks one of them
        (a monitor's 1 Hz numerics record beside its waveforms is refused for its rate)."""
        rates = [header.fs * spec.samples_per_frame for spec in header.signals]
        try:
            rows = match_channels(self.channels, header.names)
        except ChannelError:
            rows = []
        if rates:
            self.check_native_rate(name, min(rates[row] for row in rows) if rows else max(rates))
        return header

    def _specs(self, name: str, header: WfdbHeader) -> list[SignalSpec]:
        """The header's signal lines of the channels, in their order (`_rows`)."""
        return [header.signals[row] for row in self._rows(name, header)]

    def _rows(self, name: str, header: WfdbHeader) -> list[int]:
        """The header's rows of the channels (`match_channels`: ``PLETH`` finds ``PLETH,``);
        `RecordRejected` (``channel_order``) naming what it has, or the two channels one name matches."""
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
        """The header, the channels' signal lines and their samples (physical units, float64, each
        at its own rate, NaN where missing), read by `read_samples` after its checks (signal files
        regular and inside the record's folder, at most `MAX_RECORD_SAMPLES` samples, declared or
        held); `RecordRejected` naming ``name`` and the reader's check."""
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
    """The rows of the subjects file ``path`` (UTF-8, with or without a byte-order mark, as a
    spreadsheet's "CSV UTF-8" writes it); ValueError naming the file, never quoting it, when it
    leads outside ``root`` (a symbolic link), is not UTF-8 or lacks the columns record,subject."""
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
    """(L,) ``x`` at ``fs`` resampled to ``fs_out`` (`resample`, its missing samples interpolated
    first); each output sample nearest in time to a missing input sample stays missing, so that
    the gap check sees the gap."""
    missing = ~np.isfinite(x)
    if missing.all():
        return np.full(int(np.ceil(len(x) * fs_out / fs)), np.nan)
    filled = np.interp(np.arange(len(x)), np.flatnonzero(~missing), x[~missing]) if missing.any() else x
    y = resample(filled, fs, fs_out).astype(np.float64)
    nearest = np.minimum(np.round(np.arange(len(y)) * fs / fs_out).astype(int), len(x) - 1)
    y[missing[nearest]] = np.nan
    return y


def _check_text(name: str) -> None:
    """`RecordRejected` (``unreadable``, the name as ``ascii`` writes it) for a file name that is not
    UTF-8 (Python keeps its bytes as surrogates, which no text file can hold)."""
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
    """The ADC range of ``spec`` in physical units, [low, high): low = (adc_zero - 2^(bits-1) -
    baseline) / gain, high = low + 2^bits / gain (one ADC step above the largest value stored),
    bits from the header (its ADC resolution, else the storage format's)."""
    bits = spec.adc_resolution or FORMAT_BITS.get(spec.format, 16)
    low = (spec.adc_zero - 2 ** (bits - 1) - spec.baseline) / spec.gain
    high = low + 2**bits / spec.gain
    return min(low, high), max(low, high)


def unwrap(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """``x`` with ADC wrap-around undone in the range [``low``, ``high``).

    A wrap is a step between consecutive finite samples a, b where the signal runs into one
    limit and comes back from the other: a + max(a - a_prev, 0) reaches within `WRAP_MARGIN`
    of the range (high - low) of ``high`` and b - max(b_next - b, 0) within it of ``low`` (a
    rise past ``high``: the range is added to b and everything after it), or the mirror image
    (a fall past ``low``: subtracted). A step inside the range, however large, is the signal's
    and is kept: a drop from a level away from the limit does not run into it.

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
