"""Stage 3, evaluate: the trained checkpoints of every run at the configured steps, then the
cross-run figures and strata, then the report.

The stage reads the config once, where it starts (`evaluate_grid`): the device placement, the
output folder, the objective's spec and the evaluation hash, which the per-checkpoint functions
take instead of the config. It keeps finished results whose checksums hold (`is_current`), passes
the fold reads of the cohort table and of each checkpoint left to evaluate through the seal in
one gathered call before it reads the cache (`evaluation_folds`), builds the data description
and the one `EvaluationSpec` that the checkpoints are all evaluated with (`checkpoint_spec`),
writes the protocol and evaluates them, side by side in ``evaluation.at_once`` processes where
asked (`cyclejepa.workers.process_pool`), then the random baseline: each seed's untrained
weights, measured as a checkpoint is (`evaluate_random_seed`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from cyclejepa.config import ExperimentConfig
from cyclejepa.data.cache import PreparedCache
from cyclejepa.evaluation.results import CheckpointSource, RunFields, WeightsDigest
from cyclejepa.evaluation.spec import DataDescription, EvaluationSpec
from cyclejepa.outputs import OutputFolder
from cyclejepa.pipeline.checks import preflight
from cyclejepa.pipeline.identity import evaluation_identity, identity_hash
from cyclejepa.pipeline.plans import RunPlan, plan_runs, write_resolved_config
from cyclejepa.pipeline.seal import FOLD_KEYS, require_unsealed, use_folds, use_folds_in_turn
from cyclejepa.registry import DATASETS, PHASE_PROVIDERS
from cyclejepa.training.spec import ObjectiveSpec

if TYPE_CHECKING:
    from cyclejepa.devices import Placement


def evaluation_steps(cfg: ExperimentConfig) -> list[int]:
    """The evaluated checkpoints (`preflight` refuses steps that are never checkpointed)."""
    return sorted(set(cfg.evaluation.steps))


def evaluate_experiment(cfg: ExperimentConfig, cache=None, progress: bool = True) -> Path:
    """Evaluate the trained checkpoints of every run and write the report (no training), after
    `preflight` and the seal; missing checkpoints are refused by name before anything is written."""
    from cyclejepa.pipeline.preparation import configured_cache

    preflight(cfg)
    require_unsealed(cfg)
    plans, steps = plan_runs(cfg), evaluation_steps(cfg)
    missing = [str(path) for plan in plans for step in steps if not (path := plan.folder.checkpoint(step)).exists()]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} checkpoint(s) to evaluate are missing, e.g. {missing[0]}; train them with `cyclejepa run`"
        )
    write_resolved_config(cfg)
    return evaluate_stage(cfg, cache or configured_cache(cfg), plans, steps, progress)


def evaluate_stage(cfg: ExperimentConfig, cache: PreparedCache, plans: list[RunPlan], steps: list[int], progress: bool) -> Path:
    """Evaluate the trained checkpoints of ``plans`` at ``steps`` (`evaluate_grid`), then write the report."""
    from cyclejepa.pipeline.reporting import report_experiment

    evaluate_grid(cfg, cache, plans, steps, progress=progress)
    return report_experiment(Path(cfg.output_dir))


def evaluation_dir(cfg: ExperimentConfig) -> Path:
    """``<output_dir>/evaluation``: the results of every run and step."""
    return OutputFolder(Path(cfg.output_dir)).evaluation


def result_file(out: OutputFolder, plan: RunPlan, step: int) -> Path:
    """``evaluation/<run>-stepNNNNNN.json``: the result of ``plan``'s checkpoint at ``step``."""
    return out.evaluation / f"{plan.name}-step{step:06d}.json"


RANDOM_ARM = "random"
"""The arm name of the random baseline: each seed's untrained weights (`random_baseline_seeds`)."""


def random_file(out: OutputFolder, seed: int) -> Path:
    """``evaluation/random-seed<seed>-step000000.json``: the random baseline's result of ``seed``."""
    return out.evaluation / f"{RANDOM_ARM}-seed{seed}-step{0:06d}.json"


def random_baseline_seeds(cfg: ExperimentConfig) -> list[int]:
    """The seeds of the random baseline (``evaluation.random_baseline``; none when it is off)."""
    return list(cfg.runs.seeds) if cfg.evaluation.random_baseline else []


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
    provider = PHASE_PROVIDERS.build(cfg.phase.provider, cfg.phase.options)
    dataset = DATASETS.build(cfg.data.dataset, cfg.data.options, root=cfg.data.root)
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


def strata_not_applying(cfg: ExperimentConfig, cache: PreparedCache, data: DataDescription) -> str | None:
    """Why the heart-rate strata do not apply, or None when they do: they need two arms to
    compare, a probe (labels) and ECG beats (a phase provider of one coordinate whose signal
    kind, ``data.signal``, is ``"ecg"``)."""
    if len(cfg.runs.arms) != 2:
        return f"{len(cfg.runs.arms)} arm(s): the strata compare two"
    if not cache.label_levels:
        return "no probe scores to stratify (no labels)"
    if cache.coordinates:
        return f"a torus of {len(cache.coordinates)} phase coordinates: the strata take the heart rate of one ECG clock"
    if data.signal != "ecg":
        return f"phase provider {cfg.phase.provider!r} reads {data.signal!r} signals: no ECG beats to take a heart rate from"
    return None


def evaluation_spec(cfg: ExperimentConfig, cache: PreparedCache) -> EvaluationSpec:
    """The `EvaluationSpec` of a checkpoint of ``cfg``: its folds through the seal
    (`checkpoint_folds`), then the data description, the strata's applicability and the
    evaluation hash read from ``cfg`` (`checkpoint_spec`)."""
    folds = checkpoint_folds(cfg, bool(cache.label_levels))
    data = describe_data(cfg, cache)
    return checkpoint_spec(cfg, folds, data, strata_not_applying(cfg, cache, data), evaluation_hash(cfg))


def checkpoint_folds(cfg: ExperimentConfig, labelled: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The folds a checkpoint's evaluation reads, each passed through the seal in this order: the
    probes' training folds (only with labels: else none) and the evaluation folds."""
    train_folds = use_folds(cfg, "probe fitting", "data.train_folds") if labelled else []
    return tuple(train_folds), tuple(use_folds(cfg, "evaluation", "data.eval_folds"))


def checkpoint_spec(
    cfg: ExperimentConfig, folds: tuple[tuple[int, ...], tuple[int, ...]], data: DataDescription, strata: str | None, current: str
) -> EvaluationSpec:
    """The `EvaluationSpec` of a checkpoint: its training and evaluation ``folds``
    (`checkpoint_folds`), the settings of ``cfg.evaluation``, what the data is called (``data``),
    why the strata do not apply (``strata``) and the evaluation hash ``current``."""
    ev = cfg.evaluation
    return EvaluationSpec(
        train_folds=folds[0],
        eval_folds=folds[1],
        bootstrap=ev.bootstrap,
        seed=ev.seed,
        probe_c=ev.probe_c,
        eligible_min_positives=ev.eligible_min_positives,
        detector=ev.detector,
        families=tuple(ev.families),
        severities=tuple(ev.severities),
        anomaly_records=ev.anomaly_records,
        data=data,
        strata_not_applying=strata,
        evaluation_hash=current,
    )


def evaluation_folds(cfg: ExperimentConfig, labelled: bool, checkpoints: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The cohort table's training and evaluation folds, after the evaluation's fold reads have
    passed the seal in one gathered call (`use_folds_in_turn`), in the order of the reads: the
    cohort table's two keys, then for each of the ``checkpoints`` left to evaluate the
    probes' training folds (only when ``labelled``) and the evaluation folds."""
    per_checkpoint = ([("probe fitting", "data.train_folds")] if labelled else []) + [("evaluation", "data.eval_folds")]
    uses = [("cohort table", key) for key in FOLD_KEYS] + per_checkpoint * checkpoints
    train_folds, eval_folds, *_ = use_folds_in_turn(cfg, uses)
    return tuple(train_folds), tuple(eval_folds)


def evaluate_grid(
    cfg: ExperimentConfig, cache: PreparedCache, plans: list[RunPlan], steps: list[int], progress: bool = True
) -> None:
    """Evaluate every run × step (skipping finished ones), then compare the runs at each step.

    The config is read here once: the device, the output folder, the objective's spec and the
    evaluation hash; the finished results whose checksums hold (`is_current`) are kept; the fold
    reads of the cohort table and of the checkpoints left to evaluate pass the seal in one
    gathered call before the cache is read (`evaluation_folds`; the figures' in `compare_runs`,
    when they are drawn); then the data description, the strata's applicability and the one
    `EvaluationSpec` of the checkpoints. With ``evaluation.at_once`` > 1 the checkpoints are
    evaluated side by side in that many processes (spawned; each loads the cache and writes its
    own result files). After them, with ``evaluation.random_baseline``, each seed's untrained
    weights without a current result (`random_seeds_to_evaluate`, `evaluate_random_seed`); their
    fold reads are gathered with the checkpoints'.
    """
    from cyclejepa.devices import place
    from cyclejepa.evaluation.checkpoint_evaluation import evaluations_at_once, is_current, write_protocol
    from cyclejepa.pipeline.pretraining import objective_spec

    placement, out, objective = place(cfg.evaluation.device), OutputFolder(Path(cfg.output_dir)), objective_spec(cfg)
    device, current, labelled = placement.device, evaluation_hash(cfg), bool(cache.label_levels)
    cells = [
        (plan, step)
        for plan in plans
        for step in steps
        if not is_current(result_file(out, plan, step), current, plan.folder.checkpoint(step))
    ]
    randoms = random_seeds_to_evaluate(cfg, objective, out, current)
    train_folds, eval_folds = evaluation_folds(cfg, labelled, len(cells) + len(randoms))
    data = describe_data(cfg, cache)
    strata = strata_not_applying(cfg, cache, data)
    spec = checkpoint_spec(cfg, (train_folds if labelled else (), eval_folds), data, strata, current)
    out.evaluation.mkdir(parents=True, exist_ok=True)
    write_protocol(out.evaluation, cache, train_folds, eval_folds, data, current)
    at_once = evaluations_at_once(cfg.evaluation.at_once, device.type, len(cells))
    if at_once > 1:
        _evaluate_in_processes(spec, cells, objective, cache, out, at_once, placement, progress)
    else:
        for plan, step in cells:
            evaluate_run_step(spec, objective, cache, out, plan, step, device, progress)
    for seed in randoms:  # after the arms: their evaluation is the same with the baseline or without it
        evaluate_random_seed(spec, objective, cache, out, seed, device, progress)
    for step in steps:
        compare_runs(cfg, cache, plans, step, device, objective, strata, current)


def evaluate_run_step(
    spec: EvaluationSpec,
    objective: ObjectiveSpec,
    cache: PreparedCache,
    out: OutputFolder,
    plan: RunPlan,
    step: int,
    device: torch.device,
    progress: bool = False,
) -> None:
    """Evaluate the checkpoint of ``plan`` at ``step`` into `result_file`
    (`write_checkpoint_evaluation` of ``spec``, the objective built from ``objective``), with the
    run, its arm, seed, step, transport weight and the checkpoint (path and weights' digest)."""
    from cyclejepa.evaluation.integrity import model_digest
    from cyclejepa.evaluation.checkpoint_evaluation import write_checkpoint_evaluation
    from cyclejepa.training import load_trained

    checkpoint = plan.folder.checkpoint(step)
    trained = load_trained(objective, checkpoint, device)  # refuses non-finite weights by name
    run = RunFields(
        run=plan.name,
        arm=plan.arm.name,
        seed=plan.seed,
        step=step,
        transport_weight=plan.arm.transport_weight,
        checkpoint=CheckpointSource(path=str(checkpoint.relative_to(out.path)), model_sha256=model_digest(checkpoint)),
    )
    write_checkpoint_evaluation(spec, cache, trained, checkpoint, result_file(out, plan, step), run, device, progress)


def random_seeds_to_evaluate(cfg: ExperimentConfig, objective: ObjectiveSpec, out: OutputFolder, current: str) -> list[int]:
    """The seeds of the random baseline (`random_baseline_seeds`) without a current result
    (`is_current_untrained`: this evaluation's, of the weights each seed's runs start from now)."""
    from cyclejepa.evaluation.integrity import state_digest
    from cyclejepa.evaluation.checkpoint_evaluation import is_current_untrained
    from cyclejepa.training import initial_objective

    def current_weights(seed: int) -> str:
        return state_digest(initial_objective(objective, seed).state_dict())

    return [
        seed
        for seed in random_baseline_seeds(cfg)
        if not is_current_untrained(random_file(out, seed), current, current_weights(seed))
    ]


def evaluate_random_seed(
    spec: EvaluationSpec,
    objective: ObjectiveSpec,
    cache: PreparedCache,
    out: OutputFolder,
    seed: int,
    device: torch.device,
    progress: bool = False,
) -> None:
    """Evaluate the random baseline of ``seed`` into `random_file`: the untrained objective every
    run of ``seed`` starts from (`initial_objective`: the trainer's step-0 weights), frozen and
    measured as a checkpoint is (`write_checkpoint_evaluation`), with its seed, step 0 and the
    weights' digest; it trains nothing."""
    from cyclejepa.evaluation.integrity import state_digest
    from cyclejepa.evaluation.checkpoint_evaluation import write_checkpoint_evaluation
    from cyclejepa.training import initial_objective

    untrained = initial_objective(objective, seed, device)
    target = random_file(out, seed)
    run = RunFields(
        run=f"{RANDOM_ARM}-seed{seed}",
        arm=RANDOM_ARM,
        seed=seed,
        step=0,
        transport_weight=None,
        untrained=True,
        weights=WeightsDigest(model_sha256=state_digest(untrained.state_dict())),
    )
    write_checkpoint_evaluation(spec, cache, untrained, target, target, run, device, progress)


def _evaluate_in_processes(
    spec: EvaluationSpec,
    cells: list[tuple[RunPlan, int]],
    objective: ObjectiveSpec,
    cache: PreparedCache,
    out: OutputFolder,
    at_once: int,
    placement: Placement,
    progress: bool,
) -> None:
    """`evaluate_run_step` of ``spec`` for every cell (plan, step) in a `process_pool` of ``at_once``
    processes that share the cores (`shared_threads`) and take the GPUs of ``placement`` (the
    ``evaluation.device`` setting's) in turn."""
    from concurrent.futures import as_completed

    from cyclejepa.progress import progress_bar
    from cyclejepa.workers import process_pool, shared_threads

    with (
        process_pool(at_once, threads=shared_threads(at_once), gpus=len(placement.gpus), tasks=len(cells)) as pool,
        progress_bar(len(cells), f"evaluating {len(cells)} checkpoints, {at_once} at a time", enabled=progress) as update,
    ):
        futures = [
            pool.submit(_evaluate_run_step_process, spec, objective, str(cache.path), out, plan, step, placement.setting)
            for plan, step in cells
        ]
        for future in as_completed(futures):
            future.result()  # re-raises a cell's error here
            update(1)


def _evaluate_run_step_process(
    spec: EvaluationSpec, objective: ObjectiveSpec, cache_path: str, out: OutputFolder, plan: RunPlan, step: int, device: str
) -> None:
    """`evaluate_run_step` in a worker: the cache (checked against the config by the parent)
    opened from its folder, on this process's device of the setting ``device``."""
    from cyclejepa.devices import resolve_device

    evaluate_run_step(spec, objective, PreparedCache(Path(cache_path)), out, plan, step, resolve_device(device))


def compare_runs(
    cfg: ExperimentConfig,
    cache: PreparedCache,
    plans: list[RunPlan],
    step: int,
    device: torch.device,
    objective: ObjectiveSpec,
    strata: str | None,
    current: str,
) -> None:
    """Phase-ring and UMAP figures of ``step`` (one column per run; `draw_run_figures`, drawn
    once) and, where they apply (``strata`` is None, `strata_not_applying`), the heart-rate
    strata of the arm gap (`write_hr_strata`, with the evaluation hash ``current``)."""
    from cyclejepa.evaluation.checkpoint_evaluation import draw_run_figures, figure_paths, write_hr_strata
    from cyclejepa.training import load_trained

    out = OutputFolder(Path(cfg.output_dir))
    figures = out.report / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    folds = use_folds(cfg, "figures", "data.train_folds")  # the figures show these folds, drawn now or before
    ev = cfg.evaluation
    rings, umap = figure_paths(figures, step, cache.coordinates, ev.umap)
    if not all(path.exists() for path in [*rings, *([umap] if umap else [])]):
        objectives = {plan.name: load_trained(objective, plan.folder.checkpoint(step), device) for plan in plans}
        draw_run_figures(objectives, cache, tuple(folds), rings, umap, ev.umap_points, ev.seed, device)
    if strata is None:
        arms, seeds = [a.name for a in cfg.runs.arms], list(cfg.runs.seeds)
        write_hr_strata(out.evaluation, cache.label_levels[0].name, step, arms, seeds, ev.bootstrap, ev.seed, current)
