"""The equality section: the first training steps of every variant against strict float32."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from cyclejepa.bench.throughput.common import (
    EQUALITY_RTOL,
    EQUALITY_TERMS,
    Budget,
    _guarded,
    _release,
    _skipped,
)
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.throughput.training import measure_training, synthetic_training_arrays, timed_trainer


def _training_and_equality(
    report: dict[str, Any],
    spec: ThroughputSpec,
    budget: Budget,
    variants: Sequence[str],
    equality_steps: int,
    time_left: Callable[[], bool],
    log: Callable[[str], None],
    save: Callable[[], None],
) -> None:
    """Fill ``report["training"]`` variant by variant (saving after each) and, when
    ``equality_steps``, compare each variant's first steps with a strict-float32 run."""
    report["training"] = []
    report["equality"] = _skipped("not selected (--sections)")
    reference: list[list[float]] = []
    if equality_steps:
        log(f"[throughput] strict float32 reference, {equality_steps} steps")
        reference = _guarded(lambda: strict_float32_trace(spec, equality_steps))
        report["equality"] = (
            reference
            if isinstance(reference, dict)
            else {
                "status": "ok",
                "reference": "float32 eager with TF32 off for matmul and cuDNN, same seed and batches",
                "steps": equality_steps,
                "variants": {},
            }
        )
    for entry, trace in measure_training(spec, budget, variants, time_left, log):
        report["training"].append(entry)
        if trace and report["equality"]["status"] == "ok":
            report["equality"]["variants"][entry["variant"]] = compare_traces(trace, reference)
        save()


def strict_float32_trace(spec: ThroughputSpec, steps: int) -> list[list[float]]:
    """Metrics rows of the first ``steps`` steps of the ``float32`` variant with TF32 disabled."""
    corpus = synthetic_training_arrays(spec.channels, spec.tokens)
    with _strict_float32(), tempfile.TemporaryDirectory(prefix="cyclejepa-bench-") as directory:
        trainer = timed_trainer(spec.trainers["float32"], corpus, directory)
        rows = torch.stack([trainer.train_step() for _ in range(steps)]).tolist()
    _release(spec.device, compiled=False)
    return rows


def compare_traces(trace: list[list[float]], reference: list[list[float]], rtol: float = EQUALITY_RTOL) -> dict[str, Any]:
    """Largest relative difference per loss term over the common steps, and whether all are
    within ``rtol``. Rows are `Trainer.train_step` metrics (loss, prediction, regulariser,
    transport, grad_norm, lr)."""
    steps = min(len(trace), len(reference))
    if steps == 0:
        raise ValueError("compare_traces: empty trace")
    worst = {}
    for column, term in enumerate(EQUALITY_TERMS):
        differences = [
            abs(row[column] - ref[column]) / max(abs(ref[column]), 1e-12)
            for row, ref in zip(trace[:steps], reference[:steps], strict=True)
        ]
        at = int(np.argmax(differences))
        worst[term] = {"max_rel_diff": differences[at], "at_step": at + 1}
    passed = all(value["max_rel_diff"] <= rtol for value in worst.values())
    return {"steps": steps, "rtol": rtol, "passed": passed, "terms": worst}


@contextmanager
def _strict_float32() -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
