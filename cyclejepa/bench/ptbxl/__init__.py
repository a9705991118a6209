"""The PTB-XL benchmark (``cyclejepa benchmark ptbxl CONFIG_OR_RUN``): the six statement tasks of
Strodthoff et al. (2021), linear probe, fine-tuning, linear-then-fine-tuning and a from-scratch
baseline, label fractions and seeds; macro-AUROC and Fmax with patient-clustered intervals, the
published figures beside them.

One command from a config (or a finished run) to the tables: the cache is prepared and missing
pre-training runs are trained as `cyclejepa run` would, then every cell is computed (`run`) and
summarised (`report`). Everything goes to ``<output_dir>/benchmark/ptbxl/``::

    cells/<task>/<protocol>/<run>-ft<seed>-<fraction>.json   one result each
    finetune/<same>/checkpoints/                            a running fine-tuning's latest checkpoint
    <task>/<protocol>.json                                  per task and protocol: summary and cells
    benchmark.json, benchmark.md                            the summary and its tables
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from cyclejepa.bench.ptbxl.report import markdown_report, summarise
from cyclejepa.bench.ptbxl.run import FRACTIONS, PROTOCOLS, SCRATCH, Bench, Cell, benchmark_split, task_data
from cyclejepa.pipeline.checks import checkpoint_listing, checkpointed
from cyclejepa.config import ConfigError, ExperimentConfig, load_config
from cyclejepa.data.ptbxl_tasks import TASKS
from cyclejepa.jsonio import write_json
from cyclejepa.outputs import OutputFolder
from cyclejepa.training.finetune import FinetuneSettings

__all__ = ["FRACTIONS", "PROTOCOLS", "load_target", "main", "run_benchmark"]

log = logging.getLogger(__name__)
PTBXL_LAYOUT = ("ptbxl", "synthetic")
"""Datasets whose root holds PTB-XL's two tables."""


def load_target(target: str | Path, overrides: Sequence[str] = (), unseal: bool = False) -> ExperimentConfig:
    """The config of ``target``: a YAML file, or an output directory of `cyclejepa run` (its
    ``config.yaml``, with ``output_dir`` the directory itself)."""
    target = Path(target)
    extra = ["evaluation.unseal=true"] if unseal else []
    if target.is_dir():
        if not OutputFolder(target).config.is_file():
            raise ConfigError([f"{target} is a folder without config.yaml: give an experiment YAML or an output directory of `cyclejepa run`"])
        return load_config(OutputFolder(target).config, [*overrides, f"output_dir={target}", *extra])
    return load_config(target, [*overrides, *extra])


def _check(cfg: ExperimentConfig, tasks, protocols, fractions, seeds, step: int) -> None:
    problems = [f"unknown task {t!r}; one of {', '.join(TASKS)}" for t in tasks if t not in TASKS]
    problems += [f"unknown protocol {p!r}; one of {', '.join(PROTOCOLS)}" for p in protocols if p not in PROTOCOLS]
    problems += [f"label fraction {f} is not in (0, 1]" for f in fractions if not 0 < f <= 1]
    problems += ["no seed given"] if not seeds else []
    if cfg.data.dataset not in PTBXL_LAYOUT:
        problems.append(f"data.dataset {cfg.data.dataset!r}: the benchmark reads PTB-XL's tables (dataset ptbxl or synthetic)")
    if not checkpointed(cfg, step):
        problems.append(f"step {step} is never checkpointed; checkpointed steps: {checkpoint_listing(cfg)}")
    if problems:
        raise ConfigError(problems, source="benchmark ptbxl")


def run_benchmark(
    target: str | Path,
    *,
    overrides: Sequence[str] = (),
    unseal: bool = False,
    tasks: Sequence[str] = TASKS,
    protocols: Sequence[str] = PROTOCOLS,
    fractions: Sequence[float] = FRACTIONS,
    seeds: Sequence[int] = (0, 1, 2),
    step: int | None = None,
    settings: FinetuneSettings | None = None,
    validation_fold: int | None = None,
    progress: bool = True,
) -> Path:
    """Prepare, pre-train what is missing, compute every cell and write the report; returns benchmark.md.

    ``step`` is the pre-trained checkpoint (default ``evaluation.headline_step``, else the last);
    ``settings`` the fine-tuning (default: `FinetuneSettings` at ``training.batch_size``);
    ``validation_fold`` the early-stopping fold (default: the last of ``data.train_folds``).
    """
    from cyclejepa.lock import output_lock
    from cyclejepa.pipeline.plans import plan_runs
    from cyclejepa.progress import progress_bar
    from cyclejepa.pipeline import build_dataset, preflight, prepare, pretrain_all, require_unsealed, write_resolved_config

    began = time.perf_counter()
    cfg = load_target(target, overrides, unseal)
    step = step or cfg.evaluation.headline_step or cfg.training.steps
    _check(cfg, tasks, protocols, fractions, seeds, step)
    preflight(cfg)
    require_unsealed(cfg)
    settings = settings or FinetuneSettings(batch_size=cfg.training.batch_size)
    out = Path(cfg.output_dir) / "benchmark" / "ptbxl"
    with output_lock(cfg.output_dir):
        config = write_resolved_config(cfg)
        cache = prepare(cfg, progress=progress)
        if set(protocols) != {SCRATCH}:
            pretrain_all(cfg, cache, config, progress=progress)
        split = benchmark_split(cfg, cache, validation_fold)
        dataset = build_dataset(cfg)
        bench = Bench(cfg, cache, split, dataset, step=step, settings=settings, out=out, progress=False)
        plans = plan_runs(cfg)
        per_task = len(fractions) * len(seeds) * sum(1 if p == SCRATCH else len(plans) for p in protocols)
        cells = []
        with progress_bar(len(tasks) * per_task, "benchmark ptbxl", enabled=progress, fields=("cell",)) as update:
            for task in tasks:
                data = task_data(bench.dataset, task, cache, split)
                for protocol in protocols:
                    found = []
                    for plan in [None] if protocol == SCRATCH else plans:
                        for fraction in fractions:
                            for seed in seeds:
                                cell = Cell(task, protocol, plan.name if plan else SCRATCH, seed, fraction)
                                update(0, cell=cell.name)
                                found.append(bench.result(cell, data, plan))
                                update(1)
                    write_json(out / task / f"{protocol}.json", {"task": task, "protocol": protocol, "summary": summarise(found), "cells": found})
                    cells += found
        summary = summarise(cells)
        meta = {
            "name": cfg.name, "corpus": _corpus(cfg, cache), "step": step, "seeds": list(seeds), "settings": _settings_text(settings),
            "folds": {"fit": split.fit_folds, "validation": split.validation_fold, "test": split.test_folds},
            "runs": [plan.name for plan in plans], "wall_s": time.perf_counter() - began,
            "cells_wall_s": sum(c["wall_s"] for c in cells),
        }  # fmt: skip
        write_json(out / "benchmark.json", {"meta": meta, "settings": asdict(settings), "summary": summary})
        (out / "benchmark.md").write_text(markdown_report(summary, meta))
    return out / "benchmark.md"


def _corpus(cfg: ExperimentConfig, cache) -> str:
    records = cfg.data.options.get("records") if cfg.data.dataset == "synthetic" else None
    kind = f"synthetic ({records} records)" if records else cfg.data.dataset
    root = cfg.data.root if cfg.data.root is not None else "its default root"
    return f"{kind} at {root}, {len(cache)} cached records"


def _settings_text(settings: FinetuneSettings) -> str:
    return (f"≤ {settings.steps} steps at batch {settings.batch_size}, lr {settings.lr:g} (encoder and projector × "
            f"{settings.backbone_scale:g}), early stopping every {settings.eval_every} steps, patience {settings.patience}")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> Path:
    """Command line: ``cyclejepa benchmark ptbxl CONFIG_OR_RUN [options]``."""
    from cyclejepa.pipeline.seal import SealedFoldError

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
    parser.add_argument("--backbone-scale", type=float, default=defaults.backbone_scale, help="encoder rate / head rate when fine-tuning")
    parser.add_argument("--eval-every", type=int, default=defaults.eval_every, help="steps between early-stopping evaluations")
    parser.add_argument("--patience", type=int, default=defaults.patience, help="evaluations without improvement before stopping")
    args = parser.parse_args(argv)
    try:
        batch = args.batch_size or load_target(args.target, args.overrides).training.batch_size
        settings = FinetuneSettings(steps=args.steps, batch_size=batch, lr=args.lr, backbone_scale=args.backbone_scale,
                                    eval_every=args.eval_every, patience=args.patience)  # fmt: skip
        report = run_benchmark(args.target, overrides=args.overrides, unseal=args.unseal, tasks=args.tasks, protocols=args.protocols,
                               fractions=args.fractions, seeds=args.seeds, step=args.step, settings=settings,
                               validation_fold=args.validation_fold)  # fmt: skip
    except (ConfigError, SealedFoldError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2 if isinstance(error, ConfigError) else 1) from None
    print(report.read_text())
    print(f"wrote {report} and {report.with_suffix('.json')}", file=sys.stderr)
    return report
