"""The prepare section: records/s of `prepare_cache` on a synthetic corpus in a temp folder."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
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

        from cyclejepa.data.cache import prepare_split
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
        result["split"] = prepare_split(root, min(records, 500))
    real = Path(os.environ.get("CYCLEJEPA_PREPARE_REAL", "runs/ptbxl-dev/ptbxl-dev"))
    if (real / "ptbxl_database.csv").is_file():
        with tempfile.TemporaryDirectory(prefix="cyclejepa-bench-prepare-real-") as folder:
            result["real"] = {
                "root": str(real),
                "rows": _prepare_rows(real, Path(folder), workers),
                "split": prepare_split(real),
            }
    return result



def _prepare_rows(root: Path, folder: Path, workers: Sequence[int]) -> list[dict[str, Any]]:
    """One `prepare_cache` run per worker count: wall-clock rates, and for the one-worker run
    (in this process) the rate per CPU-second. Forkserver workers' CPU time reaches
    ``RUSAGE_CHILDREN`` only when the server exits, so several workers get no CPU figure."""
    import resource

    from cyclejepa.data.cache import prepare_cache

    def cpu_seconds() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        return own.ru_utime + own.ru_stime

    rows = []
    for count in workers:
        cpu, start = cpu_seconds(), time.perf_counter()
        cache = prepare_cache(root, folder / f"cache-{count}", workers=count, progress=False)
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
