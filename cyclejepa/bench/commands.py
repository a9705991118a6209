"""Each benchmark's command: ``cyclejepa benchmark ptbxl`` (`benchmark_ptbxl`), ``allocations``
(`benchmark_allocations`), ``throughput`` (`benchmark_throughput`) and the whole-experiment timing
(`time_experiment`), the top layer of `cyclejepa.bench`.

Each reads the experiment config, runs the pipeline stages it needs (preflight, prepare,
pre-train) and hands the benchmark below narrow arguments: a spec (`BenchmarkSpec`,
`ThroughputSpec`), folds already passed through the seal, checkpoint paths, run hashes, the output
folder. Nothing under `cyclejepa.bench` but this module reads the config.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from cyclejepa.bench.allocations import (
    ALLOCATIONS,
    QUICKSTART,
    allocation_arguments,
    allocation_metrics,
    allocation_table,
    markdown_table,
)
from cyclejepa.bench.experiment import (
    PTBXL_RECORDS,
    StageClock,
    stand_in_overrides,
    write_stand_in_corpus,
)
from cyclejepa.bench.ptbxl import (
    FRACTIONS,
    PROTOCOLS,
    TASKS,
    argument_problems,
    benchmark_folder,
    corpus_description,
    dataset_problems,
    finetune_settings,
    ptbxl_arguments,
    run_benchmark,
)
from cyclejepa.bench.ptbxl.run import RANDOM_LINEAR, SCRATCH, benchmark_split
from cyclejepa.bench.ptbxl.spec import BenchmarkSpec, PretrainedRun, Scoring, Training
from cyclejepa.bench.report import markdown_report
from cyclejepa.bench.throughput import VARIANTS, ThroughputSpec, measure_throughput, throughput_arguments
from cyclejepa.bench.throughput.common import SAMPLES
from cyclejepa.bench.timing import machine_info, versions
from cyclejepa.config import ConfigError, ExperimentConfig, apply_overrides, load_config, parse_config
from cyclejepa.devices import resolve_device
from cyclejepa.jsonio import short_hash
from cyclejepa.lock import output_lock
from cyclejepa.outputs import OutputFolder
from cyclejepa.pipeline.checks import checkpoint_listing, checkpointed, preflight
from cyclejepa.pipeline.evaluation import evaluate_grid, evaluation_spec, evaluation_steps
from cyclejepa.pipeline.identity import identity_hash
from cyclejepa.pipeline.plans import plan_runs, write_resolved_config
from cyclejepa.pipeline.preparation import build_dataset, prepare
from cyclejepa.pipeline.pretraining import objective_spec, pretrain_all, train_run, training_spec
from cyclejepa.pipeline.seal import SealedFoldError, require_unsealed, use_folds
from cyclejepa.training.finetune import FinetuneSettings
from cyclejepa.training.spec import TrainingSpec

# ---- benchmark ptbxl -------------------------------------------------------------------------


def load_target(target: str | Path, overrides: Sequence[str] = (), unseal: bool = False) -> ExperimentConfig:
    """The config of ``target``: a YAML file, or an output directory of `cyclejepa run` (its
    ``config.yaml``, with ``output_dir`` the directory itself)."""
    target = Path(target)
    extra = ["evaluation.unseal=true"] if unseal else []
    if target.is_dir():
        if not OutputFolder(target).config.is_file():
            raise ConfigError(
                [f"{target} is a folder without config.yaml: give an experiment YAML or an output directory of `cyclejepa run`"]
            )
        return load_config(OutputFolder(target).config, [*overrides, f"output_dir={target}", *extra])
    return load_config(target, [*overrides, *extra])


def _step_problems(cfg: ExperimentConfig, step: int) -> list[str]:
    return (
        [] if checkpointed(cfg, step) else [f"step {step} is never checkpointed; checkpointed steps: {checkpoint_listing(cfg)}"]
    )


def benchmark_ptbxl(
    cfg: ExperimentConfig,
    *,
    tasks: Sequence[str] = TASKS,
    protocols: Sequence[str] = PROTOCOLS,
    fractions: Sequence[float] = FRACTIONS,
    seeds: Sequence[int] = (0, 1, 2),
    step: int | None = None,
    settings: FinetuneSettings | None = None,
    validation_fold: int | None = None,
    at_once: int | str = 1,
    progress: bool = True,
) -> Path:
    """Prepare, pre-train what is missing, compute every cell and write the report; returns benchmark.md.

    ``step`` is the pre-trained checkpoint (default ``evaluation.headline_step``, else the last);
    ``settings`` the fine-tuning (default: `FinetuneSettings` at ``training.batch_size``);
    ``validation_fold`` the early-stopping fold (default: the last of ``data.train_folds``);
    ``at_once`` the cells trained side by side (`cyclejepa.bench.ptbxl.cells_at_once`). Bad
    arguments are refused before any work.
    """

    began = time.perf_counter()
    step = step or cfg.evaluation.headline_step or cfg.training.steps
    problems = (
        argument_problems(tasks, protocols, fractions, seeds, at_once)
        + dataset_problems(cfg.data.dataset)
        + _step_problems(cfg, step)
    )
    if problems:
        raise ConfigError(problems, source="benchmark ptbxl")
    preflight(cfg)
    require_unsealed(cfg)
    settings = settings or FinetuneSettings(batch_size=cfg.training.batch_size)
    with output_lock(cfg.output_dir):
        config = write_resolved_config(cfg)
        cache = prepare(cfg, progress=progress)
        if set(protocols) - {SCRATCH, RANDOM_LINEAR}:
            pretrain_all(cfg, cache, config, plan_runs(cfg), progress=progress)
        train = use_folds(cfg, "benchmark fitting and early stopping", "data.train_folds")
        test = use_folds(cfg, "benchmark scoring", "data.eval_folds")
        split = benchmark_split(cache, train, test, validation_fold)
        spec = ptbxl_spec(cfg, tasks, protocols, fractions, seeds, step, settings)
        corpus = corpus_description(cfg.data.dataset, cfg.data.options.model_dump(mode="json"), cfg.data.root, len(cache))
        return run_benchmark(
            spec,
            cache,
            split,
            build_dataset(cfg),
            experiment=cfg.name,
            corpus=corpus,
            began=began,
            at_once=at_once,
            progress=progress,
        )


def ptbxl_spec(
    cfg: ExperimentConfig,
    tasks: Sequence[str],
    protocols: Sequence[str],
    fractions: Sequence[float],
    seeds: Sequence[int],
    step: int,
    settings: FinetuneSettings,
) -> BenchmarkSpec:
    """The `BenchmarkSpec` of ``cfg``: its runs' checkpoints at ``step`` and hashes, its scoring and
    training sections, its folder (`cyclejepa.bench.ptbxl.benchmark_folder`)."""

    runs = tuple(
        PretrainedRun(plan.name, plan.arm.name, plan.folder.checkpoint(step), identity_hash(plan.identity))
        for plan in plan_runs(cfg)
    )
    random_runs = tuple(_random_run(cfg, seed) for seed in cfg.runs.seeds)
    ev, training = cfg.evaluation, cfg.training
    return BenchmarkSpec(
        tasks=tuple(tasks),
        protocols=tuple(protocols),
        fractions=tuple(fractions),
        seeds=tuple(seeds),
        step=step,
        runs=runs,
        load_model=partial(_trained_model, cfg),
        model=cfg.model,
        random_runs=random_runs,
        initial_model=partial(_initial_model, cfg),
        scoring=Scoring(probe_c=ev.probe_c, bootstrap=ev.bootstrap, seed=ev.seed, device=ev.device),
        training=Training(settings=settings, device=training.device, precision=training.precision, compile=training.compile),
        out=benchmark_folder(Path(cfg.output_dir)),
    )


def _random_run(cfg: ExperimentConfig, seed: int) -> PretrainedRun:
    """The random baseline of ``seed`` as a run of the ``random-linear`` protocol: no checkpoint,
    its hash that of its weights (`state_digest` of the trainer's step-0 weights)."""
    from cyclejepa.evaluation.integrity import state_digest
    from cyclejepa.training.trainer import initial_objective

    digest = state_digest(initial_objective(objective_spec(cfg), seed).state_dict())
    return PretrainedRun(f"random-seed{seed}", "random", Path(), digest[:16], untrained_seed=seed)


def _initial_model(cfg: ExperimentConfig, seed: int, device: torch.device) -> torch.nn.Module:
    from cyclejepa.training.trainer import initial_objective

    return initial_objective(objective_spec(cfg), seed, device).model


def _trained_model(cfg: ExperimentConfig, path: Path, device: torch.device) -> torch.nn.Module:
    from cyclejepa.training.trainer import load_trained

    return load_trained(objective_spec(cfg), path, device).model


def ptbxl_main(argv: Sequence[str] | None = None) -> Path:
    """Command line: ``cyclejepa benchmark ptbxl CONFIG_OR_RUN [options]``."""
    args = ptbxl_arguments().parse_args(argv)
    try:
        cfg = load_target(args.target, args.overrides, args.unseal)
        report = benchmark_ptbxl(
            cfg,
            tasks=args.tasks,
            protocols=args.protocols,
            fractions=args.fractions,
            seeds=args.seeds,
            step=args.step,
            settings=finetune_settings(args, cfg.training.batch_size),
            validation_fold=args.validation_fold,
            at_once=args.at_once,
        )
    except (ConfigError, SealedFoldError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2 if isinstance(error, ConfigError) else 1) from None
    print(report.read_text())
    print(f"wrote {report} and {report.with_suffix('.json')}", file=sys.stderr)
    return report


# ---- benchmark allocations -------------------------------------------------------------------


def allocation_configs(
    base: ExperimentConfig, allocations: dict[str, str], out: Path, steps: int | None
) -> dict[str, ExperimentConfig]:
    """One config per allocation: ``base`` with its ``symmetry.spectrum``, output under ``out``,
    the cache where ``base`` keeps it, and (when given) ``steps`` training steps evaluated at the last."""
    raw = base.model_dump(mode="json")
    extra = [
        f"output_dir={json.dumps(str(out))}",
        f"data.cache_dir={json.dumps(str(base.data.cache_dir or Path(base.output_dir) / 'cache'))}",
    ]
    if steps is not None:
        extra += [f"training.steps={steps}", f"evaluation.steps=[{steps}]", "evaluation.headline_step=null"]
    return {
        name: parse_config(apply_overrides(raw, extra + [f"symmetry.spectrum={json.dumps(spectrum)}"]))
        for name, spectrum in allocations.items()
    }


def benchmark_allocations(
    out: str | Path,
    *,
    allocations: dict[str, str] | None = None,
    seeds: Sequence[int] = (0, 1),
    steps: int | None = None,
    base_config: str | Path | None = None,
    overrides: Sequence[str] = (),
    progress: bool = True,
    random_baseline: bool = True,
) -> dict[str, Any]:
    """Train and score every allocation × seed (default: `ALLOCATIONS` on the quickstart), and
    (``random_baseline``) its untrained weights at no training cost; write
    ``allocations.json``, ``.md`` and ``.png``. Every allocation's config passes `preflight` and
    the seal before the cache is prepared."""
    from cyclejepa.evaluation.checkpoint_evaluation import core_metrics

    out = Path(out)
    configs = allocation_configs(load_config(base_config or QUICKSTART, list(overrides)), allocations or ALLOCATIONS, out, steps)
    for cfg in configs.values():
        preflight(cfg)
        require_unsealed(cfg)
    cache = prepare(next(iter(configs.values())), progress=progress)

    def score(name: str, seed: int, directory: Path) -> dict[str, Any]:
        cfg = configs[name]
        trainer = train_run(cfg, cache, directory, seed=seed, transport_weight=1.0, progress=progress)
        spec = evaluation_spec(cfg, cache)
        return allocation_metrics(
            core_metrics(spec, cache, trainer.objective.eval(), resolve_device(cfg.evaluation.device)).result
        )

    def untrained(name: str, seed: int) -> dict[str, Any]:
        """The random baseline of ``name`` × ``seed``: the step-0 weights of that run, scored the same way."""
        from cyclejepa.training.trainer import initial_objective

        cfg = configs[name]
        device = resolve_device(cfg.evaluation.device)
        spec = evaluation_spec(cfg, cache)
        return allocation_metrics(core_metrics(spec, cache, initial_objective(objective_spec(cfg), seed, device), device).result)

    steps_run = next(iter(configs.values())).training.steps
    return allocation_table(
        out,
        score,
        allocations=allocations or ALLOCATIONS,
        seeds=seeds,
        steps=steps_run,
        untrained=untrained if random_baseline else None,
    )


def allocations_main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command line: ``cyclejepa benchmark allocations [options]``."""
    args = allocation_arguments().parse_args(argv)
    summary = benchmark_allocations(
        args.out,
        seeds=args.seeds,
        steps=args.steps,
        base_config=args.config,
        overrides=args.overrides,
        random_baseline=args.random_baseline,
    )
    print(markdown_table(summary["table"]))
    return summary


# ---- whole-experiment timing -----------------------------------------------------------------


def time_experiment(
    config: str | Path,
    out: str | Path,
    *,
    records: int = PTBXL_RECORDS,
    overrides: Sequence[str] = (),
    unseal: bool = False,
    workers: int = 8,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run ``config`` on a synthetic corpus of ``records`` records under ``out``, stage by stage
    (`cyclejepa.bench.experiment`).

    Returns the stage table: ``{"stages": {name: seconds}, "experiment_s": Σ of the
    experiment's stages, ...}``; also written to ``out/stages.json`` and ``out/stages.md``.
    """
    from cyclejepa.pipeline.reporting import report_experiment

    out = Path(out)
    corpus = out / "corpus"
    sets = [*stand_in_overrides(corpus, records), f"output_dir={out / 'run'}", *overrides]
    cfg = load_config(config, sets + (["evaluation.unseal=true"] if unseal else []))
    clock = StageClock(
        out,
        log,
        {
            "config": str(config),
            "overrides": list(overrides),
            "records": records,
            "runs": [plan.name for plan in plan_runs(cfg)],
            "steps": cfg.training.steps,
            "at_once": cfg.runs.at_once,
            "machine": machine_info(resolve_device(cfg.training.device)),
            "versions": versions(),
            "stages": {},
        },
    )
    with clock.stage("synthetic corpus (stand-in, not timed in the experiment)"):
        write_stand_in_corpus(corpus, records, cfg.data.options.model_dump()["seed"], workers)
    require_unsealed(cfg)
    config_file = write_resolved_config(cfg)
    with clock.stage("prepare"):
        cache = prepare(cfg, progress=False)
    plans = plan_runs(cfg)
    with clock.stage("pre-train"):
        pretrain_all(cfg, cache, config_file, plans, progress=False)
    with clock.stage("evaluate"):
        evaluate_grid(cfg, cache, plans, evaluation_steps(cfg), progress=False)
    with clock.stage("report"):
        clock.result["report"] = str(report_experiment(cfg.output_dir))
    clock.write()
    return clock.result


# ---- benchmark throughput ------------------------------------------------------------------


def timed_training_spec(cfg: ExperimentConfig, directory: str | Path, *, seed: int, transport_weight: float) -> TrainingSpec:
    """The trainer's spec of a timed run of ``cfg``: `training_spec`'s, with no identity (the
    benchmark's trainers are never saved nor resumed)."""
    return replace(training_spec(cfg, Path(directory), seed=seed, transport_weight=transport_weight), identity={}, run_hash="")


def throughput_spec(config: dict[str, Any] | None, device: torch.device) -> ThroughputSpec:
    """The `ThroughputSpec` of the raw experiment config ``config`` (a nested dict; None or empty:
    the paper's) on ``device``: per variant, the config with ``training.device``,
    ``training.precision`` and ``training.compile`` set to the variant's."""
    raw = copy.deepcopy(config or {})
    cfg = parse_config(raw, source="benchmark config")
    channels, patch = cfg.model.encoder.leads, cfg.model.encoder.patch
    if channels is None or patch is None:
        raise ConfigError(
            [f"model.encoder needs leads and patch for the synthetic training arrays, got {channels} and {patch}"],
            source="benchmark config",
        )

    def trainer(precision: str, compile_mode: str | bool) -> TrainingSpec:
        training = {"device": str(device), "precision": precision, "compile": compile_mode}
        variant = apply_overrides(raw, [f"training.{key}={json.dumps(value)}" for key, value in training.items()])
        return timed_training_spec(parse_config(variant, source="benchmark config"), Path(), seed=0, transport_weight=1.0)

    return ThroughputSpec(
        device=device,
        objective=objective_spec(cfg),
        batch_size=cfg.training.batch_size,
        channels=channels,
        tokens=SAMPLES // patch,
        trainers={name: trainer(variant.precision, variant.compile_mode or False) for name, variant in VARIANTS.items()},
        ensemble=trainer("bf16" if device.type == "cuda" else "float32", False),
        config_hash=short_hash(cfg.model_dump(mode="json")),
        config_overrides=raw,
    )


def benchmark_throughput(
    device: str = "auto",
    quick: bool = False,
    out: str | os.PathLike | None = None,
    *,
    config: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Run the throughput benchmark of ``config`` (nested dict for `parse_config`; default the
    paper's) on ``device`` (``"auto"``: CUDA when present) and return its results; ``quick``,
    ``out`` and the ``options`` (``sections``, ``variants``, ``prepare_records``, ``deadline_s``,
    ``threads``, ``log``) are those of `cyclejepa.bench.throughput.measure_throughput`."""
    return measure_throughput(throughput_spec(config, resolve_device(device)), quick, out, **options)


def throughput_main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Command line: ``cyclejepa benchmark throughput [--quick] [--device cuda] [--out PATH] ...``."""
    args = throughput_arguments().parse_args(argv)
    try:
        config = load_config(args.config).model_dump(mode="json") if args.config else None
        out = args.out or Path("runs/benchmarks") / f"throughput-{_device_tag(args.device)}.json"
        options = {key: getattr(args, key) for key in ("sections", "variants", "prepare_records", "deadline_s", "threads")}
        report = benchmark_throughput(args.device, args.quick, out, config=config, **options)
    except ValueError as error:  # a ConfigError (exit status 2), an unknown section or variant
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2 if isinstance(error, ConfigError) else 1) from None
    print(markdown_report(report))
    print(f"\nwrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return report


def _device_tag(device: str) -> str:
    """``device`` as a file-name part: ``auto`` resolved to cuda or cpu, without the colon."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device.replace(":", "")
