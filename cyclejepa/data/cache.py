"""The preprocessing cache: each PTB-XL record verified, decimated, normalised, phase-tagged once.

`prepare_cache` runs steps 1-7 of the paper's preprocessing chain over the whole corpus and the
phase provider over each record's native 500 Hz signal, and writes::

    CACHE/signals.npy        (N, 12, 1000) float32, z-scored, lead-major (memory-mapped on load)
    CACHE/phase_centre.npy   (N, 125) float32 token phases in radians, centre convention (training)
    CACHE/phase_causal.npy   (N, 125) float32 token phases in radians, causal convention (reporting)
    CACHE/rpeaks.npz         R-peaks at 500 Hz, ragged: ``indices`` (all beats), ``offsets`` (N+1)
    CACHE/meta.csv           one row per kept record (see `META_COLUMNS`)
    CACHE/norm.json          per-lead mean and std (mV) fitted on the training folds
    CACHE/rejections.csv     id, check, detail of every rejected record
    CACHE/manifest.json      arguments, their hash, library version, counts, sha256 of every file

Row i of every array is row i of meta.csv (records kept, in ecg_id order); phases are NaN where
undefined. Normalisation is fitted on the decimated training-fold signals before any normalised
signal is written: pass one writes decimated mV to a scratch memmap, pass two fits the
statistics on it and writes the z-scored rows of the kept records. The cache is built in a
temporary folder beside ``cache_dir`` and renamed into place; loading it needs only numpy
(pandas only for `PreparedCache.meta`).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import re
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

from cyclejepa.data.preprocess import DECIMATION, KAISER_BETA, Normalisation, fit_normalisation
from cyclejepa.data.ptbxl import (
    DATABASE_CSV,
    FS,
    LEADS,
    N_SAMPLES,
    PTBXL,
    STATEMENTS_CSV,
    SUBCLASSES,
    SUPERCLASSES,
    RecordRejected,
    read_verified,
)
from cyclejepa.progress import progress_bar

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CACHE_FORMAT", "META_COLUMNS", "PreparedCache", "RecordOutcome", "prepare_cache", "prepare_record"]

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
"""Version of the cache layout; part of the manifest hash."""
PHASE_REVISION = 3
"""Revision of the default R-peak detection (2: multi-lead fusion; 3: timed on the R wave unless
the QRS is negative); part of the manifest hash,
so a cache built by an older detector is rebuilt rather than reused."""
TOKEN_PATCH = 8
"""Samples per token at the decimated rate (80 ms at 100 Hz)."""
FS_OUT = FS // DECIMATION
N_OUT = N_SAMPLES // DECIMATION
N_TOKENS = N_OUT // TOKEN_PATCH
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
LABEL_COLUMNS = tuple(f"super_{c}" for c in SUPERCLASSES) + tuple(f"sub_{c}" for c in SUBCLASSES)
_DATASET_COLUMNS = ("ecg_id", "patient_id", "fold", "age", "sex") + LABEL_COLUMNS
META_COLUMNS = _DATASET_COLUMNS + ("beats", "phase_yield", "qc_ok", "qc_reason")
"""Columns of meta.csv: age 300 = de-identified over 89; sex 0 male, 1 female; beats = R-peaks
detected; phase_yield = fraction of native samples with a defined phase; qc_reason = the
provider's QC reasons joined by ``;`` (empty when ``qc_ok``)."""
_FLOAT_COLUMNS = ("age", "phase_yield")


# --------------------------------------------------------------------------------------------
# building


def prepare_cache(
    root: str | os.PathLike | None,
    cache_dir: str | os.PathLike,
    *,
    train_folds: Sequence[int] = tuple(range(1, 10)),
    phase_provider: str = "ecg-rpeak",
    phase_options: Mapping[str, Any] | None = None,
    workers: int = 1,
    progress: bool = True,
) -> PreparedCache:
    """Build (or reuse) the preprocessing cache of the PTB-XL corpus at ``root``.

    Idempotent: when ``cache_dir`` already holds a cache whose manifest hash matches these
    arguments (dataset root, its two CSV files, ``train_folds``, ``phase_provider``,
    ``phase_options``, library and cache-format version) and whose files match their recorded
    sha256, it is loaded and nothing is recomputed. Otherwise it is rebuilt and replaced
    atomically. ``workers`` and ``progress`` do not change the result and are not hashed.

    A row of ptbxl_database.csv failing `check_database`, and a record failing a check of
    `read_verified`, is logged to rejections.csv and left out; the run goes on. Records failing
    phase QC stay in, flagged in meta.csv. The finished cache is loaded and checked for
    consistency before it replaces the previous one (`_validate`), so a broken cache is never
    published.

    Parameters
    ----------
    root : PTB-XL folder (None reads ``$CYCLEJEPA_PTBXL``).
    cache_dir : where the cache lives; an existing non-cache, non-empty folder is refused.
    train_folds : folds the normalisation statistics are fitted on.
    phase_provider, phase_options : registered `PhaseProvider` name and constructor options.
    workers : processes reading records in parallel (1 runs in this process).
    progress : show a rich progress bar.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    dataset = PTBXL(root)
    cache_dir = Path(cache_dir)
    arguments = _arguments(dataset, train_folds, phase_provider, phase_options)
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
    dataset: PTBXL,
    train_folds: Sequence[int],
    phase_provider: str,
    phase_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Everything the cache contents depend on, JSON-serialisable."""
    from cyclejepa import __version__
    from cyclejepa.registry import PHASE_PROVIDERS

    folds = sorted({int(f) for f in train_folds})
    if not folds or not set(folds) <= set(range(1, 11)):
        raise ValueError(f"train_folds must be a non-empty subset of 1..10, got {train_folds!r}")
    PHASE_PROVIDERS.get(phase_provider)  # unknown names fail here, listing the registered ones
    return {
        "root": str(dataset.root.resolve()),
        "database_sha256": _sha256(dataset.root / DATABASE_CSV),
        "statements_sha256": _sha256(dataset.root / STATEMENTS_CSV),
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
    if np.any(np.diff(columns["ecg_id"]) <= 0):
        problems.append("meta.csv ecg_ids are not strictly increasing")
    checks = {"fold": range(1, 11), "sex": range(0, 2)}
    problems += [f"meta.csv {name} outside {allowed}" for name, allowed in checks.items()
                 if np.any(~np.isin(columns[name], list(allowed)))]  # fmt: skip
    if not (np.all(np.isfinite(cache.norm.mean)) and np.all(cache.norm.std > 0)):
        problems.append("norm.json statistics are not finite and positive")
    counts = cache.manifest["counts"]
    if counts["kept"] != n or counts["rejected"] != len(cache.rejections):
        problems.append(f"manifest counts {counts} disagree with meta.csv and rejections.csv")
    return problems


@dataclass
class RecordOutcome:
    """What one record contributes besides its decimated signal (which goes straight to the
    scratch memmap): its rejection, or its R-peaks, token phases and phase QC."""

    row: int
    rejection: RecordRejected | None = None
    events: np.ndarray | None = None
    phase_centre: np.ndarray | None = None
    phase_causal: np.ndarray | None = None
    qc_ok: bool = True
    qc_reason: str = ""
    phase_yield: float = 0.0


def _build(
    dataset: PTBXL, build_dir: Path, arguments: dict[str, Any], workers: int, progress: bool
) -> None:
    meta = dataset.metadata
    scratch_path = build_dir / "decimated_mv.npy"
    scratch = np.lib.format.open_memmap(
        scratch_path, mode="w+", dtype=np.float32, shape=(len(meta), len(LEADS), N_OUT)
    )
    del scratch  # workers reopen it
    jobs = [
        (row, int(ecg_id), str(dataset.root / name))
        for row, (ecg_id, name) in enumerate(zip(meta["ecg_id"], meta["filename_hr"]))
    ]
    outcomes = sorted(
        _run_jobs(jobs, scratch_path, arguments, workers, progress), key=lambda o: o.row
    )
    kept = [o for o in outcomes if o.rejection is None]
    rejections = dataset.row_rejections + [o.rejection for o in outcomes if o.rejection is not None]
    rows = np.array([o.row for o in kept], dtype=np.int64)
    n_rows = len(meta) + len(dataset.row_rejections)
    scratch = np.load(scratch_path, mmap_mode="r")
    in_train = np.zeros(len(meta), dtype=bool)
    in_train[rows] = np.isin(meta["fold"].to_numpy()[rows], arguments["train_folds"])
    if not in_train.any():
        checks = Counter(r.check for r in rejections)
        raise ValueError(
            f"no record of train_folds {arguments['train_folds']} passed verification "
            f"({len(rejections)} of {n_rows} records rejected: {dict(checks)})"
        )
    norm = fit_normalisation(scratch, in_train)
    _write_signals(build_dir / "signals.npy", scratch, rows, norm)
    del scratch
    scratch_path.unlink()
    _write_phases(build_dir, kept)
    _write_meta(build_dir / "meta.csv", meta.iloc[rows], kept)
    (build_dir / "norm.json").write_text(
        json.dumps({**norm.to_dict(LEADS), "train_folds": arguments["train_folds"],
                    "records": int(in_train.sum())}, indent=2)  # fmt: skip
    )
    _write_rejections(build_dir / "rejections.csv", rejections)
    _write_manifest(build_dir, arguments, n_rows, kept, rejections)


def _run_jobs(
    jobs: list[tuple[int, int, str]],
    scratch_path: Path,
    arguments: Mapping[str, Any],
    workers: int,
    progress: bool,
) -> list[RecordOutcome]:
    """Every record through `_process_chunk`, inline or over ``workers`` processes."""
    size = min(64, max(1, len(jobs) // (8 * workers)))
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    provider = (arguments["phase_provider"], arguments["phase_options"])
    outcomes: list[RecordOutcome] = []
    with progress_bar(len(jobs), "preparing records", enabled=progress) as advance:
        if workers == 1:
            for chunk in chunks:
                outcomes += _process_chunk(chunk, scratch_path, *provider)
                advance(len(chunk))
            return outcomes
        with ProcessPoolExecutor(workers, mp_context=_worker_context()) as pool:
            futures = {
                pool.submit(_process_chunk, chunk, scratch_path, *provider): len(chunk)
                for chunk in chunks
            }
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
    context.set_forkserver_preload([__name__, "cyclejepa.phase.rpeak", "scipy.signal"])
    return context


def _process_chunk(
    jobs: Sequence[tuple[int, int, str]],
    scratch_path: Path,
    provider_name: str,
    provider_options: Mapping[str, Any],
) -> list[RecordOutcome]:
    """Verify, decimate (into the scratch memmap) and phase-tag the records of one chunk."""
    from cyclejepa.registry import PHASE_PROVIDERS

    provider = PHASE_PROVIDERS.build(provider_name, **provider_options)
    scratch = np.load(scratch_path, mmap_mode="r+")
    outcomes = []
    for row, ecg_id, path in jobs:
        try:
            signal = read_record_fast(path, record_id=ecg_id)
        except RecordRejected as rejection:
            outcomes.append(RecordOutcome(row, rejection=rejection))
            continue
        try:
            scratch[row], outcome, _ = prepare_record(signal, provider)
            outcome.row = row
            outcomes.append(outcome)
        except Exception as error:
            raise RuntimeError(f"preparing record {ecg_id} ({path}) failed: {error}") from error
    scratch.flush()
    return outcomes


# --------------------------------------------------------------------------------------------
# the per-record work, fast path

_HEADER_SIGNAL = re.compile(
    r"^(?P<file>\S+) 16 (?P<gain>[0-9.eE+-]+)\((?P<baseline>-?\d+)\)/(?P<unit>\S+)"
    r" \d+ -?\d+ -?\d+ (?P<checksum>-?\d+) 0 (?P<name>\S+)$"
)


def read_record_fast(path: str | os.PathLike, record_id: object = None) -> np.ndarray:
    """`read_verified` of a plainly written PTB-XL record in a fraction of its time.

    Parses the header itself and reads the samples with one ``np.fromfile``, then runs the same
    checks (sampling rate, extent, lead order, format 16, file size, checksums, calibration,
    invalid samples) and computes the same float32 mV values. Any record that is not a plain
    single-file, format-16, mV record with every header field present, and any record failing
    a check, goes through `read_verified` itself, so rejections are exactly its rejections.
    """
    path = Path(path)
    try:
        lines = [
            line
            for line in path.with_suffix(".hea").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        record = lines[0].split()
        fields = [_HEADER_SIGNAL.match(line) for line in lines[1 : 1 + len(LEADS)]]
        plain = (
            len(record) == 4
            and record[0] == path.name
            and float(record[2]) == FS
            and (int(record[1]), int(record[3])) == (len(LEADS), N_SAMPLES)
            and len(lines) == 1 + len(LEADS)
            and all(fields)
            and len({f["file"] for f in fields}) == 1
            and [f["name"].lower() for f in fields] == [lead.lower() for lead in LEADS]
            and all(f["unit"].lower() == "mv" for f in fields)
        )
        if plain:
            data = path.parent / fields[0]["file"]
            plain = data.is_file() and data.stat().st_size == 2 * len(LEADS) * N_SAMPLES
    except (OSError, ValueError, UnicodeDecodeError):
        plain = False
    if not plain:
        return read_verified(path, record_id=record_id)
    digital = np.fromfile(data, dtype="<i2").reshape(N_SAMPLES, len(LEADS))
    gain = np.array([float(f["gain"]) for f in fields])
    checksum = np.array([int(f["checksum"]) for f in fields], dtype=np.int64)
    wide = digital.astype(np.int64)
    if (
        not np.all(np.isfinite(gain) & (gain > 0))
        or np.any(np.mod(wide.sum(axis=0), 65536) != np.mod(checksum, 65536))
        or np.any(digital == -32768)
    ):
        return read_verified(path, record_id=record_id)
    baseline = np.array([float(f["baseline"]) for f in fields])
    signal = ((wide - baseline) / gain * 1.0).T  # the operations of read_verified, in order
    if not np.isfinite(signal).all():
        return read_verified(path, record_id=record_id)
    return signal.astype(np.float32)


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


def prepare_record(signal: np.ndarray, provider, clock=None) -> tuple[np.ndarray, RecordOutcome, list]:
    """Decimated signal and phase outcome of one verified record (stage times when ``clock``).

    ``signal`` is a (12, 5000) float32 record in mV at `FS`, leads in `LEADS` order (what
    `read_record_fast` returns); ``provider`` a `PhaseProvider`. Returns the (12, 1000) float32
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
            track = provider.phase(signal.astype(np.float64), FS, LEADS)
        else:
            outcome = _phase_outcome(0, track)
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


def _phase_outcome(row: int, track) -> RecordOutcome:
    """Events, token phases (both conventions) and QC of a `PhaseTrack`."""

    def tokens(convention: str) -> np.ndarray:
        phases = track.at_tokens(patch=TOKEN_PATCH, fs_out=FS_OUT, convention=convention)
        return np.asarray(phases, dtype=np.float32)

    qc = track.qc
    return RecordOutcome(
        row,
        events=np.asarray(track.events, dtype=np.int64),
        phase_centre=tokens("centre"),
        phase_causal=tokens("causal"),
        qc_ok=True if qc is None else bool(qc.ok),
        qc_reason="" if qc is None else ";".join(qc.reasons),
        phase_yield=float(track.phase_yield),
    )


def _write_signals(path: Path, scratch: np.ndarray, rows: np.ndarray, norm: Normalisation) -> None:
    out = np.lib.format.open_memmap(
        path, mode="w+", dtype=np.float32, shape=(len(rows), len(LEADS), N_OUT)
    )
    for start in range(0, len(rows), 512):
        out[start : start + 512] = norm.apply(scratch[rows[start : start + 512]])
    out.flush()


def _write_phases(build_dir: Path, kept: list[RecordOutcome]) -> None:
    empty = np.zeros((0, N_TOKENS), dtype=np.float32)
    for convention in ("centre", "causal"):
        stack = [getattr(o, f"phase_{convention}") for o in kept]
        np.save(build_dir / f"phase_{convention}.npy", np.stack(stack) if stack else empty)
    events = [o.events for o in kept]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in events])]).astype(np.int64)
    indices = np.concatenate(events).astype(np.int64) if events else np.zeros(0, np.int64)
    np.savez(build_dir / "rpeaks.npz", indices=indices, offsets=offsets)


def _write_meta(path: Path, meta: pd.DataFrame, kept: list[RecordOutcome]) -> None:
    columns = {name: meta[name].to_numpy() for name in _DATASET_COLUMNS}
    columns |= {
        "beats": [len(o.events) for o in kept],
        "phase_yield": [o.phase_yield for o in kept],
        "qc_ok": [int(o.qc_ok) for o in kept],
        "qc_reason": [o.qc_reason for o in kept],
    }
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(META_COLUMNS)
        writer.writerows(zip(*(columns[name] for name in META_COLUMNS)))


def _write_rejections(path: Path, rejections: Iterable[RecordRejected]) -> None:
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(("id", "check", "detail"))
        writer.writerows((r.record_id, r.check, r.detail) for r in rejections)


def _write_manifest(
    build_dir: Path,
    arguments: dict[str, Any],
    n_records: int,
    kept: list[RecordOutcome],
    rejections: list[RecordRejected],
) -> None:
    manifest = {
        "config_hash": _hash(arguments),
        "arguments": arguments,
        "cyclejepa_version": arguments["cyclejepa_version"],
        "leads": list(LEADS),
        "fs_native": FS,
        "fs": FS_OUT,
        "counts": {
            "records": n_records,
            "kept": len(kept),
            "rejected": len(rejections),
            "qc_failed": sum(not o.qc_ok for o in kept),
        },
        "files": {name: _sha256(build_dir / name) for name in DATA_FILES},
    }
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
    signals : (N, 12, 1000) float32 memmap, z-scored, lead-major.
    phase_centre, phase_causal : (N, 125) float32 token phases, NaN undefined.
    rpeak_indices, rpeak_offsets : ragged R-peaks at 500 Hz; record i's are
        ``rpeak_indices[rpeak_offsets[i]:rpeak_offsets[i + 1]]`` (see `rpeaks`).
    columns : meta.csv as a dict of numpy arrays (`META_COLUMNS`).
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
        with np.load(self.path / "rpeaks.npz") as rpeaks:
            self.rpeak_indices, self.rpeak_offsets = rpeaks["indices"], rpeaks["offsets"]
        self.columns = _read_meta(self.path / "meta.csv")
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
        """(N, 125) token phases, ``"centre"`` (training) or ``"causal"`` (reporting) convention."""
        if convention not in ("centre", "causal"):
            raise ValueError(f"unknown token convention {convention!r}; use 'centre' or 'causal'")
        return self.phase_centre if convention == "centre" else self.phase_causal

    def rpeaks(self, index: int) -> np.ndarray:
        """R-peak sample indices (500 Hz) of row ``index``."""
        return self.rpeak_indices[self.rpeak_offsets[index] : self.rpeak_offsets[index + 1]]

    def select(self, folds: Iterable[int]) -> np.ndarray:
        """Row indices of the records in ``folds``, ascending."""
        return np.flatnonzero(np.isin(self.columns["fold"], list(folds)))

    def labels(self, level: str = "superclass") -> np.ndarray:
        """(N, C) uint8 multi-hot of ``"superclass"`` (`SUPERCLASSES`) or ``"subclass"``."""
        names = {"superclass": ("super", SUPERCLASSES), "subclass": ("sub", SUBCLASSES)}
        if level not in names:
            raise ValueError(f"unknown label level {level!r}; use 'superclass' or 'subclass'")
        prefix, classes = names[level]
        return np.stack([self.columns[f"{prefix}_{c}"] for c in classes], axis=1).astype(np.uint8)


def _read_meta(path: Path) -> dict[str, np.ndarray]:
    with path.open(newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader)
        if tuple(header) != META_COLUMNS:
            raise ValueError(f"{path}: columns {header} differ from {list(META_COLUMNS)}")
        values = list(zip(*reader)) or [()] * len(header)
    columns = {}
    for name, column in zip(header, values):
        if name == "qc_reason":
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
