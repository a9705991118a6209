"""`cyclejepa run`: prepare → pre-train every arm × seed → evaluate the grid → report.

Everything lands in one output directory (``output_dir`` of the config)::

    <output_dir>/
      config.yaml                 the resolved configuration of this run
      cache/                      the preprocessing cache (unless data.cache_dir says otherwise)
      runs/<arm>-seed<seed>/      metrics.jsonl, checkpoints/step_XXXXXX.pt, done.json
      evaluation/<arm>-seed<seed>-step<step>.json
      report/                     report.md, report.json, figures (*.png)
      folds_used.jsonl            the folds each stage read (`cyclejepa.seal`)
      unseal_audit.jsonl          one line per use of the sealed fold

A stage whose outputs exist for the same run identity (the keys that change the weights, see
`ExperimentConfig.training_identity`) is skipped, so re-running a finished experiment does
nothing and a killed one resumes from its last checkpoint. `preflight` checks everything that
can be checked from the config and the files on disk before any work starts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import yaml

from cyclejepa.config import (
    ConfigError,
    ExperimentConfig,
    consistency_problems,
    expand_grid,
    identity_differences,
    identity_hash,
)
from cyclejepa.jsonio import read_json, write_json
from cyclejepa.outputs import RunPlan, cache_dir, plan_runs, run_dir
from cyclejepa.seal import SEALED_FOLD, SealedFoldError, require_unsealed, use_folds

log = logging.getLogger(__name__)


def evaluation_steps(cfg: ExperimentConfig) -> list[int]:
    """The evaluated checkpoints (`preflight` refuses steps that are never checkpointed)."""
    return sorted(set(cfg.evaluation.steps))


def preflight(cfg: ExperimentConfig) -> None:
    """Every check that the config and the files on disk allow, before any work: raises one
    `ConfigError` listing each problem with its key path (a grid: each cell's)."""
    problems = consistency_problems(cfg)
    for label, cell in expand_grid(cfg):
        where = f"grid {label}: " if label else ""
        problems += [where + problem for problem in _device_problems(cell) + _corpus_problems(cell) + identity_problems(cell)]
    if problems:
        raise ConfigError(problems, source="preflight")


def _device_problems(cfg: ExperimentConfig) -> list[str]:
    from cyclejepa.devices import resolve_device

    problems = []
    for key in ("training.device", "evaluation.device"):
        section, name = key.split(".")
        try:
            resolve_device(getattr(getattr(cfg, section), name))
        except ValueError as error:
            problems.append(f"{key}: {error}")
    return problems


def _corpus_problems(cfg: ExperimentConfig) -> list[str]:
    """A configured synthetic corpus that disagrees with the one already at the root."""
    from cyclejepa.data.synthetic import RPEAKS_FILENAME

    root, wanted = cfg.data.resolved_root(), cfg.data.synthetic_records
    if not wanted or root is None or not (root / "ptbxl_database.csv").exists():
        return []
    if not (root / RPEAKS_FILENAME).exists():
        return [f"data.synthetic_records: {wanted}, but {root} holds a corpus that is not a cyclejepa synthetic one; "
                "unset data.synthetic_records or point data.root elsewhere"]
    import csv

    with open(root / "ptbxl_database.csv", newline="") as stream:
        found = sum(1 for _ in csv.reader(stream)) - 1
    seed = read_json(root / RPEAKS_FILENAME).get("seed")
    if (found, seed) != (wanted, cfg.data.synthetic_seed):
        return [f"data.synthetic_records: the corpus at {root} was written with synthetic_records {found}, "
                f"synthetic_seed {seed}, not {wanted}, {cfg.data.synthetic_seed}; set those values or point "
                "data.root at a new folder"]
    return []


def identity_problems(cfg: ExperimentConfig) -> list[str]:
    """Runs in the output directory trained with other settings than ``cfg``'s, with the keys that differ."""
    problems = []
    for plan in plan_runs(cfg):
        recorded = recorded_identity(cfg, plan)
        if recorded is None:
            continue
        differences = identity_differences(recorded, plan.identity(cfg))
        if differences:
            problems.append(
                f"{run_dir(cfg, plan)} was trained with other settings ({'; '.join(differences)}); "
                "restore them, or choose another output_dir"
            )
    return problems


def recorded_identity(cfg: ExperimentConfig, plan: RunPlan) -> dict | None:
    """The identity a run directory was trained with: from done.json, else its last checkpoint."""
    from cyclejepa.training.checkpoint import latest_checkpoint, load_checkpoint

    directory = run_dir(cfg, plan)
    if (directory / "done.json").exists():
        return read_json(directory / "done.json").get("identity", {})
    last = latest_checkpoint(directory / "checkpoints")
    return None if last is None else load_checkpoint(last)["meta"].get("identity", {})


def describe_plan(cfg: ExperimentConfig) -> list[str]:
    """Human-readable lines of what `run` would do, and which stages are already done."""
    out = Path(cfg.output_dir)
    if cfg.grid:
        lines = [f"grid of {len(expand_grid(cfg))} experiments over {', '.join(sorted(cfg.grid))}:"]
        for label, cell in expand_grid(cfg):
            lines += [f"[{label}] " + line for line in describe_plan(cell)]
        return lines + [f"grid summary: {out / 'grid_summary.md'}"]
    lines = [f"output: {out}", f"data: {_corpus_line(cfg)}", f"cache: {cache_dir(cfg)}"]
    for plan in plan_runs(cfg):
        state = "done" if _finished(cfg, plan) else "to train"
        lines.append(
            f"pre-train {plan.name}: λ_trans={plan.arm.transport_weight}, "
            f"{cfg.training.steps} steps × batch {cfg.training.batch_size} [{state}]"
        )
    lines.append(
        f"evaluate steps {evaluation_steps(cfg)} on folds {cfg.data.eval_folds} "
        f"(probe fitted on folds {cfg.data.train_folds})"
    )
    if SEALED_FOLD in cfg.data.eval_folds + cfg.data.train_folds:
        lines.append(f"fold {SEALED_FOLD} is sealed: " + ("UNSEALED (audited)" if cfg.evaluation.unseal else "needs --unseal"))
    lines.append(f"report: {out / 'report' / 'report.md'}")
    return lines


def _corpus_line(cfg: ExperimentConfig) -> str:
    root = cfg.data.resolved_root() or "$CYCLEJEPA_PTBXL (not set: set it or data.root)"
    if cfg.data.synthetic_records:
        return f"synthetic corpus of {cfg.data.synthetic_records} records at {root}"
    return f"dataset {cfg.data.dataset} at {root}"


def build_dataset(cfg: ExperimentConfig, progress: bool = False):
    """The configured `Dataset`: ``data.dataset`` built with ``data.root`` and ``data.options``
    (with ``data.synthetic_records``: the synthetic corpus, written at the root when missing)."""
    from cyclejepa.registry import DATASETS

    data, root = cfg.data, cfg.data.resolved_root()
    if data.synthetic_records:
        return DATASETS.build("synthetic", root=root, records=data.synthetic_records, seed=data.synthetic_seed, progress=progress)
    return DATASETS.build(data.dataset, root=root, **data.options)


def prepare(cfg: ExperimentConfig, progress: bool = True):
    """Stage 1: build the configured dataset (writing the synthetic corpus when configured and
    missing), then the cache of its windows."""
    from cyclejepa.data.cache import prepare_cache

    train_folds = use_folds(cfg, "normalisation statistics", "data.train_folds")
    return prepare_cache(
        build_dataset(cfg, progress),
        cache_dir(cfg),
        train_folds=tuple(train_folds),
        phase_provider=cfg.phase.provider,
        phase_options=cfg.phase.options,
        window_s=cfg.data.window_s,
        workers=cfg.data.workers,
        progress=progress,
    )


def _finished(cfg: ExperimentConfig, plan: RunPlan) -> bool:
    done = run_dir(cfg, plan) / "done.json"
    return done.exists() and read_json(done).get("identity") == plan.identity(cfg)


def training_phases(cache, rows, convention: str):
    """Token phases of ``rows`` for training: NaN throughout for records that fail phase QC,
    so that they take no part in phase-dependent losses (the transport term)."""
    phases = np.array(cache.phases(convention)[rows], dtype=np.float32)
    phases[~cache.columns["qc_ok"][rows]] = np.nan
    return phases


def train_run(cfg: ExperimentConfig, cache, directory: Path, *, seed: int, transport_weight: float,
              dist=None, progress: bool = True):
    """Train one run on the cache's training folds, resuming from its last checkpoint; returns the trainer."""
    from cyclejepa.training import Distributed, Trainer, latest_checkpoint

    folds = use_folds(cfg, "pre-training", "data.train_folds")
    rows = cache.select(folds)
    trainer = Trainer(
        cfg, cache.signals[rows], training_phases(cache, rows, cfg.phase.convention), directory,
        seed=seed, transport_weight=transport_weight, fs=cache.fs, dist=dist or Distributed(),
    )
    last = latest_checkpoint(Path(directory) / "checkpoints")
    if last is not None:
        trainer.resume(last)
        log.info("%s: resuming from step %d (%s)", Path(directory).name, trainer.step, last)
    trainer.fit(progress=progress)
    return trainer


def pretrain(cfg: ExperimentConfig, cache, plan: RunPlan, progress: bool = True, dist=None) -> Path:
    """Stage 2 for one arm × seed: train (resuming from the last checkpoint) unless finished."""
    directory = run_dir(cfg, plan)
    if _finished(cfg, plan):
        return directory
    trainer = train_run(
        cfg, cache, directory, seed=plan.seed, transport_weight=plan.arm.transport_weight,
        dist=dist, progress=progress,
    )
    if trainer.dist.is_main:
        identity = plan.identity(cfg)
        write_json(directory / "done.json", {"identity": identity, "run_hash": identity_hash(identity), "steps": trainer.step})
    return directory


def write_resolved_config(cfg: ExperimentConfig) -> Path:
    path = Path(cfg.output_dir) / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path


def run_experiment(cfg: ExperimentConfig, progress: bool = True) -> Path:
    """Every stage in order; returns the report path (for a grid, the grid summary).

    Holds the output directory's lock throughout (`cyclejepa.lock.output_lock`)."""
    from cyclejepa.lock import output_lock

    with output_lock(cfg.output_dir):
        return _run_stages(cfg, progress)


def _run_stages(cfg: ExperimentConfig, progress: bool) -> Path:
    preflight(cfg)
    if cfg.grid:
        from cyclejepa.evaluation.report import write_grid_summary

        cells = expand_grid(cfg)
        for _, cell in cells:  # every cell passes the seal before the first one starts
            require_unsealed(cell)
        for _, cell in cells:
            run_experiment(cell, progress=progress)
        return write_grid_summary(Path(cfg.output_dir), cells)
    require_unsealed(cfg)
    config = write_resolved_config(cfg)
    cache = prepare(cfg, progress=progress)
    pretrain_all(cfg, cache, config, progress=progress)
    return evaluate_experiment(cfg, cache, progress=progress)


def pretrain_all(cfg: ExperimentConfig, cache, config: Path, progress: bool = True) -> None:
    """Stage 2 for every arm × seed: unfinished runs side by side in ``runs.at_once`` processes
    (each reads the resolved config file ``config``), else one after the other in this one."""
    from cyclejepa.devices import resolve_device
    from cyclejepa.training.concurrent import RunJob, runs_at_once, train_concurrently

    todo = [plan for plan in plan_runs(cfg) if not _finished(cfg, plan)]
    at_once = runs_at_once(cfg.runs.at_once, resolve_device(cfg.training.device).type, len(todo))
    if at_once > 1:
        jobs = [RunJob(plan.arm.name, plan.seed, run_dir(cfg, plan)) for plan in todo]
        train_concurrently(config, jobs, at_once, cfg.training.steps, progress=progress)
    for plan in plan_runs(cfg):  # the sequential path; finished runs are skipped
        pretrain(cfg, cache, plan, progress=progress)


def evaluate_experiment(cfg: ExperimentConfig, cache=None, progress: bool = True) -> Path:
    """Evaluate the trained checkpoints of every run and write the report (no training)."""
    from cyclejepa.data.cache import PreparedCache
    from cyclejepa.evaluation.report import write_report
    from cyclejepa.evaluation.stage import evaluate_grid
    from cyclejepa.training.checkpoint import checkpoint_path

    preflight(cfg)
    require_unsealed(cfg)
    steps = evaluation_steps(cfg)
    missing = [
        str(checkpoint_path(run_dir(cfg, plan) / "checkpoints", step))
        for plan in plan_runs(cfg)
        for step in steps
        if not checkpoint_path(run_dir(cfg, plan) / "checkpoints", step).exists()
    ]
    if missing:
        raise FileNotFoundError(f"{len(missing)} checkpoint(s) to evaluate are missing, e.g. {missing[0]}; train them with `cyclejepa run`")
    write_resolved_config(cfg)
    cache = cache or PreparedCache(cache_dir(cfg))
    evaluate_grid(cfg, cache, plan_runs(cfg), steps, progress=progress)
    return write_report(Path(cfg.output_dir))
