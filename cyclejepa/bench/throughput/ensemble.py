"""The ensemble section: N runs stepped as one stacked ensemble (`StackedRuns`) against the
same N runs stepped one after another in one process, eager, in the product precision.

For N in `ENSEMBLE_SIZES` (arms alternating, seeds 0 … N − 1): the aggregate rate N × steps / s
of each way over a window of the budget's ``timed`` unsynchronised steps after its warm-up,
their ratio, and the peak memory. The one-after-another rate is what N side-by-side processes
reach when their kernels time-slice without overlapping; the experiment job's pre-training stage
gives the processes' own aggregate rate.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cyclejepa.bench.throughput.common import Budget, _release
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.throughput.training import synthetic_training_arrays, timed_trainer
from cyclejepa.bench.timing import device_sync, peak_memory, reset_peak_memory, time_window
from cyclejepa.training import Trainer
from cyclejepa.training.stacked import StackedRuns

ENSEMBLE_SIZES = (1, 2, 4)


def measure_ensemble(spec: ThroughputSpec, budget: Budget) -> dict[str, Any]:
    """Aggregate steps/s of N stacked runs and of N runs in turn, per N of `ENSEMBLE_SIZES`
    (run i: seed i, λ_trans = 1 for even i and 0 for odd i)."""
    device, run = spec.device, spec.ensemble
    corpus = synthetic_training_arrays(spec.channels, spec.tokens)
    calls = budget.timed
    rows = []
    for runs in ENSEMBLE_SIZES:
        row: dict[str, Any] = {"runs": runs}
        for way in ("in turn", "stacked"):
            with tempfile.TemporaryDirectory(prefix="cyclejepa-bench-") as folder:
                trainers = [
                    timed_trainer(run, corpus, Path(folder) / f"run{i}", seed=i, transport_weight=float(i % 2 == 0))
                    for i in range(runs)
                ]
                row[way] = _rate(trainers, way, device, budget.warmup, calls)
            _release(device, compiled=False)
        row["stacked / in turn"] = row["stacked"]["steps_per_s"] / row["in turn"]["steps_per_s"]
        rows.append(row)
    settings = {"precision": run.training.precision, "compile": run.training.compile}
    return {"status": "ok", **settings, "window_steps": calls, "rows": rows}


def _rate(trainers: list[Trainer], way: str, device: torch.device, warmup: int, calls: int) -> dict[str, Any]:
    """Aggregate run-steps per second of ``trainers`` stepped ``way`` over ``calls`` steps."""
    step: Callable[[], object] = StackedRuns(trainers).train_step if way == "stacked" else functools.partial(_in_turn, trainers)

    sync = device_sync(device)
    reset_peak_memory(device)
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - start
    seconds = time_window(step, calls, sync=sync)
    return {"steps_per_s": len(trainers) * calls / seconds, "warmup_s": warmup_s, "peak_memory": peak_memory(device)}


def _in_turn(trainers: list[Trainer]) -> None:
    """One step of each of ``trainers``, one after the other."""
    for trainer in trainers:
        trainer.train_step()
