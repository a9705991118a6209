"""`cyclejepa run`: prepare → pre-train every arm × seed → evaluate the grid → report.

Everything lands in ``output_dir`` (`cyclejepa.outputs`). A stage whose outputs exist for the same
run identity is skipped, so re-running a finished experiment does nothing and a killed one resumes
from its last checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cyclejepa.config import ConfigError, ExperimentConfig
from cyclejepa.lock import output_lock
from cyclejepa.pipeline.evaluation import evaluate_stage, evaluation_steps, random_baseline_seeds
from cyclejepa.pipeline.plans import plan_runs, write_resolved_config
from cyclejepa.pipeline.checks import prepared_cache_verdict, preflight
from cyclejepa.pipeline.preparation import cache_dir, prepare
from cyclejepa.pipeline.pretraining import pretrain_all
from cyclejepa.pipeline.seal import require_unsealed, sealed_folds

log = logging.getLogger(__name__)


def run_experiment(cfg: ExperimentConfig, progress: bool = True, *, overwrite_cache: bool = False) -> Path:
    """Every stage in order under the output directory's lock, after `preflight`; returns the report
    path (for a grid, the grid summary; every cell passes the seal before the first starts)."""
    cells = preflight(cfg)
    with output_lock(cfg.output_dir):
        if not cfg.grid:
            return _run_stages(cfg, progress, overwrite_cache)
        from cyclejepa.pipeline.reporting import write_grid_summary

        for _, cell in cells:
            require_unsealed(cell)
        for _, cell in cells:
            with output_lock(cell.output_dir):
                _run_stages(cell, progress, overwrite_cache)
        return write_grid_summary(Path(cfg.output_dir), cells)


def _run_stages(cfg: ExperimentConfig, progress: bool, overwrite_cache: bool = False) -> Path:
    """The stages of one experiment (no grid); the prepared cache is checked before any training."""
    require_unsealed(cfg)
    config, plans = write_resolved_config(cfg), plan_runs(cfg)
    cache = prepare(cfg, progress=progress, overwrite_cache=overwrite_cache)
    problems, flags = prepared_cache_verdict(cfg, cache)  # before any run trains (a refused share is flagged too)
    if problems:
        raise ConfigError(problems, source="prepare")
    for flag in flags:
        log.warning("phase QC: %s; the report will mark no figure best", flag)
    pretrain_all(cfg, cache, config, plans, progress=progress)
    return evaluate_stage(cfg, cache, plans, evaluation_steps(cfg), progress)


def describe_plan(cfg: ExperimentConfig) -> list[str]:
    """Lines saying what `run` would do and what is already done, after the same `preflight`."""
    cells = preflight(cfg)
    if not cfg.grid:
        return _plan_lines(cfg)
    lines = [f"grid of {len(cells)} experiments over {', '.join(sorted(cfg.grid))}:"]
    for label, cell in cells:
        lines += [f"[{label}] " + line for line in _plan_lines(cell)]
    return lines + [f"grid summary: {Path(cfg.output_dir) / 'grid_summary.md'}"]


def _plan_lines(cfg: ExperimentConfig) -> list[str]:
    out = Path(cfg.output_dir)
    lines = [f"output: {out}", f"data: {_corpus_line(cfg)}", f"cache: {cache_dir(cfg)}"]
    for plan in plan_runs(cfg):
        state = "done" if plan.finished() else "to train"
        lines.append(
            f"pre-train {plan.name}: λ_trans={plan.arm.transport_weight}, "
            f"{cfg.training.steps} steps × batch {cfg.training.batch_size} [{state}]"
        )
    lines.append(
        f"evaluate steps {evaluation_steps(cfg)} on folds {cfg.data.eval_folds} (probe fitted on folds {cfg.data.train_folds})"
    )
    if seeds := random_baseline_seeds(cfg):
        lines.append(f"evaluate the random baseline of seeds {seeds}: each seed's untrained weights, no training")
    touched = sorted((set(cfg.data.eval_folds or ()) | set(cfg.data.train_folds or ())) & set(sealed_folds(cfg)))
    if touched:
        lines.append(
            f"fold {', '.join(map(str, touched))} is sealed: "
            + ("UNSEALED (audited)" if cfg.evaluation.unseal else "needs --unseal")
        )
    lines.append(f"report: {out / 'report' / 'report.md'}")
    return lines


def _corpus_line(cfg: ExperimentConfig) -> str:
    data = cfg.data
    assert data.cache_fs is not None and data.decimation is not None, "preflight, before the plan, derives the rates"
    options = f" {dumped}" if (dumped := data.options.model_dump(mode="json")) else ""
    root = data.root if data.root is not None else "its default root"
    return (
        f"dataset {data.dataset}{options} at {root}: {data.cache_fs:g} Hz cache, model at "
        f"{data.cache_fs / data.decimation:g} Hz, {data.window_s:g} s windows of {data.token_patch}-sample tokens"
    )
