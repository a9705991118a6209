"""The cache's files: their names, meta.csv's columns, and writing and reading them.

Every writer takes what the build computed and writes one file; `read_meta` and
`read_rejections` read them back with numpy and the standard library only.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.cache.record import RecordOutcome
from cyclejepa.data.datasets import Entry, LabelLevel, RecordRejected, sha256_file
from cyclejepa.jsonio import json_sha256, writing

CACHE_FORMAT = 6
"""Version of the cache layout; part of the manifest hash (6: the channels, rates, window and
tokens in one ``geometry`` object, `cyclejepa.signal_geometry.SignalGeometry.to_dict`, in the
manifest and its arguments; 5: the signals in parts of bounded
size, `SIGNAL_PARTS`; 4: the rates named ``cache_fs`` and
``model_fs`` and the channels ``channels`` in the manifest, 3 called them ``fs_native``, ``fs``
and ``leads``; 3: the signal-neutral names `EVENTS_FILE`, ``record_id`` and ``events``; 2 wrote
them in the words of one signal)."""
PHASE_REVISION = 4
"""Revision of the built-in providers' event detection (2-4: revisions of the ``ecg-rpeak``
detector, described in docs/phase.md); part of the manifest hash, so a cache built
by an older detector is rebuilt rather than reused."""
MANIFEST = "manifest.json"
EVENTS_FILE = "events.npz"
"""The phase provider's events of every window, ragged (``indices``, ``offsets``)."""
SIGNAL_PARTS = "signals-{:05d}.npy"
"""The signals' part files, in row order; the manifest lists each with its rows (``signal_parts``)."""
PART_BYTES = 1 << 30
"""Default largest size of one signal part (1 GiB: about 22,000 windows of 12 x 1000 float32)."""
DATA_FILES = (
    "phase_centre.npy",
    "phase_causal.npy",
    EVENTS_FILE,
    "meta.csv",
    "norm.json",
    "rejections.csv",
)
ENTRY_COLUMNS = ("record_id", "record", "window", "patient_id", "fold", "age", "sex")
QC_COLUMNS = ("events", "phase_yield", "qc_ok", "qc_reason")
"""meta.csv holds `ENTRY_COLUMNS`, then one 0/1 column per class of each label level
(``{prefix}_{class}``), then `QC_COLUMNS`. record_id is the dataset's integer record id, record its
name, window the window's index in the record; age NaN unknown (PTB-XL: 300 = de-identified over
89); sex 0 male, 1 female, -1 unknown; events = the phase provider's events (cycles) detected in
the window (the first coordinate's); phase_yield = fraction of samples at the cache rate with a
defined phase; qc_reason = the provider's QC reasons joined by ``;``."""
_FLOAT_COLUMNS = ("age", "phase_yield")
_TEXT_COLUMNS = ("record", "qc_reason")


class NpyAppender:
    """A ``.npy`` file of rows of ``row_shape`` written by appending blocks (`append`), never
    mapped into memory; the header, a fixed `HEADER_BYTES`, gets the final row count on `close`."""

    HEADER_BYTES = 128

    def __init__(self, path: Path, row_shape: tuple[int, ...], dtype: Any = np.float32):
        self.path, self.row_shape, self.dtype, self.rows = Path(path), tuple(row_shape), np.dtype(dtype), 0
        with writing(self.path):
            self.stream = self.path.open("wb")
            self.stream.write(self._header())

    def _header(self) -> bytes:
        text = f"{{'descr': {self.dtype.str!r}, 'fortran_order': False, 'shape': {(self.rows, *self.row_shape)!r}, }}"
        body = text.ljust(self.HEADER_BYTES - 11) + "\n"
        if len(body) != self.HEADER_BYTES - 10:
            raise ValueError(f"{self.path}: shape {(self.rows, *self.row_shape)} does not fit a {self.HEADER_BYTES}-byte header")
        return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: rows of shape {block.shape[1:]}, expected {self.row_shape}")
        with writing(self.path):
            self.stream.write(block.tobytes())
        self.rows += len(block)

    def close(self) -> None:
        with writing(self.path):
            self.stream.seek(0)
            self.stream.write(self._header())
            self.stream.close()


def npy_layout(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, offset of the data) of the ``.npy`` file at ``path``."""
    with path.open("rb") as stream:
        version = np.lib.format.read_magic(stream)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(stream)
        if fortran:
            raise ValueError(f"{path}: Fortran-ordered arrays are not read by rows")
        return shape, dtype, stream.tell()


def read_rows(path: Path, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the ``.npy`` file at ``path``, read (not mapped: the pages of a
    memmap stay in the process's resident memory until it is closed)."""
    shape, dtype, offset = npy_layout(path)
    stop = min(stop, shape[0])
    row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    with path.open("rb") as stream:
        stream.seek(offset + start * row)
        data = np.frombuffer(stream.read(max(stop - start, 0) * row), dtype=dtype)
    return data.reshape((max(stop - start, 0), *shape[1:]))


def row_blocks(path: Path, size: int = 512):
    """The rows of the ``.npy`` file at ``path`` in consecutive blocks of ``size`` (`read_rows`)."""
    rows = npy_layout(path)[0][0]
    for start in range(0, rows, size):
        yield read_rows(path, start, start + size)


def reserve(path: Path, size: int) -> None:
    """Reserve ``size`` bytes for ``path`` (``posix_fallocate`` where the platform has it): a disk
    too small fails here with OSError(ENOSPC) naming the file, not later in a write."""
    if not hasattr(os, "posix_fallocate"):
        return
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        os.posix_fallocate(handle, 0, size)
    except OSError as error:
        raise OSError(error.errno, f"cannot reserve {size} bytes ({error.strerror or error})", str(path)) from None
    finally:
        os.close(handle)


def write_npy(target: Any, shape: tuple[int, ...], dtype: Any, blocks: Iterable[np.ndarray]) -> None:
    """Write a ``.npy`` of ``shape`` to the open binary ``target`` from consecutive ``blocks``
    (numpy's own header, so the file is what `np.save` would write)."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(target, header)
    written = 0
    for block in blocks:
        block = np.ascontiguousarray(block, dtype=dtype)
        target.write(block.tobytes())
        written += len(block)
    if written != shape[0]:
        raise ValueError(f"wrote {written} rows, expected {shape[0]}")


def meta_columns(levels: Sequence[LabelLevel]) -> tuple[str, ...]:
    """The columns of meta.csv for these label levels (see `QC_COLUMNS`)."""
    return ENTRY_COLUMNS + tuple(c for level in levels for c in level.columns()) + QC_COLUMNS


def meta_row(entry: Entry, levels: Sequence[LabelLevel], outcome: RecordOutcome) -> list:
    """One window's row of meta.csv (`meta_columns`)."""
    labels = [int(c in entry.labels.get(level.name, ())) for level in levels for c in level.classes]
    return [
        entry.id,
        entry.name,
        outcome.window,
        entry.patient_id,
        entry.fold,
        "" if np.isnan(entry.age) else entry.age,
        entry.sex,
        *labels,
        len(outcome.events[0]),
        outcome.phase_yield,
        int(outcome.qc_ok),
        outcome.qc_reason,
    ]


def write_rejections(path: Path, rejections: Iterable[RecordRejected], header: bool = True) -> None:
    with writing(path), path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        if header:
            writer.writerow(("id", "check", "detail"))
        writer.writerows((r.record_id, r.check, r.detail) for r in rejections)


def as_json(options: Mapping[str, Any]) -> Any:
    """``options`` as the manifest records them: through JSON, keys sorted, other types as text."""
    return json.loads(json.dumps(dict(options), sort_keys=True, default=str))


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """sha256 of the build arguments (the manifest's ``config_hash``)."""
    return json_sha256(arguments)


def write_manifest(
    build_dir: Path,
    arguments: dict[str, Any],
    dataset: dict[str, Any],
    levels: Sequence[LabelLevel],
    counts: dict[str, int],
    parts: list[dict[str, Any]],
    coordinates: Sequence[str] = (),
) -> None:
    """manifest.json: the arguments and their hash, the dataset's facts (``dataset``: its name,
    channel units and fold protocol), the ``geometry`` every later stage reads, the label
    vocabularies, the ``counts`` (records, records_kept, kept, rejected, qc_failed), the signal
    ``parts`` (file and rows of each, in row order) and the sha256 of every data file."""
    names = [part["file"] for part in parts] + list(DATA_FILES)
    manifest = {
        "config_hash": arguments_hash(arguments),
        "arguments": arguments,
        "cyclejepa_version": arguments["cyclejepa_version"],
        "dataset": dataset,
        "geometry": arguments["geometry"],
        "label_levels": [{"name": lv.name, "prefix": lv.prefix, "classes": list(lv.classes)} for lv in levels],
        "counts": counts,
        "signal_parts": parts,
        "files": {name: sha256_file(build_dir / name) for name in names},
    }
    if coordinates:
        manifest["phase_coordinates"] = list(coordinates)
    with writing(build_dir / MANIFEST):
        (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=2))


def read_meta(path: Path, expected: tuple[str, ...], rows_at_once: int = 65536) -> dict[str, np.ndarray]:
    """meta.csv as one numpy array per column, converted ``rows_at_once`` rows at a time (the
    text of a large cache is never held whole)."""
    with path.open(newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader)
        if tuple(header) != expected:
            raise ValueError(f"{path}: columns {header} differ from {list(expected)}")
        blocks: dict[str, list[np.ndarray]] = {name: [] for name in header}
        while True:
            rows = list(itertools.islice(reader, rows_at_once))
            for name, column in zip(header, list(zip(*rows, strict=True)) or [()] * len(header), strict=True):
                blocks[name].append(_meta_column(name, column))
            if len(rows) < rows_at_once:
                break
    columns = {name: np.concatenate(parts) for name, parts in blocks.items()}
    columns["qc_ok"] = columns["qc_ok"].astype(bool)
    return columns


def _meta_column(name: str, column: Sequence[str]) -> np.ndarray:
    if name in _TEXT_COLUMNS:
        return np.array(column, dtype=str)
    if name in _FLOAT_COLUMNS:
        return np.array([float(v) if v else np.nan for v in column], dtype=np.float64)
    return np.array([int(v) for v in column], dtype=np.int64)


def read_rejections(path: Path) -> list[RecordRejected]:
    """rejections.csv as `RecordRejected`: an id written as an integer (a dataset's entry id) is
    read back as one, every other id, digit-only record names with a leading zero such as
    ``03700181`` included, stays the string written."""
    with path.open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    return [RecordRejected(_record_id(r["id"]), r["check"], r["detail"]) for r in rows]


def _record_id(text: str) -> int | str:
    """``text`` as the integer it spells exactly (``str(int(text)) == text``), else unchanged."""
    return int(text) if text.isdecimal() and str(int(text)) == text else text
