"""Stage 3, evaluate: the trained checkpoints of every run at the configured steps, then the
report."""

from __future__ import annotations

from pathlib import Path

from cyclejepa.config import ExperimentConfig
from cyclejepa.pipeline.plans import plan_runs, run_folder, write_resolved_config
from cyclejepa.pipeline.preparation import configured_cache
from cyclejepa.pipeline.checks import preflight
from cyclejepa.pipeline.seal import require_unsealed


def evaluation_steps(cfg: ExperimentConfig) -> list[int]:
    """The evaluated checkpoints (`preflight` refuses steps that are never checkpointed)."""
    return sorted(set(cfg.evaluation.steps))


def evaluate_experiment(cfg: ExperimentConfig, cache=None, progress: bool = True) -> Path:
    """Evaluate the trained checkpoints of every run and write the report (no training), after
    `preflight`."""
    preflight(cfg)
    return evaluate_stage(cfg, cache, progress)


def evaluate_stage(cfg: ExperimentConfig, cache, progress: bool) -> Path:
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
    cache = cache or configured_cache(cfg)
    evaluate_grid(cfg, cache, plan_runs(cfg), steps, progress=progress)
    return write_report(Path(cfg.output_dir))
