"""Stage 3, evaluate: the trained checkpoints of every run at the configured steps, then the
cross-run figures and strata, then the report.

The stage reads the config: it passes the folds through the seal (`use_folds`), builds the
`EvaluationSpec` of the checkpoints (`evaluation_spec`), names the files of each run and step,
keeps finished results whose checksums hold (`is_current`) and evaluates the rest, side by side
in ``evaluation.at_once`` processes where asked (`cyclejepa.workers.process_pool`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from cyclejepa.config import ExperimentConfig
from cyclejepa.data.cache import PreparedCache
from cyclejepa.evaluation.spec import DataDescription, EvaluationSpec
from cyclejepa.outputs import OutputFolder
from cyclejepa.pipeline.checks import preflight
from cyclejepa.pipeline.identity import evaluation_identity, identity_hash
from cyclejepa.pipeline.plans import RunPlan, plan_runs, write_resolved_config
from cyclejepa.pipeline.seal import require_unsealed, use_folds
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS


def evaluation_steps(cfg: ExperimentConfig) -> list[int]:
    """The evaluated checkpoints (`preflight` refuses steps that are never checkpointed)."""
    return sorted(set(cfg.evaluation.steps))


def evaluate_experiment(cfg: ExperimentConfig, cache=None, progress: bool = True) -> Path:
    """Evaluate the trained checkpoints of every run and write the report (no training), after
    `preflight`."""
    preflight(cfg)
    return evaluate_stage(cfg, cache, progress)


def evaluate_stage(cfg: ExperimentConfig, cache, progress: bool) -> Path:
    """Refuse missing checkpoints by name, evaluate the grid (`evaluate_grid`), write the report."""
    from cyclejepa.pipeline.preparation import configured_cache
    from cyclejepa.pipeline.reporting import report_experiment

    require_unsealed(cfg)
    steps = evaluation_steps(cfg)
    missing = [str(path) for plan in plan_runs(cfg) for step in steps if not (path := checkpoint_file(cfg, plan, step)).exists()]
    if missing:
        raise FileNotFoundError(f"{len(missing)} checkpoint(s) to evaluate are missing, e.g. {missing[0]}; train them with `cyclejepa run`")
    write_resolved_config(cfg)
    cache = cache or configured_cache(cfg)
    evaluate_grid(cfg, cache, plan_runs(cfg), steps, progress=progress)
    return report_experiment(Path(cfg.output_dir))


def evaluation_dir(cfg: ExperimentConfig) -> Path:
    """``<output_dir>/evaluation``: the results of every run and step."""
    return OutputFolder(Path(cfg.output_dir)).evaluation


def checkpoint_file(cfg: ExperimentConfig, plan: RunPlan, step: int) -> Path:
    """The checkpoint of ``plan``'s run at ``step``."""
    from cyclejepa.training.checkpoint import checkpoint_path

    return checkpoint_path(plan.folder.checkpoints, step)


def result_file(cfg: ExperimentConfig, plan: RunPlan, step: int) -> Path:
    """``evaluation/<run>-stepNNNNNN.json``: the result of ``plan``'s checkpoint at ``step``."""
    return evaluation_dir(cfg) / f"{plan.name}-step{step:06d}.json"


def evaluation_hash(cfg: ExperimentConfig) -> str:
    """What a result depends on (`cyclejepa.pipeline.identity.evaluation_identity`): results made
    with another unseal flag, device, name or report setting are kept."""
    return identity_hash(evaluation_identity(cfg))


def describe_data(cfg: ExperimentConfig, cache: PreparedCache) -> DataDescription:
    """What the report calls the data: the dataset, whether it knows whose each recording is
    (`Dataset.subjects_known`), the cache's channels and units, ``channel_word`` ("lead" when
    every channel is in mV, as ECG leads are, else "channel"), the phase provider's signal kind
    and event word (`PhaseProvider.signal`, `PhaseProvider.event_name`)."""
    assert cfg.phase.provider is not None, "preflight refuses a config without a phase provider"
    provider = PHASE_PROVIDERS.build(cfg.phase.provider, **cfg.phase.options)
    dataset = DATASETS.build(cfg.data.dataset, root=cfg.data.root, **cfg.data.options)
    units = tuple(cache.units)
    return DataDescription(
        dataset=cfg.data.dataset,
        subjects_known=bool(dataset.subjects_known),
        channels=tuple(cache.channels),
        units=units,
        channel_word="lead" if all(unit.lower() == "mv" for unit in units) else "channel",
        signal=getattr(provider, "signal", "any"),
        event=getattr(provider, "event_name", "event"),
    )


def strata_not_applying(cfg: ExperimentConfig, cache: PreparedCache) -> str | None:
    """Why the heart-rate strata do not apply, or None when they do: they need two arms to
    compare, a probe (labels) and ECG beats (an ``"ecg"`` phase provider of one coordinate)."""
    if len(cfg.runs.arms) != 2:
        return f"{len(cfg.runs.arms)} arm(s): the strata compare two"
    if not cache.label_levels:
        return "no probe scores to stratify (no labels)"
    if cache.coordinates:
        return f"a torus of {len(cache.coordinates)} phase coordinates: the strata take the heart rate of one ECG clock"
    assert cfg.phase.provider is not None, "preflight refuses a config without a phase provider"
    signal = getattr(PHASE_PROVIDERS.get(cfg.phase.provider), "signal", "any")
    if signal != "ecg":
        return f"phase provider {cfg.phase.provider!r} reads {signal!r} signals: no ECG beats to take a heart rate from"
    return None


def evaluation_spec(cfg: ExperimentConfig, cache: PreparedCache) -> EvaluationSpec:
    """The `EvaluationSpec` of a checkpoint of ``cfg``: the probes' training folds (with labels)
    and the evaluation folds, each passed through the seal in that order, then the settings of
    ``cfg.evaluation`` and what the data is called."""
    labelled = bool(cache.label_levels)
    train_folds = use_folds(cfg, "probe fitting", "data.train_folds") if labelled else []
    eval_folds = use_folds(cfg, "evaluation", "data.eval_folds")
    ev = cfg.evaluation
    return EvaluationSpec(
        train_folds=tuple(train_folds), eval_folds=tuple(eval_folds), bootstrap=ev.bootstrap, seed=ev.seed,
        probe_c=ev.probe_c, eligible_min_positives=ev.eligible_min_positives, detector=ev.detector,
        families=tuple(ev.families), severities=tuple(ev.severities), anomaly_records=ev.anomaly_records,
        data=describe_data(cfg, cache), strata_not_applying=strata_not_applying(cfg, cache),
        evaluation_hash=evaluation_hash(cfg),
    )  # fmt: skip


def evaluate_grid(cfg: ExperimentConfig, cache: PreparedCache, plans: list[RunPlan], steps: list[int], progress: bool = True) -> None:
    """Evaluate every run × step (skipping finished ones), then compare the runs at each step.

    With ``evaluation.at_once`` > 1 the checkpoints are evaluated side by side in that many
    processes (spawned; each loads the cache and writes its own result files).
    """
    from cyclejepa.devices import resolve_device
    from cyclejepa.evaluation.stage import evaluations_at_once, is_current

    device = resolve_device(cfg.evaluation.device)
    evaluation_dir(cfg).mkdir(parents=True, exist_ok=True)
    write_evaluation_protocol(cfg, cache)
    current = evaluation_hash(cfg)
    cells = [(plan, step) for plan in plans for step in steps
             if not is_current(result_file(cfg, plan, step), current, checkpoint_file(cfg, plan, step))]  # fmt: skip
    at_once = evaluations_at_once(cfg.evaluation.at_once, device.type, len(cells))
    if at_once > 1:
        _evaluate_in_processes(cfg, cache, cells, at_once, progress)
    else:
        for plan, step in cells:
            evaluate_run_step(cfg, cache, plan, step, device, progress)
    for step in steps:
        compare_runs(cfg, cache, plans, step, device)


def write_evaluation_protocol(cfg: ExperimentConfig, cache: PreparedCache) -> None:
    """``evaluation/protocol.json`` (`cyclejepa.evaluation.stage.write_protocol`) of the folds
    the cohort table reads, passed through the seal."""
    from cyclejepa.evaluation.stage import write_protocol

    train_folds, eval_folds = (use_folds(cfg, "cohort table", key) for key in ("data.train_folds", "data.eval_folds"))
    write_protocol(evaluation_dir(cfg), cache, tuple(train_folds), tuple(eval_folds), describe_data(cfg, cache), evaluation_hash(cfg))


def evaluate_run_step(
    cfg: ExperimentConfig, cache: PreparedCache, plan: RunPlan, step: int, device: torch.device, progress: bool = False
) -> None:
    """Evaluate the checkpoint of ``plan`` at ``step`` into `result_file`
    (`write_checkpoint_evaluation`), with the run, its arm, seed, step, transport weight and the
    checkpoint (path and weights' digest)."""
    from cyclejepa.evaluation.integrity import model_digest
    from cyclejepa.evaluation.stage import write_checkpoint_evaluation
    from cyclejepa.pipeline.pretraining import objective_spec
    from cyclejepa.training import load_trained

    checkpoint = checkpoint_file(cfg, plan, step)
    objective = load_trained(objective_spec(cfg), checkpoint, device)  # refuses non-finite weights by name
    spec = evaluation_spec(cfg, cache)
    run = {"run": plan.name, "arm": plan.arm.name, "seed": plan.seed, "step": step, "transport_weight": plan.arm.transport_weight,
           "checkpoint": {"path": str(checkpoint.relative_to(cfg.output_dir)), "model_sha256": model_digest(checkpoint)}}  # fmt: skip
    write_checkpoint_evaluation(spec, cache, objective, checkpoint, result_file(cfg, plan, step), run, device, progress)


def _evaluate_in_processes(cfg: ExperimentConfig, cache: PreparedCache, cells, at_once: int, progress: bool) -> None:
    """`evaluate_run_step` for every cell in a `process_pool` of ``at_once`` processes that share
    the cores (`shared_threads`) and take the GPUs in turn."""
    from concurrent.futures import as_completed

    from cyclejepa.devices import child_gpus
    from cyclejepa.progress import progress_bar
    from cyclejepa.workers import process_pool, shared_threads

    raw = cfg.model_dump(mode="json")
    gpus = len(child_gpus(cfg.evaluation.device))
    with process_pool(at_once, threads=shared_threads(at_once), gpus=gpus) as pool, progress_bar(
        len(cells), f"evaluating {len(cells)} checkpoints, {at_once} at a time", enabled=progress
    ) as update:
        futures = [pool.submit(_evaluate_run_step_process, raw, str(cache.path), plan, step) for plan, step in cells]
        for future in as_completed(futures):
            future.result()  # re-raises a cell's error here
            update(1)


def _evaluate_run_step_process(raw: dict[str, Any], cache_path: str, plan: RunPlan, step: int) -> None:
    """`evaluate_run_step` in a worker: the config and the cache from their serialised forms."""
    from cyclejepa.config import parse_config
    from cyclejepa.devices import resolve_device
    from cyclejepa.pipeline.preparation import configured_cache

    cfg = parse_config(raw)
    evaluate_run_step(cfg, configured_cache(cfg, Path(cache_path)), plan, step, resolve_device(cfg.evaluation.device))


def compare_runs(cfg: ExperimentConfig, cache: PreparedCache, plans: list[RunPlan], step: int, device: torch.device) -> None:
    """Phase-ring and UMAP figures of ``step`` (one column per run; `draw_run_figures`, drawn
    once) and, where they apply (`strata_not_applying`), the heart-rate strata of the arm gap
    (`write_hr_strata`)."""
    from cyclejepa.evaluation.stage import draw_run_figures, figure_paths, write_hr_strata
    from cyclejepa.pipeline.pretraining import objective_spec
    from cyclejepa.training import load_trained

    figures = OutputFolder(Path(cfg.output_dir)).report / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    folds = use_folds(cfg, "figures", "data.train_folds")  # the figures show these folds, drawn now or before
    ev = cfg.evaluation
    rings, umap = figure_paths(figures, step, cache.coordinates, ev.umap)
    if not all(path.exists() for path in [*rings, *([umap] if umap else [])]):
        objectives = {plan.name: load_trained(objective_spec(cfg), checkpoint_file(cfg, plan, step), device) for plan in plans}
        draw_run_figures(objectives, cache, tuple(folds), rings, umap, ev.umap_points, ev.seed, device)
    if strata_not_applying(cfg, cache) is None:
        arms, seeds = [a.name for a in cfg.runs.arms], list(cfg.runs.seeds)
        write_hr_strata(evaluation_dir(cfg), cache.label_levels[0].name, step, arms, seeds, ev.bootstrap, ev.seed, evaluation_hash(cfg))
