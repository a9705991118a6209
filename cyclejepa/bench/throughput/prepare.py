"""The prepare section: records/s of `prepare_cache` on a synthetic corpus in a temp folder."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cyclejepa.bench.throughput.common import _skipped


def measure_prepare(records: int, all_cores: bool = True) -> dict[str, Any]:
    """`prepare_cache` records/s per worker count, with CPU time and the per-record split.

    On a synthetic corpus of ``records`` records written to a temporary folder (deleted
    afterwards) the cache is built with 1 worker and, if ``all_cores``, with 2, 4, 8 ... up to
    every core (at most 16). Each row has the wall-clock rate, the rate per worker, and the
    rate per CPU-second (this process and its workers: on a machine shared with other jobs
    it is the per-core rate that contention does not dilute). ``split`` is `prepare_split` on
    500 of those records: the mean milliseconds per record of reading and verification,
    decimation, R-peak detection (with QC) and token phases. The real PTB-XL records under
    ``$CYCLEJEPA_PREPARE_REAL`` (default ``runs/ptbxl-dev/ptbxl-dev``, the shared 434
    extracted), when present, get the same measurements under ``real``.
    """
    if records <= 0:
        return _skipped("--prepare-records 0")
    try:
        import scipy  # noqa: F401  (decimation, R-peak detection)
        import wfdb  # noqa: F401  (record reading)

        from cyclejepa.data.synthetic import write_synthetic_corpus
    except ImportError as error:
        return _skipped(f"needs the data dependencies: {error}")
    cores = min(os.cpu_count() or 1, 16) if all_cores else 1
    workers = sorted({1, cores, *(2**k for k in range(1, 5) if 2**k < cores)})
    result: dict[str, Any] = {"status": "ok", "records": records, "rows": []}
    with tempfile.TemporaryDirectory(prefix="cyclejepa-bench-prepare-") as folder:
        root = Path(folder) / "corpus"
        start = time.perf_counter()
        write_synthetic_corpus(root, records, 0, workers=workers[-1], progress=False)
        result["synthetic_write_s"] = time.perf_counter() - start
        result["rows"] = _prepare_rows(root, Path(folder), workers)
        result["split"] = prepare_split(_ptbxl_layout(root), min(records, 500))
    real = Path(os.environ.get("CYCLEJEPA_PREPARE_REAL", "runs/ptbxl-dev/ptbxl-dev"))
    if (real / "ptbxl_database.csv").is_file():
        with tempfile.TemporaryDirectory(prefix="cyclejepa-bench-prepare-real-") as folder:
            result["real"] = {
                "root": str(real),
                "rows": _prepare_rows(real, Path(folder), workers),
                "split": prepare_split(_ptbxl_layout(real)),
            }
    return result


def _prepare_rows(root: Path, folder: Path, workers: Sequence[int]) -> list[dict[str, Any]]:
    """One `prepare_cache` run per worker count: wall-clock rates, and for the one-worker run
    (in this process) the rate per CPU-second. Forkserver workers' CPU time reaches
    ``RUSAGE_CHILDREN`` only when the server exits, so several workers get no CPU figure."""
    import resource

    from cyclejepa.data.cache import CacheSpec, prepare_cache

    def cpu_seconds() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return own.ru_utime + own.ru_stime

    rows = []
    for count in workers:
        cpu, start = cpu_seconds(), time.perf_counter()
        cache = prepare_cache(_ptbxl_layout(root), CacheSpec(folder / f"cache-{count}", workers=count), progress=False)
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        n = cache.manifest["counts"]["records"]
        row = {
            "workers": count,
            "seconds": seconds,
            "kept": len(cache),
            "records_per_s": n / seconds,
            "records_per_s_per_worker": n / seconds / count,
        }
        if count == 1:
            row |= {"cpu_seconds": cpu, "records_per_cpu_s": n / cpu}
        rows.append(row)
    return rows


def _ptbxl_layout(root: Path):
    """The PTB-XL-layout corpus at ``root`` (real or synthetic) as a registered dataset."""
    from cyclejepa.registry import DATASETS

    return DATASETS.build("ptbxl", root=root)


def prepare_split(
    dataset,
    records: int | None = None,
    phase_provider: str = "ecg-rpeak",
    phase_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Per-record CPU time of each prepare stage (`STAGES`) in this process.

    Runs exactly the per-record work of `prepare_cache` on the first ``records`` entries of
    ``dataset`` (all when None) at its default rates: reading, verification and conforming
    (`record_windows`), decimation, events (the provider's detection and QC), phase (token
    phases in both conventions), reading ``time.process_time`` between stages (CPU time: other
    jobs on a shared machine do not inflate it). Rejected records are skipped. Returns
    ``{"records", "ms": {stage: mean ms per record}, "total_ms", "records_per_cpu_s"}``.
    """
    from cyclejepa.data.cache.record import STAGES, decimate_and_phase, record_windows
    from cyclejepa.data.datasets import RecordRejected
    from cyclejepa.registry import PHASE_PROVIDERS

    geometry = dataset.geometry(dataset.channels)
    provider = PHASE_PROVIDERS.build(phase_provider, **dict(phase_options or {}))
    totals = dict.fromkeys(STAGES, 0.0)
    done = 0
    for entry in dataset.entries()[: records or None]:
        start = time.process_time()
        try:
            windows = record_windows(dataset, entry, geometry.channels, geometry.cache_fs, geometry.window)
        except RecordRejected:
            continue
        totals["read_verify"] += time.process_time() - start
        for window in windows:
            _, _, times = decimate_and_phase(window, provider, geometry, time.process_time)
            for stage, seconds in zip(STAGES[1:], times, strict=True):
                totals[stage] += seconds
        done += 1
    ms = {stage: 1e3 * seconds / max(done, 1) for stage, seconds in totals.items()}
    total = sum(ms.values())
    return {"records": done, "ms": ms, "total_ms": total, "records_per_cpu_s": 1e3 / total}
