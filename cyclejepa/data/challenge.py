"""PhysioNet/CinC Challenge 2020/2021 format: WFDB folders with SNOMED-CT ``# Dx:`` labels.

The Challenge corpora (CPSC 2018, INCART, PTB, Georgia, Chapman-Shaoxing, Ningbo, ...) share one
layout: per record a header ``NAME.hea`` and a signal file, ``NAME.mat`` (MATLAB, key ``val``,
(leads, samples) int16) or ``NAME.dat`` (WFDB format 16, interleaved), anywhere under the root::

    A0001 12 500 7500 05-Feb-2020 11:39:16
    A0001.mat 16+24 1000/mV 16 0 28 -1716 0 I
    ...
    # Age: 74
    # Sex: Male
    # Dx: 59118001,164889003

Records run at 257 Hz to 1 kHz and last 6 s to many minutes; the cache resamples them and
cuts them into windows. The sources give no patient ids, so every record is its own patient and
its fold is `hash_fold` of its name (relative path without extension). The label level ``dx``
holds the SNOMED-CT codes present in the corpus, sorted.
"""

from __future__ import annotations

import math
import os
from functools import cached_property
from pathlib import Path

import numpy as np

from cyclejepa.data.datasets import Dataset, Entry, LabelLevel, Record, RecordRejected, hash_fold, sha256_of
from cyclejepa.data.ptbxl import LEADS, _UNIT_FACTORS
from cyclejepa.registry import DATASETS

__all__ = ["Challenge2021", "ChallengeHeader", "read_header"]

_SEX = {"male": 0, "m": 0, "female": 1, "f": 1}


class ChallengeHeader:
    """The parsed ``.hea`` of one Challenge record (see `read_header`)."""

    def __init__(self, name: str, fs: float, samples: int, files: list[str], formats: list[str],
                 gains: list[float], baselines: list[float], units: list[str], leads: list[str],
                 age: float, sex: int, dx: list[str]):  # fmt: skip
        self.name, self.fs, self.samples = name, fs, samples
        self.files, self.formats, self.gains, self.baselines = files, formats, gains, baselines
        self.units, self.leads, self.age, self.sex, self.dx = units, leads, age, sex, dx


def read_header(path: Path) -> ChallengeHeader:
    """Parse a Challenge header; raises ValueError naming the line and what is wrong with it."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError("the header is empty")
    record = lines[0].split()
    if len(record) < 4:
        raise ValueError(f"line 1: {lines[0]!r} is not 'NAME SIGNALS FS SAMPLES'")
    try:
        n_sig, fs, samples = int(record[1]), float(record[2].split("/")[0]), int(record[3])
    except ValueError:
        raise ValueError(f"line 1: {lines[0]!r}: signals, rate and samples must be numbers") from None
    if n_sig < 1 or not (math.isfinite(fs) and fs > 0) or samples < 1:
        raise ValueError(f"line 1: {lines[0]!r}: signals, rate and samples must be positive")
    signal_lines = [line for line in lines[1:] if not line.startswith("#")]
    if len(signal_lines) != n_sig:
        raise ValueError(f"the header declares {n_sig} signals but has {len(signal_lines)} signal lines")
    fields = [_signal_line(line, i + 2) for i, line in enumerate(signal_lines)]
    comments = {}
    for line in lines[1:]:
        if line.startswith("#") and ":" in line:
            key, value = line[1:].split(":", 1)
            comments[key.strip().lower()] = value.strip()
    dx = [code.strip() for code in comments.get("dx", "").split(",") if code.strip()]
    if not dx:
        raise ValueError("no '# Dx:' line with SNOMED-CT codes")
    if not all(code.isdigit() for code in dx):
        raise ValueError(f"'# Dx: {comments['dx']}' holds codes that are not SNOMED-CT numbers")
    return ChallengeHeader(record[0], fs, samples, *map(list, zip(*fields)), _age(comments.get("age", "")),
                           _SEX.get(comments.get("sex", "").lower(), -1), dx)  # fmt: skip


def _signal_line(line: str, number: int) -> tuple[str, str, float, float, str, str]:
    """(file, format, gain, baseline, unit, lead) of a signal line."""
    parts = line.split()
    if len(parts) < 9:
        raise ValueError(f"line {number}: {line!r} has {len(parts)} fields, a signal line has 9")
    gain_field = parts[2]
    gain_text, _, unit = gain_field.partition("/")
    baseline_text = parts[4]  # the ADC zero is the baseline unless the gain field names one
    if "(" in gain_text:
        gain_text, baseline_text = gain_text.rstrip(")").split("(")
    try:
        gain, baseline = float(gain_text), float(baseline_text)
    except ValueError:
        raise ValueError(f"line {number}: gain {gain_field!r} or ADC zero {parts[4]!r} is not a number") from None
    return parts[0], parts[1].split("+")[0], gain, baseline, unit or "mV", parts[8]


def _age(text: str) -> float:
    try:
        age = float(text)
    except ValueError:
        return math.nan
    return age if math.isfinite(age) and age >= 0 else math.nan


@DATASETS.register("challenge2021")
class Challenge2021(Dataset):
    """A folder of PhysioNet/CinC Challenge 2020/2021 records (any depth below ``root``).

    Parameters
    ----------
    root : the folder searched for ``*.hea`` headers.
    channels : the leads the cache keeps (default the 12 standard leads).
    """

    def __init__(self, root: str | os.PathLike | None = None, channels: list[str] | tuple[str, ...] = LEADS):
        if root is None or not Path(root).is_dir():
            raise FileNotFoundError(f"Challenge corpus folder {root} does not exist (set data.root)")
        self.root = Path(root)
        self.channels = tuple(channels)
        self._headers = sorted(self.root.rglob("*.hea"))
        if not self._headers:
            raise FileNotFoundError(f"no *.hea header under {self.root}: not a Challenge-format corpus")

    def __repr__(self) -> str:
        return f"Challenge2021({str(self.root)!r})"

    @cached_property
    def _index(self) -> tuple[list[Entry], dict[int, ChallengeHeader], list[RecordRejected]]:
        entries, headers, rejected = [], {}, []
        for number, path in enumerate(self._headers, start=1):
            name = path.relative_to(self.root).with_suffix("").as_posix()
            try:
                header = read_header(path)
            except (ValueError, OSError, UnicodeDecodeError) as error:
                rejected.append(RecordRejected(name, "unreadable", f"header {path}: {error}"))
                continue
            fold = hash_fold(name)
            entries.append(Entry(number, name, number, fold, header.age, header.sex, {"dx": frozenset(header.dx)}))
            headers[number] = header
        return entries, headers, rejected

    def entries(self) -> list[Entry]:
        """Every record with a readable header, in the order of their paths; id = rank of the path."""
        return self._index[0]

    def rejected(self) -> list[RecordRejected]:
        """Records whose header does not parse (check ``unreadable``), with the reason."""
        return self._index[2]

    @property
    def label_levels(self) -> tuple[LabelLevel, ...]:
        codes = sorted({code for entry in self.entries() for code in entry.labels["dx"]}, key=int)
        return (LabelLevel("dx", "dx", tuple(codes)),)

    def fingerprint(self) -> dict:
        """The root and one sha256 over every header."""
        return {"root": str(self.root.resolve()), "headers_sha256": sha256_of(self._headers, self.root)}

    def load(self, entry: Entry) -> Record:
        """The record in mV at its own rate; raises `RecordRejected` (``unreadable``, ``extent``,
        ``calibration``, ``non_finite``)."""
        header = self._index[1][entry.id]
        folder = (self.root / entry.name).parent
        digital = _samples(header, folder, entry.name)
        unknown = sorted({u for u in header.units if u.lower() not in _UNIT_FACTORS})
        gain = np.asarray(header.gains, dtype=np.float64)
        if unknown or not np.all(np.isfinite(gain) & (gain > 0)):
            raise RecordRejected(entry.name, "calibration", f"units {header.units}, gains {header.gains}")
        factor = np.array([_UNIT_FACTORS[u.lower()] for u in header.units])
        baseline = np.asarray(header.baselines, dtype=np.float64)
        signal = (digital - baseline[:, None]) / gain[:, None] * factor[:, None]
        if not np.isfinite(signal).all():
            raise RecordRejected(entry.name, "non_finite", "non-finite physical values")
        return Record(entry.id, signal.astype(np.float32), header.fs, tuple(header.leads))


def _samples(header: ChallengeHeader, folder: Path, name: str) -> np.ndarray:
    """(leads, samples) float64 stored values from the header's single .mat or .dat file."""
    files = set(header.files)
    if len(files) != 1:
        raise RecordRejected(name, "unreadable", f"signals spread over files {sorted(files)}")
    path = folder / files.pop()
    if not path.is_file():
        raise RecordRejected(name, "unreadable", f"signal file {path} does not exist")
    if set(header.formats) != {"16"}:
        raise RecordRejected(name, "format", f"WFDB format {sorted(set(header.formats))}, expected 16")
    n_sig = len(header.leads)
    try:
        if path.suffix == ".mat":
            from scipy.io import loadmat

            values = np.asarray(loadmat(path)["val"], dtype=np.float64)
        else:
            raw = np.fromfile(path, dtype="<i2")
            if raw.size % n_sig:
                raise ValueError(f"{raw.size} samples do not divide into {n_sig} signals")
            values = raw.reshape(-1, n_sig).T.astype(np.float64)
    except Exception as error:
        raise RecordRejected(name, "unreadable", f"samples of {path}: {error}") from error
    if values.shape != (n_sig, header.samples):
        raise RecordRejected(
            name, "extent", f"{path.name} holds {values.shape[0]} x {values.shape[1]} samples, the header declares "
            f"{n_sig} x {header.samples}"
        )  # fmt: skip
    return values
