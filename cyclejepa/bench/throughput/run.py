"""Measured speed of the trainer and its parts (``cyclejepa benchmark throughput``).

The entry points `run_throughput` and the command line `main`; what each section measures is
said in `cyclejepa.bench.throughput`.
"""

from __future__ import annotations

import argparse
import copy
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
    SAMPLES,
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
from cyclejepa.bench.timing import machine_info, versions
from cyclejepa.config import load_config, parse_config
from cyclejepa.devices import resolve_device
from cyclejepa.jsonio import short_hash, write_json


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
        "ensemble": lambda: measure_ensemble(raw, device, budget),
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
            "config_hash": short_hash(cfg.model_dump(mode="json")),
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



def _device_tag(device: str) -> str:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device.replace(":", "")
