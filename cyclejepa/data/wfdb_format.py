"""The WFDB format as the library reads it: headers (`cyclejepa.data.wfdb_header`, its grammar),
samples (`cyclejepa.data.samples`, the one sample reader) and annotations (`read_annotation`).
Other modules import these names from here. The Challenge 2021 release writes ``16x1+24``
(format 16, one sample per frame, byte offset 24: a MATLAB Level 4 matrix ``val``):

>>> header = parse_header("E07500 1 500 5000\\nE07500.mat 16x1+24 1000.0(0)/mV 16 0 -68 1250 0 I")
>>> s = header.signals[0]
>>> (s.format, s.samples_per_frame, s.byte_offset, s.gain, s.baseline, s.units, s.name)
(16, 1, 24, 1000.0, 0, 'mV', 'I')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cyclejepa.data.samples import SampleError, Samples, WfdbRecord, read_record, read_samples
from cyclejepa.data.wfdb_header import (
    FORMATS,
    MAX_RECORD_SAMPLES,
    RATE_RANGE,
    HeaderError,
    SignalSpec,
    WfdbHeader,
    check_rate,
    parse_header,
    read_header,
    regular_file,
    resolve_inside,
    to_physical,
)

if TYPE_CHECKING:
    import os

__all__ = [
    "FORMATS",
    "MAX_RECORD_SAMPLES",
    "RATE_RANGE",
    "HeaderError",
    "SampleError",
    "Samples",
    "SignalSpec",
    "WfdbHeader",
    "WfdbRecord",
    "check_rate",
    "parse_header",
    "read_annotation",
    "read_header",
    "read_record",
    "read_samples",
    "regular_file",
    "resolve_inside",
    "to_physical",
]


def read_annotation(path: str | os.PathLike[str], extension: str):
    """The ``wfdb`` annotation ``extension`` of the record at ``path`` (no extension);
    FileNotFoundError or ValueError naming a missing or unreadable file."""
    import wfdb

    try:
        return wfdb.rdann(str(path), extension)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"annotation {extension!r} of WFDB record {str(path)!r} not found: {error}") from error
    except Exception as error:  # wfdb raises assorted types for malformed files
        raise ValueError(f"cannot read annotation {extension!r} of WFDB record {str(path)!r}: {error}") from error
