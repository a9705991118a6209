"""A prepared cache, loaded with numpy only (`PreparedCache`), and its consistency checks."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

from cyclejepa.data.cache.files import CACHE_FORMAT, EVENTS_FILE, MANIFEST, meta_columns, read_meta, read_rejections
from cyclejepa.data.datasets import FoldProtocol, LabelLevel
from cyclejepa.data.preprocess import Normalisation
from cyclejepa.signal_geometry import SignalGeometry

if TYPE_CHECKING:
    import pandas as pd


class PreparedCache:
    """A cache written by `prepare_cache`, loaded with numpy only.

    Attributes
    ----------
    signals : (N, C, L) float32 windows at `model_fs`, z-scored, channel-major (PTB-XL: 12 x
        1000), memory-mapped: the memmap of the one signal part, or a `SignalParts` over several.
    phase_centre, phase_causal : (N, T) float32 token phases, NaN undefined (PTB-XL: T = 125);
        (N, T, C) for a provider of C coordinates (`coordinates`).
    event_indices, event_offsets : the phase provider's ragged events at `cache_fs`; row i's are
        ``event_indices[event_offsets[i]:event_offsets[i + 1]]`` (see `events`); the first
        coordinate's events for C coordinates (`events` gives any coordinate's).
    coordinates : the phase coordinates' names (``()`` for a one-coordinate provider).
    columns : meta.csv as a dict of numpy arrays (`meta_columns`).
    label_levels : the dataset's `LabelLevel` vocabularies.
    norm : the fitted `Normalisation`.
    rejections : the rejected records as `RecordRejected` (record_id, check, detail).
    manifest : the manifest dict (arguments, counts, file hashes).
    """

    def __init__(self, cache_dir: str | os.PathLike):
        self.path = Path(cache_dir)
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise FileNotFoundError(
                f"{self.path} holds no prepared cache (no {MANIFEST}); build it with "
                f"`cyclejepa prepare CONFIG` or cyclejepa.data.prepare_cache()"
            )
        self.manifest = json.loads(manifest_path.read_text())
        _check_format(self.path, self.manifest)
        self.signals: np.ndarray = cast(np.ndarray, open_signals(self.path, self.manifest["signal_parts"]))  # ndarray-like
        self.phase_centre = np.load(self.path / "phase_centre.npy")
        self.phase_causal = np.load(self.path / "phase_causal.npy")
        self.coordinates = tuple(self.manifest.get("phase_coordinates", ()))
        with np.load(self.path / EVENTS_FILE) as events:
            self._events = [
                (events[f"indices{s}"], events[f"offsets{s}"]) for s in ("", *(f"_{c}" for c in range(1, len(self.coordinates))))
            ]
        self.event_indices, self.event_offsets = self._events[0]
        self.label_levels = tuple(
            LabelLevel(lv["name"], lv["prefix"], tuple(lv["classes"])) for lv in self.manifest["label_levels"]
        )
        self.columns = read_meta(self.path / "meta.csv", meta_columns(self.label_levels))
        self.norm = Normalisation.from_dict(json.loads((self.path / "norm.json").read_text()))
        self.rejections = read_rejections(self.path / "rejections.csv")

    def __len__(self) -> int:
        return len(self.signals)

    @cached_property
    def geometry(self) -> SignalGeometry:
        """Channels, rates, window and tokens of ``signals`` (the manifest's ``geometry``)."""
        return SignalGeometry.from_dict(self.manifest["geometry"])

    @property
    def channels(self) -> tuple[str, ...]:
        """The channels of ``signals``, in row order."""
        return self.geometry.channels

    @property
    def model_fs(self) -> float:
        """The rate of ``signals`` (Hz): cache_fs / decimation."""
        return self.geometry.model_fs

    @property
    def cache_fs(self) -> float:
        """The cache rate (Hz) records were resampled to and the phase provider ran at: events
        (`events`) are sample indices at it."""
        return self.geometry.cache_fs

    @property
    def token_patch(self) -> int:
        """Samples of ``signals`` per token."""
        return self.geometry.token_patch

    @property
    def units(self) -> tuple[str, ...]:
        """Each channel's physical unit, as the dataset declared it."""
        return tuple(self.manifest.get("dataset", {}).get("units") or ["mV"] * len(self.channels))

    @property
    def folds(self) -> FoldProtocol:
        """The dataset's fold protocol, as recorded when the cache was built."""
        found = self.manifest.get("dataset", {}).get("folds")
        return FoldProtocol.from_dict(found) if found else FoldProtocol()

    @property
    def n_tokens(self) -> int:
        """Tokens per window: T = L / ``token_patch``."""
        return self.geometry.n_tokens

    def __repr__(self) -> str:
        counts = self.manifest["counts"]
        kept, rejected = counts["kept"], counts["rejected"]
        return f"PreparedCache({str(self.path)!r}, kept={kept}, rejected={rejected})"

    @cached_property
    def meta(self) -> pd.DataFrame:
        """meta.csv as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.columns)

    def phases(self, convention: str = "centre") -> np.ndarray:
        """(N, T) token phases ((N, T, C) for C coordinates), ``"centre"`` (training) or ``"causal"`` (reporting) convention."""
        if convention not in ("centre", "causal"):
            raise ValueError(f"unknown token convention {convention!r}; use 'centre' or 'causal'")
        return self.phase_centre if convention == "centre" else self.phase_causal

    def events(self, index: int, coordinate: int = 0) -> np.ndarray:
        """Event sample indices (at `cache_fs`) of phase coordinate ``coordinate``
        in row ``index``."""
        indices, offsets = self._events[coordinate]
        return indices[offsets[index] : offsets[index + 1]]

    def select(self, folds: Iterable[int]) -> np.ndarray:
        """Row indices of the records in ``folds``, ascending."""
        return np.flatnonzero(np.isin(self.columns["fold"], list(folds)))

    def phase_qc_counts(self, folds: Iterable[int]) -> dict[str, int | dict[str, int]]:
        """The windows of ``folds`` against the phase QC verdict meta.csv records: ``windows``,
        ``passed`` (``qc_ok``) and, for the others, how often each reason (``qc_reason``, ``;``
        separated) fails them, commonest first."""
        rows = self.select(folds)
        passed = self.columns["qc_ok"][rows]
        reasons = Counter(
            reason for text in self.columns["qc_reason"][rows][~passed] for reason in str(text).split(";") if reason
        )
        return {"windows": len(rows), "passed": int(passed.sum()), "reasons": dict(reasons.most_common())}

    def labels(self, level: str) -> np.ndarray:
        """(N, C) uint8 multi-hot of the label level named ``level`` (PTB-XL: ``"superclass"``,
        ``"subclass"``), columns in the order of its classes."""
        found = {lv.name: lv for lv in self.label_levels}
        if level not in found:
            raise ValueError(f"unknown label level {level!r}; this cache has {sorted(found)}")
        columns = found[level].columns()
        if not columns:
            return np.zeros((len(self), 0), dtype=np.uint8)
        return np.stack([self.columns[c] for c in columns], axis=1).astype(np.uint8)


def open_signals(path: Path, parts: list[dict]) -> np.ndarray | SignalParts:
    """The signal ``parts`` (manifest ``signal_parts``) of the cache at ``path``: the memmap of a
    single part, else a `SignalParts` over them."""
    paths = [path / part["file"] for part in parts]
    return np.load(paths[0], mmap_mode="r") if len(paths) == 1 else SignalParts(paths)


class SignalParts:
    """The rows of several ``.npy`` files (one trailing shape and dtype) as one read-only (N, ...)
    array-like, each file memory-mapped and never read whole: ``len``, ``shape``, ``dtype``,
    ``ndim``, ``size``, ``nbytes``; indexing by an integer, a slice, an integer array or a boolean
    mask of the rows (then any further indices) returns a numpy array, as a memmap's fancy
    indexing does; ``np.asarray`` reads every row."""

    def __init__(self, paths: Iterable[str | os.PathLike]):
        paths = list(paths)
        self.parts = [np.load(p, mmap_mode="r") for p in paths]
        if not self.parts:
            raise ValueError("SignalParts needs at least one part")
        first = self.parts[0]
        for path, part in zip(paths, self.parts, strict=True):
            if part.shape[1:] != first.shape[1:] or part.dtype != first.dtype:
                raise ValueError(
                    f"{path}: rows {part.shape[1:]} {part.dtype}, the first part's are {first.shape[1:]} {first.dtype}"
                )
        self.bounds = np.cumsum([0] + [len(p) for p in self.parts])
        self.shape = (int(self.bounds[-1]), *first.shape[1:])
        self.dtype = first.dtype

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"SignalParts(shape={self.shape}, dtype={self.dtype}, parts={len(self.parts)})"

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(rows, (int, np.integer)):
            index = int(rows) + len(self) if rows < 0 else int(rows)
            if not 0 <= index < len(self):
                raise IndexError(f"index {rows} is out of bounds for {len(self)} rows")
            part = int(np.searchsorted(self.bounds, index, side="right")) - 1
            return np.asarray(self.parts[part][index - self.bounds[part]])[rest]
        if isinstance(rows, slice):
            picked = np.arange(len(self))[rows]
        else:
            picked = np.asarray(rows)
            if picked.dtype == bool:
                if picked.shape != (len(self),):
                    raise IndexError(f"boolean index of shape {picked.shape} does not match {len(self)} rows")
                picked = np.flatnonzero(picked)
            elif not np.issubdtype(picked.dtype, np.integer) and picked.size:
                raise IndexError(f"rows must be integers, a slice or a boolean mask, got {picked.dtype}")
        return self._gather(picked.astype(np.int64))[(slice(None),) * picked.ndim + tuple(rest)]

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        flat = np.where(rows < 0, rows + len(self), rows).ravel()
        if flat.size and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"row index out of bounds for {len(self)} rows")
        out = np.empty((flat.size, *self.shape[1:]), dtype=self.dtype)
        owner = np.searchsorted(self.bounds, flat, side="right") - 1
        for part in np.unique(owner):
            chosen = owner == part
            out[chosen] = self.parts[part][flat[chosen] - self.bounds[part]]
        return out.reshape((*rows.shape, *self.shape[1:]))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _check_format(path: Path, manifest: dict) -> None:
    """Refuse a cache written in another layout (`CACHE_FORMAT`), naming the command that rebuilds it."""
    found = manifest.get("arguments", {}).get("cache_format")
    if found != CACHE_FORMAT:
        raise ValueError(
            f"{path} holds a cache in format {found}; this cyclejepa reads format {CACHE_FORMAT}: "
            f"rebuild it with `cyclejepa prepare CONFIG` (the experiment's config)"
        )


def inconsistencies(cache: PreparedCache) -> list[str]:
    """What is wrong with a loaded cache: lengths, ragged offsets, ids, folds, sex, statistics."""
    n, columns, problems = len(cache.columns["record_id"]), cache.columns, []
    lengths = {
        "signals": len(cache.signals),
        "phase_centre.npy": len(cache.phase_centre),
        "phase_causal.npy": len(cache.phase_causal),
        f"{EVENTS_FILE} offsets": len(cache.event_offsets) - 1,
    }
    problems += [f"{name} has {length} rows, meta.csv {n}" for name, length in lengths.items() if length != n]
    offsets = cache.event_offsets
    if len(offsets) and (offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(cache.event_indices)):
        problems.append(f"{EVENTS_FILE} offsets do not partition its indices")
    ids, windows = columns["record_id"], columns["window"]
    step = np.diff(ids)
    if np.any(step < 0) or np.any((step == 0) & (np.diff(windows) != 1)) or np.any((step > 0) & (windows[1:] != 0)):
        problems.append("meta.csv rows are not the windows 0, 1, ... of strictly increasing record_ids")
    same = step == 0
    for name in ("patient_id", "fold"):
        if np.any(same & (np.diff(columns[name]) != 0)):
            problems.append(f"meta.csv windows of one record differ in {name}")
    checks = {"fold": cache.folds.all_folds, "sex": range(-1, 2)}
    problems += [
        f"meta.csv {name} outside {allowed}" for name, allowed in checks.items() if np.any(~np.isin(columns[name], list(allowed)))
    ]
    rank = max(len(cache.coordinates), 1)
    for name, phases in (("phase_centre.npy", cache.phase_centre), ("phase_causal.npy", cache.phase_causal)):
        if phases.ndim != (2 if rank == 1 else 3) or (rank > 1 and phases.shape[-1] != rank):
            problems.append(f"{name} has shape {phases.shape}, expected (N, T{'' if rank == 1 else f', {rank}'})")
    if not (np.all(np.isfinite(cache.norm.mean)) and np.all(cache.norm.std > 0)):
        problems.append("norm.json statistics are not finite and positive")
    counts = cache.manifest["counts"]
    if counts["kept"] != n or counts["rejected"] != len(cache.rejections):
        problems.append(f"manifest counts {counts} disagree with meta.csv and rejections.csv")
    return problems
