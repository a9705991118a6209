"""The training section: steps/s of `Trainer.train_step` per variant, the split of a step into
phases and the host synchronisations of a step."""

from __future__ import annotations

import functools
import math
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cyclejepa.bench.throughput.common import (
    CORPUS_RECORDS,
    EQUALITY_STEPS,
    MODEL_FS,
    SAMPLES,
    SPLIT_GROUPS,
    VARIANTS,
    Budget,
    _guarded,
    _release,
    _skipped,
)
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.timing import (
    PhaseTimer,
    device_sync,
    peak_memory,
    reset_peak_memory,
    summarise,
    time_calls,
    time_window,
)
from cyclejepa.objectives import prediction_loss, sample_cutoffs
from cyclejepa.training import Trainer
from cyclejepa.training.schedule import learning_rate, set_learning_rate
from cyclejepa.training.spec import TrainingSpec

SYNC_WARNING = "called a synchronizing CUDA operation"
"""What ``torch.cuda.set_sync_debug_mode("warn")`` says at each blocking operation."""


def measure_training(
    spec: ThroughputSpec,
    budget: Budget,
    variants: Sequence[str],
    time_left: Callable[[], bool] = lambda: True,
    log: Callable[[str], None] = lambda message: None,
) -> Iterator[tuple[dict[str, Any], list[list[float]]]]:
    """Per variant: its entry and the metrics rows of its first `EQUALITY_STEPS` steps."""
    corpus = synthetic_training_arrays(spec.channels, spec.tokens)
    for name in variants:
        entry: dict[str, Any] = {"variant": name, **asdict(VARIANTS[name])}
        trace: list[list[float]] = []
        if time_left():
            log(f"[throughput] training, variant {name}")
            entry.update(_guarded(functools.partial(_measure_variant, spec, name, budget, corpus, trace)))
            _release(spec.device, compiled=VARIANTS[name].compile_mode is not None)
        else:
            entry.update(_skipped("deadline passed"))
        yield entry, trace


def _measure_variant(
    spec: ThroughputSpec,
    name: str,
    budget: Budget,
    corpus: tuple[np.ndarray, np.ndarray],
    trace: list[list[float]],
) -> dict[str, Any]:
    """Timings of one variant; appends the metrics rows of its first steps to ``trace``."""
    variant, device = VARIANTS[name], spec.device
    sync = device_sync(device)
    with tempfile.TemporaryDirectory(prefix="cyclejepa-bench-") as directory:
        trainer = timed_trainer(spec.trainers[name], corpus, directory)
        reset_peak_memory(device)
        first: list[torch.Tensor] = []

        def step() -> None:
            metrics = trainer.train_step()
            if len(first) < EQUALITY_STEPS:
                first.append(metrics)

        start = time.perf_counter()
        for _ in range(budget.warmup):
            step()
        sync()
        entry: dict[str, Any] = {"status": "ok", "warmup_steps": budget.warmup}
        entry["warmup_s"] = time.perf_counter() - start
        entry["step"] = summarise(time_calls(step, warmup=0, repeats=budget.timed, sync=sync))
        entry["steps_per_s"] = 1e3 / entry["step"]["median_ms"]
        if budget.window:
            seconds = time_window(trainer.train_step, budget.window, sync=sync)
            entry["window"] = {"steps": budget.window, "seconds": seconds, "steps_per_s": budget.window / seconds}
        entry["peak_memory"] = peak_memory(device)
        trace += torch.stack(first).tolist()
        entry["finite"] = all(math.isfinite(v) for row in trace for v in row)
        compiled = variant.compile_mode is not None
        entry["split"] = measure_split(trainer, budget.instrumented, sync, compiled)
        if compiled:
            entry["dynamo"] = _dynamo_counters()
        elif device.type == "cuda":
            entry["host_syncs"] = find_host_syncs(trainer.train_step)
    return entry


def _dynamo_counters() -> dict[str, Any]:
    """What torch.compile made of the step: graphs, graph breaks by reason, CUDA-graph skips."""
    from torch._dynamo.utils import counters

    breaks: Counter[str] = Counter()
    for reason, count in counters["graph_break"].items():
        breaks[reason.splitlines()[0]] += count
    return {
        "unique_graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": dict(breaks),
        "inductor": {key: value for key, value in counters["inductor"].items() if "cudagraph" in key},
    }


def timed_trainer(spec: TrainingSpec, corpus: tuple[np.ndarray, np.ndarray], directory: str | Path, **changes: Any) -> Trainer:
    """A `Trainer` of ``spec`` (with ``changes``, e.g. ``seed``) on ``corpus`` writing to ``directory``."""
    return Trainer(replace(spec, directory=Path(directory), **changes), *corpus, model_fs=MODEL_FS)


def instrumented_step(trainer, timer: PhaseTimer) -> dict[str, torch.Tensor]:
    """One `Trainer.train_step` (single process), phase by phase, each phase timed by ``timer``.

    Computes exactly what ``train_step`` computes, from the same RNG streams, with the
    predictor's forward timed apart from the prediction loss; returns the loss terms.
    """
    objective, streams, spec = trainer.objective, trainer.streams, trainer.spec
    with timer.phase("batch"):
        x, phi = trainer.batches.next()
    with timer.phase("augment + cutoffs"):
        x = trainer.augmenter(x, streams["augment"])
        cutoff = sample_cutoffs(x.shape[0], phi.shape[1], streams["mask"], trainer.device)
    set_learning_rate(trainer.optimisers, learning_rate(trainer.step, spec.training.steps, spec.optimiser))
    with timer.phase("encoder + projector"):
        with objective._autocast(x.device.type):
            z = objective.model(x)
        z = z.float()
    with timer.phase("predictor"):
        prediction = objective._predict(z, cutoff)
    with timer.phase("prediction loss"):
        terms = {"prediction": prediction_loss(lambda *_: prediction, z, cutoff, stop_gradient=objective.stop_gradient)}
    with timer.phase("regulariser"):
        terms["regulariser"] = objective._regulariser(z, trainer.regulariser_inputs())
    with timer.phase("transport"):
        terms["transport"] = objective._transport(z, phi)
    terms["loss"] = sum(objective.weights[name] * value for name, value in terms.items())
    _timed_update(trainer, timer, terms["loss"], "optimiser")
    return terms


def product_step(trainer, timer: PhaseTimer) -> dict[str, torch.Tensor]:
    """One `Trainer.train_step` (single process) in its own four parts, each timed by ``timer``:
    the inputs (batch, augmentation, cutoffs, regulariser draws), the objective's forward (the
    compiled module of a compiled variant, its CUDA graphs included), backward, and gradient
    clipping with the optimiser. The calls are ``train_step``'s own, so a compiled variant is
    split as it runs; returns the loss terms."""
    spec = trainer.spec
    set_learning_rate(trainer.optimisers, learning_rate(trainer.step, spec.training.steps, spec.optimiser))
    if trainer.cuda_graphs:
        torch.compiler.cudagraph_mark_step_begin()
    with timer.phase("inputs"):
        inputs = trainer.step_inputs()
    with timer.phase("objective forward"):
        terms = trainer.step_module(*inputs)
    _timed_update(trainer, timer, terms["loss"], "clip + optimiser")
    return terms


def _timed_update(trainer, timer: PhaseTimer, loss: torch.Tensor, update: str) -> None:
    """``train_step``'s end, timed: the backward of ``loss`` (phase ``backward``), then gradient
    clipping and the optimiser step (phase ``update``); the trainer's step count moves on."""
    with timer.phase("backward"):
        for optimiser in trainer.optimisers:
            optimiser.zero_grad(set_to_none=True)
        loss.backward()
    with timer.phase(update):
        nn.utils.clip_grad_norm_(trainer.objective.parameters(), trainer.spec.optimiser.grad_clip)
        for optimiser in trainer.optimisers:
            optimiser.step()
    trainer.step += 1


def measure_split(trainer, steps: int, sync: Callable[[], None], compiled: bool = False) -> dict[str, Any]:
    """Phase split of ``steps`` instrumented training steps: `instrumented_step`'s nine phases
    for an eager variant, `product_step`'s four parts for a ``compiled`` one."""
    timer = PhaseTimer(sync)
    for _ in range(steps):
        (product_step if compiled else instrumented_step)(trainer, timer)
    split = timer.split(None if compiled else SPLIT_GROUPS)
    split["note"] = "device synchronised at every phase boundary: the phases sum to more than a plain step"
    return split


def find_host_syncs(step: Callable[[], object], steps: int = 3) -> list[dict[str, Any]]:
    """Every operation of ``steps`` training steps that blocks the host on the GPU.

    Runs under ``torch.cuda.set_sync_debug_mode("warn")``; each entry names the operation's
    Python line (``op``), the innermost cyclejepa line that led to it (``caller``) and how
    often it fires per step.
    """
    found: Counter[tuple[str, str, str]] = Counter()

    def capture(message, category, filename, lineno, file=None, line=None) -> None:
        if SYNC_WARNING not in str(message):  # e.g. the notice that the debug mode is a prototype
            return
        frames = traceback.extract_stack()[:-1]
        ours = [f for f in frames if "/cyclejepa/" in f.filename and "/cyclejepa/bench/" not in f.filename]
        caller = f"{_short(ours[-1].filename)}:{ours[-1].lineno}" if ours else "?"
        found[(f"{_short(filename)}:{lineno}", caller, str(message).splitlines()[0][:120])] += 1

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = capture
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return [
        {"op": op, "caller": caller, "message": message, "per_step": count / steps}
        for (op, caller, message), count in found.most_common()
    ]


def synthetic_training_arrays(
    channels: int, tokens: int, records: int = CORPUS_RECORDS, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Z-scored-like signals (records, channels, 1000) and token phases (records, tokens).

    Phases advance linearly at 10–12.5 tokens per beat from a random offset and are NaN (no
    beat yet / after the last beat) on the first 0–12 and last 1–12 tokens of each record.
    """
    rng = np.random.default_rng(seed)
    signals = rng.standard_normal((records, channels, SAMPLES), dtype=np.float32)
    period = rng.uniform(10.0, 12.5, (records, 1))
    position = np.arange(tokens)
    phases = (rng.uniform(0, 2 * np.pi, (records, 1)) + 2 * np.pi * position / period) % (2 * np.pi)
    first = rng.integers(0, 13, (records, 1))
    last = tokens - rng.integers(1, 13, (records, 1))
    phases[(position < first) | (position >= last)] = np.nan
    return signals, phases.astype(np.float32)


def _short(filename: str) -> str:
    """A path relative to site-packages or to the source checkout, for readable locations."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.removeprefix(str(Path(__file__).resolve().parents[3]) + "/")
