"""The pipeline: the stages of `cyclejepa run` and the only code that reads the experiment config.

Each stage turns its part of an `ExperimentConfig` into the narrow arguments of the layer below:
`preflight` → `prepare` → `pretrain_all` → `evaluate_experiment` → `report_experiment`, in order
in `run_experiment`; after a run, `load_encoder` and `export_run`. Names are imported on first use.
"""

from typing import TYPE_CHECKING

from cyclejepa.registry import lazy_names

if TYPE_CHECKING:
    from cyclejepa.pipeline.checks import preflight as preflight
    from cyclejepa.pipeline.embedding import load_encoder as load_encoder, locate_run as locate_run, run_encoder as run_encoder
    from cyclejepa.pipeline.evaluation import (
        evaluate_experiment as evaluate_experiment,
        evaluate_grid as evaluate_grid,
        evaluation_dir as evaluation_dir,
        evaluation_spec as evaluation_spec,
        evaluation_steps as evaluation_steps,
    )
    from cyclejepa.pipeline.exporting import (
        evaluation_result as evaluation_result,
        export_run as export_run,
        export_spec as export_spec,
        save_pretrained as save_pretrained,
    )
    from cyclejepa.pipeline.plans import (
        plan_runs as plan_runs,
        run_plan as run_plan,
        RunPlan as RunPlan,
        write_resolved_config as write_resolved_config,
    )
    from cyclejepa.pipeline.preparation import (
        build_dataset as build_dataset,
        cache_dir as cache_dir,
        cache_spec as cache_spec,
        configured_cache as configured_cache,
        prepare as prepare,
    )
    from cyclejepa.pipeline.pretraining import (
        objective_spec as objective_spec,
        pretrain as pretrain,
        pretrain_all as pretrain_all,
        train_run as train_run,
        training_phases as training_phases,
        training_spec as training_spec,
        watch_run as watch_run,
    )
    from cyclejepa.pipeline.reporting import (
        report_experiment as report_experiment,
        report_spec as report_spec,
        write_grid_summary as write_grid_summary,
    )
    from cyclejepa.pipeline.run import describe_plan as describe_plan, run_experiment as run_experiment
    from cyclejepa.pipeline.seal import require_unsealed as require_unsealed

_HOMES = {
    name: module
    for module, names in {
        "checks": ("preflight",),
        "embedding": ("load_encoder", "locate_run", "run_encoder"),
        "evaluation": ("evaluate_experiment", "evaluate_grid", "evaluation_dir", "evaluation_spec", "evaluation_steps"),
        "exporting": ("evaluation_result", "export_run", "export_spec", "save_pretrained"),
        "plans": ("RunPlan", "plan_runs", "run_plan", "write_resolved_config"),
        "preparation": ("build_dataset", "cache_dir", "cache_spec", "configured_cache", "prepare"),
        "pretraining": (
            "objective_spec",
            "pretrain",
            "pretrain_all",
            "train_run",
            "training_phases",
            "training_spec",
            "watch_run",
        ),
        "reporting": ("report_experiment", "report_spec", "write_grid_summary"),
        "run": ("describe_plan", "run_experiment"),
        "seal": ("require_unsealed",),
    }.items()
    for name in names
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_names(__name__, _HOMES)
