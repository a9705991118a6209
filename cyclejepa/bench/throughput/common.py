"""What every section of the throughput benchmark shares: its settings, the training variants,
the step budgets, and running one measurement so that its failure is recorded, not raised."""

from __future__ import annotations

import gc
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

SCHEMA = "cyclejepa-throughput/1"

SECTIONS = ("transport", "sigreg", "inference", "prepare", "ensemble", "training", "equality")
"""Sections in the order they run; the slow compiled training variants come last."""

SAMPLES = 1000  # 10 s at 100 Hz, the paper's input length
MODEL_FS = 100.0  # Hz: the rate of the synthetic training arrays (the model's input rate)

CORPUS_RECORDS = 2048  # synthetic training arrays (98 MB at 12 × 1000 float32)

TRANSPORT_TOKENS = (125, 1000)

INFERENCE_BATCH = 256

EQUALITY_STEPS = 20

EQUALITY_TERMS = ("loss", "prediction", "regulariser", "transport")

EQUALITY_RTOL = 2e-2
"""Largest accepted relative difference of a loss term from strict float32 over the first steps:
bf16 keeps 8 significand bits (unit roundoff 2^-8 ≈ 3.9e-3) and the trajectories drift apart
through 20 optimiser steps."""

SPLIT_GROUPS = {
    "data + augmentation": ("batch", "augment + cutoffs"),
    "forward (encoder + projector + predictor)": ("encoder + projector", "predictor"),
    "objectives": ("prediction loss", "regulariser", "transport"),
    "backward + optimiser": ("backward", "optimiser"),
}


@dataclass(frozen=True)
class Variant:
    """A way to run the training step: precision and torch.compile mode (None: eager)."""

    precision: str
    compile_mode: str | None = None


VARIANTS = {
    "float32": Variant("float32"),
    "bf16": Variant("bf16"),
    "bf16-compile": Variant("bf16", "default"),
    "bf16-compile-cudagraphs": Variant("bf16", "reduce-overhead"),
    "bf16-compile-max-autotune": Variant("bf16", "max-autotune"),
}
"""Each variant is the product path: the trainer built from ``training.precision`` and
``training.compile`` set to the variant's values (``bf16-compile-cudagraphs`` is what the
paper configs' ``auto`` settings give on CUDA)."""


@dataclass(frozen=True)
class Budget:
    """How many steps and calls each measurement takes."""

    warmup: int  # untimed training steps (compilation happens here)
    timed: int  # synchronised timed training steps
    window: int  # unsynchronised steps for the sustained rate (0: skip)
    instrumented: int  # steps of the phase-split pass
    repeats: int  # timed calls of each part (transport O(T), SIGReg, inference)
    part_warmup: int  # untimed calls before them
    naive_records: tuple[int, int]  # records of the all-pairs transport at T = 125 and 1,000
    naive_repeats: int  # timed calls of the all-pairs transport
    prepare_records: int


def default_budget(device: torch.device, quick: bool) -> Budget:
    """The step counts for ``device``; ``quick`` keeps a 2-core CPU run within minutes."""
    if device.type == "cuda":
        if quick:
            return Budget(5, 30, 50, 10, 10, 1, (64, 2), 3, 500)
        return Budget(10, 100, 300, 30, 30, 2, (64, 4), 10, 21_799)
    if quick:
        return Budget(1, 3, 0, 2, 2, 0, (8, 1), 1, 500)
    return Budget(2, 10, 0, 5, 5, 1, (64, 2), 3, 21_799)


def _guarded(fn: Callable[[], Any]) -> Any:
    """``fn()``, or a ``failed`` status with the error when it raises (one failure, not the run)."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001  (one failing section must not take the others down)
        return {
            "status": "failed",
            "error": f"{type(error).__name__}: {error}"[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }


def _skipped(reason: str) -> dict[str, str]:
    return {"status": "skipped", "reason": reason}


def _release(device: torch.device, compiled: bool) -> None:
    """Free what a finished measurement left behind (compiled graphs and their counters,
    cached GPU memory)."""
    if compiled:
        from torch._dynamo import reset
        from torch._dynamo.utils import counters

        reset()
        counters.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
