"""The cache's files: their names, meta.csv's columns, and writing and reading them.

Every writer takes what the build computed and writes one file; `read_meta` and
`read_rejections` read them back with numpy and the standard library only.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.cache.record import RecordOutcome
from cyclejepa.data.datasets import Entry, LabelLevel, RecordRejected, sha256_file
from cyclejepa.data.preprocess import Normalisation
from cyclejepa.jsonio import json_sha256, writing

CACHE_FORMAT = 4
"""Version of the cache layout; part of the manifest hash (4: the rates named ``cache_fs`` and
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
DATA_FILES = (
    "signals.npy",
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


def allocated_memmap(path: Path, shape: tuple[int, ...]) -> np.memmap:
    """A float32 ``.npy`` memmap of ``shape`` written at ``path``, its blocks reserved on disk
    first (``posix_fallocate`` where the platform has it): a disk too small fails here with
    OSError(ENOSPC) naming the file, not later with SIGBUS when a page of a sparse file is
    written."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    if hasattr(os, "posix_fallocate"):
        size = path.stat().st_size
        handle = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(handle, 0, size)
        except OSError as error:
            del out
            raise OSError(error.errno, f"cannot reserve {size} bytes ({error.strerror or error})", str(path)) from None
        finally:
            os.close(handle)
    return out


def write_signals(path: Path, scratch: np.ndarray, norm: Normalisation) -> None:
    out = allocated_memmap(path, scratch.shape)
    for start in range(0, len(scratch), 512):
        out[start : start + 512] = norm.apply(scratch[start : start + 512])
    out.flush()


def write_phases(build_dir: Path, kept: list[RecordOutcome], n_tokens: int) -> None:
    """phase_{centre,causal}.npy ((N, T), or (N, T, C) for C coordinates) and `EVENTS_FILE`."""
    n_coordinates = len(kept[0].events) if kept else 1
    shape = (0, n_tokens) if n_coordinates == 1 else (0, n_tokens, n_coordinates)
    for convention in ("centre", "causal"):
        stack = [getattr(o, f"phase_{convention}") for o in kept]
        with writing(build_dir / f"phase_{convention}.npy"):
            np.save(build_dir / f"phase_{convention}.npy", np.stack(stack) if stack else np.zeros(shape, np.float32))
    arrays: dict[str, Any] = {}
    for c in range(n_coordinates):
        events = [o.events[c] for o in kept]
        suffix = f"_{c}" if c else ""
        arrays[f"indices{suffix}"] = np.concatenate(events).astype(np.int64) if events else np.zeros(0, np.int64)
        arrays[f"offsets{suffix}"] = np.concatenate([[0], np.cumsum([len(e) for e in events])]).astype(np.int64)
    with writing(build_dir / EVENTS_FILE):
        np.savez(build_dir / EVENTS_FILE, **arrays)


def meta_columns(levels: Sequence[LabelLevel]) -> tuple[str, ...]:
    """The columns of meta.csv for these label levels (see `QC_COLUMNS`)."""
    return ENTRY_COLUMNS + tuple(c for level in levels for c in level.columns()) + QC_COLUMNS


def write_meta(path: Path, entries: list[Entry], levels: Sequence[LabelLevel], kept: list[RecordOutcome]) -> None:
    rows = []
    for e, o in zip(entries, kept, strict=True):
        labels = [int(c in e.labels.get(level.name, ())) for level in levels for c in level.classes]
        rows.append([e.id, e.name, o.window, e.patient_id, e.fold, "" if np.isnan(e.age) else e.age, e.sex,
                     *labels, len(o.events[0]), o.phase_yield, int(o.qc_ok), o.qc_reason])  # fmt: skip
    with writing(path), path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(meta_columns(levels))
        writer.writerows(rows)


def write_rejections(path: Path, rejections: Iterable[RecordRejected]) -> None:
    with writing(path), path.open("w", newline="") as stream:
        writer = csv.writer(stream)
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
    n_records: int,
    kept: list[RecordOutcome],
    rejections: list[RecordRejected],
) -> None:
    """manifest.json: the arguments and their hash, the dataset's facts (``dataset``: its name,
    channel units and fold protocol), the rates and shapes every later stage reads, the label
    vocabularies, the counts and the sha256 of every data file."""
    manifest = {
        "config_hash": arguments_hash(arguments),
        "arguments": arguments,
        "cyclejepa_version": arguments["cyclejepa_version"],
        "dataset": dataset,
        "channels": arguments["channels"],
        "cache_fs": arguments["cache_fs"],
        "model_fs": arguments["cache_fs"] / arguments["decimation"],
        "window_s": arguments["window_s"],
        "token_patch": arguments["token_patch"],
        "label_levels": [{"name": lv.name, "prefix": lv.prefix, "classes": list(lv.classes)} for lv in levels],
        "counts": {
            "records": n_records,
            "records_kept": len({o.row for o in kept}),
            "kept": len(kept),
            "rejected": len(rejections),
            "qc_failed": sum(not o.qc_ok for o in kept),
        },
        "files": {name: sha256_file(build_dir / name) for name in DATA_FILES},
    }
    if kept and kept[0].coordinates:
        manifest["phase_coordinates"] = list(kept[0].coordinates)
    with writing(build_dir / MANIFEST):
        (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=2))


def read_meta(path: Path, expected: tuple[str, ...]) -> dict[str, np.ndarray]:
    with path.open(newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader)
        if tuple(header) != expected:
            raise ValueError(f"{path}: columns {header} differ from {list(expected)}")
        values = list(zip(*reader, strict=True)) or [()] * len(header)
    columns = {}
    for name, column in zip(header, values, strict=True):
        if name in _TEXT_COLUMNS:
            columns[name] = np.array(column, dtype=str)
        elif name in _FLOAT_COLUMNS:
            columns[name] = np.array([float(v) if v else np.nan for v in column], dtype=np.float64)
        else:
            columns[name] = np.array([int(v) for v in column], dtype=np.int64)
    columns["qc_ok"] = columns["qc_ok"].astype(bool)
    return columns


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
