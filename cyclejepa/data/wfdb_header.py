"""WFDB headers: the library's one header reader, written from the specification (header(5);
public through `cyclejepa.data.wfdb_format`). Comment lines (``#``), a record line and one
line per signal::

    RECORD[/SEGMENTS] N_SIGNALS [FS[/COUNTER_FREQ[(BASE_COUNTER)]] [N_SAMPLES [TIME [DATE]]]]
    FILE FORMAT[xSAMPLES_PER_FRAME][:SKEW][+BYTE_OFFSET] [GAIN[(BASELINE)][/UNITS]
         [ADC_RESOLUTION [ADC_ZERO [INITIAL_VALUE [CHECKSUM [BLOCK_SIZE [DESCRIPTION]]]]]]]

The specification's defaults: rate 250 Hz, gain 200 ADC units per physical unit (also for a
written gain of 0), baseline = ADC zero, units mV.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os

    import numpy as np
    import numpy.typing as npt

__all__ = [
    "FORMATS",
    "MAX_RECORD_SAMPLES",
    "RATE_RANGE",
    "HeaderError",
    "SignalSpec",
    "WfdbHeader",
    "check_rate",
    "parse_header",
    "read_header",
    "regular_file",
    "resolve_inside",
    "to_physical",
]

FORMATS = (8, 16, 24, 32, 61, 80, 160, 212, 310, 311, 508, 516, 524)
"""The storage formats the specification defines."""
DEFAULT_FS = 250.0
DEFAULT_GAIN = 200.0
MAX_RECORD_SAMPLES = 1 << 27
"""Most samples a record read may hold over its signal files (1 GiB as float64: 12 leads × 6 h
at 500 Hz fit)."""
RATE_RANGE = (1.0, 1e6)
"""Sampling rates (Hz) a waveform is read at (`check_rate`)."""
MAX_HEADER_BYTES = 1 << 20
"""A header larger than this is refused before it is read (a real one is a few kB)."""

_FORMAT = re.compile(r"^(?P<format>\d+)(?:x(?P<spf>\d+))?(?::(?P<skew>\d+))?(?:\+(?P<offset>\d+))?$")
_GAIN = re.compile(r"^(?P<gain>[-+0-9.eE]+)(?:\((?P<baseline>[-+]?\d+)\))?(?:/(?P<units>\S+))?$")
_RATE = re.compile(r"^(?P<fs>[0-9.eE+-]+)(?:/(?P<counter>[0-9.eE+-]+)(?:\((?P<base>[-0-9.eE+]+)\))?)?$")


class HeaderError(ValueError):
    """A header off the specification (the message names line and field) or declaring too much."""


@dataclass(frozen=True)
class SignalSpec:
    """One signal line: storage and physical = (stored − baseline) / gain; ``units_stated`` False
    when the line names no unit (then mV)."""

    file: str
    format: int
    samples_per_frame: int = 1
    skew: int = 0
    byte_offset: int = 0
    gain: float = DEFAULT_GAIN
    baseline: int = 0
    units: str = "mV"
    adc_resolution: int = 0
    adc_zero: int = 0
    initial_value: int | None = None
    checksum: int | None = None
    block_size: int = 0
    name: str = ""
    units_stated: bool = False


@dataclass(frozen=True)
class WfdbHeader:
    """A parsed header: the record line, its signals in order, and its comment lines (without ``#``)."""

    record: str
    n_signals: int
    fs: float
    samples: int | None
    signals: tuple[SignalSpec, ...]
    comments: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.signals)

    def comment(self, key: str) -> str | None:
        """The value of a ``# Key: value`` comment (case-insensitive key), or None."""
        for line in self.comments:
            name, sep, value = line.partition(":")
            if sep and name.strip().lower() == key.lower():
                return value.strip()
        return None


def regular_file(path: str | os.PathLike[str]) -> os.stat_result:
    """``os.stat`` of ``path`` without opening it; `HeaderError` when not a regular file (a FIFO,
    device or folder), FileNotFoundError when absent."""
    import os
    import stat

    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise HeaderError(f"{path} is not a regular file (mode {stat.filemode(status.st_mode)}): refused without opening it")
    return status


def read_header(path: str | os.PathLike[str]) -> WfdbHeader:
    """Parse the header at ``path`` (``.hea`` added when missing); `HeaderError`, OSError."""
    path = Path(path)
    if path.suffix != ".hea":
        path = path.with_name(path.name + ".hea")
    size = regular_file(path).st_size
    if size > MAX_HEADER_BYTES:
        raise HeaderError(f"{path}: {size} bytes, more than a header can hold ({MAX_HEADER_BYTES})")
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except UnicodeDecodeError as error:
        raise HeaderError(f"{path}: not text ({error})") from None
    return parse_header(text)


def parse_header(text: str) -> WfdbHeader:
    """Parse header text (see the module docstring); `HeaderError` names the line and field."""
    numbered = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    comments = tuple(line[1:].strip() for _, line in numbered if line.startswith("#"))
    lines = [(n, line.split("#", 1)[0].strip()) for n, line in numbered if not line.startswith("#")]
    if not lines:
        raise HeaderError("the header has no record line")
    number, record_line = lines[0]
    record, n_signals, fs, samples = _record_line(record_line, number)
    signal_lines = lines[1:]
    if len(signal_lines) != n_signals:
        raise HeaderError(f"the record line declares {n_signals} signals but the header has {len(signal_lines)} signal lines")
    signals = tuple(_signal_line(line, n) for n, line in signal_lines)
    return WfdbHeader(record, n_signals, fs, samples, signals, comments)


def _record_line(line: str, number: int) -> tuple[str, int, float, int | None]:
    fields = line.split()
    if len(fields) < 2:
        raise HeaderError(f"line {number}: {line!r} is not 'RECORD N_SIGNALS [FS [N_SAMPLES ...]]'")
    record = fields[0].split("/")[0]
    if "/" in fields[0]:
        raise HeaderError(f"line {number}: {fields[0]!r} is a multi-segment record, which is not supported")
    n_signals = _integer(fields[1], "number of signals", number)
    fs = DEFAULT_FS
    if len(fields) > 2:
        rate = _RATE.match(fields[2])
        if not rate:
            raise HeaderError(f"line {number}: sampling frequency {fields[2]!r} is not FS[/COUNTER[(BASE)]]")
        fs = _number(rate["fs"], "sampling frequency", number)
    samples = _integer(fields[3], "number of samples", number) if len(fields) > 3 else None
    if n_signals < 0 or not (math.isfinite(fs) and fs > 0) or (samples is not None and samples < 0):
        raise HeaderError(f"line {number}: {line!r}: signals, rate and samples must be positive")
    return record, n_signals, fs, samples


def _signal_line(line: str, number: int) -> SignalSpec:
    fields = line.split(maxsplit=8)
    if len(fields) < 2:
        raise HeaderError(f"line {number}: {line!r} is not 'FILE FORMAT ...'")
    storage = _FORMAT.match(fields[1])
    if not storage:
        raise HeaderError(f"line {number}: format field {fields[1]!r} is not FORMAT[xSPF][:SKEW][+OFFSET]")
    fmt = int(storage["format"])
    if fmt not in FORMATS:
        raise HeaderError(f"line {number}: format {fmt} is not a WFDB storage format ({', '.join(map(str, FORMATS))})")
    values: dict = {
        "file": fields[0],
        "format": fmt,
        "samples_per_frame": int(storage["spf"] or 1),
        "skew": int(storage["skew"] or 0),
        "byte_offset": int(storage["offset"] or 0),
    }
    if values["samples_per_frame"] < 1:
        raise HeaderError(f"line {number}: samples per frame must be at least 1 (format field {fields[1]!r})")
    names = ("adc_resolution", "adc_zero", "initial_value", "checksum", "block_size")
    for name, text in zip(names, fields[3:8], strict=False):  # the trailing fields are optional
        values[name] = _integer(text, name.replace("_", " "), number)
    if len(fields) > 8:
        values["name"] = fields[8].strip()
    baseline = values.get("adc_zero", 0)
    if len(fields) > 2:
        gain = _GAIN.match(fields[2])
        if not gain:
            raise HeaderError(f"line {number}: gain field {fields[2]!r} is not GAIN[(BASELINE)][/UNITS]")
        values["gain"] = _number(gain["gain"], "ADC gain", number) or DEFAULT_GAIN
        values["units"] = gain["units"] or "mV"
        values["units_stated"] = gain["units"] is not None
        baseline = int(gain["baseline"]) if gain["baseline"] is not None else baseline
    return SignalSpec(**values, baseline=baseline)


def _integer(text: str, what: str, number: int) -> int:
    if len(text) > 20 or not re.fullmatch(r"[-+]?\d+", text):
        raise HeaderError(f"line {number}: {what} {text[:40]!r} is not an integer")
    return int(text)


def _number(text: str, what: str, number: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise HeaderError(f"line {number}: {what} {text[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise HeaderError(f"line {number}: {what} {text[:40]!r} is not finite")
    return value


def resolve_inside(folder: Path, name: str, root: Path, what: str = "signal file") -> Path:
    """``folder / name`` resolved, when inside ``root``; else `HeaderError` naming ``what`` it is."""
    path = (folder / name).resolve()
    if not path.is_relative_to(root.resolve()):
        raise HeaderError(f"{what} {name!r} resolves to {path}, outside the dataset root {root}")
    return path


def check_rate(header: WfdbHeader) -> None:
    """`HeaderError` when the header's rate is outside `RATE_RANGE` (e.g. ``1e12``, ``0.12``)."""
    low, high = RATE_RANGE
    if not low <= header.fs <= high:
        raise HeaderError(
            f"record {header.record!r} declares {header.fs:g} Hz, outside the {low:g} Hz to {high:g} Hz a biosignal is read at"
        )


def to_physical(
    stored: npt.ArrayLike, gain: npt.ArrayLike, baseline: npt.ArrayLike, factor: npt.ArrayLike | None = None
) -> np.ndarray:
    """Stored (signals, samples) ADC values as float64 physical = (stored − baseline) / gain ×
    factor, one gain, baseline and factor (unit rescaling, None: 1) per signal; checks nothing.

    >>> to_physical([[1200, 0], [-5, 15]], gain=[1000.0, 10.0], baseline=[200, 5], factor=[1.0, 1e3]).tolist()
    [[1.0, -0.2], [-1000.0, 1000.0]]
    """
    import numpy as np

    signal = (np.asarray(stored) - np.asarray(baseline, np.float64)[:, None]) / np.asarray(gain, np.float64)[:, None]
    return signal if factor is None else signal * np.asarray(factor, np.float64)[:, None]
