"""The PTB-XL benchmark (``cyclejepa benchmark ptbxl CONFIG_OR_RUN``): the six statement tasks of
Strodthoff et al. (2021), linear probe, fine-tuning, linear-then-fine-tuning, a from-scratch
baseline and a linear probe of the frozen random (untrained) encoder, label fractions and seeds; macro-AUROC and Fmax with patient-clustered intervals, the
published figures beside them.

One command from a config (or a finished run) to the tables: `cyclejepa.bench.commands`
prepares the cache and trains missing pre-training runs as `cyclejepa run` would and hands a
`BenchmarkSpec` to `run_benchmark`, which computes every cell (`run`), in turn or side by side
in worker processes (`cells`), and summarises them (`report`). Everything goes to
``<output_dir>/benchmark/ptbxl/``::

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

from cyclejepa.bench.ptbxl.cells import Planned, computed_cells
from cyclejepa.bench.ptbxl.report import benchmark_markdown, summarise_cells
from cyclejepa.bench.ptbxl.run import (
    FRACTIONS,
    LINEAR_PROTOCOLS,
    PROTOCOLS,
    RANDOM_LINEAR,
    SCRATCH,
    Bench,
    Cell,
    Split,
    task_data,
)
from cyclejepa.bench.ptbxl.spec import BenchmarkSpec, PretrainedRun
from cyclejepa.data.ptbxl import PTBXL
from cyclejepa.data.ptbxl_tasks import TASKS
from cyclejepa.jsonio import write_json
from cyclejepa.training.finetune import FinetuneSettings

__all__ = [
    "FRACTIONS",
    "PROTOCOLS",
    "argument_problems",
    "at_once_argument",
    "benchmark_folder",
    "cells_at_once",
    "corpus_description",
    "dataset_problems",
    "finetune_settings",
    "planned_cells",
    "ptbxl_arguments",
    "run_benchmark",
]

PTBXL_LAYOUT = ("ptbxl", "synthetic")
"""Datasets whose root holds PTB-XL's two tables."""


def benchmark_folder(output_dir: Path) -> Path:
    """Where the benchmark of the experiment at ``output_dir`` goes: ``<output_dir>/benchmark/ptbxl``."""
    return output_dir / "benchmark" / "ptbxl"


def argument_problems(
    tasks: Sequence[str], protocols: Sequence[str], fractions: Sequence[float], seeds: Sequence[int], at_once: int | str = 1
) -> list[str]:
    """What is wrong with the benchmark's tasks, protocols, label fractions, seeds (a value given
    twice would name one cell twice) and cells at once."""
    problems = [f"unknown task {t!r}; one of {', '.join(TASKS)}" for t in tasks if t not in TASKS]
    problems += [f"unknown protocol {p!r}; one of {', '.join(PROTOCOLS)}" for p in protocols if p not in PROTOCOLS]
    problems += [f"label fraction {f} is not in (0, 1]" for f in fractions if not 0 < f <= 1]
    for kind, values in (("task", tasks), ("protocol", protocols), ("label fraction", fractions), ("seed", seeds)):
        problems += [f"{kind} {value!r} is given twice" for value in dict.fromkeys(values) if list(values).count(value) > 1]
    if at_once != "auto" and not (isinstance(at_once, int) and at_once >= 1):
        problems.append(f"cells at once {at_once!r} is neither auto nor a whole number >= 1")
    return problems + (["no seed given"] if not seeds else [])


MIN_FIT_RECORDS = 2
"""Fewest positive and negative fit records a class needs to be learnt: a label fraction that
leaves no class of a task this many of both trains a constant (its AUROC is 0.5 [0.5, 0.5])."""


def fraction_problems(tasks: dict, fractions: Sequence[float], seeds: Sequence[int]) -> list[str]:
    """Label fractions whose fit subset (`label_subset`, for any seed) leaves no class of a task
    `MIN_FIT_RECORDS` positive and negative records, each naming the task and the records left."""
    from cyclejepa.training.finetune import label_subset

    problems = []
    for name, data in tasks.items():
        labels = data.labels[data.fit]
        if not len(labels):
            continue
        for fraction in fractions:
            for seed in seeds:
                subset = labels[label_subset(labels, fraction, seed)]
                positives = subset.sum(axis=0)
                if not ((positives >= MIN_FIT_RECORDS) & (len(subset) - positives >= MIN_FIT_RECORDS)).any():
                    problems.append(
                        f"label fraction {fraction:g} leaves task {name} {len(subset)} of {len(labels)} fit "
                        f"records, in which no class has {MIN_FIT_RECORDS} positive and {MIN_FIT_RECORDS} "
                        "negative records: its scores would be a constant's; choose a larger --fractions"
                    )
                    break
    return problems


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


def run_benchmark(
    spec: BenchmarkSpec,
    cache,
    split: Split,
    dataset: PTBXL,
    *,
    experiment: str,
    corpus: str,
    began: float,
    at_once: int | str = 1,
    progress: bool = True,
) -> Path:
    """Compute (or keep) every cell of ``spec``, write each task × protocol's JSON (once its cells
    are done), the summary ``benchmark.json`` and its tables ``benchmark.md``; returns benchmark.md.

    ``experiment`` and ``corpus`` name the experiment and its corpus in the report; ``began`` is
    the `time.perf_counter` of the command's start (the report's wall time counts from it).
    ``at_once`` cells that train a network are computed side by side in worker processes
    (`computed_cells`); ``auto`` is `cells_at_once`'s.
    """
    from cyclejepa.progress import progress_bar

    bench = Bench(spec, cache, split, dataset.fingerprint(), progress=False)
    tasks = {task: task_data(dataset, task, cache, split) for task in spec.tasks}
    if problems := fraction_problems(tasks, spec.fractions, spec.seeds):
        raise ValueError("; ".join(problems))
    groups = planned_cells(spec)
    planned = [item for cells in groups.values() for item in cells]
    results = {cell: kept for cell, run in planned if (kept := bench.stored(cell, run)) is not None}
    todo = [(cell, run) for cell, run in planned if cell not in results]
    workers = cells_at_once(at_once, spec.training.device, sum(cell.protocol not in LINEAR_PROTOCOLS for cell, _ in todo))
    for group in groups.values():
        _write_when_done(spec.out, group, results)
    title = "benchmark ptbxl" + (f", {workers} cells at once" if workers > 1 else "")
    with progress_bar(len(planned), title, enabled=progress, completed=len(results), fields=("cell",)) as update:
        for cell, result in computed_cells(bench, tasks, todo, workers):
            results[cell] = result
            update(1, cell=cell.name)
            _write_when_done(spec.out, groups[cell.task, cell.protocol], results)
    cells = [results[cell] for cell, _ in planned]
    summary = summarise_cells(cells)
    settings = spec.training.settings
    meta = {
        "name": experiment,
        "corpus": corpus,
        "step": spec.step,
        "seeds": list(spec.seeds),
        "settings": _settings_text(settings),
        "folds": {"fit": split.fit_folds, "validation": split.validation_fold, "test": split.test_folds},
        "runs": [run.name for run in spec.runs],
        "wall_s": time.perf_counter() - began,
        "cells_wall_s": sum(c["wall_s"] for c in cells),
        "at_once": workers,
    }
    write_json(spec.out / "benchmark.json", {"meta": meta, "settings": asdict(settings), "summary": summary})
    (spec.out / "benchmark.md").write_text(benchmark_markdown(summary, meta))
    return spec.out / "benchmark.md"


def _write_when_done(out: Path, group: list[Planned], results: dict[Cell, dict]) -> None:
    """``<task>/<protocol>.json`` of a task × protocol's cells (``group``), once each has its result."""
    if all(cell in results for cell, _ in group):
        cell, found = group[0][0], [results[cell] for cell, _ in group]
        write_json(
            out / cell.task / f"{cell.protocol}.json",
            {"task": cell.task, "protocol": cell.protocol, "summary": summarise_cells(found), "cells": found},
        )


def planned_cells(spec: BenchmarkSpec) -> dict[tuple[str, str], list[Planned]]:
    """The cells of ``spec`` per (task, protocol), each with its pre-trained run (None from
    scratch), in the report's order: task, protocol, run, fraction, seed."""
    return {
        (task, protocol): [
            (Cell(task, protocol, run.name if run else SCRATCH, seed, fraction), run)
            for run in _protocol_runs(spec, protocol)
            for fraction in spec.fractions
            for seed in spec.seeds
        ]
        for task in spec.tasks
        for protocol in spec.protocols
    }


def _protocol_runs(spec: BenchmarkSpec, protocol: str) -> tuple[PretrainedRun | None, ...]:
    """The runs a protocol's cells start from: none (from scratch), the random baseline's, or the pre-trained ones."""
    if protocol == SCRATCH:
        return (None,)
    return spec.random_runs if protocol == RANDOM_LINEAR else spec.runs


def cells_at_once(setting: int | str, device: str, cells: int) -> int:
    """Worker processes training ``cells`` on ``device`` (``training.device``), at most one per
    cell: as many as `evaluations_at_once` evaluates, so ``auto`` is half the cores on CUDA (each
    worker keeps two cores for what it runs on the CPU: the early-stopping and test scores, the
    bootstrap, a linear-finetune cell's probe) and one on the CPU, where the one process already
    keeps every core busy and more would only share them."""
    from cyclejepa.devices import resolve_device
    from cyclejepa.evaluation.checkpoint_evaluation import evaluations_at_once

    return evaluations_at_once(setting, resolve_device(device).type, cells)


def _settings_text(settings: FinetuneSettings) -> str:
    return (
        f"≤ {settings.steps} steps at batch {settings.batch_size}, lr {settings.lr:g} (encoder and projector × "
        f"{settings.backbone_scale:g}), early stopping every {settings.eval_every} steps, patience {settings.patience}"
    )


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
    parser.add_argument(
        "--at-once",
        type=at_once_argument,
        default=1,
        metavar="N|auto",
        help="cells that train a network computed side by side in N worker processes (auto: half the cores on CUDA, 1 on the CPU)",
    )
    return parser


def at_once_argument(text: str) -> int | str:
    """``--at-once``: ``auto`` or a whole number ≥ 1."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is neither auto nor a whole number of processes >= 1")
    return int(text)


def finetune_settings(args: argparse.Namespace, batch_size: int) -> FinetuneSettings:
    """The fine-tuning settings of parsed `arguments`; ``batch_size`` when ``--batch-size`` is not given."""
    return FinetuneSettings(
        steps=args.steps,
        batch_size=args.batch_size or batch_size,
        lr=args.lr,
        backbone_scale=args.backbone_scale,
        eval_every=args.eval_every,
        patience=args.patience,
    )
