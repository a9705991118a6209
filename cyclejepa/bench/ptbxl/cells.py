"""The benchmark's cells computed in turn in this process, or side by side in worker processes.

With ``at_once`` > 1 the cells that train a network (``finetune``, ``linear-finetune``,
``scratch``: the cost of the benchmark) go to a `cyclejepa.workers.process_pool` of that many
workers, each with its share of the cores (`shared_threads`) and, on several GPUs, its own in
turn; the ``linear`` and ``random-linear`` cells (a probe on features computed once per run) are computed here
meanwhile. Each cell is handed to one worker once (the arguments refuse a value given twice), and
its result file and fine-tuning checkpoints are named by the cell (`Bench.cell_path`,
``finetune/<cell>/``), so no two processes write the same file. A worker computes exactly what
this process would (`Bench.computed`, seeded by the cell): the head of a ``linear-finetune`` cell
is its own probe of the run's features, embedded once per worker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cyclejepa.bench.ptbxl.run import LINEAR_PROTOCOLS, Bench, Cell, Split, TaskData
from cyclejepa.bench.ptbxl.spec import BenchmarkSpec, PretrainedRun

log = logging.getLogger(__name__)

Planned = tuple[Cell, PretrainedRun | None]
"""A cell and the pre-trained run it starts from (None: from scratch)."""

_bench: Bench | None = None
_tasks: dict[str, TaskData] = {}
"""A worker's `Bench` and the task data of every task, set once when it starts (`_start_worker`)."""


def computed_cells(
    bench: Bench, tasks: dict[str, TaskData], cells: Sequence[Planned], at_once: int
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Every one of ``cells`` with its result (`Bench.computed`), as each finishes: with
    ``at_once`` = 1 in turn, else the linear ones here while at most ``at_once`` workers compute
    the others.

    A cell's ValueError is its stored ``error``; any other exception in a worker is logged with
    the cell's name and raised here, after the running cells finish and store their results (the
    queued ones are not started).
    """
    trained = [(cell, run) for cell, run in cells if cell.protocol not in LINEAR_PROTOCOLS]
    if at_once == 1 or not trained:
        for cell, run in cells:
            yield cell, bench.computed(cell, tasks[cell.task], run)
        return
    yield from _side_by_side(bench, tasks, cells, trained, at_once)


def _side_by_side(
    bench: Bench, tasks: dict[str, TaskData], todo: Sequence[Planned], trained: list[Planned], at_once: int
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    from concurrent.futures import as_completed

    from cyclejepa.devices import child_gpus
    from cyclejepa.workers import process_pool, shared_threads

    spec = bench.spec
    initargs = (spec, str(bench.cache.path), bench.split, bench.fingerprint, tasks)
    with process_pool(
        at_once,
        initializer=_start_worker,
        initargs=initargs,
        threads=shared_threads(at_once),
        gpus=len(child_gpus(spec.training.device)),
        tasks=len(trained),
    ) as pool:
        futures = {pool.submit(_computed_in_worker, cell, run): cell for cell, run in trained}
        for cell, run in todo:
            if cell.protocol in LINEAR_PROTOCOLS:
                yield cell, bench.computed(cell, tasks[cell.task], run)
        for future in as_completed(futures):
            cell = futures[future]
            try:
                result = future.result()
            except Exception:
                log.error("benchmark cell %s failed in a worker process", cell.name)
                raise
            yield cell, result


def _start_worker(spec: BenchmarkSpec, cache: str, split: Split, fingerprint: dict[str, Any], tasks: dict[str, TaskData]) -> None:
    """A worker's `Bench` on the cache at ``cache``, and the task data, kept for its cells."""
    from cyclejepa.data.cache import PreparedCache

    global _bench, _tasks
    _bench, _tasks = Bench(spec, PreparedCache(Path(cache)), split, fingerprint, progress=False), tasks


def _computed_in_worker(cell: Cell, run: PretrainedRun | None) -> dict[str, Any]:
    """`Bench.computed` of ``cell`` in a worker."""
    assert _bench is not None, "the pool's initializer sets the worker's Bench"
    return _bench.computed(cell, _tasks[cell.task], run)
