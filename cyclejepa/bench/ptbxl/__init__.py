"""The PTB-XL benchmark (``cyclejepa benchmark ptbxl CONFIG_OR_RUN``): the six statement tasks of
Strodthoff et al. (2021), linear probe, fine-tuning, linear-then-fine-tuning and a from-scratch
baseline, label fractions and seeds; macro-AUROC and Fmax with patient-clustered intervals, the
published figures beside them.

One command from a config (or a finished run) to the tables: `cyclejepa.pipeline.benchmarking`
prepares the cache and trains missing pre-training runs as `cyclejepa run` would and hands a
`BenchmarkSpec` to `run_benchmark`, which computes every cell (`run`) and summarises them
(`report`). Everything goes to ``<output_dir>/benchmark/ptbxl/``::

    cells/<task>/<protocol>/<run>-ft<seed>-<fraction>.json   one result each
    finetune/<same>/checkpoints/                            a running fine-tuning's latest checkpoint
    <task>/<protocol>.json                                  per task and protocol: summary and cells
    benchmark.json, benchmark.md                            the summary and its tables
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from cyclejepa.bench.ptbxl.report import benchmark_markdown, summarise_cells
from cyclejepa.bench.ptbxl.run import FRACTIONS, PROTOCOLS, SCRATCH, Bench, Cell, Split, task_data
from cyclejepa.bench.ptbxl.spec import BenchmarkSpec
from cyclejepa.data.ptbxl import PTBXL
from cyclejepa.data.ptbxl_tasks import TASKS
from cyclejepa.jsonio import write_json
from cyclejepa.training.finetune import FinetuneSettings

__all__ = [
    "FRACTIONS", "PROTOCOLS", "argument_problems", "benchmark_folder", "corpus_description", "dataset_problems",
    "finetune_settings", "ptbxl_arguments", "run_benchmark",
]  # fmt: skip

PTBXL_LAYOUT = ("ptbxl", "synthetic")
"""Datasets whose root holds PTB-XL's two tables."""


def benchmark_folder(output_dir: Path) -> Path:
    """Where the benchmark of the experiment at ``output_dir`` goes: ``<output_dir>/benchmark/ptbxl``."""
    return output_dir / "benchmark" / "ptbxl"


def argument_problems(
    tasks: Sequence[str], protocols: Sequence[str], fractions: Sequence[float], seeds: Sequence[int]
) -> list[str]:
    """What is wrong with the benchmark's tasks, protocols, label fractions and seeds."""
    problems = [f"unknown task {t!r}; one of {', '.join(TASKS)}" for t in tasks if t not in TASKS]
    problems += [f"unknown protocol {p!r}; one of {', '.join(PROTOCOLS)}" for p in protocols if p not in PROTOCOLS]
    problems += [f"label fraction {f} is not in (0, 1]" for f in fractions if not 0 < f <= 1]
    return problems + (["no seed given"] if not seeds else [])


def dataset_problems(dataset: str) -> list[str]:
    """Refuses a ``data.dataset`` without PTB-XL's tables."""
    if dataset in PTBXL_LAYOUT:
        return []
    return [f"data.dataset {dataset!r}: the benchmark reads PTB-XL's tables (dataset ptbxl or synthetic)"]


def corpus_description(dataset: str, options: dict, root: str | Path | None, cached: int) -> str:
    """The corpus as the report names it: ``dataset`` (a synthetic one with its record count) at
    ``root``, with ``cached`` records in the cache."""
    records = options.get("records") if dataset == "synthetic" else None
    kind = f"synthetic ({records} records)" if records else dataset
    return f"{kind} at {root if root is not None else 'its default root'}, {cached} cached records"


def run_benchmark(spec: BenchmarkSpec, cache, split: Split, dataset: PTBXL, *, experiment: str, corpus: str,
                  began: float, progress: bool = True) -> Path:  # fmt: skip
    """Compute (or keep) every cell of ``spec``, write each task × protocol's JSON, the summary
    ``benchmark.json`` and its tables ``benchmark.md``; returns benchmark.md.

    ``experiment`` and ``corpus`` name the experiment and its corpus in the report; ``began`` is
    the `time.perf_counter` of the command's start (the report's wall time counts from it).
    """
    from cyclejepa.progress import progress_bar

    bench = Bench(spec, cache, split, dataset, progress=False)
    per_task = len(spec.fractions) * len(spec.seeds) * sum(1 if p == SCRATCH else len(spec.runs) for p in spec.protocols)
    cells = []
    with progress_bar(len(spec.tasks) * per_task, "benchmark ptbxl", enabled=progress, fields=("cell",)) as update:
        for task in spec.tasks:
            data = task_data(bench.dataset, task, cache, split)
            for protocol in spec.protocols:
                found = []
                for run in [None] if protocol == SCRATCH else spec.runs:
                    for fraction in spec.fractions:
                        for seed in spec.seeds:
                            cell = Cell(task, protocol, run.name if run else SCRATCH, seed, fraction)
                            update(0, cell=cell.name)
                            found.append(bench.result(cell, data, run))
                            update(1)
                write_json(
                    spec.out / task / f"{protocol}.json",
                    {"task": task, "protocol": protocol, "summary": summarise_cells(found), "cells": found},
                )
                cells += found
    summary = summarise_cells(cells)
    settings = spec.training.settings
    meta = {
        "name": experiment, "corpus": corpus, "step": spec.step, "seeds": list(spec.seeds), "settings": _settings_text(settings),
        "folds": {"fit": split.fit_folds, "validation": split.validation_fold, "test": split.test_folds},
        "runs": [run.name for run in spec.runs], "wall_s": time.perf_counter() - began,
        "cells_wall_s": sum(c["wall_s"] for c in cells),
    }  # fmt: skip
    write_json(spec.out / "benchmark.json", {"meta": meta, "settings": asdict(settings), "summary": summary})
    (spec.out / "benchmark.md").write_text(benchmark_markdown(summary, meta))
    return spec.out / "benchmark.md"


def _settings_text(settings: FinetuneSettings) -> str:
    return (f"≤ {settings.steps} steps at batch {settings.batch_size}, lr {settings.lr:g} (encoder and projector × "
            f"{settings.backbone_scale:g}), early stopping every {settings.eval_every} steps, patience {settings.patience}")  # fmt: skip


def ptbxl_arguments() -> argparse.ArgumentParser:
    """The options of ``cyclejepa benchmark ptbxl CONFIG_OR_RUN``."""
    defaults = FinetuneSettings()
    parser = argparse.ArgumentParser(prog="cyclejepa benchmark ptbxl", description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="experiment YAML, or the output directory of `cyclejepa run`")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--unseal", action="store_true", help="allow (and audit) scoring the sealed fold 10")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"default: {' '.join(TASKS)}")
    parser.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), help=f"default: {' '.join(PROTOCOLS)}")
    parser.add_argument("--fractions", nargs="+", type=float, default=list(FRACTIONS), help="label fractions of the fit records")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="fine-tuning seeds (head, batches, subsets)")
    parser.add_argument("--step", type=int, help="pre-trained checkpoint (default: evaluation.headline_step, else the last)")
    parser.add_argument("--validation-fold", type=int, help="early-stopping fold (default: the last training fold)")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="most fine-tuning steps")
    parser.add_argument("--batch-size", type=int, help="fine-tuning batch (default: training.batch_size)")
    parser.add_argument("--lr", type=float, default=defaults.lr, help="the head's peak learning rate")
    parser.add_argument(
        "--backbone-scale", type=float, default=defaults.backbone_scale, help="encoder rate / head rate when fine-tuning"
    )
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every, help="steps between early-stopping evaluations")
    parser.add_argument("--patience", type=int, default=defaults.patience, help="evaluations without improvement before stopping")
    return parser


def finetune_settings(args: argparse.Namespace, batch_size: int) -> FinetuneSettings:
    """The fine-tuning settings of parsed `arguments`; ``batch_size`` when ``--batch-size`` is not given."""
    return FinetuneSettings(steps=args.steps, batch_size=args.batch_size or batch_size, lr=args.lr,
                            backbone_scale=args.backbone_scale, eval_every=args.eval_every, patience=args.patience)  # fmt: skip
