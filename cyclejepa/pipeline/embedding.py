"""The embedding stage: a run's trained `Encoder` from its output directory (`load_encoder`,
``cyclejepa embed``), with the run's preprocessing read from its config and cache."""

from __future__ import annotations

import os
from pathlib import Path

from cyclejepa.config import ExperimentConfig, load_config
from cyclejepa.embed import Encoder, Preprocessing, find_checkpoint
from cyclejepa.outputs import OutputFolder, checkpoint_step
from cyclejepa.pipeline.plans import RunPlan, plan_runs

__all__ = ["load_encoder", "locate_run", "run_encoder"]


def load_encoder(
    run_dir: str | os.PathLike,
    step: int | None = None,
    device: str = "auto",
    *,
    arm: str | None = None,
    seed: int | None = None,
) -> Encoder:
    """The trained encoder of a run, with the run's preprocessing.

    Parameters
    ----------
    run_dir : output directory of `cyclejepa run` (holds config.yaml), or one run's folder in it
        (``<output_dir>/runs/<arm>-seed<seed>``).
    step : checkpoint step; default ``evaluation.headline_step`` when that checkpoint exists,
        else the latest checkpoint.
    device : ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    arm, seed : the run of an output directory (default: the first arm and the first seed).
    """
    cfg, plan = locate_run(Path(run_dir), arm, seed)
    return run_encoder(cfg, plan, step, device)


def run_encoder(cfg: ExperimentConfig, plan: RunPlan, step: int | None = None, device: str = "auto") -> Encoder:
    """The `Encoder` of run ``plan`` of ``cfg`` at checkpoint ``step`` (as `load_encoder` chooses
    it) on ``device``: the trained model and symmetry, and the preprocessing of the run's cache
    and dataset."""
    from cyclejepa.pipeline.preparation import configured_cache
    from cyclejepa.devices import resolve_device
    from cyclejepa.pipeline.pretraining import objective_spec
    from cyclejepa.training import load_trained

    checkpoint = find_checkpoint(plan.folder, step, cfg.evaluation.headline_step)
    target = resolve_device(device)
    objective = load_trained(objective_spec(cfg), checkpoint, target)
    preprocessing = Preprocessing.from_cache(configured_cache(cfg, corpus=False), cfg.data.dataset, cfg.data.options)
    source = {"run": str(checkpoint.parents[1]), "step": checkpoint_step(checkpoint)}
    return Encoder(objective.model, preprocessing, target, source, objective.symmetry, root=cfg.data.root)


def locate_run(path: Path, arm: str | None = None, seed: int | None = None) -> tuple[ExperimentConfig, RunPlan]:
    """The config (output_dir set to where it lies now) and the `RunPlan` of ``path`` (as
    `load_encoder` takes ``run_dir``, ``arm`` and ``seed``)."""
    if OutputFolder(path).config.is_file():
        output, name = path, None
    elif path.parent.name == "runs" and OutputFolder(path.parents[1]).config.is_file():
        output, name = path.parents[1], path.name
    else:
        raise FileNotFoundError(
            f"{path} is neither the output directory of `cyclejepa run` (no config.yaml) "
            f"nor a run folder <output_dir>/runs/<arm>-seed<seed> in one"
        )
    cfg = load_config(OutputFolder(output).config).model_copy(update={"output_dir": output})
    if cfg.grid:
        raise ValueError(f"{output} holds a grid of experiments: give one cell, {output / 'grid'}/<label>")
    plans = plan_runs(cfg)
    wanted = [
        p for p in plans
        if (name is None or p.name == name) and arm in (None, p.arm.name) and seed in (None, p.seed)
    ]  # fmt: skip
    if not wanted:
        asked = name or f"arm {arm or 'any'}, seed {'any' if seed is None else seed}"
        raise ValueError(f"{output} has no run {asked}; its runs are {[p.name for p in plans]}")
    return cfg, wanted[0]
