"""Stage 2, pre-train: every arm × seed of the config, resuming from the last checkpoint and
skipping finished runs (`cyclejepa.pipeline.plans.finished`); and the trainer's specs built from
the config (`training_spec`, `objective_spec`)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from cyclejepa.config import ExperimentConfig
from cyclejepa.jsonio import write_json
from cyclejepa.outputs import RunFolder
from cyclejepa.pipeline.identity import identity_hash, training_identity
from cyclejepa.pipeline.plans import RunPlan
from cyclejepa.pipeline.seal import use_folds
from cyclejepa.training.spec import ObjectiveSpec, TrainingSpec

log = logging.getLogger(__name__)


def objective_spec(cfg: ExperimentConfig) -> ObjectiveSpec:
    """What the experiment's training objective (and so each of its checkpoints) is built from."""
    return ObjectiveSpec(model=cfg.model, symmetry=cfg.symmetry, objectives=cfg.objectives, precision=cfg.training.precision)


def training_spec(cfg: ExperimentConfig, directory: Path, *, seed: int, transport_weight: float) -> TrainingSpec:
    """The trainer's spec of one run of the experiment: seed, λ_trans, output folder ``directory``,
    and its identity (`cyclejepa.pipeline.identity.training_identity`)."""
    objective, identity = objective_spec(cfg), training_identity(cfg, transport_weight, seed)
    return TrainingSpec(
        objective=objective, optimiser=cfg.optimiser, augmentations=tuple(cfg.augmentations),
        training=cfg.training, transport_weight=transport_weight, seed=seed,
        identity=identity, run_hash=identity_hash(identity), directory=Path(directory),
    )  # fmt: skip


def training_phases(cache, rows, convention: str):
    """Token phases of ``rows`` for training: NaN throughout for records that fail phase QC,
    so that they take no part in phase-dependent losses (the transport term)."""
    phases = np.array(cache.phases(convention)[rows], dtype=np.float32)
    phases[~cache.columns["qc_ok"][rows]] = np.nan
    return phases


def train_run(
    cfg: ExperimentConfig, cache, directory: Path, *, seed: int, transport_weight: float, dist=None, progress: bool = True
):
    """Train one run on the cache's training folds, resuming from its last checkpoint; returns the trainer."""
    from cyclejepa.training import Distributed, Trainer, latest_checkpoint

    spec = training_spec(cfg, directory, seed=seed, transport_weight=transport_weight)
    folds = use_folds(cfg, "pre-training", "data.train_folds")  # before the cache is read
    rows = cache.select(folds)
    signals, phases = cache.signals[rows], training_phases(cache, rows, cfg.phase.convention)
    trainer = Trainer(spec, signals, phases, model_fs=cache.model_fs, dist=dist or Distributed())
    last = latest_checkpoint(RunFolder(Path(directory)))
    if last is not None:
        trainer.resume(last)
        log.info("%s: resuming from step %d (%s)", Path(directory).name, trainer.step, last)
    board = watch_run(trainer, signals, phases)
    try:
        trainer.fit(progress=progress)
    finally:
        if board is not None:
            board.close()
    return trainer


def watch_run(trainer, signals, phases):
    """With ``training.tensorboard`` (of the trainer's spec), a `TensorBoardLog` of ``trainer``
    (rank 0 only) with the held-batch diagnostics of its training data every
    ``training.diagnostics_every`` steps."""
    training = trainer.spec.training
    if not (training.tensorboard and trainer.dist.is_main):
        return None
    from cyclejepa.evaluation.watch import HeldBatch
    from cyclejepa.training.tensorboard import TensorBoardLog

    board = TensorBoardLog(
        trainer.directory, start_step=trainer.step, diagnose=HeldBatch(signals, phases), every=training.diagnostics_every,
    )  # fmt: skip
    trainer.watchers.append(board)
    return board


def pretrain(cfg: ExperimentConfig, cache, plan: RunPlan, progress: bool = True, dist=None) -> Path:
    """Stage 2 for one arm × seed: train (resuming from the last checkpoint) unless finished."""
    directory = plan.directory
    if plan.finished():
        return directory
    trainer = train_run(
        cfg,
        cache,
        directory,
        seed=plan.seed,
        transport_weight=plan.arm.transport_weight,
        dist=dist,
        progress=progress,
    )
    if trainer.dist.is_main:
        spec = trainer.spec
        write_json(RunFolder(directory).done, {"identity": spec.identity, "run_hash": spec.run_hash, "steps": trainer.step})
    return directory


def pretrain_all(cfg: ExperimentConfig, cache, config: Path, plans: list[RunPlan], progress: bool = True) -> None:
    """Stage 2 for every arm × seed (``plans``, `plan_runs`): unfinished runs side by side in
    ``runs.at_once`` processes (each reads the resolved config file ``config``), else one after
    the other in this one."""
    from cyclejepa.devices import place
    from cyclejepa.training.concurrent import RunJob, runs_at_once, train_concurrently

    todo, placement = [plan for plan in plans if not plan.finished()], place(cfg.training.device)
    at_once = runs_at_once(cfg.runs.at_once, placement.device.type, len(todo))
    if at_once > 1:
        jobs = [RunJob(plan.arm.name, plan.seed, plan.directory) for plan in todo]
        train_concurrently(config, jobs, at_once, cfg.training.steps, gpus=list(placement.gpus), progress=progress)
    for plan in plans:  # the sequential path; finished runs are skipped
        pretrain(cfg, cache, plan, progress=progress)
