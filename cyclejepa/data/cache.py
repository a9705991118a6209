"""The preprocessing cache: each record of a dataset verified, windowed, decimated, normalised,
phase-tagged once.

`prepare_cache` reads every record of a `Dataset` (PTB-XL, the synthetic corpus, the Challenge
format, a plugin), resamples it to the cache rate ``fs`` (500 Hz by default), cuts it into
windows of the model's length (`cut_windows`, 10 s by default), and runs steps 4-7 of the
paper's preprocessing chain and the phase provider on every window. It writes::

    CACHE/signals.npy        (N, C, L) float32 windows, z-scored, lead-major (PTB-XL: 12 x 1000)
    CACHE/phase_centre.npy   (N, T) float32 token phases in radians, centre convention (training)
    CACHE/phase_causal.npy   (N, T) float32 token phases in radians, causal convention (reporting)
    CACHE/rpeaks.npz         R-peaks at ``fs`` from each window's start, ragged: ``indices``, ``offsets`` (N+1)
    CACHE/meta.csv           one row per kept window (see `meta_columns`)
    CACHE/norm.json          per-lead mean and std (mV) fitted on the training folds
    CACHE/rejections.csv     id, check, detail of every rejected record
    CACHE/manifest.json      arguments, their hash, channels, rates, label vocabularies, counts,
                             sha256 of every file

A provider of C > 1 cyclic coordinates (``composite``) stores (N, T, C) phases, coordinate c in
the provider's order (`CompositeTrack.at_tokens`), its events per coordinate (``indices``,
``offsets`` the first coordinate's, ``indices_c``, ``offsets_c`` coordinate c's), the joint QC in
meta.csv and the coordinate names in the manifest (``phase_coordinates``); a one-coordinate
cache has none of these additions.

Row i of every array is row i of meta.csv (windows of the kept records, in record order, then
window order); phases are NaN where undefined. Normalisation is fitted on the decimated
training-fold windows before any normalised signal is written: pass one writes decimated mV to
scratch files, pass two fits the statistics on them and writes the z-scored windows. The cache
is built in a temporary folder beside ``cache_dir`` and renamed into place; loading it needs
only numpy (pandas only for `PreparedCache.meta`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cyclejepa.data.datasets import Dataset, Entry, LabelLevel, RecordRejected, conform
from cyclejepa.data.preprocess import DECIMATION, KAISER_BETA, Normalisation, cut_windows, fit_normalisation
from cyclejepa.data.ptbxl import FS, LEADS, PTBXL, read_record_fast
from cyclejepa.progress import progress_bar

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CACHE_FORMAT", "PreparedCache", "RecordOutcome", "meta_columns", "prepare_cache", "prepare_record", "record_windows",
]  # fmt: skip

log = logging.getLogger(__name__)

CACHE_FORMAT = 2
"""Version of the cache layout; part of the manifest hash."""
PHASE_REVISION = 3
"""Revision of the default R-peak detection (2: multi-lead fusion; 3: timed on the R wave unless
the QRS is negative); part of the manifest hash,
so a cache built by an older detector is rebuilt rather than reused."""
TOKEN_PATCH = 8
"""Samples per token at the decimated rate (80 ms at 100 Hz)."""
WINDOW_S = 10.0
"""Default window length (s): the model's record length."""
MANIFEST = "manifest.json"
DATA_FILES = (
    "signals.npy",
    "phase_centre.npy",
    "phase_causal.npy",
    "rpeaks.npz",
    "meta.csv",
    "norm.json",
    "rejections.csv",
)
ENTRY_COLUMNS = ("ecg_id", "record", "window", "patient_id", "fold", "age", "sex")
QC_COLUMNS = ("beats", "phase_yield", "qc_ok", "qc_reason")
"""meta.csv holds `ENTRY_COLUMNS`, then one 0/1 column per class of each label level
(``{prefix}_{class}``), then `QC_COLUMNS`. ecg_id is the dataset's integer record id, record its
name, window the window's index in the record; age NaN unknown (PTB-XL: 300 = de-identified over
89); sex 0 male, 1 female, -1 unknown; beats = R-peaks detected; phase_yield = fraction of native
samples with a defined phase; qc_reason = the provider's QC reasons joined by ``;``."""
_FLOAT_COLUMNS = ("age", "phase_yield")
_TEXT_COLUMNS = ("record", "qc_reason")


# --------------------------------------------------------------------------------------------
# building


def prepare_cache(
    dataset: Dataset | str | os.PathLike | None,
    cache_dir: str | os.PathLike,
    *,
    train_folds: Sequence[int] = tuple(range(1, 10)),
    phase_provider: str = "ecg-rpeak",
    phase_options: Mapping[str, Any] | None = None,
    fs: float = FS,
    window_s: float = WINDOW_S,
    workers: int = 1,
    progress: bool = True,
) -> PreparedCache:
    """Build (or reuse) the preprocessing cache of ``dataset``.

    Every record of the dataset is read and verified (`Dataset.load`), its channels picked and
    resampled to ``fs`` (`conform`), cut into windows of ``window_s`` seconds (`cut_windows`:
    non-overlapping from the first sample, a shorter tail dropped; a record shorter than one
    window is rejected, check ``extent``), and each window decimated by `DECIMATION` and
    phase-tagged at ``fs``. Row i of the cache is one window; the windows of a record share its
    id, patient, fold and labels.

    Idempotent: when ``cache_dir`` already holds a cache whose manifest hash matches these
    arguments (the dataset's `Dataset.fingerprint`, ``train_folds``, ``phase_provider``,
    ``phase_options``, ``fs``, ``window_s``, library and cache-format version) and whose files
    match their recorded sha256, it is loaded and nothing is recomputed. Otherwise it is
    rebuilt and replaced atomically. ``workers`` and ``progress`` do not change the result.

    Records the dataset rejects while indexing (`Dataset.rejected`, e.g. a bad row of
    ptbxl_database.csv) or while reading are logged to rejections.csv and left out; the run goes
    on. Windows failing phase QC stay in, flagged in meta.csv. The finished cache is loaded and
    checked for consistency before it replaces the previous one (`_validate`).

    Parameters
    ----------
    dataset : a `Dataset`; a path (or None: ``$CYCLEJEPA_PTBXL``) is read as PTB-XL.
    cache_dir : where the cache lives; an existing non-cache, non-empty folder is refused.
    train_folds : folds the normalisation statistics are fitted on.
    phase_provider, phase_options : registered `PhaseProvider` name and constructor options.
    fs : the rate (Hz) records are resampled to and phased at; the model sees fs / `DECIMATION`.
    window_s : the window (the model's record length) in seconds.
    workers : processes reading records in parallel (1 runs in this process).
    progress : show a rich progress bar.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not isinstance(dataset, Dataset):
        dataset = PTBXL(dataset)
    cache_dir = Path(cache_dir)
    arguments = _arguments(dataset, train_folds, phase_provider, phase_options, fs, window_s)
    current = _current_cache(cache_dir, arguments)
    if current is not None:
        return current
    _check_replaceable(cache_dir)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    build_dir = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}.build-", dir=cache_dir.parent))
    try:
        _build(dataset, build_dir, arguments, workers, progress)
        _validate(build_dir)
        _swap_in(build_dir, cache_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    return PreparedCache(cache_dir)


def _arguments(
    dataset: Dataset,
    train_folds: Sequence[int],
    phase_provider: str,
    phase_options: Mapping[str, Any] | None,
    fs: float,
    window_s: float,
) -> dict[str, Any]:
    """Everything the cache contents depend on, JSON-serialisable."""
    from cyclejepa import __version__
    from cyclejepa.registry import PHASE_PROVIDERS

    folds = sorted({int(f) for f in train_folds})
    if not folds or not set(folds) <= set(range(1, 11)):
        raise ValueError(f"train_folds must be a non-empty subset of 1..10, got {train_folds!r}")
    window = window_s * fs
    if not (fs > 0 and window == int(window) and int(window) % (DECIMATION * TOKEN_PATCH) == 0):
        raise ValueError(
            f"window_s {window_s:g} s at fs {fs:g} Hz must be a whole number of tokens "
            f"({DECIMATION * TOKEN_PATCH} samples each)"
        )
    PHASE_PROVIDERS.get(phase_provider)  # unknown names fail here, listing the registered ones
    return {
        "dataset": dataset.fingerprint(),
        "channels": list(dataset.channels),
        "fs": fs,
        "window_s": window_s,
        "train_folds": folds,
        "phase_provider": phase_provider,
        "phase_options": json.loads(json.dumps(dict(phase_options or {}), sort_keys=True)),
        "token_patch": TOKEN_PATCH,
        "phase_revision": PHASE_REVISION,
        "cache_format": CACHE_FORMAT,
        "cyclejepa_version": __version__,
    }


def _hash(arguments: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()


def _current_cache(cache_dir: Path, arguments: Mapping[str, Any]) -> PreparedCache | None:
    """The cache at ``cache_dir`` if it was built with ``arguments`` and is intact, else None."""
    manifest_path = cache_dir / MANIFEST
    if not manifest_path.is_file():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        log.warning("cache manifest %s is unreadable; rebuilding", manifest_path)
        return None
    if manifest.get("config_hash") != _hash(arguments):
        log.info("cache %s was built with other arguments; rebuilding", cache_dir)
        return None
    for name, digest in manifest.get("files", {}).items():
        path = cache_dir / name
        if not path.is_file() or _sha256(path) != digest:
            log.warning("cache file %s is missing or modified; rebuilding", path)
            return None
    return PreparedCache(cache_dir)


def _check_replaceable(cache_dir: Path) -> None:
    if cache_dir.exists() and not (cache_dir / MANIFEST).is_file() and any(cache_dir.iterdir()):
        raise FileExistsError(
            f"{cache_dir} exists, is not empty and holds no {MANIFEST}; refusing to replace it "
            f"with a cache (choose another cache_dir or empty it)"
        )


def _swap_in(build_dir: Path, cache_dir: Path) -> None:
    """Rename the finished ``build_dir`` to ``cache_dir``, replacing an older cache."""
    if not cache_dir.exists():
        build_dir.rename(cache_dir)
        return
    retired = cache_dir.with_name(f".{cache_dir.name}.old-{os.getpid()}")
    cache_dir.rename(retired)
    build_dir.rename(cache_dir)
    shutil.rmtree(retired)


def _validate(build_dir: Path) -> None:
    """Load the cache in ``build_dir`` and check that its files agree; raise ValueError if not."""
    try:
        cache = PreparedCache(build_dir)
        problems = _inconsistencies(cache)
    except (OSError, ValueError, KeyError) as error:
        problems = [f"it does not load: {error}"]
    if problems:
        raise ValueError(
            f"the cache built in {build_dir} is broken, so it was not published (the previous "
            f"cache, if any, is unchanged): {'; '.join(problems)}"
        )


def _inconsistencies(cache: PreparedCache) -> list[str]:
    """What is wrong with a loaded cache: lengths, ragged offsets, ids, folds, sex, statistics."""
    n, columns, problems = len(cache.columns["ecg_id"]), cache.columns, []
    lengths = {"signals.npy": len(cache.signals), "phase_centre.npy": len(cache.phase_centre),
               "phase_causal.npy": len(cache.phase_causal), "rpeaks.npz offsets": len(cache.rpeak_offsets) - 1}  # fmt: skip
    problems += [f"{name} has {length} rows, meta.csv {n}" for name, length in lengths.items() if length != n]
    offsets = cache.rpeak_offsets
    if len(offsets) and (offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(cache.rpeak_indices)):
        problems.append("rpeaks.npz offsets do not partition its indices")
    ids, windows = columns["ecg_id"], columns["window"]
    step = np.diff(ids)
    if np.any(step < 0) or np.any((step == 0) & (np.diff(windows) != 1)) or np.any((step > 0) & (windows[1:] != 0)):
        problems.append("meta.csv rows are not the windows 0, 1, ... of strictly increasing ecg_ids")
    same = step == 0
    for name in ("patient_id", "fold"):
        if np.any(same & (np.diff(columns[name]) != 0)):
            problems.append(f"meta.csv windows of one record differ in {name}")
    checks = {"fold": range(1, 11), "sex": range(-1, 2)}
    problems += [f"meta.csv {name} outside {allowed}" for name, allowed in checks.items()
                 if np.any(~np.isin(columns[name], list(allowed)))]  # fmt: skip
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


@dataclass
class RecordOutcome:
    """What one window contributes besides its decimated signal (which goes to the chunk's
    scratch file, row ``slot``): its record's rejection, or its events (one array per phase
    coordinate, R-peaks first for ``ecg-rpeak``), token phases and QC; ``coordinates`` names
    the coordinates of a provider with more than one (empty otherwise)."""

    row: int
    rejection: RecordRejected | None = None
    events: tuple[np.ndarray, ...] = ()
    coordinates: tuple[str, ...] = ()
    phase_centre: np.ndarray | None = None
    phase_causal: np.ndarray | None = None
    qc_ok: bool = True
    qc_reason: str = ""
    phase_yield: float = 0.0
    window: int = 0
    slot: int = -1
    scratch: str = ""


def _build(
    dataset: Dataset, build_dir: Path, arguments: dict[str, Any], workers: int, progress: bool
) -> None:
    entries = dataset.entries()
    outcomes = sorted(
        _run_jobs(dataset, list(enumerate(entries)), build_dir, arguments, workers, progress),
        key=lambda o: (o.row, o.window),
    )
    kept = [o for o in outcomes if o.rejection is None]
    rejections = dataset.rejected() + [o.rejection for o in outcomes if o.rejection is not None]
    n_records = len(entries) + len(dataset.rejected())
    folds = np.array([entries[o.row].fold for o in kept], dtype=np.int64)
    in_train = np.isin(folds, arguments["train_folds"])
    if not in_train.any():
        checks = Counter(r.check for r in rejections)
        raise ValueError(
            f"no record of train_folds {arguments['train_folds']} passed verification "
            f"({len(rejections)} of {n_records} records rejected: {dict(checks)})"
        )
    scratch = _gather_scratch(build_dir / "decimated_mv.npy", kept)
    norm = fit_normalisation(scratch, in_train)
    _write_signals(build_dir / "signals.npy", scratch, norm)
    del scratch
    (build_dir / "decimated_mv.npy").unlink()
    _write_phases(build_dir, kept, _n_tokens(arguments))
    levels = dataset.label_levels
    _write_meta(build_dir / "meta.csv", [entries[o.row] for o in kept], levels, kept)
    (build_dir / "norm.json").write_text(
        json.dumps({**norm.to_dict(arguments["channels"]), "train_folds": arguments["train_folds"],
                    "windows": int(in_train.sum())}, indent=2)  # fmt: skip
    )
    _write_rejections(build_dir / "rejections.csv", rejections)
    _write_manifest(build_dir, arguments, levels, n_records, kept, rejections)


def _n_tokens(arguments: Mapping[str, Any]) -> int:
    return round(arguments["window_s"] * arguments["fs"]) // (DECIMATION * TOKEN_PATCH)


def _gather_scratch(path: Path, kept: list[RecordOutcome]) -> np.ndarray:
    """The decimated windows of ``kept`` in order, from the chunks' scratch files into one memmap."""
    chunks = {name: np.load(name, mmap_mode="r") for name in dict.fromkeys(o.scratch for o in kept)}
    first = next(iter(chunks.values()))
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(len(kept), *first.shape[1:]))
    for i, o in enumerate(kept):
        out[i] = chunks[o.scratch][o.slot]
    out.flush()
    del chunks
    for name in dict.fromkeys(o.scratch for o in kept):
        Path(name).unlink()
    for leftover in path.parent.glob("scratch-*.npy"):  # chunks whose every record was rejected
        leftover.unlink()
    return np.load(path, mmap_mode="r")


def _run_jobs(
    dataset: Dataset,
    jobs: list[tuple[int, Entry]],
    build_dir: Path,
    arguments: Mapping[str, Any],
    workers: int,
    progress: bool,
) -> list[RecordOutcome]:
    """Every record through `_process_chunk`, inline or over ``workers`` processes."""
    size = min(64, max(1, len(jobs) // (8 * workers)))
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    outcomes: list[RecordOutcome] = []
    with progress_bar(len(jobs), "preparing records", enabled=progress) as advance:
        if workers == 1:
            _set_worker_dataset(dataset)
            for chunk in chunks:
                outcomes += _process_chunk(chunk, build_dir, arguments)
                advance(len(chunk))
            return outcomes
        context = _worker_context()
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_set_worker_dataset, initargs=(dataset,)) as pool:
            futures = {pool.submit(_process_chunk, chunk, build_dir, arguments): len(chunk) for chunk in chunks}
            for future in as_completed(futures):
                outcomes += future.result()
                advance(futures[future])
    return outcomes


def _worker_context():
    """Processes forked from a server that imported this module once (not fresh interpreters).

    ``spawn`` re-imports the library in every worker (about 2 s each: the data package imports
    torch), which alone would cost more than a worker's share of a 20,000-record corpus on 16
    cores; a plain ``fork`` of a parent that may run threads (the progress bar, torch) is
    unsafe. The ``forkserver`` imports once and forks workers from a clean, single-threaded
    process. Platforms without it (Windows, macOS defaults aside) fall back to ``spawn``.
    """
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "cyclejepa.phase.ecg.rpeak", "scipy.signal"])
    return context


_WORKER: dict[str, Dataset] = {}


def _set_worker_dataset(dataset: Dataset) -> None:
    """The dataset this process reads (sent once per worker process, not once per chunk)."""
    _WORKER["dataset"] = dataset


def _process_chunk(jobs: Sequence[tuple[int, Entry]], build_dir: Path, arguments: Mapping[str, Any]) -> list[RecordOutcome]:
    """Read, verify, window, decimate (into the chunk's scratch file) and phase-tag one chunk."""
    from cyclejepa.registry import PHASE_PROVIDERS

    dataset = _WORKER["dataset"]
    provider = PHASE_PROVIDERS.build(arguments["phase_provider"], **arguments["phase_options"])
    channels, fs = tuple(arguments["channels"]), arguments["fs"]
    window = round(arguments["window_s"] * fs)
    scratch = str(Path(build_dir) / f"scratch-{jobs[0][0]:09d}.npy")
    outcomes, signals = [], []
    for row, entry in jobs:
        try:
            windows = record_windows(dataset, entry, channels, fs, window)
        except RecordRejected as rejection:
            outcomes.append(RecordOutcome(row, rejection=rejection))
            continue
        try:
            for w, segment in enumerate(windows):
                decimated, outcome, _ = prepare_record(segment, provider, fs=fs, channels=channels)
                outcome.row, outcome.window, outcome.slot, outcome.scratch = row, w, len(signals), scratch
                signals.append(decimated)
                outcomes.append(outcome)
        except Exception as error:
            raise RuntimeError(f"preparing record {entry.id} ({entry.name}) failed: {error}") from error
    if signals:
        np.save(scratch, np.stack(signals))
    return outcomes


def record_windows(dataset: Dataset, entry: Entry, channels: tuple[str, ...], fs: float, window: int) -> np.ndarray:
    """(W, C, window) float32 mV: ``entry``'s verified record conformed to ``channels`` at ``fs``
    and cut by `cut_windows`; raises `RecordRejected` (``extent`` when shorter than a window)."""
    x = conform(dataset.load(entry), channels, fs)
    try:
        return cut_windows(x, window)
    except ValueError:
        raise RecordRejected(
            entry.id, "extent", f"the record lasts {x.shape[-1] / fs:.2f} s, shorter than one {window / fs:g} s window"
        ) from None


@lru_cache(maxsize=1)
def _decimation_taps() -> np.ndarray:
    """The FIR that `decimate` designs on every call: firwin(101, 1/5, kaiser 5.0)."""
    from scipy.signal import firwin

    return firwin(2 * 10 * DECIMATION + 1, 1.0 / DECIMATION, window=("kaiser", KAISER_BETA))


def decimate_fast(signal: np.ndarray) -> np.ndarray:
    """`decimate` with its filter designed once per process: the same float32 output."""
    from scipy.signal import resample_poly

    y = resample_poly(
        signal.astype(np.float64), 1, DECIMATION, axis=-1, window=_decimation_taps(),
        padtype="edge",
    )  # fmt: skip
    return y.astype(np.float32)


STAGES = ("read_verify", "decimate", "rpeaks", "phase")
"""The per-record stages `prepare_split` times."""


def prepare_record(
    signal: np.ndarray, provider, clock=None, *, fs: float = FS, channels: Sequence[str] = LEADS
) -> tuple[np.ndarray, RecordOutcome, list]:
    """Decimated signal and phase outcome of one verified window (stage times when ``clock``).

    ``signal`` is a (C, L) float32 window in mV at ``fs``, rows named by ``channels`` (e.g. a
    (12, 5000) PTB-XL record from `read_record_fast`); ``provider`` a `PhaseProvider`. Returns
    the (C, L / `DECIMATION`) float32
    decimated signal (not normalised), the `RecordOutcome` (R-peaks, token phases in both
    conventions, QC) and the stage times (empty without ``clock``). Stages after reading:
    decimation, R-peaks (``provider.phase``: detection and QC), phase (token phases).
    """
    times = []
    start = clock() if clock else 0.0
    for step in range(3):
        if step == 0:
            decimated = decimate_fast(signal)
        elif step == 1:
            track = provider.phase(signal.astype(np.float64), fs, tuple(channels))
        else:
            outcome = _phase_outcome(0, track, fs / DECIMATION)
        if clock:
            now = clock()
            times.append(now - start)
            start = now
    return decimated, outcome, times


def prepare_split(
    root: str | os.PathLike | None,
    records: int | None = None,
    phase_provider: str = "ecg-rpeak",
    phase_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Per-record CPU time of each prepare stage (`STAGES`) in this process.

    Runs exactly the per-record work of `prepare_cache` on the first ``records`` records (all
    when None): fast read and verification, decimation, R-peaks (the provider's detection and
    QC), phase (token phases in both conventions), reading ``time.process_time`` between
    stages (CPU time: other jobs on a shared machine do not inflate it). Rejected records are
    skipped. Returns ``{"records", "ms": {stage: mean ms per record}, "total_ms",
    "records_per_cpu_s"}``.
    """
    import time

    from cyclejepa.registry import PHASE_PROVIDERS

    dataset = PTBXL(root)
    meta = dataset.metadata
    paths = [dataset.root / name for name in meta["filename_hr"]][: records or None]
    provider = PHASE_PROVIDERS.build(phase_provider, **dict(phase_options or {}))
    totals = dict.fromkeys(STAGES, 0.0)
    done = 0
    for path in paths:
        start = time.process_time()
        try:
            signal = read_record_fast(path)
        except RecordRejected:
            continue
        totals["read_verify"] += time.process_time() - start
        _, _, times = prepare_record(signal, provider, time.process_time)
        for stage, seconds in zip(STAGES[1:], times):
            totals[stage] += seconds
        done += 1
    ms = {stage: 1e3 * seconds / max(done, 1) for stage, seconds in totals.items()}
    total = sum(ms.values())
    return {"records": done, "ms": ms, "total_ms": total, "records_per_cpu_s": 1e3 / total}


def _phase_outcome(row: int, track, fs_out: float) -> RecordOutcome:
    """Events, token phases (both conventions) and QC of a `PhaseTrack`, or of a `CompositeTrack`
    of several coordinates ((T, C) phases, events per coordinate, the joint QC)."""

    def tokens(convention: str) -> np.ndarray:
        phases = np.asarray(track.at_tokens(patch=TOKEN_PATCH, fs_out=fs_out, convention=convention), dtype=np.float32)
        return phases[:, 0] if len(tracks) == 1 and phases.ndim == 2 else phases  # one coordinate: (T,)

    qc, tracks = track.qc, getattr(track, "tracks", (track,))
    return RecordOutcome(
        row,
        events=tuple(np.asarray(t.events, dtype=np.int64) for t in tracks),
        coordinates=tuple(getattr(track, "names", ())) if len(tracks) > 1 else (),
        phase_centre=tokens("centre"),
        phase_causal=tokens("causal"),
        qc_ok=True if qc is None else bool(qc.ok),
        qc_reason="" if qc is None else ";".join(qc.reasons),
        phase_yield=float(track.phase_yield),
    )


def _write_signals(path: Path, scratch: np.ndarray, norm: Normalisation) -> None:
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=scratch.shape)
    for start in range(0, len(scratch), 512):
        out[start : start + 512] = norm.apply(scratch[start : start + 512])
    out.flush()


def _write_phases(build_dir: Path, kept: list[RecordOutcome], n_tokens: int) -> None:
    """phase_{centre,causal}.npy ((N, T), or (N, T, C) for C coordinates) and rpeaks.npz."""
    n_coordinates = len(kept[0].events) if kept else 1
    shape = (0, n_tokens) if n_coordinates == 1 else (0, n_tokens, n_coordinates)
    for convention in ("centre", "causal"):
        stack = [getattr(o, f"phase_{convention}") for o in kept]
        np.save(build_dir / f"phase_{convention}.npy", np.stack(stack) if stack else np.zeros(shape, np.float32))
    arrays = {}
    for c in range(n_coordinates):
        events = [o.events[c] for o in kept]
        suffix = f"_{c}" if c else ""
        arrays[f"indices{suffix}"] = np.concatenate(events).astype(np.int64) if events else np.zeros(0, np.int64)
        arrays[f"offsets{suffix}"] = np.concatenate([[0], np.cumsum([len(e) for e in events])]).astype(np.int64)
    np.savez(build_dir / "rpeaks.npz", **arrays)


def meta_columns(levels: Sequence[LabelLevel]) -> tuple[str, ...]:
    """The columns of meta.csv for these label levels (see `QC_COLUMNS`)."""
    return ENTRY_COLUMNS + tuple(c for level in levels for c in level.columns()) + QC_COLUMNS


def _write_meta(path: Path, entries: list[Entry], levels: Sequence[LabelLevel], kept: list[RecordOutcome]) -> None:
    rows = []
    for e, o in zip(entries, kept):
        labels = [int(c in e.labels.get(level.name, ())) for level in levels for c in level.classes]
        rows.append([e.id, e.name, o.window, e.patient_id, e.fold, "" if np.isnan(e.age) else e.age, e.sex,
                     *labels, len(o.events[0]), o.phase_yield, int(o.qc_ok), o.qc_reason])  # fmt: skip
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(meta_columns(levels))
        writer.writerows(rows)


def _write_rejections(path: Path, rejections: Iterable[RecordRejected]) -> None:
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(("id", "check", "detail"))
        writer.writerows((r.record_id, r.check, r.detail) for r in rejections)


def _write_manifest(
    build_dir: Path,
    arguments: dict[str, Any],
    levels: Sequence[LabelLevel],
    n_records: int,
    kept: list[RecordOutcome],
    rejections: list[RecordRejected],
) -> None:
    manifest = {
        "config_hash": _hash(arguments),
        "arguments": arguments,
        "cyclejepa_version": arguments["cyclejepa_version"],
        "leads": arguments["channels"],
        "fs_native": arguments["fs"],
        "fs": arguments["fs"] / DECIMATION,
        "window_s": arguments["window_s"],
        "label_levels": [{"name": lv.name, "prefix": lv.prefix, "classes": list(lv.classes)} for lv in levels],
        "counts": {
            "records": n_records,
            "records_kept": len({o.row for o in kept}),
            "kept": len(kept),
            "rejected": len(rejections),
            "qc_failed": sum(not o.qc_ok for o in kept),
        },
        "files": {name: _sha256(build_dir / name) for name in DATA_FILES},
    }
    if kept and kept[0].coordinates:
        manifest["phase_coordinates"] = list(kept[0].coordinates)
    (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# loading


class PreparedCache:
    """A cache written by `prepare_cache`, loaded with numpy only.

    Attributes
    ----------
    signals : (N, C, L) float32 memmap of N windows, z-scored, lead-major (PTB-XL: 12 x 1000).
    phase_centre, phase_causal : (N, T) float32 token phases, NaN undefined (PTB-XL: T = 125);
        (N, T, C) for a provider of C coordinates (`coordinates`).
    rpeak_indices, rpeak_offsets : ragged R-peaks at 500 Hz; record i's are
        ``rpeak_indices[rpeak_offsets[i]:rpeak_offsets[i + 1]]`` (see `rpeaks`); the first
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
        self.signals = np.load(self.path / "signals.npy", mmap_mode="r")
        self.phase_centre = np.load(self.path / "phase_centre.npy")
        self.phase_causal = np.load(self.path / "phase_causal.npy")
        self.coordinates = tuple(self.manifest.get("phase_coordinates", ()))
        with np.load(self.path / "rpeaks.npz") as rpeaks:
            self._events = [
                (rpeaks[f"indices{s}"], rpeaks[f"offsets{s}"])
                for s in ("", *(f"_{c}" for c in range(1, len(self.coordinates))))
            ]
        self.rpeak_indices, self.rpeak_offsets = self._events[0]
        self.label_levels = tuple(
            LabelLevel(lv["name"], lv["prefix"], tuple(lv["classes"])) for lv in self.manifest["label_levels"]
        )
        self.columns = _read_meta(self.path / "meta.csv", meta_columns(self.label_levels))
        self.norm = Normalisation.from_dict(json.loads((self.path / "norm.json").read_text()))
        self.rejections = _read_rejections(self.path / "rejections.csv")

    def __len__(self) -> int:
        return len(self.signals)

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

    def rpeaks(self, index: int) -> np.ndarray:
        """R-peak sample indices (500 Hz) of row ``index`` (the first coordinate's events)."""
        return self.rpeak_indices[self.rpeak_offsets[index] : self.rpeak_offsets[index + 1]]

    def events(self, index: int, coordinate: int = 0) -> np.ndarray:
        """Event sample indices (at the cache's ``fs_native``) of phase coordinate ``coordinate``
        in row ``index``."""
        indices, offsets = self._events[coordinate]
        return indices[offsets[index] : offsets[index + 1]]

    def select(self, folds: Iterable[int]) -> np.ndarray:
        """Row indices of the records in ``folds``, ascending."""
        return np.flatnonzero(np.isin(self.columns["fold"], list(folds)))

    def labels(self, level: str = "superclass") -> np.ndarray:
        """(N, C) uint8 multi-hot of the label level named ``level`` (PTB-XL: ``"superclass"``,
        ``"subclass"``), columns in the order of its classes."""
        found = {lv.name: lv for lv in self.label_levels}
        if level not in found:
            raise ValueError(f"unknown label level {level!r}; this cache has {sorted(found)}")
        columns = found[level].columns()
        if not columns:
            return np.zeros((len(self), 0), dtype=np.uint8)
        return np.stack([self.columns[c] for c in columns], axis=1).astype(np.uint8)


def _read_meta(path: Path, expected: tuple[str, ...]) -> dict[str, np.ndarray]:
    with path.open(newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader)
        if tuple(header) != expected:
            raise ValueError(f"{path}: columns {header} differ from {list(expected)}")
        values = list(zip(*reader)) or [()] * len(header)
    columns = {}
    for name, column in zip(header, values):
        if name in _TEXT_COLUMNS:
            columns[name] = np.array(column, dtype=str)
        elif name in _FLOAT_COLUMNS:
            columns[name] = np.array([float(v) if v else np.nan for v in column], dtype=np.float64)
        else:
            columns[name] = np.array([int(v) for v in column], dtype=np.int64)
    columns["qc_ok"] = columns["qc_ok"].astype(bool)
    return columns


def _read_rejections(path: Path) -> list[RecordRejected]:
    with path.open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    return [
        RecordRejected(int(r["id"]) if r["id"].isdigit() else r["id"], r["check"], r["detail"])
        for r in rows
    ]
