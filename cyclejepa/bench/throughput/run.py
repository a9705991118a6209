"""Measured speed of the trainer and its parts (``cyclejepa benchmark throughput``).

`measure_throughput` runs the sections on a `ThroughputSpec` (built from the experiment config by
`cyclejepa.bench.commands`, which also reads the command line `throughput_arguments`); what
each section measures is said in `cyclejepa.bench.throughput`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from cyclejepa.bench.report import markdown_report
from cyclejepa.bench.throughput.common import (
    CORPUS_RECORDS,
    EQUALITY_RTOL,
    EQUALITY_STEPS,
    EQUALITY_TERMS,
    SCHEMA,
    SECTIONS,
    VARIANTS,
    _guarded,
    _skipped,
    default_budget,
)
from cyclejepa.bench.throughput.ensemble import measure_ensemble
from cyclejepa.bench.throughput.equality import _training_and_equality
from cyclejepa.bench.throughput.parts import measure_inference, measure_sigreg, measure_transport
from cyclejepa.bench.throughput.prepare import measure_prepare
from cyclejepa.bench.throughput.spec import ThroughputSpec
from cyclejepa.bench.timing import machine_info, versions
from cyclejepa.jsonio import write_json


def measure_throughput(
    spec: ThroughputSpec,
    quick: bool = False,
    out: str | os.PathLike | None = None,
    *,
    sections: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    prepare_records: int | None = None,
    deadline_s: float | None = None,
    threads: int | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the throughput benchmark on ``spec`` and return its results (also written to ``out`` when given).

    Parameters
    ----------
    spec
        The model, objective and trainers to time, and the device
        (`cyclejepa.bench.commands.throughput_spec`).
    quick
        Fewer steps and a 500-record prepare corpus (a CPU run in a few minutes).
    out
        JSON path; the Markdown report goes beside it with suffix ``.md``. Both are rewritten
        after every section, so an interrupted run leaves what it measured.
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
        return _run(spec, quick, out, sections, variants, prepare_records, deadline_s, log)


def _run(spec: ThroughputSpec, quick, out, sections, variants, prepare_records, deadline_s, log) -> dict[str, Any]:
    """`measure_throughput` under its thread setting."""
    started = time.perf_counter()
    device = spec.device
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

    report = _header(spec, quick, budget, sections, variants)

    def save() -> None:
        report["elapsed_s"] = time.perf_counter() - started
        _write(report, out)

    parts = {
        "transport": lambda: measure_transport(spec, budget),
        "sigreg": lambda: measure_sigreg(spec, budget),
        "inference": lambda: measure_inference(spec, budget),
        "prepare": lambda: measure_prepare(budget.prepare_records, all_cores=not quick),
        "ensemble": lambda: measure_ensemble(spec, budget),
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
        _training_and_equality(report, spec, budget, variants, steps, time_left, log, save)
    else:
        report["training"] = _skipped("not selected (--sections)")
        report["equality"] = _skipped("needs the training section")
    report["machine"]["load_average_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    save()
    return report


def _header(spec: ThroughputSpec, quick, budget, sections, variants) -> dict[str, Any]:
    """The report's machine, versions and settings."""
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "machine": machine_info(spec.device),
        "versions": versions(),
        "settings": {
            "device": str(spec.device),
            "quick": quick,
            "batch": spec.batch_size,
            "tokens": spec.tokens,
            "corpus_records": CORPUS_RECORDS,
            "config_overrides": spec.config_overrides,
            "config_hash": spec.config_hash,
            "budget": asdict(budget),
            "sections": list(sections),
            "variants": list(variants),
            "equality": {"steps": EQUALITY_STEPS, "rtol": EQUALITY_RTOL, "terms": list(EQUALITY_TERMS)},
            "float32_flags": _float32_flags(),
        },
    }


def throughput_arguments() -> argparse.ArgumentParser:
    """The command line of ``cyclejepa benchmark throughput`` (read by `cyclejepa.bench.commands`)."""
    parser = argparse.ArgumentParser(prog="cyclejepa benchmark throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--quick", action="store_true", help="fewer steps, 500-record prepare corpus")
    parser.add_argument("--out", type=Path, help="JSON path (default runs/benchmarks/throughput-DEVICE.json)")
    parser.add_argument("--prepare-records", type=int, help="synthetic prepare corpus size (0 skips)")
    parser.add_argument("--sections", type=_split, help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--variants", type=_split, help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--deadline-s", type=float, help="skip what has not started after this many seconds")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--config", type=Path, help="experiment YAML (default: the paper's configuration)")
    return parser


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


def _float32_flags() -> dict[str, Any]:
    return {
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def _check_names(kind: str, names: Sequence[str], allowed: Sequence[str]) -> None:
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ValueError(f"unknown {kind}(s) {unknown}; choose from {', '.join(allowed)}")


def _write(report: dict[str, Any], out: str | os.PathLike | None) -> None:
    """Rewrite the JSON at ``out`` (atomically) and the Markdown report beside it."""
    if out is not None:
        path = write_json(Path(out), report)
        path.with_suffix(".md").write_text(markdown_report(report))


def _split(text: str | None) -> list[str] | None:
    return [item.strip() for item in text.split(",") if item.strip()] if text else None
