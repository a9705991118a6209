"""Stage 2, pre-train every arm × seed (resuming, finished runs skipped), and the trainer's specs."""

from __future__ import annotations

import hashlib
import logging
import mmap
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
    """The trainer's spec of one run (seed, λ_trans, folder, identity)."""
    objective, identity = objective_spec(cfg), training_identity(cfg, transport_weight, seed)
    return TrainingSpec(
        objective=objective,
        optimiser=cfg.optimiser,
        augmentations=tuple(cfg.augmentations),
        training=cfg.training,
        transport_weight=transport_weight,
        seed=seed,
        identity=identity,
        run_hash=identity_hash(identity),
        directory=Path(directory),
    )


def training_phases(cache, rows, convention: str):
    """Token phases of ``rows``, NaN throughout for records failing phase QC (no transport term)."""
    phases = np.array(cache.phases(convention)[rows], dtype=np.float32)
    phases[~cache.columns["qc_ok"][rows]] = np.nan
    return phases


def streams(cfg: ExperimentConfig, cache, rows: np.ndarray) -> bool:
    """Whether the training set exceeds ``training.memory_budget_gb`` and so streams from shards."""
    from cyclejepa.training.shards import training_set_bytes

    size = training_set_bytes(len(rows), cache.signals.shape[1:], cache.phase_centre.shape[1:])
    return size > cfg.training.memory_budget_gb * 1e9


def training_shards(cache, rows: np.ndarray, convention: str, dist) -> Path:
    """``<cache>-shards/<key>`` of the training set, keyed by the manifest, rows and convention (so
    nothing reads stale shards); written once by rank 0 while the other ranks wait."""
    from cyclejepa.training.shards import shard_key, write_shards

    rows_hash = hashlib.sha256(np.ascontiguousarray(rows, dtype=np.int64).tobytes()).hexdigest()
    key = shard_key({"manifest": cache.manifest, "rows": rows_hash, "convention": convention})
    folder = cache.path.with_name(f"{cache.path.name}-shards") / key
    if dist.is_main:
        folder.parent.mkdir(parents=True, exist_ok=True)
        write_shards(training_blocks(cache, rows, convention), folder)
    dist.barrier()
    return folder


SHARD_BLOCK = 512
"""Cache rows read at once when writing shards (512 PTB-XL windows: 25 MB)."""


def training_blocks(cache, rows: np.ndarray, convention: str, block: int = SHARD_BLOCK):
    """(signals, phases) of ``rows`` (ascending), ``block`` rows at a time from contiguous slices."""
    for first in range(0, len(rows), block):
        chunk = rows[first : first + block]
        start, stop = int(chunk[0]), int(chunk[-1]) + 1
        if stop - start > 4 * block:  # rows far apart: read them one contiguous run at a time
            signals = np.concatenate([np.asarray(cache.signals[r : r + 1]) for r in chunk])
        else:
            signals = np.asarray(cache.signals[start:stop])[chunk - start]
        release_mapped_pages(cache.signals)
        yield signals, training_phases(cache, chunk, convention)


def release_mapped_pages(array) -> None:
    """Drop a `numpy.memmap`'s read pages from this process's resident set (they stay cached)."""
    mapped = getattr(array, "_mmap", None)
    if mapped is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


class RowView:
    """Rows of the cache read on demand: ``view[i]`` is ``read(rows[i])``."""

    def __init__(self, read, rows: np.ndarray):
        self.read, self.rows = read, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        return self.read(self.rows[index])


def train_run(
    cfg: ExperimentConfig, cache, directory: Path, *, seed: int, transport_weight: float, dist=None, progress: bool = True
):
    """Train one run on the cache's training folds, resuming from its last checkpoint; returns the trainer."""
    from cyclejepa.training import Distributed, Trainer, latest_checkpoint

    spec = training_spec(cfg, directory, seed=seed, transport_weight=transport_weight)
    folds = use_folds(cfg, "pre-training", "data.train_folds")  # before the cache is read
    rows, dist = cache.select(folds), dist or Distributed()
    if streams(cfg, cache, rows):
        signals = RowView(lambda index: cache.signals[index], rows)
        phases = RowView(lambda index: training_phases(cache, index, cfg.phase.convention), rows)
        shards = training_shards(cache, rows, cfg.phase.convention, dist)
        trainer = Trainer(spec, None, None, model_fs=cache.model_fs, dist=dist, shards=shards)
    else:
        signals, phases = cache.signals[rows], training_phases(cache, rows, cfg.phase.convention)
        trainer = Trainer(spec, signals, phases, model_fs=cache.model_fs, dist=dist)
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
    """With ``training.tensorboard``, a `TensorBoardLog` of ``trainer`` (rank 0) with held-batch diagnostics."""
    training = trainer.spec.training
    if not (training.tensorboard and trainer.dist.is_main):
        return None
    from cyclejepa.evaluation.training_diagnostics import HeldBatch
    from cyclejepa.training.tensorboard import TensorBoardLog

    board = TensorBoardLog(
        trainer.directory,
        start_step=trainer.step,
        diagnose=HeldBatch(signals, phases),
        every=training.diagnostics_every,
    )
    trainer.watchers.append(board)
    return board


def pretrain(cfg: ExperimentConfig, cache, plan: RunPlan, progress: bool = True, dist=None) -> Path:
    """Stage 2 for one arm × seed: train (resuming from the last checkpoint) unless finished."""
    directory = plan.directory
    if plan.finished():
        return directory
    trainer = train_run(
        cfg, cache, directory, seed=plan.seed, transport_weight=plan.arm.transport_weight, dist=dist, progress=progress
    )
    if trainer.dist.is_main:
        spec = trainer.spec
        write_json(RunFolder(directory).done, {"identity": spec.identity, "run_hash": spec.run_hash, "steps": trainer.step})
    return directory


def pretrain_all(cfg: ExperimentConfig, cache, config: Path, plans: list[RunPlan], progress: bool = True) -> None:
    """Stage 2 for every plan: unfinished runs side by side in ``runs.at_once`` processes (each
    reading the resolved ``config``), else one after the other here."""
    from cyclejepa.devices import place
    from cyclejepa.training.concurrent import RunJob, runs_at_once, train_concurrently

    todo, placement = [plan for plan in plans if not plan.finished()], place(cfg.training.device)
    at_once = runs_at_once(cfg.runs.at_once, placement.device.type, len(todo))
    if at_once > 1:
        jobs = [RunJob(plan.arm.name, plan.seed, plan.directory) for plan in todo]
        train_concurrently(config, jobs, at_once, cfg.training.steps, gpus=list(placement.gpus), progress=progress)
    for plan in plans:  # the sequential path; finished runs are skipped
        pretrain(cfg, cache, plan, progress=progress)
