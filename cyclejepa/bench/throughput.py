"""Measured speed of the trainer and its parts (``cyclejepa benchmark throughput``).

What is measured, for the configured model (the paper's by default) at its batch size:

- **training**: steps/s of `Trainer.train_step` (batch draw, augmentation, forward, objectives,
  backward, optimiser) per precision/compile variant: the median of device-synchronised timed
  steps after warm-up, the sustained rate of a window of unsynchronised steps (CUDA), peak
  memory, and for eager variants the split of a step into phases (an instrumented pass that
  synchronises at every phase boundary) and, on CUDA, every host synchronisation of a step;
- **transport**: the O(T) transport loss against the all-pairs evaluation at T = 125 and 1,000;
- **sigreg**: the SIGReg regulariser on all B × T tokens, forward and forward + backward;
- **inference**: records/s of the deployed path (encoder + projector), no grad, batch 256;
- **prepare**: records/s per worker of `prepare_cache` on a synthetic corpus in a temp folder;
- **equality**: the first training steps' losses of every variant against strict float32.

Results go to one JSON file plus a Markdown report beside it (``.md``).
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import math
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cyclejepa.bench.report import markdown_report
from cyclejepa.bench.timing import (
    PhaseTimer,
    device_sync,
    machine_info,
    peak_memory,
    reset_peak_memory,
    summarise,
    time_calls,
    time_window,
    versions,
)
from cyclejepa.config import load_config, parse_config
from cyclejepa.jsonio import write_json
from cyclejepa.objectives import SIGReg, prediction_loss, sample_cutoffs, transport_loss
from cyclejepa.symmetry import U1Symmetry
from cyclejepa.training import JEPAObjective, Trainer
from cyclejepa.training.schedule import learning_rate, set_learning_rate
from cyclejepa.devices import resolve_device

__all__ = [
    "SECTIONS",
    "VARIANTS",
    "Budget",
    "Variant",
    "compare_traces",
    "instrumented_step",
    "main",
    "run_throughput",
]

SCHEMA = "cyclejepa-throughput/1"
SECTIONS = ("transport", "sigreg", "inference", "prepare", "training", "equality")
"""Sections in the order they run; the slow compiled training variants come last."""

SAMPLES = 1000  # 10 s at 100 Hz, the paper's input length
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


# ---------------------------------------------------------------------------------------------
# Entry points


def run_throughput(
    device: str = "auto",
    quick: bool = False,
    out: str | os.PathLike | None = None,
    *,
    config: dict[str, Any] | None = None,
    sections: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    prepare_records: int | None = None,
    deadline_s: float | None = None,
    threads: int | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the throughput benchmark and return its results (also written to ``out`` when given).

    Parameters
    ----------
    device
        ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, ...
    quick
        Fewer steps and a 500-record prepare corpus (a CPU run in a few minutes).
    out
        JSON path; the Markdown report goes beside it with suffix ``.md``. Both are rewritten
        after every section, so an interrupted run leaves what it measured.
    config
        Experiment config overrides (a nested dict for `parse_config`); default: the paper.
    sections
        Subset of `SECTIONS`; default all of them on CUDA, all but ``equality`` on the CPU.
    variants
        Training variants (keys of `VARIANTS`); default all on CUDA, ``float32`` on the CPU.
    prepare_records
        Records of the synthetic prepare corpus (default 21,799, quick 500; 0 skips).
    deadline_s
        Seconds after which the sections and variants not yet started are skipped.
    threads
        CPU threads for torch during the run (default: torch's setting). On a CPU shared with
        other work, one thread avoids OpenMP barriers waiting on descheduled threads.
    log
        Progress messages (default: printed to stderr).
    """
    with _torch_threads(threads):
        return _run(device, quick, out, config, sections, variants, prepare_records, deadline_s, log)


def _run(device, quick, out, config, sections, variants, prepare_records, deadline_s, log) -> dict[str, Any]:
    """`run_throughput` under its thread setting."""
    started = time.perf_counter()
    raw = copy.deepcopy(config or {})
    cfg = parse_config(raw, source="benchmark config")
    device = resolve_device(device)
    on_cuda = device.type == "cuda"
    sections = tuple(sections or (s for s in SECTIONS if on_cuda or s != "equality"))
    variants = tuple(variants or (VARIANTS if on_cuda else ("float32",)))
    _check_names("section", sections, SECTIONS)
    _check_names("variant", variants, tuple(VARIANTS))
    budget = default_budget(device, quick)
    if prepare_records is not None:
        budget = replace(budget, prepare_records=prepare_records)
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))

    def time_left() -> bool:
        return deadline_s is None or time.perf_counter() - started < deadline_s

    report = _header(cfg, raw, device, quick, budget, sections, variants)

    def save() -> None:
        report["elapsed_s"] = time.perf_counter() - started
        _write(report, out)

    parts = {
        "transport": lambda: measure_transport(cfg, device, budget),
        "sigreg": lambda: measure_sigreg(cfg, device, budget),
        "inference": lambda: measure_inference(cfg, device, budget),
        "prepare": lambda: measure_prepare(budget.prepare_records, all_cores=not quick),
    }
    for name, measure in parts.items():
        if name not in sections:
            report[name] = _skipped("not selected (--sections)")
        elif not time_left():
            report[name] = _skipped(f"deadline of {deadline_s} s passed")
        else:
            log(f"[throughput] {name} on {device}")
            report[name] = _guarded(measure)
        save()
    if "training" in sections:
        steps = min(EQUALITY_STEPS, budget.warmup + budget.timed) if "equality" in sections else 0
        _training_and_equality(report, raw, device, budget, variants, steps, time_left, log, save)
    else:
        report["training"] = _skipped("not selected (--sections)")
        report["equality"] = _skipped("needs the training section")
    report["machine"]["load_average_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    save()
    return report


def _header(cfg, raw, device, quick, budget, sections, variants) -> dict[str, Any]:
    """The report's machine, versions and settings."""
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "machine": machine_info(device),
        "versions": versions(),
        "settings": {
            "device": str(device),
            "quick": quick,
            "batch": cfg.training.batch_size,
            "tokens": SAMPLES // cfg.model.encoder.patch,
            "corpus_records": CORPUS_RECORDS,
            "config_overrides": raw,
            "config_hash": cfg.config_hash(),
            "budget": asdict(budget),
            "sections": list(sections),
            "variants": list(variants),
            "equality": {"steps": EQUALITY_STEPS, "rtol": EQUALITY_RTOL, "terms": list(EQUALITY_TERMS)},
            "float32_flags": _float32_flags(),
        },
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command line: ``python benchmarks/throughput.py [--quick] [--device cuda] [--out PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--quick", action="store_true", help="fewer steps, 500-record prepare corpus")
    parser.add_argument("--out", type=Path, help="JSON path (default runs/benchmarks/throughput-DEVICE.json)")
    parser.add_argument("--prepare-records", type=int, help="synthetic prepare corpus size (0 skips)")
    parser.add_argument("--sections", help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--deadline-s", type=float, help="skip what has not started after this many seconds")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--config", type=Path, help="experiment YAML (default: the paper's configuration)")
    args = parser.parse_args(argv)

    config = load_config(args.config).model_dump(mode="json") if args.config else None
    out = args.out or Path("runs/benchmarks") / f"throughput-{_device_tag(args.device)}.json"
    report = run_throughput(
        args.device,
        args.quick,
        out,
        config=config,
        sections=_split(args.sections),
        variants=_split(args.variants),
        prepare_records=args.prepare_records,
        deadline_s=args.deadline_s,
        threads=args.threads,
    )
    print(markdown_report(report))
    print(f"\nwrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return report


# ---------------------------------------------------------------------------------------------
# Training


def _training_and_equality(
    report: dict[str, Any],
    raw: dict[str, Any],
    device: torch.device,
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
        reference = _guarded(lambda: strict_float32_trace(raw, device, equality_steps))
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
    for entry, trace in measure_training(raw, device, budget, variants, time_left, log):
        report["training"].append(entry)
        if trace and report["equality"]["status"] == "ok":
            report["equality"]["variants"][entry["variant"]] = compare_traces(trace, reference)
        save()


def measure_training(
    raw: dict[str, Any],
    device: torch.device,
    budget: Budget,
    variants: Sequence[str],
    time_left: Callable[[], bool] = lambda: True,
    log: Callable[[str], None] = lambda message: None,
) -> Iterator[tuple[dict[str, Any], list[list[float]]]]:
    """Per variant: its entry and the metrics rows of its first `EQUALITY_STEPS` steps."""
    cfg = parse_config(raw)
    corpus = synthetic_training_arrays(cfg.model.encoder.leads, SAMPLES // cfg.model.encoder.patch)
    for name in variants:
        entry: dict[str, Any] = {"variant": name, **asdict(VARIANTS[name])}
        trace: list[list[float]] = []
        if time_left():
            log(f"[throughput] training, variant {name}")
            entry.update(
                _guarded(lambda name=name, trace=trace: _measure_variant(raw, name, device, budget, corpus, trace))
            )
            _release(device, compiled=VARIANTS[name].compile_mode is not None)
        else:
            entry.update(_skipped("deadline passed"))
        yield entry, trace


def _measure_variant(
    raw: dict[str, Any],
    name: str,
    device: torch.device,
    budget: Budget,
    corpus: tuple[np.ndarray, np.ndarray],
    trace: list[list[float]],
) -> dict[str, Any]:
    """Timings of one variant; appends the metrics rows of its first steps to ``trace``."""
    variant = VARIANTS[name]
    sync = device_sync(device)
    with tempfile.TemporaryDirectory(prefix="cyclejepa-bench-") as directory:
        trainer = _trainer(raw, variant, device, corpus, directory)
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
        if variant.compile_mode is None:
            entry["split"] = measure_split(trainer, budget.instrumented, sync)
            if device.type == "cuda":
                entry["host_syncs"] = find_host_syncs(trainer.train_step)
        else:
            entry["dynamo"] = _dynamo_counters()
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


def _trainer(raw: dict[str, Any], variant: Variant, device: torch.device, corpus, directory: str):
    """A paper-seeded trainer (seed 0, λ_trans = 1) running ``variant`` on ``device``."""
    training = {"device": str(device), "precision": variant.precision, "compile": variant.compile_mode or False}
    cfg = parse_config(_merge(raw, {"training": training}))
    return Trainer(cfg, *corpus, directory, seed=0, transport_weight=1.0)


def instrumented_step(trainer, timer: PhaseTimer) -> dict[str, torch.Tensor]:
    """One `Trainer.train_step` (single process), phase by phase, each phase timed by ``timer``.

    Computes exactly what ``train_step`` computes, from the same RNG streams, with the
    predictor's forward timed apart from the prediction loss; returns the loss terms.
    """
    objective, streams, cfg = trainer.objective, trainer.streams, trainer.cfg
    with timer.phase("batch"):
        x, phi = trainer.batches.next()
    with timer.phase("augment + cutoffs"):
        x = trainer.augmenter(x, streams["augment"])
        cutoff = sample_cutoffs(x.shape[0], phi.shape[1], streams["mask"], trainer.device)
    set_learning_rate(trainer.optimisers, learning_rate(trainer.step, cfg.training.steps, cfg.optimiser))
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
    with timer.phase("backward"):
        for optimiser in trainer.optimisers:
            optimiser.zero_grad(set_to_none=True)
        terms["loss"].backward()
    with timer.phase("optimiser"):
        nn.utils.clip_grad_norm_(objective.parameters(), cfg.optimiser.grad_clip)
        for optimiser in trainer.optimisers:
            optimiser.step()
    trainer.step += 1
    return terms


def measure_split(trainer, steps: int, sync: Callable[[], None]) -> dict[str, Any]:
    """Phase split of ``steps`` instrumented training steps (see `instrumented_step`)."""
    timer = PhaseTimer(sync)
    for _ in range(steps):
        instrumented_step(trainer, timer)
    split = timer.split(SPLIT_GROUPS)
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
    leads: int, tokens: int, records: int = CORPUS_RECORDS, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Z-scored-like signals (records, leads, 1000) and token phases (records, tokens).

    Phases advance linearly at 10–12.5 tokens per beat from a random offset and are NaN (no
    beat yet / after the last beat) on the first 0–12 and last 1–12 tokens of each record.
    """
    rng = np.random.default_rng(seed)
    signals = rng.standard_normal((records, leads, SAMPLES), dtype=np.float32)
    period = rng.uniform(10.0, 12.5, (records, 1))
    position = np.arange(tokens)
    phases = (rng.uniform(0, 2 * np.pi, (records, 1)) + 2 * np.pi * position / period) % (2 * np.pi)
    first = rng.integers(0, 13, (records, 1))
    last = tokens - rng.integers(1, 13, (records, 1))
    phases[(position < first) | (position >= last)] = np.nan
    return signals, phases.astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Equality with strict float32


def strict_float32_trace(raw: dict[str, Any], device: torch.device, steps: int) -> list[list[float]]:
    """Metrics rows of the first ``steps`` steps in float32 with TF32 disabled."""
    cfg = parse_config(raw)
    corpus = synthetic_training_arrays(cfg.model.encoder.leads, SAMPLES // cfg.model.encoder.patch)
    with _strict_float32(), tempfile.TemporaryDirectory(prefix="cyclejepa-bench-") as directory:
        trainer = _trainer(raw, VARIANTS["float32"], device, corpus, directory)
        rows = torch.stack([trainer.train_step() for _ in range(steps)]).tolist()
    _release(device, compiled=False)
    return rows


def compare_traces(
    trace: list[list[float]], reference: list[list[float]], rtol: float = EQUALITY_RTOL
) -> dict[str, Any]:
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
            for row, ref in zip(trace[:steps], reference[:steps])
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


# ---------------------------------------------------------------------------------------------
# Parts: transport, SIGReg, inference, prepare


def measure_transport(cfg, device: torch.device, budget: Budget) -> dict[str, Any]:
    """O(T) transport loss vs the all-pairs evaluation of benchmarks/transport_speed.py.

    The all-pairs version holds (chunk, T, T, K) tensors, so it runs on
    ``budget.naive_records`` records and its batch time is extrapolated linearly (records are
    independent), which the row says.
    """
    speed = _transport_speed_module()
    symmetry = U1Symmetry(cfg.symmetry.spectrum).to(device)
    batch, dim = cfg.training.batch_size, symmetry.dim
    sync = device_sync(device)
    rows = []
    for tokens, naive_records in zip(TRANSPORT_TOKENS, budget.naive_records):
        z, phi = speed.synthetic_batch(batch, tokens, symmetry, str(device))
        chunk = max(1, min(8, 2**25 // (tokens * tokens * dim)))  # ≤ 128 MiB per float32 intermediate

        def all_pairs(z, phi, symmetry, chunk=chunk):
            return speed.all_pairs_transport_loss(z, phi, symmetry, records_per_chunk=chunk)

        n = min(batch, naive_records)
        with torch.no_grad():
            difference = float((transport_loss(z[:n], phi[:n], symmetry) - all_pairs(z[:n], phi[:n], symmetry)).abs())
        fast = _time_loss(transport_loss, z, phi, symmetry, budget.part_warmup, budget.repeats, sync)
        slow = _time_loss(all_pairs, z[:n], phi[:n], symmetry, budget.part_warmup, budget.naive_repeats, sync)
        common = {"tokens": tokens, "batch": batch, "dim": dim, "abs_difference": difference}
        rows.append({**common, "method": "O(T) identity", "records_measured": batch, "extrapolated": False, **fast})
        rows.append(
            {
                **common,
                "method": "all pairs",
                "records_measured": n,
                "extrapolated": n < batch,
                **{key: value * batch / n for key, value in slow.items()},
                "speedup_forward": slow["forward_ms"] * batch / n / fast["forward_ms"],
                "speedup_forward_backward": slow["forward_backward_ms"] * batch / n / fast["forward_backward_ms"],
            }
        )
    return {"status": "ok", "rows": rows}


def _time_loss(loss_fn, z, phi, symmetry, warmup: int, repeats: int, sync) -> dict[str, float]:
    """Median forward (no grad) and forward + backward ms of ``loss_fn(z, phi, symmetry)``."""
    leaf = z.detach().clone().requires_grad_(True)

    def forward() -> None:
        with torch.no_grad():
            loss_fn(leaf, phi, symmetry)

    def forward_backward() -> None:
        leaf.grad = None
        loss_fn(leaf, phi, symmetry).backward()

    return {
        name: summarise(time_calls(fn, warmup=warmup, repeats=repeats, sync=sync))["median_ms"]
        for name, fn in (("forward_ms", forward), ("forward_backward_ms", forward_backward))
    }


def measure_sigreg(cfg, device: torch.device, budget: Budget) -> dict[str, Any]:
    """SIGReg on N = B × T random tokens with fresh directions per call (as in training)."""
    reg_cfg = cfg.objectives.regulariser
    regulariser = SIGReg(**(reg_cfg.options if reg_cfg.name == "sigreg" else {}))
    tokens = cfg.training.batch_size * (SAMPLES // cfg.model.encoder.patch)
    generator = torch.Generator(device=device).manual_seed(0)
    z = torch.randn(tokens, cfg.model.projector.dim, generator=generator, device=device).requires_grad_(True)
    sync = device_sync(device)

    def forward() -> None:
        with torch.no_grad():
            regulariser(z, generator=generator)

    def forward_backward() -> None:
        z.grad = None
        regulariser(z, generator=generator).backward()

    row: dict[str, Any] = {
        "status": "ok",
        "N": tokens,
        "K": z.shape[1],
        "M": regulariser.num_directions,
        "J": regulariser.knots,
    }
    for name, fn in (("forward", forward), ("forward_backward", forward_backward)):
        row[name] = summarise(time_calls(fn, warmup=budget.part_warmup, repeats=budget.repeats, sync=sync))
    return row


def measure_inference(cfg, device: torch.device, budget: Budget) -> dict[str, Any]:
    """Records/s of the deployed path (encoder + projector), no grad, batch `INFERENCE_BATCH`."""
    model = JEPAObjective(cfg, transport_weight=1.0, init_seed=0).model.to(device).eval()
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(INFERENCE_BATCH, cfg.model.encoder.leads, SAMPLES, generator=generator, device=device)
    sync = device_sync(device)
    rows = []
    for precision in ("float32", "bf16") if device.type == "cuda" else ("float32",):
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()

        def forward(autocast=autocast) -> None:
            with torch.no_grad(), autocast:
                model(x)

        step = summarise(time_calls(forward, warmup=budget.part_warmup, repeats=budget.repeats, sync=sync))
        rows.append(
            {
                "precision": precision,
                "batch": INFERENCE_BATCH,
                "batch_ms": step,
                "records_per_s": INFERENCE_BATCH * 1e3 / step["median_ms"],
            }
        )
    return {"status": "ok", "rows": rows}


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


# ---------------------------------------------------------------------------------------------
# Helpers


def _transport_speed_module():
    """benchmarks/transport_speed.py of the source checkout (its all-pairs reference).

    It is a script beside the package, not part of it: found in editable installs and
    checkouts, absent from a wheel install (the transport section then fails with this message).
    """
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "transport_speed.py"
    if not path.is_file():
        raise FileNotFoundError(f"the all-pairs transport reference {path} is not there (not a source checkout)")
    spec = importlib.util.spec_from_file_location("cyclejepa_benchmarks_transport_speed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Run with ``threads`` torch CPU threads (unchanged when None), restored afterwards."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


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


def _float32_flags() -> dict[str, Any]:
    return {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        merged[key] = _merge(merged.get(key) or {}, value) if isinstance(value, dict) else value
    return merged


def _check_names(kind: str, names: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {unknown}; choose from {', '.join(allowed)}")


def _write(report: dict[str, Any], out: str | os.PathLike | None) -> None:
    """Rewrite the JSON at ``out`` (atomically) and the Markdown report beside it."""
    if out is not None:
        path = write_json(out, report)
        path.with_suffix(".md").write_text(markdown_report(report))


def _split(text: str | None) -> list[str] | None:
    return [item.strip() for item in text.split(",") if item.strip()] if text else None


def _device_tag(device: str) -> str:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device.replace(":", "")


def _short(filename: str) -> str:
    """A path relative to site-packages or to the source checkout, for readable locations."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.removeprefix(str(Path(__file__).resolve().parents[2]) + "/")
