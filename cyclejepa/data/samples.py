"""The one reader of stored samples: WFDB signal files (``.dat``) and MATLAB ``.mat`` files.

Every reader of samples goes through `read_samples` (or `read_record`: physical units, one
rate; `read_matlab_variable` for a plain MATLAB file). In order, before any sample is read:

1. the header is parsed; a header or signal file that is not a regular file is never opened;
2. every signal file lies inside ``root`` (by default the record's folder);
3. the frames (the header's count, else what the file holds) × Σ samples per frame are at most
   `MAX_RECORD_SAMPLES`, and a file shorter than they need is refused;
4. a ``.mat`` file's header bytes match the WFDB header: MATLAB Level 4 (``wfdb2mat``, the
   Challenge 2021 release) the format's type (16: int16, 32: int32, 80: uint8, 160: uint16, 61:
   big-endian int16), rows Σ samples per frame, columns frames, data at the byte offset; Level 5
   (``scipy.io.savemat``) ``val`` of that class and shape, at most `MAX_MAT_EXPANSION` × the
   file's size, inflated no further than its shape declares.

Decoded here: formats 8, 16, 24, 32, 61, 80, 160, 212, 310, 311 with samples per frame (each
signal at its own rate), skew and byte offsets; FLAC (508, 516, 524) by ``wfdb`` after the same
checks. A stored `INVALID` value is missing: NaN in physical units (`Samples.physical`).

Memory: at most 20 bytes per sample (stored bytes, int32 twice while frames are split, float64),
so 2.5 GiB for `MAX_RECORD_SAMPLES` = 2^27; a record that still runs out of memory is rejected
by name (check ``memory``) and the batch goes on.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cyclejepa.data.wfdb_header import (
    MAX_RECORD_SAMPLES,
    HeaderError,
    SignalSpec,
    WfdbHeader,
    check_rate,
    read_header,
    regular_file,
    resolve_inside,
    to_physical,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DECODED",
    "INVALID",
    "MAX_MAT_EXPANSION",
    "SampleError",
    "Samples",
    "WfdbRecord",
    "read_matlab_variable",
    "read_record",
    "read_samples",
]

INVALID = {
    8: None,
    16: -32768,
    24: -(2**23),
    32: -(2**31),
    61: -32768,
    80: -128,
    160: -32768,
    212: -2048,
    310: -512,
    311: -512,
    508: -128,
    516: -32768,
    524: -(2**23),
}
"""Each format's invalid-sample value (a missing sample); format 8 has none."""
DECODED = {8: 1, 16: 2, 24: 3, 32: 4, 61: 2, 80: 1, 160: 2, 212: 1.5, 310: 4 / 3, 311: 4 / 3}
"""Bytes per sample of the formats decoded here (the others go to the ``wfdb`` package)."""
MAX_MAT_EXPANSION = 64
"""The most a MATLAB Level 5 file's samples may take over the file's own size (stored biosignals
compress about 2-4 times); a file declaring more is refused before it is decompressed."""
_MAT4_TYPES = {(16, 0): 3, (61, 1): 3, (32, 0): 2, (80, 0): 5, (160, 0): 4}
"""(WFDB format, MATLAB byte order M) -> MATLAB Level 4 precision P (type code M*1000 + P*10)."""
_MAT5_CLASSES = {16: "int16", 61: "int16", 32: "int32", 80: "uint8", 160: "uint16"}


@dataclass(frozen=True)
class WfdbRecord:
    """A record's samples in physical units: ``signal`` (signals, samples) float64 at ``fs`` Hz;
    ``units`` as the header states them, None for a signal whose line names none."""

    name: str
    signal: np.ndarray
    fs: float
    names: tuple[str, ...]
    units: tuple[str | None, ...]


class SampleError(HeaderError):
    """A record's signal files do not match its header; ``check`` names the failed check
    (``unreadable``, ``extent``, ``format``, ``outside_root``). A `HeaderError`."""

    def __init__(self, check: str, message: str):
        self.check = check
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.check, str(self))


@dataclass(frozen=True)
class Samples:
    """The stored samples of some of a record's signals: ``digital[i]`` (int32) holds signal
    ``rows[i]`` of ``header`` at its own rate (header rate x its samples per frame)."""

    header: WfdbHeader
    rows: tuple[int, ...]
    digital: tuple[np.ndarray, ...]

    @property
    def specs(self) -> tuple[SignalSpec, ...]:
        return tuple(self.header.signals[row] for row in self.rows)

    def invalid(self, i: int) -> np.ndarray:
        """Where signal ``i``'s stored value is its format's invalid-sample value (`INVALID`)."""
        code = INVALID.get(self.specs[i].format)
        return np.zeros(len(self.digital[i]), bool) if code is None else self.digital[i] == code

    def physical(self, i: int, smooth: bool = False) -> np.ndarray:
        """Signal ``i`` as float64 (stored − baseline) / gain, NaN where missing; ``smooth``: at the
        frame rate, each frame's values averaged and truncated first (as ``wfdb.rdrecord``)."""
        spec, stored, invalid = self.specs[i], self.digital[i], self.invalid(i)
        if smooth and spec.samples_per_frame > 1:
            total = stored.reshape(-1, spec.samples_per_frame).sum(axis=1, dtype=np.int64)
            stored = np.trunc(total / spec.samples_per_frame).astype(np.int64)
            code = INVALID.get(spec.format)
            invalid = np.zeros(len(stored), bool) if code is None else stored == code
        x = to_physical(stored[None], [spec.gain], [spec.baseline])[0]
        x[invalid] = np.nan
        return x


def read_samples(
    path: str | os.PathLike[str],
    rows: Sequence[int] | None = None,
    root: str | os.PathLike[str] | None = None,
    header: WfdbHeader | None = None,
) -> Samples:
    """Stored samples of signals ``rows`` (default all) of the WFDB record at ``path`` (no
    extension), after the module's checks; signal files must lie in ``root`` (default: the
    record's folder). `HeaderError` for a bad header, `SampleError` for bad signal files."""
    path = Path(path)
    header = read_header(path) if header is None else header
    rows = tuple(range(len(header.signals)) if rows is None else rows)
    root = path.parent if root is None else Path(root)
    files = dict.fromkeys(header.signals[r].file for r in rows)
    declared = (header.samples or 0) * sum(s.samples_per_frame for s in header.signals if s.file in files)
    if declared > MAX_RECORD_SAMPLES:
        raise HeaderError(
            f"record {header.record!r} declares {declared} samples, more than the {MAX_RECORD_SAMPLES} a record may hold"
        )
    layouts = [_layout(header, path.parent, root, name) for name in files]
    total = sum(layout.frames * layout.per_frame for layout in layouts)
    if total > MAX_RECORD_SAMPLES:
        raise HeaderError(
            f"record {header.record!r}: signal file(s) {', '.join(map(repr, files))} hold {total} samples, "
            f"more than the {MAX_RECORD_SAMPLES} a record may hold"
        )
    decoded: dict[int, np.ndarray] = {}
    for layout in layouts:
        decoded |= layout.read(path)
    return Samples(header, rows, tuple(decoded[row] for row in rows))


@dataclass(frozen=True)
class _Layout:
    """One signal file: header rows in file order, format, samples per frame, skews, offset, frames."""

    path: Path
    rows: tuple[int, ...]
    format: int
    spf: tuple[int, ...]
    skew: tuple[int, ...]
    offset: int
    frames: int
    size: int
    initial: dict[int, int]
    """header row -> initial value (format 8: its samples are differences from it)"""
    level5: bool = False

    @property
    def per_frame(self) -> int:
        return sum(self.spf)

    def read(self, record: Path) -> dict[int, np.ndarray]:
        """header row -> that signal's stored samples (int32) at its own rate."""
        if self.level5:
            values = _mat5_val(self.path, self.frames, self.format, self.spf, read=True)[1]
            assert values is not None, "read=True returns the matrix"
            return dict(zip(self.rows, values, strict=True))
        if self.format not in DECODED:
            return _read_with_wfdb(record, self)
        extra = max(self.skew)
        available = (
            math.floor((self.size - self.offset) / (DECODED[self.format] * self.per_frame)) if self.size > self.offset else 0
        )
        frames = min(self.frames + extra, available) if extra else self.frames
        flat = _decode(self.path, self.format, self.offset, frames * self.per_frame).reshape(frames, self.per_frame)
        if not extra and self.format != 8 and set(self.spf) == {1}:  # one transposed copy, each signal a row of it
            return dict(zip(self.rows, np.ascontiguousarray(flat.T), strict=True))
        out, start = {}, 0
        for row, spf, skew in zip(self.rows, self.spf, self.skew, strict=True):
            x = flat[skew : skew + self.frames, start : start + spf].reshape(-1)
            start += spf
            if len(x) < self.frames * spf:  # skewed past the end of the file: missing
                x = np.concatenate([x, np.full(self.frames * spf - len(x), INVALID[self.format] or 0, np.int32)])
            out[row] = x if self.format != 8 else np.cumsum(x, dtype=np.int32) + np.int32(self.initial[row])
        return out


def _layout(header: WfdbHeader, folder: Path, root: Path, name: str) -> _Layout:
    """The layout of signal file ``name`` with its size and frame count checked (module docstring)."""
    rows = tuple(r for r, s in enumerate(header.signals) if s.file == name)
    signals = [header.signals[r] for r in rows]
    formats = {s.format for s in signals}
    if len(formats) != 1:
        raise SampleError("format", f"signal file {name!r} of record {header.record!r} mixes formats {sorted(formats)}")
    try:
        path = resolve_inside(folder, name, root)
    except HeaderError as error:
        raise SampleError("outside_root", str(error)) from None
    size = _regular_size(path, header.record)
    fmt, spf, skew = formats.pop(), tuple(s.samples_per_frame for s in signals), tuple(s.skew for s in signals)
    offset, level5, frames = signals[0].byte_offset, False, header.samples
    if path.suffix.lower() == ".mat":
        offset, level5, frames = _mat_layout(path, size, header, fmt, spf, offset)
    if frames is None:
        if fmt not in DECODED:
            raise SampleError(
                "extent",
                f"record {header.record!r} declares no sample count; its compressed format {fmt} "
                "cannot be bounded before it is decoded",
            )
        frames = max(0, math.floor((size - offset) / (DECODED[fmt] * sum(spf))))
    initial = {r: header.signals[r].initial_value or 0 for r in rows}
    layout = _Layout(path, rows, fmt, spf, skew, offset, frames, size, initial, level5)
    _check_size(layout, header.record)
    return layout


def _regular_size(path: Path, record: str) -> int:
    """The size of ``path``; `SampleError` when it is missing or not a regular file."""
    try:
        return regular_file(path).st_size
    except FileNotFoundError:
        raise SampleError("unreadable", f"signal file {path.name!r} of record {record!r} does not exist") from None
    except HeaderError as error:
        raise SampleError("unreadable", str(error)) from None


def _check_size(layout: _Layout, record: str) -> None:
    """`SampleError` (``extent``) when the file is shorter than its declared frames need."""
    if layout.level5 or layout.format not in DECODED:
        return
    needed = layout.offset + stored_bytes(layout.format, layout.frames * layout.per_frame)
    if layout.size < needed:
        raise SampleError(
            "extent",
            f"signal file {layout.path.name!r} has {layout.size} bytes; the header of {record!r} "
            f"declares {layout.frames} frames of {layout.per_frame} samples in format {layout.format}, "
            f"{needed} bytes",
        )


def stored_bytes(fmt: int, n: int) -> int:
    """Bytes of ``n`` samples of format ``fmt``: ⌈n × `DECODED`⌉; a whole 4-byte block for a last
    pair in format 310 (its second sample has bits in the fourth byte)."""
    if fmt == 310 and n % 3 == 2:
        return 4 * math.ceil(n / 3)
    return math.ceil(n * DECODED[fmt])


def _decode(path: Path, fmt: int, offset: int, n: int) -> np.ndarray:
    """``n`` stored samples of format ``fmt`` from ``offset`` bytes into ``path``, int32."""
    count = stored_bytes(fmt, n)
    with path.open("rb") as stream:
        stream.seek(offset)
        raw = np.frombuffer(stream.read(count), np.uint8)
    if len(raw) < count:
        raise SampleError("extent", f"{path.name}: {len(raw)} bytes from offset {offset}, {count} needed")
    if fmt in (16, 61, 160, 32):
        dtype = {16: "<i2", 61: ">i2", 160: "<u2", 32: "<i4"}[fmt]
        values = raw.view(dtype).astype(np.int32)
        return values - 32768 if fmt == 160 else values
    if fmt in (8, 80):
        return raw.view(np.int8).astype(np.int32) if fmt == 8 else raw.astype(np.int32) - 128
    if fmt == 24:
        b = raw.reshape(-1, 3).astype(np.int32)
        return _signed(b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16), 24)
    block = 3 if fmt == 212 else 4
    b = np.concatenate([raw, np.zeros(-len(raw) % block, np.uint8)]).reshape(-1, block).astype(np.int32)
    if fmt == 212:
        values = np.stack([b[:, 0] | ((b[:, 1] & 0x0F) << 8), b[:, 2] | ((b[:, 1] & 0xF0) << 4)], axis=1)
        return _signed(values.reshape(-1)[:n], 12)
    if fmt == 310:
        values = np.stack(
            [
                (b[:, 0] >> 1) | ((b[:, 1] & 0x07) << 7),
                (b[:, 2] >> 1) | ((b[:, 3] & 0x07) << 7),
                ((b[:, 1] >> 3) & 0x1F) | (((b[:, 3] >> 3) & 0x1F) << 5),
            ],
            axis=1,
        )
    else:  # 311
        values = np.stack(
            [
                b[:, 0] | ((b[:, 1] & 0x03) << 8),
                (b[:, 1] >> 2) | ((b[:, 2] & 0x0F) << 6),
                (b[:, 2] >> 4) | ((b[:, 3] & 0x3F) << 4),
            ],
            axis=1,
        )
    return _signed(values.reshape(-1)[:n], 10)


def _signed(values: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned ``bits``-bit values as two's complement, int32."""
    values = values.astype(np.int32)
    values[values >= 1 << (bits - 1)] -= 1 << bits
    return values


def _mat_layout(path: Path, size: int, header: WfdbHeader, fmt: int, spf: tuple[int, ...], offset: int) -> tuple[int, bool, int]:
    """(byte offset, Level 5?, frames) of a MATLAB file whose header bytes match the WFDB header."""
    with path.open("rb") as stream:
        head = stream.read(128)
    if len(head) >= 20 and 0 in head[:4]:
        data, frames = _mat4_layout(path, head, header, fmt, spf, offset)
        return data, False, frames
    if len(head) == 128 and head[126:128] in (b"IM", b"MI"):
        return 0, True, _mat5_val(path, header.samples, fmt, spf, read=False)[0]
    raise SampleError("format", f"{path.name} is neither a MATLAB Level 4 nor a Level 5 file")


def _mat4_layout(path: Path, head: bytes, header: WfdbHeader, fmt: int, spf: tuple[int, ...], offset: int) -> tuple[int, int]:
    """(byte offset, frames) of a Level 4 matrix whose type, rows (Σ samples per frame), columns
    (frames) and data offset match the WFDB header."""
    order = "<" if 0 <= struct.unpack("<i", head[:4])[0] < 5000 else ">"  # a type code is below 5000
    mopt, rows, columns, imaginary, name_length = struct.unpack(order + "5i", head[:20])
    byte_order, precision, kind = mopt // 1000, (mopt // 10) % 10, mopt % 10
    expected = _MAT4_TYPES.get((fmt, byte_order))
    if kind != 0 or imaginary or precision != expected:
        raise SampleError(
            "format",
            f"{path.name} stores a MATLAB Level 4 matrix of type code {mopt} (imaginary part: "
            f"{bool(imaginary)}); the header's format {fmt} needs type code {byte_order * 1000 + (expected or 0) * 10} "
            "(a real full matrix of that integer type)",
        )
    if rows != sum(spf) or (header.samples is not None and columns != header.samples) or columns < 0:
        raise SampleError(
            "extent",
            f"{path.name} stores a {rows} x {columns} matrix; the header of {header.record!r} "
            f"declares {sum(spf)} x {header.samples}",
        )
    data = 20 + name_length
    if not 0 < name_length <= 64 or offset != data:
        raise SampleError("format", f"{path.name}: its matrix starts at byte {data}, the header's byte offset is {offset}")
    return offset, columns


_MI_TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 9: "f8", 12: "i8", 13: "u8"}
"""MATLAB Level 5 data types -> numpy type codes (byte order added from the file's header)."""
_MX_CLASSES = {6: "double", 7: "single", 8: "int8", 9: "uint8", 10: "int16", 11: "uint16", 12: "int32", 13: "uint32"}


class _Mat5Element:
    """One Level 5 data element; `read` inflates exactly the bytes asked for, never more."""

    def __init__(self, stream, size: int, compressed: bool, name: str):
        self.stream, self.left, self.name = stream, size, name
        self.file_size = os.fstat(stream.fileno()).st_size
        self.inflater = zlib.decompressobj() if compressed else None

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self.inflater is None:
                chunk = self.stream.read(min(n - len(out), self.left))
            else:
                tail = self.inflater.unconsumed_tail
                source = tail if tail else self.stream.read(min(1 << 16, self.left))
                if not tail:
                    self.left -= len(source)
                chunk = self.inflater.decompress(source, n - len(out)) if source else b""
            if not chunk and (self.inflater is None or not source):
                raise SampleError("unreadable", f"{self.name}: a MATLAB element ends {n - len(out)} bytes early")
            if self.inflater is None:
                self.left -= len(chunk)
            out += chunk
        return bytes(out)

    def tag(self, order: str) -> tuple[int, int, bytes | None]:
        """(data type, bytes, the data of a small element or None) of the next tag."""
        first, second = struct.unpack(order + "II", self.read(8))
        if first >> 16:  # small data element: type and size in 4 bytes, up to 4 bytes of data
            return first & 0xFFFF, first >> 16, struct.pack(order + "I", second)[: first >> 16]
        return first, second, None

    def field(self, order: str) -> bytes:
        """The data of the next sub-element, its padding to 8 bytes skipped."""
        kind, size, small = self.tag(order)
        return small if small is not None else self.read(size + (-size % 8))[:size]


def _mat5_val(path: Path, samples: int | None, fmt: int, spf: tuple[int, ...], read: bool) -> tuple[int, np.ndarray | None]:
    """(frames, ``val`` as (signals, frames) int32 when ``read``) of a Level 5 file, its class and
    dimensions checked against the WFDB header before any sample is inflated."""
    with path.open("rb") as stream:
        order = "<" if stream.read(128)[126:128] == b"IM" else ">"
        while len(tag := stream.read(8)) == 8:
            kind, size = struct.unpack(order + "II", tag)
            start = stream.tell()
            if kind in (14, 15):
                element = _Mat5Element(stream, size, kind == 15, path.name)
                if kind == 15 and element.tag(order)[0] != 14:
                    raise SampleError("format", f"{path.name}: a compressed element that is not a matrix")
                found = _mat5_matrix(element, order, path.name, samples, fmt, spf, read)
                if found is not None:
                    return found
            stream.seek(start + size + (-size % 8 if kind != 15 else 0))
    raise SampleError("unreadable", f"{path.name} holds no MATLAB matrix named 'val'")


def _mat5_matrix(
    element: _Mat5Element, order: str, name: str, samples: int | None, fmt: int, spf: tuple[int, ...], read: bool
) -> tuple[int, np.ndarray | None] | None:
    """`_mat5_val` of one matrix element; None when it is not named ``val``."""
    flags = struct.unpack(order + "II", element.field(order))[0]
    raw = element.field(order)
    dims = struct.unpack(order + "i" * (len(raw) // 4), raw)
    if element.field(order) != b"val":
        return None
    kind = _MX_CLASSES.get(flags & 0xFF, f"class {flags & 0xFF}")
    if any(n != 1 for n in spf) or kind != _MAT5_CLASSES.get(fmt):
        raise SampleError(
            "format",
            f"{name} stores 'val' as {kind}, the header's format {fmt} as {_MAT5_CLASSES.get(fmt)}"
            + ("" if set(spf) == {1} else f" with one sample per frame, not {list(spf)}"),
        )
    if len(dims) != 2 or dims[0] != len(spf) or (samples is not None and dims[1] != samples):
        raise SampleError("extent", f"{name} declares 'val' of shape {dims}; the header {(len(spf), samples)}")
    needed = np.dtype(kind).itemsize * dims[0] * dims[1]
    if needed > MAX_MAT_EXPANSION * element.file_size:
        raise SampleError(
            "extent",
            f"{name} declares {needed} bytes of samples in a file of {element.file_size} bytes, "
            f"more than {MAX_MAT_EXPANSION} times its size",
        )
    if not read:
        return dims[1], None
    stored, size, small = element.tag(order)
    if stored not in _MI_TYPES or size != np.dtype(_MI_TYPES[stored]).itemsize * dims[0] * dims[1]:
        raise SampleError("extent", f"{name}: 'val' of shape {dims} holds {size} bytes of data type {stored}")
    data = small if small is not None else element.read(size)
    values = np.frombuffer(data, np.dtype(order + _MI_TYPES[stored])).reshape(dims[1], dims[0]).T
    return dims[1], values.astype(np.int32)


def _read_with_wfdb(record: Path, layout: _Layout) -> dict[int, np.ndarray]:
    """A compressed (FLAC) file's signals, decoded by the ``wfdb`` package after the checks."""
    import wfdb

    try:
        data = wfdb.rdrecord(str(record), channels=list(layout.rows), physical=False, smooth_frames=False)
    except Exception as error:  # the package raises assorted types for malformed files
        raise SampleError("unreadable", f"samples of {layout.path.name}: {error}") from error
    return {row: np.asarray(x, np.int32) for row, x in zip(layout.rows, data.e_d_signal, strict=True)}


def read_record(path: str | os.PathLike[str]) -> WfdbRecord:
    """The WFDB record at ``path`` (no extension) in physical units at the frame rate
    (`Samples.physical` with ``smooth``), NaN where missing; its rate must lie in `RATE_RANGE`.
    FileNotFoundError for a missing record, ValueError naming it for anything unreadable."""
    path = Path(path)
    if not path.with_name(path.name + ".hea").exists():
        raise FileNotFoundError(f"WFDB record {str(path)!r} not found (give the path without extension)")
    try:
        header = read_header(path)
        check_rate(header)
        samples = read_samples(path, header=header)
    except HeaderError as error:  # SampleError too
        raise (
            SampleError(error.check, f"{path}: {error}") if isinstance(error, SampleError) else HeaderError(f"{path}: {error}")
        ) from None
    frames = [samples.physical(i, smooth=True) for i in range(len(header.signals))]
    units = tuple(s.units if s.units_stated else None for s in header.signals)
    signal = np.stack(frames) if frames else np.zeros((0, header.samples or 0))
    return WfdbRecord(path.name, signal, header.fs, header.names, units)


def read_matlab_variable(path: str | os.PathLike[str], name: str) -> np.ndarray:
    """Variable ``name`` of a plain MATLAB file (no WFDB header to check it against, e.g. an
    annotated reference set's ``ecg`` and ``R_peak``); KeyError naming a missing one."""
    from scipy.io import loadmat

    variables = loadmat(Path(path), variable_names=[name])
    if name not in variables:
        raise KeyError(f"{path} holds no MATLAB variable {name!r}")
    return np.asarray(variables[name])
