"""`cyclejepa run`: prepare → pre-train every arm × seed → evaluate the grid → report.

Everything lands in one output directory (``output_dir`` of the config), laid out by
`cyclejepa.outputs` (`OutputFolder`, `RunFolder`): the resolved config, the cache, one folder
per run, the evaluation results, the report and the fold-use logs.

A stage whose outputs exist for the same run identity (the keys that change the weights, see
`cyclejepa.identity.training_identity`) is skipped, so re-running a finished experiment does
nothing and a killed one resumes from its last checkpoint. `preflight` checks everything that
can be checked from the config and the files on disk before any work starts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import yaml

from cyclejepa.checks import consistency_problems
from cyclejepa.config import ConfigError, ExperimentConfig, expand_grid
from cyclejepa.identity import identity_differences, identity_hash
from cyclejepa.jsonio import read_json, write_json
from cyclejepa.outputs import OutputFolder, RunFolder, RunPlan, cache_dir, plan_runs, run_dir, run_folder
from cyclejepa.seal import refuse_sealed, require_unsealed, sealed_folds, use_folds

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
        problems += [where + problem for problem in _device_problems(cell) + _corpus_problems(cell) + identity_problems(cell)
                     + _extra_problems(cell) + _family_problems(cell)]  # fmt: skip
    if problems:
        raise ConfigError(problems, source="preflight")


def _device_problems(cfg: ExperimentConfig) -> list[str]:
    """Devices this machine lacks; ``training.device`` only while a run is left to train (runs
    trained on CUDA are evaluated elsewhere with their ``training.device``, see the run identity)."""
    from cyclejepa.devices import resolve_device

    problems, keys = [], ["evaluation.device"]
    if not all(_finished(cfg, plan) for plan in plan_runs(cfg)):
        keys.insert(0, "training.device")
    for key in keys:
        section, name = key.split(".")
        try:
            resolve_device(getattr(getattr(cfg, section), name))
        except ValueError as error:
            problems.append(f"{key}: {error}")
    return problems


def _extra_problems(cfg: ExperimentConfig) -> list[str]:
    """An optional package a setting needs that is not installed."""
    if not cfg.training.tensorboard:
        return []
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return ["training.tensorboard: true needs tensorboard: pip install 'cyclejepa[tensorboard]'"]
    return []


def _family_problems(cfg: ExperimentConfig) -> list[str]:
    """Anomaly families of a list of the config's own that cannot apply to the phase provider's
    signal (`PhaseProvider.signal`) or to the dataset's channel count. The default list is the
    battery's to filter: it skips what does not apply and says so in the report."""
    from cyclejepa.config import EvaluationConfig
    from cyclejepa.facts import cycle_band, data_facts
    from cyclejepa.evaluation.anomaly.perturbations import applicable_families
    from cyclejepa.registry import PERTURBATIONS, PHASE_PROVIDERS

    families, facts = cfg.evaluation.families, data_facts(cfg.data, cycle_band(cfg.phase.provider))
    if families == EvaluationConfig.model_fields["families"].default or isinstance(facts, str) or not all(
        family in PERTURBATIONS for family in families
    ):
        return []  # the default list; facts or names that consistency_problems already names
    signal = getattr(PHASE_PROVIDERS.get(cfg.phase.provider), "signal", "any")
    _, skipped = applicable_families(families, signal, len(facts.channels))
    return [f"evaluation.families[{families.index(name)}]: {name!r} {reason}; leave it out" for name, reason in skipped.items()]


def _corpus_problems(cfg: ExperimentConfig) -> list[str]:
    """A dataset that cannot be built from the config, or whose data on disk is not the one asked
    for (e.g. a synthetic corpus of another size at the root)."""
    from cyclejepa.data.datasets import DatasetNotFound

    try:
        dataset = build_dataset(cfg)
        mismatch = getattr(dataset, "mismatch", None)
        problem = mismatch() if mismatch else None
    except DatasetNotFound:
        return []  # said in full, with where to get it, when prepare needs the data
    except (ValueError, TypeError) as error:
        return [f"data: dataset {cfg.data.dataset!r}: {str(error).splitlines()[0]}"]
    return [problem] if problem else []


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

    folder = run_folder(cfg, plan)
    if folder.done.exists():
        return read_json(folder.done).get("identity", {})
    last = latest_checkpoint(folder.checkpoints)
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
    touched = sorted(set(cfg.data.eval_folds + cfg.data.train_folds) & set(sealed_folds(cfg)))
    if touched:
        lines.append(f"fold {', '.join(map(str, touched))} is sealed: " + ("UNSEALED (audited)" if cfg.evaluation.unseal else "needs --unseal"))
    lines.append(f"report: {out / 'report' / 'report.md'}")
    return lines


def _corpus_line(cfg: ExperimentConfig) -> str:
    data = cfg.data
    options = f" {data.options}" if data.options else ""
    root = data.root if data.root is not None else "its default root"
    return (f"dataset {data.dataset}{options} at {root}: {data.fs:g} Hz cache, model at "
            f"{data.fs / data.decimation:g} Hz, {data.window_s:g} s windows of {data.token_patch}-sample tokens")  # fmt: skip


def build_dataset(cfg: ExperimentConfig, progress: bool = False):
    """The configured `Dataset`: ``data.dataset`` built with ``data.root`` and ``data.options``
    (nothing is read or written; `prepare` calls its `fetch`)."""
    import inspect

    from cyclejepa.registry import DATASETS

    options, cls = dict(cfg.data.options), DATASETS.get(cfg.data.dataset)
    if "progress" in inspect.signature(cls).parameters:  # a dataset that writes its corpus shows its progress
        options.setdefault("progress", progress)
    return cls(root=cfg.data.root, **options)


def prepare(cfg: ExperimentConfig, progress: bool = True):
    """Stage 1: build the configured dataset (writing the synthetic corpus when configured and
    missing), then the cache of its windows."""
    from cyclejepa.data.cache import prepare_cache

    refuse_sealed(cfg, "normalisation statistics", "data.train_folds")
    dataset = build_dataset(cfg, progress)
    dataset.fetch()  # a missing corpus is named before any fold is recorded as used
    train_folds = use_folds(cfg, "normalisation statistics", "data.train_folds")
    data = cfg.data
    return prepare_cache(
        dataset,
        cache_dir(cfg),
        train_folds=tuple(train_folds),
        phase_provider=cfg.phase.provider,
        phase_options=cfg.phase.options,
        fs=data.fs,
        decimation=data.decimation,
        token_patch=data.token_patch,
        window_s=data.window_s,
        amplitude_limits=data.amplitude_limits,
        dataset_options=data.options,
        workers=cfg.data.workers,
        progress=progress,
    )


def _finished(cfg: ExperimentConfig, plan: RunPlan) -> bool:
    done = run_folder(cfg, plan).done
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
    signals, phases = cache.signals[rows], training_phases(cache, rows, cfg.phase.convention)
    trainer = Trainer(
        cfg, signals, phases, directory, seed=seed, transport_weight=transport_weight, fs=cache.fs,
        dist=dist or Distributed(),
    )
    last = latest_checkpoint(RunFolder(Path(directory)).checkpoints)
    if last is not None:
        trainer.resume(last)
        log.info("%s: resuming from step %d (%s)", Path(directory).name, trainer.step, last)
    board = watch_run(cfg, trainer, signals, phases)
    try:
        trainer.fit(progress=progress)
    finally:
        if board is not None:
            board.close()
    return trainer


def watch_run(cfg: ExperimentConfig, trainer, signals, phases):
    """With ``training.tensorboard``, a `TensorBoardLog` of ``trainer`` (rank 0 only) with the
    held-batch diagnostics of its training data every ``training.diagnostics_every`` steps."""
    if not (cfg.training.tensorboard and trainer.dist.is_main):
        return None
    from cyclejepa.evaluation.watch import HeldBatch
    from cyclejepa.training.tensorboard import TensorBoardLog

    board = TensorBoardLog(
        trainer.directory, start_step=trainer.step, diagnose=HeldBatch(signals, phases), every=cfg.training.diagnostics_every,
    )  # fmt: skip
    trainer.watchers.append(board)
    return board


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
        write_json(RunFolder(directory).done, {"identity": identity, "run_hash": identity_hash(identity), "steps": trainer.step})
    return directory


def write_resolved_config(cfg: ExperimentConfig) -> Path:
    path = OutputFolder(Path(cfg.output_dir)).config
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path


def run_experiment(cfg: ExperimentConfig, progress: bool = True) -> Path:
    """Every stage in order; returns the report path (for a grid, the grid summary).

    `preflight` first (nothing is written for a config that fails it), then the output
    directory's lock throughout (`cyclejepa.lock.output_lock`)."""
    from cyclejepa.lock import output_lock

    preflight(cfg)
    with output_lock(cfg.output_dir):
        return _run_stages(cfg, progress)


def _run_stages(cfg: ExperimentConfig, progress: bool) -> Path:
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
    return _evaluate_stage(cfg, cache, progress)


def pretrain_all(cfg: ExperimentConfig, cache, config: Path, progress: bool = True) -> None:
    """Stage 2 for every arm × seed: unfinished runs side by side in ``runs.at_once`` processes
    (each reads the resolved config file ``config``), else one after the other in this one."""
    from cyclejepa.devices import child_gpus, resolve_device
    from cyclejepa.training.concurrent import RunJob, runs_at_once, train_concurrently

    todo = [plan for plan in plan_runs(cfg) if not _finished(cfg, plan)]
    at_once = runs_at_once(cfg.runs.at_once, resolve_device(cfg.training.device).type, len(todo))
    if at_once > 1:
        jobs = [RunJob(plan.arm.name, plan.seed, run_dir(cfg, plan)) for plan in todo]
        gpus = child_gpus(cfg.training.device)
        train_concurrently(config, jobs, at_once, cfg.training.steps, gpus=gpus, progress=progress)
    for plan in plan_runs(cfg):  # the sequential path; finished runs are skipped
        pretrain(cfg, cache, plan, progress=progress)


def evaluate_experiment(cfg: ExperimentConfig, cache=None, progress: bool = True) -> Path:
    """Evaluate the trained checkpoints of every run and write the report (no training), after
    `preflight`."""
    preflight(cfg)
    return _evaluate_stage(cfg, cache, progress)


def _evaluate_stage(cfg: ExperimentConfig, cache, progress: bool) -> Path:
    from cyclejepa.data.cache import open_cache
    from cyclejepa.evaluation.report import write_report
    from cyclejepa.evaluation.stage import evaluate_grid
    from cyclejepa.training.checkpoint import checkpoint_path

    require_unsealed(cfg)
    steps = evaluation_steps(cfg)
    missing = [
        str(checkpoint_path(run_folder(cfg, plan).checkpoints, step))
        for plan in plan_runs(cfg)
        for step in steps
        if not checkpoint_path(run_folder(cfg, plan).checkpoints, step).exists()
    ]
    if missing:
        raise FileNotFoundError(f"{len(missing)} checkpoint(s) to evaluate are missing, e.g. {missing[0]}; train them with `cyclejepa run`")
    write_resolved_config(cfg)
    cache = cache or open_cache(cfg)
    evaluate_grid(cfg, cache, plan_runs(cfg), steps, progress=progress)
    return write_report(Path(cfg.output_dir))
