"""PhysioNet/CinC Challenge 2020/2021 format: WFDB folders with SNOMED-CT ``# Dx:`` labels.

The Challenge corpora (CPSC 2018, INCART, PTB, Georgia, Chapman-Shaoxing, Ningbo, ...) share one
layout: per record a header ``NAME.hea`` and a signal file, ``NAME.mat`` (MATLAB, key ``val``,
(leads, samples) int16) or ``NAME.dat`` (WFDB format 16, interleaved), anywhere under the root::

    A0001 12 500 7500 05-Feb-2020 11:39:16
    A0001.mat 16x1+24 1000.0(0)/mV 16 0 28 -1716 0 I
    ...
    # Age: 74
    # Sex: Male
    # Dx: 59118001,164889003

Headers and samples are read by the library's one reader of each (`cyclejepa.data.wfdb_format`,
`cyclejepa.data.samples`: signal files inside the root, a ``.mat`` file's own header checked).
Records run at 257 Hz to 1 kHz, 6 s to many minutes. No patient ids: each record is its own
patient, its fold `hash_fold` of its name. Label level ``dx``: the corpus's SNOMED-CT codes, sorted.
"""

from __future__ import annotations

import math
import os
from functools import cached_property
from pathlib import Path

import numpy as np

from cyclejepa.data.datasets import (
    MV_PER_UNIT,
    Dataset,
    DatasetNotFound,
    Entry,
    LabelLevel,
    Record,
    RecordRejected,
    hash_fold,
    record_name,
    sha256_of,
)
from cyclejepa.data.samples import SampleError, read_samples
from cyclejepa.data.wfdb_format import HeaderError, WfdbHeader, check_rate, read_header, resolve_inside, to_physical
from cyclejepa.declarations.datasets import Challenge2021Declaration
from cyclejepa.registry import DATASETS

__all__ = ["Challenge2021", "LEADS", "check_header"]

LEADS = Challenge2021Declaration.channels
"""The Challenge's 12 standard leads, the default channels."""
ROOT_ENV = "CYCLEJEPA_CHALLENGE2021"
_SEX = {"male": 0, "m": 0, "female": 1, "f": 1}


def check_header(header: WfdbHeader) -> list[str]:
    """SNOMED-CT codes of the ``# Dx:`` line; `HeaderError` without a sample count or numeric codes."""
    if header.samples is None or header.samples < 1:
        raise HeaderError(f"record line of {header.record!r} declares no samples")
    dx = [code.strip() for code in (header.comment("dx") or "").split(",") if code.strip()]
    if not dx:
        raise HeaderError("no '# Dx:' line with SNOMED-CT codes")
    if not all(code.isdigit() for code in dx):
        raise HeaderError(f"'# Dx: {header.comment('dx')}' holds codes that are not SNOMED-CT numbers")
    return dx


def _age(text: str | None) -> float:
    try:
        age = float(text or "")
    except ValueError:
        return math.nan
    return age if math.isfinite(age) and age >= 0 else math.nan


@DATASETS.register("challenge2021")
class Challenge2021(Challenge2021Declaration, Dataset):
    """The Challenge 2020/2021 records at any depth below ``root`` (None:
    ``$CYCLEJEPA_CHALLENGE2021``), keeping ``channels`` (default the 12 standard leads)."""

    root_env = ROOT_ENV
    subjects_known = False  # the headers name no patient: each record is its own

    def __init__(self, root: str | os.PathLike | None = None, channels: list[str] | tuple[str, ...] = LEADS):
        super().__init__(root)
        self.channels = tuple(channels)
        self.units = ("mV",) * len(self.channels)

    def __repr__(self) -> str:
        return f"Challenge2021({str(self.root)!r})"

    @cached_property
    def _folder(self) -> Path:
        """The root; `DatasetNotFound` when there is none or it is not a folder."""
        if self.root is None or not self.root.is_dir():
            raise DatasetNotFound(f"Challenge corpus folder {self.root} does not exist (set data.root or ${ROOT_ENV})")
        return self.root

    @cached_property
    def _headers(self) -> list[Path]:
        """Every ``*.hea`` under the root; `DatasetNotFound` when there is no root or no header."""
        headers = sorted(self._folder.rglob("*.hea"))
        if not headers:
            raise DatasetNotFound(f"no *.hea header under {self.root}: not a Challenge-format corpus")
        return headers

    @cached_property
    def _index(self) -> tuple[list[Entry], dict[int, WfdbHeader], list[RecordRejected]]:
        entries, headers, rejected = [], {}, []
        for number, path in enumerate(self._headers, start=1):
            try:
                entry, header = self._entry(number, path)
            except RecordRejected as rejection:
                rejected.append(rejection)
                continue
            entries.append(entry)
            headers[number] = header
        return entries, headers, rejected

    def _entry(self, number: int, path: Path) -> tuple[Entry, WfdbHeader]:
        """The entry and header of header file ``path``; `RecordRejected` naming the record."""
        name = record_name(path.relative_to(self._folder).with_suffix("").as_posix())
        try:
            resolve_inside(path.parent, path.name, self._folder, "header")
        except HeaderError as error:
            raise RecordRejected(name, "outside_root", str(error)) from None
        try:
            header = read_header(path)
            dx = check_header(header)
        except (HeaderError, OSError) as error:
            raise RecordRejected(name, "unreadable", f"header {path}: {error}") from None
        sex = _SEX.get((header.comment("sex") or "").lower(), -1)
        entry = Entry(
            number, name, number, hash_fold(name, self.folds.count), _age(header.comment("age")), sex, {"dx": frozenset(dx)}
        )
        return entry, header

    def entries(self) -> list[Entry]:
        """Every record with a readable header, in the order of their paths; id = rank of the path."""
        return self._index[0]

    def rejected(self) -> list[RecordRejected]:
        """Records whose header does not parse (check ``unreadable``), with the reason."""
        return self._index[2]

    # ignore[override]: a Dataset fact is never assigned through the base; mypy cannot declare it read-only
    @property
    def label_levels(self) -> tuple[LabelLevel, ...]:  # type: ignore[override]
        codes = sorted({code for entry in self.entries() for code in entry.labels["dx"]}, key=int)
        return (LabelLevel("dx", "dx", tuple(codes)),)

    def fingerprint(self) -> dict:
        """The root and one sha256 over every header inside it (one symlinked outside is never read)."""
        root = self._folder.resolve()
        headers = sha256_of([path for path in self._headers if path.resolve().is_relative_to(root)], self._folder)
        return {"root": str(self._folder.resolve()), "headers_sha256": headers}

    def read(self, entry: Entry) -> Record:
        """The record in mV at its own rate; raises `RecordRejected` (``sampling_rate``,
        ``outside_root``, ``unreadable``, ``format``, ``extent``, ``calibration``, ``non_finite``)."""
        header = self._index[1][entry.id]
        try:
            check_rate(header)
        except HeaderError as error:
            raise RecordRejected(entry.name, "sampling_rate", str(error)) from None
        digital = _samples(header, self._folder / entry.name, self._folder, entry.name)
        units = [s.units for s in header.signals]
        unknown = sorted({u for u in units if u.lower() not in MV_PER_UNIT})
        gain = np.array([s.gain for s in header.signals], dtype=np.float64)
        if unknown or not np.all(np.isfinite(gain) & (gain > 0)):
            raise RecordRejected(entry.name, "calibration", f"units {units}, gains {gain.tolist()}")
        factor = np.array([MV_PER_UNIT[u.lower()] for u in units])
        signal = to_physical(digital, gain, [s.baseline for s in header.signals], factor)
        if not np.isfinite(signal).all():
            raise RecordRejected(entry.name, "non_finite", "non-finite physical values")
        return Record(entry.name, signal.astype(np.float32), header.fs, header.names)


def _samples(header: WfdbHeader, path: Path, root: Path, name: str) -> np.ndarray:
    """(leads, samples) float64 stored values (`read_samples`); `RecordRejected` (``format``: several
    samples per frame, ``non_finite``: a missing sample, else the reader's check)."""
    layouts = sorted({s.samples_per_frame for s in header.signals})
    if layouts != [1]:
        raise RecordRejected(name, "format", f"samples per frame {layouts}: a Challenge record has one per frame")
    try:
        samples = read_samples(path, root=root, header=header)
    except SampleError as error:
        raise RecordRejected(name, error.check, str(error)) from None
    except (HeaderError, OSError) as error:
        raise RecordRejected(name, "extent" if isinstance(error, HeaderError) else "unreadable", str(error)) from None
    missing = [spec.name for i, spec in enumerate(samples.specs) if samples.invalid(i).any()]
    if missing:
        raise RecordRejected(name, "non_finite", f"invalid (missing) samples on {missing}")
    return np.stack(samples.digital).astype(np.float64)
