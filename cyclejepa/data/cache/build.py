"""Building the cache: every record of a dataset through `decimate_and_phase`, then the files.

`prepare_cache` is idempotent (a cache whose manifest matches the arguments and whose files
match their sha256 is reused) and atomic (built in a folder beside ``cache_dir``, validated,
then renamed into place). Records are read inline or by worker processes in chunks; each chunk
writes its results to scratch files, appended in record order to a share folder (`build_share`,
`cyclejepa.data.cache.shares.ShareWriter`), from which the cache is written (`assemble`): the
one-step cache is the cache of one share holding every record (`cyclejepa.data.cache.shards`
prepares N shares on N machines).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np

from cyclejepa.data.cache import files
from cyclejepa.data.cache.files import CACHE_FORMAT, MANIFEST, PART_BYTES, PHASE_REVISION, arguments_hash, as_json
from cyclejepa.data.cache.prepared import PreparedCache, inconsistencies
from cyclejepa.data.cache.record import RecordOutcome, decimate_and_phase, record_windows
from cyclejepa.data.cache.shares import ChunkResult, ShareWriter, assemble_cache, share_rows
from cyclejepa.data.cache.spec import CacheSpec
from cyclejepa.data.datasets import (
    Dataset,
    Entry,
    RecordRejected,
    amplitude_limit,
    corpus_listing,
    sha256_file,
)
from cyclejepa.data.preprocess import SignalPreparation
from cyclejepa.jsonio import writing
from cyclejepa.lock import file_lock
from cyclejepa.progress import progress_bar
from cyclejepa.signal_geometry import SignalGeometry
from cyclejepa.version import __version__
from cyclejepa.workers import process_pool

log = logging.getLogger(__name__)


def prepare_cache(dataset: Dataset, spec: CacheSpec, *, progress: bool = True) -> PreparedCache:
    """Build (or reuse) the preprocessing cache of ``dataset`` (a `Dataset` whose
    `Dataset.fetch` has run) that ``spec`` describes; ``spec.dataset_options`` are the options
    ``dataset`` was built with, recorded in the manifest for `open_cache` to compare.

    Every record of the dataset is read and verified (`Dataset.read`), its channels picked and
    resampled to the cache rate ``spec.cache_fs`` (`conform`), cut into windows of
    ``spec.window_s`` seconds (`cut_windows`: non-overlapping from the first sample, a shorter
    tail dropped; a record shorter than one window is rejected, check ``extent``), and each
    window decimated by ``spec.decimation`` (to the model rate ``model_fs``) and phase-tagged at
    ``cache_fs``. Row i of the cache is one window; the windows of a record share its id,
    patient, fold and labels. A rate, shape or fold the spec leaves None is the dataset's
    (`Dataset.geometry`, `Dataset.folds`; the rates from the phase provider's ``cycle_band_hz``
    where the dataset has none of its own); a phase provider left None is the dataset's
    (`Dataset.phase_provider`; ValueError when it declares none).

    Idempotent: when ``spec.directory`` already holds a cache whose manifest hash matches these
    arguments (the dataset's `Dataset.fingerprint` and channels, the train folds, the phase
    provider and its options, the rates, the window, library and cache-format version) and
    whose files match their recorded sha256, it is loaded and nothing is recomputed. Otherwise
    it is rebuilt and replaced atomically. ``spec.workers`` and ``progress`` do not change the
    result. One prepare at a time builds a cache: a second one that would build it too, from this
    experiment or another sharing the directory, is refused (`cyclejepa.lock.OutputLocked`)
    naming the one at work (`cache_lock`); a cache that is current is reused without the lock. A
    full disk fails with OSError(ENOSPC) naming the file; the partial build is removed and the
    lock released.

    Records the dataset rejects while indexing (`Dataset.rejected`, e.g. a bad row of a metadata
    table) or while reading are logged to rejections.csv and left out; the run goes on. Windows
    failing phase QC stay in, flagged in meta.csv. The finished cache is loaded and checked for
    consistency before it replaces the previous one (`_validate`). An existing non-cache,
    non-empty folder at ``spec.directory`` is refused; a record with a channel beyond its unit's
    amplitude limit is rejected (check ``amplitude``).
    """
    arguments = cache_arguments(dataset, spec)

    def write(build_dir: Path) -> None:
        share = build_dir / "share"
        build_share(dataset, arguments, share, workers=spec.workers, progress=progress, part_bytes=spec.part_bytes)
        assemble(dataset, [share], build_dir, arguments, spec.directory)
        shutil.rmtree(share)

    return publish(spec.directory, arguments, write)


def cache_arguments(dataset: Dataset, spec: CacheSpec) -> dict[str, Any]:
    """Everything the cache ``spec`` describes depends on (`_arguments`), the phase provider, rates,
    folds and preparation checked against ``dataset`` first."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"prepare_cache needs a Dataset (e.g. DATASETS.build(name, root=...)), got {dataset!r}")
    if spec.workers < 1:
        raise ValueError(f"workers must be >= 1, got {spec.workers}")
    phase_provider = _phase_provider(dataset, spec.phase_provider)
    dataset.require_rate(_rate_check(phase_provider, spec.phase_options))
    band = _cycle_band(phase_provider)
    geometry = dataset.geometry(dataset.channels, spec.cache_fs, spec.decimation, spec.token_patch, spec.window_s, band)
    folds = dataset.folds.train if spec.train_folds is None else spec.train_folds
    preparation = dataset.preparation(band)
    preparation.check_rate(geometry.cache_fs)
    return _arguments(
        dataset, folds, phase_provider, spec.phase_options, geometry, spec.amplitude_limits, spec.dataset_options, preparation
    )


def publish(cache_dir: Path, arguments: dict[str, Any], write: Callable[[Path], None]) -> PreparedCache:
    """The cache at ``cache_dir`` when it is current for ``arguments``; else, under the cache's
    lock, ``write(build_dir)`` into a folder beside it, validated and renamed into place
    (nothing is left behind when it fails)."""
    current = _current_cache(cache_dir, arguments, quiet=True)  # reused without the lock (training processes read it at once)
    if current is not None:
        return current
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(cache_lock(cache_dir), f"the cache {cache_dir}"):
        current = _current_cache(cache_dir, arguments)  # built meanwhile by the lock's last holder
        if current is not None:
            return current
        _check_replaceable(cache_dir)
        _remove_stale_builds(cache_dir)
        build_dir = Path(tempfile.mkdtemp(prefix=f".{cache_dir.name}.build-{os.getpid()}-", dir=cache_dir.parent))
        try:
            write(build_dir)
            _validate(build_dir)
            _swap_in(build_dir, cache_dir)
        except BaseException:
            shutil.rmtree(build_dir, ignore_errors=True)
            raise
        return PreparedCache(cache_dir)


def cache_lock(cache_dir: Path) -> Path:
    """The lock file (`cyclejepa.lock.file_lock`) a prepare holds while it checks, builds and
    swaps in ``cache_dir``: ``.<name>.lock`` beside it, so that the swap never moves it."""
    return cache_dir.with_name(f".{cache_dir.name}.lock")


def _phase_provider(dataset: Dataset, named: str | None) -> str:
    """``named``, else the provider the dataset declares (`Dataset.phase_provider`)."""
    provider = named if named is not None else dataset.phase_provider
    if provider is None:
        raise ValueError(
            f"phase_provider: {type(dataset).__name__} declares no default phase provider (Dataset.phase_provider); name one"
        )
    return provider


def _rate_check(phase_provider: str, options: Mapping[str, Any] | None) -> Callable[[float], str | None] | None:
    """The provider's ``rate_problem`` (`cyclejepa.phase.PhaseProvider.rate_problem`): why a
    native rate is too slow for it; None for a provider that states no requirement."""
    from cyclejepa.registry import PHASE_PROVIDERS

    return getattr(PHASE_PROVIDERS.build(phase_provider, **dict(options or {})), "rate_problem", None)


def _cycle_band(phase_provider: str) -> tuple[float, float] | None:
    """The ``cycle_band_hz`` the registered provider's class declares (None: it declares none);
    an unknown name fails here, listing the registered ones."""
    from cyclejepa.registry import PHASE_PROVIDERS

    return getattr(PHASE_PROVIDERS.get(phase_provider), "cycle_band_hz", None)


def _arguments(
    dataset: Dataset,
    train_folds: Sequence[int],
    phase_provider: str,
    phase_options: Mapping[str, Any] | None,
    geometry: SignalGeometry,
    amplitude_limits: Mapping[str, float] | None = None,
    dataset_options: Mapping[str, Any] | None = None,
    preparation: SignalPreparation = SignalPreparation(),
) -> dict[str, Any]:
    """Everything the cache contents depend on, JSON-serialisable: with the dataset's
    fingerprint its options, its root and a listing of the corpus there (`corpus_listing`); the
    preparation only when it does anything, so that a cache of the paper's chain keeps its hash."""
    folds, protocol = sorted({int(f) for f in train_folds}), dataset.folds
    if not folds or not set(folds) <= set(protocol.all_folds):
        raise ValueError(
            f"train_folds must be a non-empty subset of {type(dataset).__name__}'s folds 1..{protocol.count}, got {train_folds!r}"
        )
    root = getattr(dataset, "root", None)
    return {
        "dataset": dataset.fingerprint(),
        "dataset_options": as_json(dataset_options or {}),
        "root": str(Path(root).resolve()) if root is not None else None,
        "corpus": corpus_listing(root),
        "geometry": geometry.to_dict(),
        "train_folds": folds,
        "phase_provider": phase_provider,
        "phase_options": json.loads(json.dumps(dict(phase_options or {}), sort_keys=True)),
        "amplitude_limits": {c: amplitude_limit(dataset.unit_of(c), amplitude_limits) for c in dataset.channels},
        "phase_revision": PHASE_REVISION,
        "cache_format": CACHE_FORMAT,
        "cyclejepa_version": __version__,
        **({} if preparation.is_default else {"preparation": preparation.to_dict()}),
    }


def _current_cache(cache_dir: Path, arguments: Mapping[str, Any], quiet: bool = False) -> PreparedCache | None:
    """The cache at ``cache_dir`` if it was built with ``arguments`` and is intact, else None,
    logging why it is rebuilt unless ``quiet`` (the check before the lock, repeated under it)."""
    if not (cache_dir / MANIFEST).is_file():
        return None
    stale = _why_stale(cache_dir, arguments)
    if stale is None:
        return PreparedCache(cache_dir)
    if not quiet:
        log.log(stale[0], "%s; rebuilding", stale[1])
    return None


def _why_stale(cache_dir: Path, arguments: Mapping[str, Any]) -> tuple[int, str] | None:
    """(log level, why) the cache at ``cache_dir`` cannot serve ``arguments``; None when it can."""
    manifest_path = cache_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError:
        return logging.WARNING, f"cache manifest {manifest_path} is unreadable"
    if manifest.get("config_hash") != arguments_hash(arguments):
        return logging.INFO, f"cache {cache_dir} was built with other arguments"
    for name, digest in manifest.get("files", {}).items():
        path = cache_dir / name
        if not path.is_file() or sha256_file(path) != digest:
            return logging.WARNING, f"cache file {path} is missing or modified"
    return None


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
        problems = inconsistencies(cache)
    except (OSError, ValueError, KeyError) as error:
        problems = [f"it does not load: {error}"]
    if problems:
        raise ValueError(
            f"the cache built in {build_dir} is broken, so it was not published (the previous "
            f"cache, if any, is unchanged): {'; '.join(problems)}"
        )


def _remove_stale_builds(cache_dir: Path) -> None:
    """Remove build folders of ``cache_dir`` left by a process that no longer runs (killed mid-build)."""
    remove_stale_builds(cache_dir.parent, f".{cache_dir.name}.build-")


def remove_stale_builds(parent: Path, prefix: str) -> None:
    """Remove the folders ``<prefix><pid>-*`` in ``parent`` whose process no longer runs (killed mid-build)."""
    for folder in parent.glob(f"{prefix}*"):
        pid = folder.name.removeprefix(prefix).split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            log.info("removing %s, left by a prepare that did not finish (process %s)", folder, pid)
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build_share(
    dataset: Dataset,
    arguments: dict[str, Any],
    directory: Path,
    *,
    workers: int = 1,
    progress: bool = True,
    part_bytes: int | None = None,
    index: int = 0,
    count: int = 1,
) -> dict[str, Any]:
    """Prepare share ``index`` of ``count`` of the dataset's records (`share_rows`) into the share
    folder ``directory`` (`ShareWriter`); returns its `SHARE_FILE` contents."""
    entries = dataset.entries()
    jobs = [(row, entries[row]) for row in share_rows(len(entries), index, count)]
    del entries
    writer = ShareWriter(directory, _part_rows(arguments, part_bytes), arguments["train_folds"])
    _run_jobs(dataset, jobs, directory, arguments, workers, progress, writer.add)
    return writer.finish(arguments, index, count)


def assemble(dataset: Dataset, shares: Sequence[Path], out: Path, arguments: dict[str, Any], cache_dir: Path) -> None:
    """The cache of the share folders ``shares`` written into ``out`` (`assemble_cache`), with the
    dataset's facts and its rejections while indexing; a build with no training window names
    each rejection in ``<cache_dir>.rejections.csv`` beside the cache."""
    facts = {
        "name": _registered_name(dataset),
        "units": [dataset.unit_of(c) for c in dataset.channels],
        "folds": dataset.folds.to_dict(),
    }
    report = cache_dir.with_name(f"{cache_dir.name}.rejections.csv")
    assemble_cache(shares, out, arguments, facts, dataset.label_levels, dataset.rejected(), report)


def _part_rows(arguments: Mapping[str, Any], part_bytes: int | None) -> int:
    """Windows per signal part: as many float32 windows as fit ``part_bytes`` (default `PART_BYTES`), at least one."""
    geometry = SignalGeometry.from_dict(arguments["geometry"])
    window_bytes = len(geometry.channels) * geometry.window_samples * 4
    return max(1, (PART_BYTES if part_bytes is None else part_bytes) // window_bytes)


def _registered_name(dataset: Dataset) -> str | None:
    """The name ``dataset``'s class is registered under in `DATASETS` (None when it is not)."""
    from cyclejepa.registry import DATASETS

    return next((name for name in DATASETS.names() if DATASETS.get(name) is type(dataset)), None)


def _run_jobs(
    dataset: Dataset,
    jobs: list[tuple[int, Entry]],
    build_dir: Path,
    arguments: Mapping[str, Any],
    workers: int,
    progress: bool,
    consume: Callable[[ChunkResult], None],
) -> None:
    """Every record through `_process_chunk`, inline or over ``workers`` processes; each chunk's
    result handed to ``consume`` in record order as soon as the chunks before it are done."""
    size = min(64, max(1, len(jobs) // (8 * workers)))
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    with progress_bar(len(jobs), "preparing records", enabled=progress) as advance:
        if workers == 1:
            _set_worker_dataset(dataset)
            for chunk in chunks:
                consume(_process_chunk(chunk, build_dir, arguments))
                advance(len(chunk))
            return
        preload = [__name__, "cyclejepa.phase", "scipy.signal"]
        with process_pool(workers, initializer=_set_worker_dataset, initargs=(dataset,), preload=preload) as pool:
            futures = {pool.submit(_process_chunk, chunk, build_dir, arguments): i for i, chunk in enumerate(chunks)}
            done: dict[int, ChunkResult] = {}
            following = 0
            for future in as_completed(futures):
                done[futures[future]] = future.result()
                advance(done[futures[future]].records)
                while following in done:
                    consume(done.pop(following))
                    following += 1


_WORKER: dict[str, Dataset] = {}


def _set_worker_dataset(dataset: Dataset) -> None:
    """The dataset this process reads (sent once per worker process, not once per chunk)."""
    _WORKER["dataset"] = dataset


def _prepare_entry(
    dataset: Dataset,
    entry: Entry,
    provider,
    geometry: SignalGeometry,
    preparation: SignalPreparation,
    limits: list,
) -> list[tuple[np.ndarray, RecordOutcome]]:
    """One record's decimated windows and outcomes. Any failure of this record is its rejection,
    named as the dataset names it (`Dataset.rejection_id`), never the end of the batch: the
    dataset's `RecordRejected`; ``phase`` when the provider refuses it (ValueError, KeyError);
    ``memory`` when reading or preparing it runs out of memory; ``unreadable`` for any other error."""
    name = dataset.rejection_id(entry)
    try:
        windows = record_windows(dataset, entry, geometry.channels, geometry.cache_fs, geometry.window, preparation, limits)
        try:
            return [decimate_and_phase(window, provider, geometry)[:2] for window in windows]
        except (ValueError, KeyError) as error:  # the provider refuses this record (e.g. no such channel)
            raise RecordRejected(name, "phase", f"{type(error).__name__}: {error}") from None
    except RecordRejected:
        raise
    except MemoryError as error:
        raise RecordRejected(name, "memory", f"ran out of memory reading or preparing it ({error})") from None
    except Exception as error:  # one record's failure, whatever it is, is that record's rejection
        raise RecordRejected(name, "unreadable", f"{type(error).__name__}: {error}") from None


def _process_chunk(jobs: Sequence[tuple[int, Entry]], build_dir: Path, arguments: Mapping[str, Any]) -> ChunkResult:
    """Read, verify, window, decimate and phase-tag one chunk, written beside the stem
    ``scratch-<first row>`` in ``build_dir`` (`ChunkResult`)."""
    from cyclejepa.registry import PHASE_PROVIDERS

    dataset = _WORKER["dataset"]
    provider = PHASE_PROVIDERS.build(arguments["phase_provider"], **arguments["phase_options"])
    geometry = SignalGeometry.from_dict(arguments["geometry"])
    preparation = SignalPreparation.from_dict(arguments.get("preparation"))
    stem = Path(build_dir) / f"scratch-{jobs[0][0]:09d}"
    result = ChunkResult(str(stem), records=len(jobs))
    kept: list[tuple[Entry, np.ndarray, RecordOutcome]] = []
    rejections: list[RecordRejected] = []
    limits = [arguments["amplitude_limits"][c] for c in geometry.channels]
    for _row, entry in jobs:
        try:
            prepared = _prepare_entry(dataset, entry, provider, geometry, preparation, limits)
        except RecordRejected as rejection:
            rejections.append(rejection)
            continue
        for w, (decimated, outcome) in enumerate(prepared):
            outcome.window = w
            kept.append((entry, decimated, outcome))
        result.records_kept += bool(prepared)
    result.checks.update(r.check for r in rejections)
    if rejections:
        files.write_rejections(stem.with_suffix(".rejections.csv"), rejections, header=False)
    if kept:
        _write_chunk(stem, kept, dataset.label_levels, result)
    return result


def _write_chunk(stem: Path, kept: list[tuple[Entry, np.ndarray, RecordOutcome]], levels, result: ChunkResult) -> None:
    """The chunk's windows: decimated (``.npy``), phases, folds, window statistics and events per
    coordinate (``.npz``), meta rows (``.csv``)."""
    outcomes = [o for _, _, o in kept]
    signals = np.stack([d for _, d, _ in kept])
    result.windows, result.qc_failed = len(kept), sum(not o.qc_ok for o in outcomes)
    result.coordinates, result.n_coordinates = outcomes[0].coordinates, len(outcomes[0].events)
    with writing(stem.with_suffix(".npy")):
        np.save(stem.with_suffix(".npy"), signals)
    wide = signals.astype(np.float64)
    arrays = {
        "phase_centre": np.stack([np.asarray(o.phase_centre) for o in outcomes]),
        "phase_causal": np.stack([np.asarray(o.phase_causal) for o in outcomes]),
        "fold": np.array([e.fold for e, _, _ in kept], dtype=np.int64),
        "means": wide.mean(axis=-1),
        "stds": wide.std(axis=-1),
    }
    for c in range(result.n_coordinates):
        arrays[f"events_{c}"] = np.concatenate([o.events[c] for o in outcomes]).astype(np.int64)
        arrays[f"counts_{c}"] = np.array([len(o.events[c]) for o in outcomes], dtype=np.int64)
    with writing(stem.with_suffix(".npz")):
        np.savez(stem.with_suffix(".npz"), **arrays)
    with writing(stem.with_suffix(".csv")), stem.with_suffix(".csv").open("w", newline="") as stream:
        csv.writer(stream).writerows(files.meta_row(e, levels, o) for e, _, o in kept)
